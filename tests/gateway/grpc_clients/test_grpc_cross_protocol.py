"""One topic, five kinds of client, both directions, on a gateway subprocess:

- a gRPC send (the official Python client) reaches the project's remoting client
  (``gateway.clients`` pull), an ali-ons push consumer, a paho MQTT subscriber and an
  AMQP queue bound to ``amq.topic`` (pika); the message id the gRPC client made is the
  one the remoting clients see (``UNIQ_KEY``), tag and keys carry over, and the user
  property ``mqttSecondTopic`` places it in the MQTT/AMQP topic tree as a remoting send
  does;
- the other way round, a remoting send (project client), an ali-ons send, an MQTT publish
  and an AMQP publish all reach a gRPC simple consumer of that topic, intact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pika
import pytest

from gateway.clients import Producer, PullConsumer, RemotingClient

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from ..remoting.node_clients import OnsProcess
from ..remoting.node_clients import produce as ons_produce
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def remoting_address(gw: GatewayProcess) -> str:
    return f"127.0.0.1:{gw.ports['unified']}"


def _pull(address: str, topic: str) -> list[Any]:
    async def run() -> list[Any]:
        async with RemotingClient(address) as client:
            pull = PullConsumer(client, "xreader")
            out: list[Any] = []
            for mq in await pull.queues(topic):
                out += (await pull.pull(mq, 0)).messages
            return out

    return asyncio.run(run())


def _amqp(gw: GatewayProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", gw.ports["amqp"], socket_timeout=WAIT,
                                  blocked_connection_timeout=WAIT)
    )


def _drain(ch: Any, queue: str) -> list[tuple[str, bytes]]:
    out = []
    for method, _, body in ch.consume(queue, inactivity_timeout=3.0):
        if method is None:
            break
        out.append((method.routing_key, body))
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return out


def test_grpc_send_reaches_remoting_ali_ons_mqtt_and_amqp(ggw: GatewayProcess,
                                                          clients: Clients) -> None:
    address = remoting_address(ggw)
    p = clients.py("producer", endpoints=grpc_endpoint(ggw), topics=["xgrpc"])
    ons = OnsProcess("consume", nameSrv=address, topic="xgrpc", group="GID_xgrpc_ons")
    mqtt = Paho(ggw.mqtt_port, "xgrpc-mqtt")
    conn = _amqp(ggw)
    try:
        ons.wait_for(lambda e: e.get("ready") is True, WAIT)
        mqtt.subscribe("xgrpc/eu/+", qos=1)
        ch = conn.channel()
        ch.queue_declare("xgrpc-eu")
        ch.queue_bind("xgrpc-eu", "amq.topic", "xgrpc.eu.*")
        to_eu = p.send_message("xgrpc", "to-eu", tag="T1", keys=["k1", "k2"],
                               properties={"mqttSecondTopic": "/eu/7", "color": "red"})
        plain = p.send_message("xgrpc", "plain", tag="T2")
        # remoting pull (the project's client)
        pulled = {m.body: m for m in _pull(address, "xgrpc")}
        assert set(pulled) == {b"to-eu", b"plain"}
        m = pulled[b"to-eu"]
        assert m.msg_id == to_eu["id"] and m.tags == "T1"
        assert sorted((m.keys or "").split()) == ["k1", "k2"]
        assert m.properties.get("color") == "red"
        assert m.properties.get("mqttSecondTopic") == "/eu/7"
        assert pulled[b"plain"].msg_id == plain["id"]
        # ali-ons push consumer
        got = {x["body"]: x for x in ons.collect("msg", 2, WAIT)}
        assert set(got) == {"to-eu", "plain"}
        assert got["to-eu"]["msgId"] == to_eu["id"] and got["to-eu"]["tags"] == "T1"
        # MQTT: the second topic places it
        msg = mqtt.get(WAIT)
        assert (msg.topic, msg.payload) == ("xgrpc/eu/7", b"to-eu")
        assert mqtt.nothing_more(1.0)
        # AMQP: the topic exchange routes it by the same name
        assert _drain(ch, "xgrpc-eu") == [("xgrpc.eu.7", b"to-eu")]
    finally:
        conn.close()
        mqtt.disconnect()
        ons.stop()


def test_remoting_ali_ons_mqtt_and_amqp_sends_reach_a_grpc_consumer(
    ggw: GatewayProcess, clients: Clients
) -> None:
    address = remoting_address(ggw)
    c = clients.py("simple", endpoints=grpc_endpoint(ggw), group="GID_xback",
                   subscriptions={"xback": "*"}, await_s=3)  # its route query creates it

    async def remoting_send() -> str:
        async with RemotingClient(address) as client:
            r = await Producer(client, "xproducers").send(
                "xback", b"from-remoting", tags="R", keys=["kr"],
                properties={"origin": "remoting"})
            return r.msg_id

    remoting_id = asyncio.run(remoting_send())
    ons_sent = ons_produce(address, "xback", "PID_xback",
                           [{"body": "from-ons", "tag": "O", "keys": ["ko"]}])
    mqtt = Paho(ggw.mqtt_port, "xback-mqtt")
    mqtt.publish("xback/eu/1", b"from-mqtt", qos=1)
    mqtt.disconnect()
    conn = _amqp(ggw)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "xback.eu.2", b"from-amqp")
    finally:
        conn.close()
    got = {m["body"]: m for m in c.receive_all(4, WAIT, invisible=30)}
    assert set(got) == {"from-remoting", "from-ons", "from-mqtt", "from-amqp"}
    r = got["from-remoting"]
    assert r["id"] == remoting_id and r["tag"] == "R" and r["keys"] == ["kr"]
    assert r["properties"].get("origin") == "remoting"
    o = got["from-ons"]
    assert o["id"] == ons_sent[0]["msgId"] and o["tag"] == "O" and o["keys"] == ["ko"]
    assert got["from-mqtt"]["properties"].get("mqttSecondTopic") == "/eu/1"
    assert got["from-amqp"]["properties"].get("mqttSecondTopic") == "/eu/2"
    for m in got.values():
        assert m["attempt"] == 1 and not m["corrupted"] and m["topic"] == "xback"
        c.ack(m["id"])
    assert c.receive(16, 2) == []
