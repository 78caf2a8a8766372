"""Receive Maximum over a real socket (MQTT 5 3.3.4): a client with more QoS 2 PUBLISH
unacknowledged than the gateway's Receive Maximum gets DISCONNECT 0x93 and is closed; a
client that keeps to it (paho, its window at the gateway's maximum) is never
disconnected, although the gateway acknowledges only after the store has the message."""

from __future__ import annotations

import select
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.mqtt import (
    Connack,
    Connect,
    Disconnect,
    MQTTVersion,
    Puback,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    packet_bytes,
)

from ..gateway_process import GatewayProcess
from ..mqtt_clients import TIMEOUT, RawClient

V5 = MQTTVersion.V5


def test_one_qos2_publish_above_receive_maximum_is_disconnected(gateway):
    c = RawClient(gateway.mqtt_port, V5)
    c.send(Connect("overrun", V5))
    ack = c.recv()
    assert isinstance(ack, Connack) and ack.reason_code == 0
    maximum = ack.properties.receive_maximum
    assert maximum  # the gateway states its Receive Maximum
    # maximum QoS 2 PUBLISHes, never released: each stays unacknowledged (no PUBCOMP)
    c.send_raw(b"".join(
        packet_bytes(Publish("rm/t", b"x", 2, packet_id=i), V5) for i in range(1, maximum + 1)
    ))
    recs = {c.recv().packet_id for _ in range(maximum)}
    assert recs == set(range(1, maximum + 1))
    # the machine on our side never sends more than the window: bypass it
    c.send_raw(packet_bytes(Publish("rm/t", b"x", 2, packet_id=maximum + 1), V5))
    reply = c.recv()
    assert isinstance(reply, Disconnect), reply
    assert reply.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert c.closed_by_server()
    # the gateway goes on serving others
    other = RawClient(gateway.mqtt_port, V5)
    other.send(Connect("fine", V5))
    assert isinstance(other.recv(), Connack)
    other.send(Publish("rm/t", b"y", 1, packet_id=1))
    assert other.recv() == Puback(1)
    other.send(Publish("rm/t", b"z", 2, packet_id=2))
    assert other.recv() == Pubrec(2)


def test_a_client_still_writing_reads_the_disconnect(gateway):
    """The paho interoperability suite's test_flow_control2: a client goes past the
    Receive Maximum and goes on writing (PUBRELs for its earlier PUBRECs) after the
    gateway's DISCONNECT 0x93 is on its way. Those writes must neither fail (a reset, a
    broken pipe) nor keep the client from reading the DISCONNECT: the gateway
    half-closes after it and reads and discards what still comes."""
    c = RawClient(gateway.mqtt_port, V5)
    c.send(Connect("still-writing", V5))
    maximum = c.recv().properties.receive_maximum
    c.send_raw(b"".join(
        packet_bytes(Publish("rm/t", b"x", 2, packet_id=i), V5) for i in range(1, maximum + 1)
    ))
    assert {c.recv().packet_id for _ in range(maximum)} == set(range(1, maximum + 1))
    c.send_raw(packet_bytes(Publish("rm/t", b"x", 2, packet_id=maximum + 1), V5))
    # the DISCONNECT is here (unread): only now release the earlier messages, one by one
    assert select.select([c.sock], [], [], TIMEOUT)[0]
    for i in range(1, maximum + 1):
        c.send_raw(packet_bytes(Pubrel(i), V5))
    reply = c.recv()
    assert isinstance(reply, Disconnect), reply
    assert reply.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert c.closed_by_server()  # the gateway's FIN came after the DISCONNECT


def test_a_client_within_receive_maximum_is_never_disconnected(gateway):
    """paho with its in-flight window at the gateway's Receive Maximum publishes 6,000
    QoS 1 and 2 messages as fast as it can: all acknowledged, no disconnect."""
    probe = RawClient(gateway.mqtt_port, V5)
    probe.send(Connect("probe", V5))
    maximum = probe.recv().properties.receive_maximum
    probe.close()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fast", protocol=mqtt.MQTTv5)
    connected = threading.Event()
    disconnects: list[object] = []
    client.on_connect = lambda c, u, flags, rc, props=None: connected.set()
    client.on_disconnect = lambda c, u, flags, rc, props=None: disconnects.append(rc)
    client.max_inflight_messages_set(maximum)
    client.max_queued_messages_set(0)  # unbounded
    client.connect("127.0.0.1", gateway.mqtt_port)
    client.loop_start()
    try:
        assert connected.wait(TIMEOUT)
        infos = [client.publish("rm/fast", b"m%d" % i, qos=1 + i % 2) for i in range(6000)]
        deadline = time.monotonic() + 120
        for info in infos:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            assert info.is_published(), (len(disconnects), disconnects)
        assert disconnects == []
    finally:
        client.disconnect()
        client.loop_stop()


def test_receive_maximum_is_configurable(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text("receive_maximum = 16\n")
    gw = GatewayProcess(tmp_path / "data", "--config", str(config)).start()
    try:
        c = RawClient(gw.mqtt_port, V5)
        c.send(Connect("small", V5))
        ack = c.recv()
        assert isinstance(ack, Connack) and ack.properties.receive_maximum == 16
        c.send_raw(b"".join(
            packet_bytes(Publish("rm/t", b"x", 2, packet_id=i), V5) for i in range(1, 17)))
        assert {c.recv().packet_id for _ in range(16)} == set(range(1, 17))
        c.send_raw(packet_bytes(Publish("rm/t", b"x", 2, packet_id=17), V5))
        reply = c.recv()
        assert isinstance(reply, Disconnect), reply
        assert reply.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    finally:
        gw.stop()
