"""Packet-level MQTT behaviour, driven by a raw socket and our own client machine:
QoS 2 exactly once across reconnects and restarts, MQTT 5 properties, keep-alive,
limits, and malformed input closing only the offending connection."""

from __future__ import annotations

import time

import pytest

from protocol.mqtt import (
    Connack,
    Connect,
    Disconnect,
    MQTTVersion,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    packet_bytes,
)

from ..mqtt_clients import Paho, RawClient

V5 = MQTTVersion.V5
V311 = MQTTVersion.V3_1_1


def connect(port: int, client_id: str, version=V311, clean=True, **props) -> RawClient:
    c = RawClient(port, version)
    c.send(
        Connect(
            client_id=client_id,
            protocol_version=version,
            clean_start=clean,
            properties=Properties(**props),
        )
    )
    ack = c.recv()
    assert isinstance(ack, Connack) and ack.reason_code == 0, ack
    c.connack = ack
    return c


def subscribe(c: RawClient, topic_filter: str, qos: int) -> None:
    c.send(Subscribe(packet_id=1, subscriptions=(Subscription(topic_filter, qos=qos),)))
    ack = c.recv()
    assert isinstance(ack, Suback) and ack.reason_codes == (qos,)


def test_inbound_qos2_resend_is_stored_once(gateway):
    port = gateway.mqtt_port
    sub = Paho(port, "watch")
    sub.subscribe("q2/#", qos=2)
    c = connect(port, "pub2", clean=False)
    c.send(Publish(topic="q2/a", payload=b"once", qos=2, packet_id=7))
    assert c.recv() == Pubrec(packet_id=7)
    c.close()  # gone before PUBREL: the client must resend with DUP
    c = connect(port, "pub2", clean=False)
    assert c.connack.session_present
    c.send(Publish(topic="q2/a", payload=b"once", qos=2, packet_id=7, dup=True))
    assert c.recv() == Pubrec(packet_id=7)
    c.send(Pubrel(packet_id=7))
    assert c.recv() == Pubcomp(packet_id=7)
    assert sub.get().payload == b"once"
    assert sub.nothing_more(1.0)


def test_inbound_qos2_state_survives_restart(gateway):
    c = connect(gateway.mqtt_port, "pub2", clean=False)
    c.send(Publish(topic="q2/a", payload=b"once", qos=2, packet_id=9))
    assert c.recv() == Pubrec(packet_id=9)
    c.close()
    gateway.restart()
    sub = Paho(gateway.mqtt_port, "watch", clean=False)
    sub.subscribe("q2/#", qos=2)
    c = connect(gateway.mqtt_port, "pub2", clean=False)
    c.send(Publish(topic="q2/a", payload=b"once", qos=2, packet_id=9, dup=True))
    assert c.recv() == Pubrec(packet_id=9)  # recognised: not stored again
    c.send(Pubrel(packet_id=9))
    assert c.recv() == Pubcomp(packet_id=9)
    assert sub.nothing_more(1.0)


def test_outbound_qos2_resumes_with_pubrel_not_publish(gateway):
    port = gateway.mqtt_port
    c = connect(port, "rcv", clean=False)
    subscribe(c, "out/#", 2)
    pub = Paho(port, "pub")
    pub.publish("out/x", b"exactly-once", qos=2)
    msg = c.recv()
    assert isinstance(msg, Publish) and msg.qos == 2 and msg.payload == b"exactly-once"
    c.send(Pubrec(packet_id=msg.packet_id))
    assert c.recv() == Pubrel(packet_id=msg.packet_id)
    c.close()  # before PUBCOMP
    gateway.restart()
    c = connect(gateway.mqtt_port, "rcv", clean=False)
    assert c.recv() == Pubrel(packet_id=msg.packet_id)  # not the PUBLISH again
    c.send(Pubcomp(packet_id=msg.packet_id))
    with pytest.raises(TimeoutError):
        c.recv(timeout=1.0)


