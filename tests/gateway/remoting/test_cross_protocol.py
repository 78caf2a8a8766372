"""One topic space for three worlds, both directions, real clients on a gateway subprocess:

- MQTT (paho) publishes ``orders/eu/42`` -> a RocketMQ consumer of topic ``orders`` gets it
  with ``mqttSecondTopic`` = ``/eu/42`` (and a publish on ``orders`` alone without it); a
  tag subscription applies (an MQTT publish carries no tag, so ``TagX`` gets nothing);
- a RocketMQ send to ``orders`` with ``mqttSecondTopic`` ``/eu/7`` -> a paho subscriber of
  ``orders/eu/+`` (and not one of ``orders/us/+``);
- AMQP (pika) publishes to ``amq.topic`` with routing key ``orders.eu.42`` -> the RocketMQ
  consumer, and a RocketMQ send -> an AMQP queue bound to ``amq.topic`` with ``orders.eu.*``.

The RocketMQ side is the project's Python remoting client (PushConsumer, Producer,
PullConsumer). The topic is created first (a RocketMQ route query auto-creates it): MQTT
and AMQP publishes never create RocketMQ topics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from gateway.clients import Producer, PullConsumer, PushConsumer, RemotingClient

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho

WAIT = 15.0


@pytest.fixture
def xgw(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


def ns(gw: GatewayProcess) -> str:
    return f"127.0.0.1:{gw.ports['unified']}"


async def _create(address: str, topic: str) -> None:
    async with RemotingClient(address) as client:
        await client.route(topic)


async def _pull_everything(address: str, topic: str, expression: str = "*") -> list:  # type: ignore[type-arg]
    async with RemotingClient(address) as client:
        pull = PullConsumer(client, "xreader")
        out = []
        for mq in await pull.queues(topic):
            result = await pull.pull(mq, 0, expression=expression)
            out += result.messages
        return out


def test_mqtt_publish_reaches_a_rocketmq_consumer(xgw: GatewayProcess) -> None:
    address = ns(xgw)

    async def run() -> list:  # type: ignore[type-arg]
        got: asyncio.Queue = asyncio.Queue()  # type: ignore[type-arg]
        async with RemotingClient(address) as client:
            consumer = PushConsumer(client, "xgroup", consume_from="first", suspend_ms=2000,
                                    rebalance_interval=1.0)

            async def handler(message) -> None:  # type: ignore[no-untyped-def]
                await got.put(message)

            consumer.subscribe("orders", "*", handler)
            await consumer.start()
            try:
                loop = asyncio.get_running_loop()

                def publish() -> None:
                    paho = Paho(xgw.mqtt_port, "xpub")
                    paho.publish("orders/eu/42", b"from-mqtt", qos=1)
                    paho.publish("orders", b"plain", qos=1)
                    paho.publish("other/eu/42", b"elsewhere", qos=1)
                    paho.disconnect()

                await loop.run_in_executor(None, publish)
                out = [await asyncio.wait_for(got.get(), WAIT) for _ in range(2)]
                await asyncio.sleep(0.5)
                assert got.empty()
                return out
            finally:
                await consumer.close()

    asyncio.run(_create(address, "orders"))
    messages = {m.body: m for m in asyncio.run(run())}
    assert set(messages) == {b"from-mqtt", b"plain"}
    assert messages[b"from-mqtt"].topic == "orders"
    assert messages[b"from-mqtt"].properties.get("mqttSecondTopic") == "/eu/42"
    assert "mqttSecondTopic" not in messages[b"plain"].properties
    # the tag filter applies: an MQTT publish has no tag
    assert asyncio.run(_pull_everything(address, "orders", "TagX")) == []
    assert len(asyncio.run(_pull_everything(address, "orders", "*"))) == 2


def test_rocketmq_send_reaches_mqtt_subscribers_by_second_topic(xgw: GatewayProcess) -> None:
    address = ns(xgw)
    asyncio.run(_create(address, "orders"))
    eu = Paho(xgw.mqtt_port, "xsub-eu")
    eu.subscribe("orders/eu/+", qos=1)
    us = Paho(xgw.mqtt_port, "xsub-us")
    us.subscribe("orders/us/+", qos=1)
    whole = Paho(xgw.mqtt_port, "xsub-all")
    whole.subscribe("orders", qos=1)

    async def send() -> None:
        async with RemotingClient(address) as client:
            producer = Producer(client, "xproducers")
            await producer.send("orders", b"to-eu", tags="t",
                                properties={"mqttSecondTopic": "/eu/7"})
            await producer.send("orders", b"no-second", tags="t")

    asyncio.run(send())
    m = eu.get(WAIT)
    assert (m.topic, m.payload) == ("orders/eu/7", b"to-eu")
    m = whole.get(WAIT)
    assert (m.topic, m.payload) == ("orders", b"no-second")
    assert eu.nothing_more(1.0) and us.nothing_more(0.2) and whole.nothing_more(0.2)


def _amqp(gw: GatewayProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", gw.ports["amqp"], socket_timeout=WAIT,
                                  blocked_connection_timeout=WAIT)
    )


def test_amqp_topic_exchange_to_rocketmq(xgw: GatewayProcess) -> None:
    address = ns(xgw)
    asyncio.run(_create(address, "orders"))
    conn = _amqp(xgw)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("eu-orders")
        ch.queue_bind("eu-orders", "amq.topic", "orders.eu.*")
        ch.basic_publish("amq.topic", "orders.eu.42", b"from-amqp")
        # the AMQP queue bound to orders.eu.* has its copy ...
        method, _, body = ch.basic_get("eu-orders", auto_ack=True)
        assert body == b"from-amqp"
    finally:
        conn.close()
    # ... and the RocketMQ topic orders has one, with the rest of the name as property
    got = asyncio.run(_pull_everything(address, "orders"))
    assert [m.body for m in got] == [b"from-amqp"]
    assert got[0].properties.get("mqttSecondTopic") == "/eu/42"


def test_rocketmq_send_reaches_an_amqp_queue_bound_to_amq_topic(xgw: GatewayProcess) -> None:
    address = ns(xgw)
    asyncio.run(_create(address, "orders"))
    conn = _amqp(xgw)
    try:
        ch = conn.channel()
        ch.queue_declare("eu-orders")
        ch.queue_bind("eu-orders", "amq.topic", "orders.eu.*")

        async def send() -> None:
            async with RemotingClient(address) as client:
                producer = Producer(client, "xproducers")
                await producer.send(
                    "orders", b"from-rocketmq", properties={"mqttSecondTopic": "/eu/9"}
                )
                await producer.send(
                    "orders", b"not-for-eu", properties={"mqttSecondTopic": "/us/9"}
                )

        asyncio.run(send())
        bodies = []
        for method, _, body in ch.consume("eu-orders", inactivity_timeout=2.0):
            if method is None:
                break
            bodies.append((method.routing_key, body))
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
        assert bodies == [("orders.eu.9", b"from-rocketmq")]
    finally:
        conn.close()
