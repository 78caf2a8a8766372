"""The Aliyun MQ HTTP API shares the RocketMQ model with the other front ends: a message
published with the real ``mq-http-sdk`` reaches a RocketMQ remoting consumer (the
project's client: same message id, tag, keys and properties), an MQTT subscriber and an
AMQP queue bound to ``amq.topic`` (pika); a remoting send, an MQTT publish and an AMQP
publish reach an HTTP consumer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pika
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_producer import TopicMessage

from gateway.clients import Producer, PullConsumer, RemotingClient
from gateway.config import AUTO

from ..mqtt_clients import Paho
from .aliyun_support import aliyun_gateway


def _pull(address: str, topic: str) -> list[Any]:
    async def run() -> list[Any]:
        async with RemotingClient(address) as client:
            pull = PullConsumer(client, "xreader")
            out: list[Any] = []
            for mq in await pull.queues(topic):
                out += (await pull.pull(mq, 0)).messages
            return out

    return asyncio.run(run())


def _send(address: str, topic: str, body: bytes) -> None:
    async def run() -> None:
        async with RemotingClient(address) as client:
            await Producer(client, "xwriter").send(topic, body, tags="fromRemoting",
                                                   keys=["rk"])

    asyncio.run(run())


def _consume(consumer: Any, want: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while len(got) < want and time.monotonic() < deadline:
        try:
            got += consumer.consume_message(16, 2)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
    return got


def test_http_to_remoting_and_mqtt_and_back(tmp_path: Path) -> None:
    with aliyun_gateway(tmp_path / "data", unified_port=AUTO) as ali:
        assert ali.gw.gateway is not None
        unified = ali.gw.gateway.listener("unified")
        assert unified is not None
        address = f"127.0.0.1:{unified.port}"
        client = MQClient(ali.endpoint, "ak", "sk")
        ali.on_stop.append(client.close_connection)
        sub = Paho(ali.gw.mqtt_port, "xp-sub")
        sub.subscribe("xp", qos=1)
        amqp = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", ali.gw.port, socket_timeout=15, blocked_connection_timeout=15))
        ali.on_stop.insert(0, amqp.close)
        ch = amqp.channel()
        ch.queue_declare("xp-q")
        ch.queue_bind("xp-q", "amq.topic", "xp")
        consumer = client.get_consumer("", "xp", "GID_x")
        try:
            consumer.consume_message(1, 0)  # makes the topic and the group
        except MQServerException:
            pass

        msg = TopicMessage("from-http", "tagH")
        msg.set_message_key("hk")
        msg.put_property("origin", "http")
        sent = client.get_producer("", "xp").publish_message(msg)
        pulled = _pull(address, "xp")
        assert [m.body for m in pulled] == [b"from-http"]
        assert pulled[0].msg_id == sent.message_id
        assert pulled[0].tags == "tagH" and pulled[0].keys == "hk"
        assert pulled[0].properties["origin"] == "http"
        assert sub.get().payload == b"from-http"
        method, _, body = next(ch.consume("xp-q", inactivity_timeout=10))
        assert method is not None and body == b"from-http"
        ch.basic_ack(method.delivery_tag)
        ch.cancel()

        _send(address, "xp", b"from-remoting")
        sub.client.publish("xp", b"from-mqtt", qos=1).wait_for_publish(10)
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "xp", b"from-amqp")
        got = _consume(consumer, 4)
        bodies = sorted(m.message_body for m in got)
        assert bodies == ["from-amqp", "from-http", "from-mqtt", "from-remoting"]
        remote = next(m for m in got if m.message_body == "from-remoting")
        assert remote.message_tag == "fromRemoting" and remote.get_message_key() == "rk"
        consumer.ack_message([m.receipt_handle for m in got])