def test_unacked_qos1_is_redelivered_with_dup_after_reconnect(gateway):
    port = gateway.mqtt_port
    c = connect(port, "slow", clean=False)
    subscribe(c, "r/#", 1)
    pub = Paho(port, "pub")
    pub.publish("r/1", b"one", qos=1)
    pub.publish("r/2", b"two", qos=1)
    first, second = c.recv(), c.recv()
    assert (first.payload, second.payload) == (b"one", b"two") and not first.dup
    c.send(Puback(packet_id=first.packet_id))
    time.sleep(0.2)
    c.close()
    c = connect(port, "slow", clean=False)
    again = c.recv()
    assert (again.payload, again.dup) == (b"two", True)
    c.send(Puback(packet_id=again.packet_id))
    with pytest.raises(TimeoutError):
        c.recv(timeout=1.0)


def test_receive_maximum_limits_inflight(gateway):
    c = connect(gateway.mqtt_port, "windowed", V5, receive_maximum=3)
    subscribe(c, "w/#", 1)
    pub = Paho(gateway.mqtt_port, "pub")
    for i in range(6):
        pub.publish("w/x", b"%d" % i, qos=1)
    window = [c.recv() for _ in range(3)]
    with pytest.raises(TimeoutError):
        c.recv(timeout=0.7)  # the fourth waits for an ack
    c.send(Puback(packet_id=window[0].packet_id))
    assert c.recv().payload == b"3"


def test_mqtt5_properties_are_forwarded(gateway):
    port = gateway.mqtt_port
    c = connect(port, "", V5)  # empty client id: one is assigned
    assert c.connack.properties.assigned_client_identifier
    c.send(
        Subscribe(
            packet_id=2,
            subscriptions=(Subscription("p/#", qos=1),),
            properties=Properties(subscription_identifiers=(42,)),
        )
    )
    assert isinstance(c.recv(), Suback)
    p = connect(port, "pub5", V5)
    props = Properties(
        payload_format_indicator=1,
        content_type="application/json",
        response_topic="reply/here",
        correlation_data=b"\x01\x02",
        user_properties=(("k", "v"), ("k", "w")),
        message_expiry_interval=60,
    )
    p.send(Publish(topic="p/x", payload=b"{}", qos=1, packet_id=1, properties=props))
    assert isinstance(p.recv(), Puback)
    got = c.recv()
    gp = got.properties
    assert (gp.content_type, gp.response_topic, gp.correlation_data) == (
        "application/json",
        "reply/here",
        b"\x01\x02",
    )
    assert gp.user_properties == (("k", "v"), ("k", "w"))
    assert gp.payload_format_indicator == 1 and gp.subscription_identifiers == (42,)
    assert 0 < gp.message_expiry_interval <= 60


def test_mqtt5_expired_messages_are_not_delivered(gateway):
    port = gateway.mqtt_port
    c = connect(port, "late", V5, clean=False, session_expiry_interval=600)
    subscribe(c, "exp/#", 1)
    c.send(Disconnect())
    p = connect(port, "pub5", V5)
    p.send(
        Publish(
            topic="exp/a",
            payload=b"short",
            qos=1,
            packet_id=1,
            properties=Properties(message_expiry_interval=1),
        )
    )
    p.send(
        Publish(
            topic="exp/a",
            payload=b"long",
            qos=1,
            packet_id=2,
            properties=Properties(message_expiry_interval=600),
        )
    )
    assert isinstance(p.recv(), Puback) and isinstance(p.recv(), Puback)
    time.sleep(2.1)
    c = connect(port, "late", V5, clean=False, session_expiry_interval=600)
    assert c.recv().payload == b"long"


def test_mqtt5_no_local(gateway):
    c = connect(gateway.mqtt_port, "echo", V5)
    c.send(Subscribe(packet_id=1, subscriptions=(Subscription("nl", qos=1, no_local=True),)))
    assert isinstance(c.recv(), Suback)
    c.send(Publish(topic="nl", payload=b"mine", qos=1, packet_id=3))
    assert isinstance(c.recv(), Puback)
    with pytest.raises(TimeoutError):
        c.recv(timeout=0.8)


