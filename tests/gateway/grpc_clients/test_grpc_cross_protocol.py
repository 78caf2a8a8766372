"""One topic, five kinds of client, both directions, on a gateway subprocess:

- a gRPC send (the official Python client) reaches the project's remoting client
  (``gateway.clients`` pull), an ali-ons push consumer, a paho MQTT subscriber and an
  AMQP queue bound to ``amq.topic`` (pika); the message id the gRPC client made is the
  one the remoting clients see (``UNIQ_KEY``), tag, keys and properties carry over;
- the other way round, a remoting send (project client), an ali-ons send, an MQTT publish
  and an AMQP publish all reach a gRPC simple consumer of that topic, intact;
- the user property ``mqttSecondTopic`` places a gRPC send in the MQTT topic tree and
  shows a gRPC consumer the MQTT subtopic, as over remoting;
- a message sent without UNIQ_KEY (ali-ons) has one id on both protocols.
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
        mqtt.subscribe("xgrpc", qos=1)
        ch = conn.channel()
        ch.queue_declare("xgrpc-q")
        ch.queue_bind("xgrpc-q", "amq.topic", "xgrpc")
        first = p.send_message("xgrpc", "first", tag="T1", keys=["k1", "k2"],
                               properties={"color": "red"})
        second = p.send_message("xgrpc", "second", tag="T2")
        # remoting pull (the project's client): the id the gRPC client made is UNIQ_KEY
        pulled = {m.body: m for m in _pull(address, "xgrpc")}
        assert set(pulled) == {b"first", b"second"}
        m = pulled[b"first"]
        assert m.msg_id == first["id"] and m.tags == "T1"
        assert sorted((m.keys or "").split()) == ["k1", "k2"]
        assert m.properties.get("color") == "red"
        assert pulled[b"second"].msg_id == second["id"]
        # ali-ons push consumer (its msgId is always the store's offset id; the client's
        # id is the UNIQ_KEY property)
        got = {x["body"]: x for x in ons.collect("msg", 2, WAIT)}
        assert set(got) == {"first", "second"}
        assert got["first"]["properties"].get("UNIQ_KEY") == first["id"]
        assert got["first"]["msgId"] == m.offset_msg_id and got["first"]["tags"] == "T1"
        assert got["first"]["properties"].get("color") == "red"
        # MQTT and AMQP: the topic is the MQTT topic and the AMQP routing key
        msgs = mqtt.get_n(2, WAIT)
        assert sorted((x.topic, x.payload) for x in msgs) == [
            ("xgrpc", b"first"), ("xgrpc", b"second")]
        assert mqtt.nothing_more(1.0)
        assert sorted(_drain(ch, "xgrpc-q")) == [("xgrpc", b"first"), ("xgrpc", b"second")]
    finally:
        conn.close()
        mqtt.disconnect()
        ons.stop()


def test_mqtt_second_topic_across_grpc(ggw: GatewayProcess, clients: Clients) -> None:
    """The user property ``mqttSecondTopic`` (what RocketMQ producers set to address an
    MQTT subtopic, and what they read on messages MQTT clients published) means the same
    over gRPC as over remoting."""
    p = clients.py("producer", endpoints=grpc_endpoint(ggw), topics=["xsecond"])
    c = clients.py("simple", endpoints=grpc_endpoint(ggw), group="GID_xsecond",
                   subscriptions={"xsecond": "*"}, await_s=3)
    eu = Paho(ggw.mqtt_port, "xsecond-eu")
    eu.subscribe("xsecond/eu/+", qos=1)
    p.send_message("xsecond", "to-eu", tag="T", properties={"mqttSecondTopic": "/eu/7"})
    msg = eu.get(WAIT)
    assert (msg.topic, msg.payload) == ("xsecond/eu/7", b"to-eu")
    pub = Paho(ggw.mqtt_port, "xsecond-pub")
    pub.publish("xsecond/us/1", b"from-mqtt", qos=1)
    pub.disconnect()
    got = {m["body"]: m for m in c.receive_all(2, WAIT)}
    assert got["to-eu"]["properties"].get("mqttSecondTopic") == "/eu/7"
    assert got["from-mqtt"]["properties"].get("mqttSecondTopic") == "/us/1"
    eu.disconnect()


def test_message_id_without_uniq_key_agrees_across_protocols(ggw: GatewayProcess,
                                                             clients: Clients) -> None:
    """ali-ons sends no UNIQ_KEY: its message id is the store's offset id from the send
    response, and a gRPC consumer must see the same id for the same message."""
    address = remoting_address(ggw)
    c = clients.py("simple", endpoints=grpc_endpoint(ggw), group="GID_xids",
                   subscriptions={"xids": "*"}, await_s=3)
    sent = ons_produce(address, "xids", "PID_xids", [{"body": "no-uniq-key", "tag": "O"}])
    got = c.receive_all(1, WAIT)
    assert got[0]["body"] == "no-uniq-key"
    assert got[0]["id"] == sent[0]["msgId"]


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
    mqtt.publish("xback", b"from-mqtt", qos=1)
    mqtt.disconnect()
    conn = _amqp(ggw)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "xback", b"from-amqp")
    finally:
        conn.close()
    got = {m["body"]: m for m in c.receive_all(4, WAIT, invisible=30)}
    assert set(got) == {"from-remoting", "from-ons", "from-mqtt", "from-amqp"}
    r = got["from-remoting"]
    assert r["id"] == remoting_id and r["tag"] == "R" and r["keys"] == ["kr"]
    assert r["properties"].get("origin") == "remoting"
    o = got["from-ons"]
    assert o["tag"] == "O" and o["keys"] == ["ko"]  # its id: the test above
    assert ons_sent[0]["status"] == "SEND_OK"
    for m in got.values():
        assert m["attempt"] == 1 and not m["corrupted"] and m["topic"] == "xback"
        c.ack(m["id"])
    assert c.receive(16, 2) == []