def test_mqtt5_inbound_topic_alias(gateway):
    sub = Paho(gateway.mqtt_port, "sub")
    sub.subscribe("alias/#", qos=1)
    c = connect(gateway.mqtt_port, "aliaser", V5)
    assert c.connack.properties.topic_alias_maximum > 0
    c.send(
        Publish(
            topic="alias/long/topic",
            payload=b"1",
            qos=1,
            packet_id=1,
            properties=Properties(topic_alias=5),
        )
    )
    c.send(
        Publish(topic="", payload=b"2", qos=1, packet_id=2, properties=Properties(topic_alias=5))
    )
    assert isinstance(c.recv(), Puback) and isinstance(c.recv(), Puback)
    assert [(m.topic, m.payload) for m in sub.get_n(2)] == [
        ("alias/long/topic", b"1"),
        ("alias/long/topic", b"2"),
    ]


def test_keep_alive_is_enforced_and_will_sent(gateway):
    watcher = Paho(gateway.mqtt_port, "watcher")
    watcher.subscribe("ka/#", qos=1)
    c = RawClient(gateway.mqtt_port)
    from protocol.mqtt import Will

    c.send(
        Connect(
            client_id="sleepy",
            keep_alive=1,
            protocol_version=V311,
            will=Will(topic="ka/sleepy", payload=b"timed out", qos=1),
        )
    )
    assert isinstance(c.recv(), Connack)
    started = time.monotonic()
    assert c.closed_by_server(timeout=5)
    assert 1.0 <= time.monotonic() - started < 4.0  # 1.5 x keep-alive
    assert watcher.get().payload == b"timed out"


def test_oversized_packet_gets_0x95_and_others_keep_working(gateway):
    good = Paho(gateway.mqtt_port, "good")
    good.subscribe("ok", qos=1)
    c = connect(gateway.mqtt_port, "big", V5)
    max_size = c.connack.properties.maximum_packet_size
    assert max_size
    # a PUBLISH whose remaining length claims more than the maximum
    c.send_raw(b"\x30" + bytes([0xFF, 0xFF, 0xFF, 0x7F]) + b"\x00\x01a")
    reply = c.recv()
    assert isinstance(reply, Disconnect) and reply.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert c.closed_by_server()
    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("ok", b"still here", qos=1)
    assert good.get().payload == b"still here"


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        (
            "reserved flags in SUBSCRIBE",
            b"\x80\x06\x00\x01\x00\x01a\x00",
            ReasonCode.MALFORMED_PACKET,
        ),
        ("QoS 3 PUBLISH", b"\x36\x05\x00\x01a\x00\x01", ReasonCode.MALFORMED_PACKET),
        ("second CONNECT", None, ReasonCode.PROTOCOL_ERROR),
        (
            "wildcard in PUBLISH topic",
            b"\x32\x08\x00\x03a/+\x00\x01\x00",
            ReasonCode.TOPIC_NAME_INVALID,
        ),
        ("5-byte remaining length", b"\x30\xff\xff\xff\xff\x01", ReasonCode.MALFORMED_PACKET),
    ],
)
def test_malformed_packets_close_with_reason_code(gateway, name, data, code):
    c = connect(gateway.mqtt_port, "bad", V5)
    if data is None:
        data = packet_bytes(Connect(client_id="again", protocol_version=V5), V5)
    c.send_raw(data)
    reply = c.recv()
    assert isinstance(reply, Disconnect), (name, reply)
    assert reply.reason_code == code, name
    assert c.closed_by_server()
    other = connect(gateway.mqtt_port, "fine", V5)
    other.send(Publish(topic="x", payload=b"", qos=1, packet_id=1))
    assert isinstance(other.recv(), Puback)


def test_graceful_shutdown_sends_disconnect_0x8b(gateway):
    c = connect(gateway.mqtt_port, "stay", V5)
    gateway.stop()
    reply = c.recv()
    assert isinstance(reply, Disconnect) and reply.reason_code == ReasonCode.SERVER_SHUTTING_DOWN


def test_mqtt_3_1_mqisdp(gateway):
    c = connect(gateway.mqtt_port, "old-client", MQTTVersion.V3_1)
    subscribe(c, "legacy", 1)
    c.send(Publish(topic="legacy", payload=b"1999", qos=1, packet_id=4))
    packets = [c.recv(), c.recv()]
    assert {type(p) for p in packets} == {Puback, Publish}


def test_mqtt5_outbound_topic_aliases(gateway):
    c = connect(gateway.mqtt_port, "aliased", V5, topic_alias_maximum=4)
    subscribe(c, "long/topic/name/#", 0)
    pub = Paho(gateway.mqtt_port, "pub")
    for i in range(3):
        pub.publish("long/topic/name/x", b"%d" % i, qos=1)
    got = [c.recv() for _ in range(3)]
    # the client machine resolves aliases; the wire carried the topic only once
    assert [g.topic for g in got] == ["long/topic/name/x"] * 3
    assert c.machine._inbound_aliases  # an alias was assigned by the gateway


def test_metrics_count_mqtt_traffic(gateway):
    import urllib.request

    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("m/1", b"x", qos=1)
    body = (
        urllib.request.urlopen(f"http://127.0.0.1:{gateway.ports['unified']}/metrics", timeout=5)
        .read()
        .decode()
    )
    line = next(ln for ln in body.splitlines() if ln.startswith("lmq_mqtt_messages_received_total"))
    assert float(line.split()[-1]) >= 1


def test_shared_subscription_redelivers_unacked_to_another_member(gateway):
    port = gateway.mqtt_port
    a = connect(port, "member-a", V5, receive_maximum=1)
    subscribe(a, "$share/grp/work/#", 1)
    pub = Paho(port, "pub")
    pub.publish("work/1", b"job-1", qos=1)
    held = a.recv()
    assert isinstance(held, Publish) and held.payload == b"job-1"
    b = Paho(port, "member-b")
    b.subscribe("$share/grp/work/#", qos=1)
    assert b.nothing_more(0.5)  # a holds it, unacked
    a.close()  # disconnect without PUBACK
    got = b.get(timeout=5)
    assert got.payload == b"job-1" and got.dup


def test_server_keep_alive_caps_the_clients(tmp_path):
    from ..gateway_process import GatewayProcess

    config = tmp_path / "ka.toml"
    config.write_text("max_keep_alive = 1\n")
    gw = GatewayProcess(tmp_path / "d", "--config", str(config)).start()
    try:
        c = RawClient(gw.mqtt_port, V5)
        c.send(Connect(client_id="lazy", keep_alive=600, protocol_version=V5))
        ack = c.recv()
        assert ack.properties.server_keep_alive == 1
        started = time.monotonic()
        assert c.closed_by_server(timeout=5)  # enforced at 1.5 x 1 s, not 600 s
        assert time.monotonic() - started < 4.0
    finally:
        gw.stop()


def test_disconnect_carries_a_reason_string(gateway):
    c = connect(gateway.mqtt_port, "why", V5)
    c.send_raw(b"\x32\x08\x00\x03a/+\x00\x01\x00")  # QoS 1 PUBLISH to "a/+"
    reply = c.recv()
    assert isinstance(reply, Disconnect) and reply.reason_code == ReasonCode.TOPIC_NAME_INVALID
    assert "wildcard in topic name 'a/+'" in reply.properties.reason_string


def test_outbound_qos2_keeps_its_packet_id_and_is_not_repeated_after_pubcomp(gateway):
    """MQTT-4.4.0-1: an unacknowledged QoS 2 PUBLISH goes again with the same packet id;
    a completed flow is not sent again after a restart, even right after its PUBCOMP."""
    port = gateway.mqtt_port
    c = connect(port, "q2rcv", clean=False)
    subscribe(c, "o2/#", 2)
    pub = Paho(port, "pub")
    pub.publish("o2/a", b"first", qos=2)
    first = c.recv()
    c.close()  # no PUBREC: the flow is unfinished
    c = connect(port, "q2rcv", clean=False)
    again = c.recv()
    assert (again.payload, again.packet_id, again.dup) == (b"first", first.packet_id, True)
    c.send(Pubrec(packet_id=again.packet_id))
    assert c.recv() == Pubrel(packet_id=again.packet_id)
    c.send(Pubcomp(packet_id=again.packet_id))
    time.sleep(0.1)
    gateway.kill()  # within the offset-commit interval
    gateway.start()
    c = connect(gateway.mqtt_port, "q2rcv", clean=False)
    with pytest.raises(TimeoutError):
        c.recv(timeout=1.0)  # completed: not delivered again
