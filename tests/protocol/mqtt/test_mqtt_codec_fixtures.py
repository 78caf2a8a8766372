"""Byte-level fixtures for every packet type in every version (after h11's test_io.py).

Each fixture is checked four ways: decoding the bytes gives the packet and consumes them
all; encoding the packet gives the bytes back; bytes after the packet are left alone;
every strict prefix raises InsufficientData. Then each is fed to a connection state
machine whole and byte by byte. The paho fixtures are what paho-mqtt 2.2.0 writes (its
``Client._send_*`` methods with a fake socket), so our reading matches a real client.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from protocol.mqtt import (
    NEED_DATA,
    Auth,
    Connack,
    Connect,
    Connection,
    Disconnect,
    InsufficientData,
    MQTTVersion,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Role,
    State,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    decode_packet,
    packet_bytes,
)

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5
ALL = (V31, V311, V5)
V3 = (V31, V311)


@dataclass(frozen=True)
class Fixture:
    name: str
    versions: tuple[MQTTVersion, ...]
    hex: str
    packet: Packet
    canonical: bool = True  # our encoder writes exactly these bytes

    @property
    def data(self) -> bytes:
        return bytes.fromhex(self.hex.replace(" ", ""))


PAHO_WILL = Will("w/t", b"bye", qos=1, retain=True)
FIXTURES = [
    # CONNECT
    Fixture("connect-3.1", (V31,), "10 0f 0006 4d5149736470 03 02 003c 0001 63",
            Connect("c", V31)),
    Fixture("connect-3.1.1", (V311,), "10 0d 0004 4d515454 04 02 003c 0001 63",
            Connect("c", V311)),
    Fixture("connect-5", (V5,), "10 0e 0004 4d515454 05 02 003c 00 0001 63", Connect("c", V5)),
    Fixture("connect-5-props", (V5,),
            "10 1a 0004 4d515454 05 00 0000 0d 11 00000e10 21 000a 27 00000400 0000",
            Connect("", V5, clean_start=False, keep_alive=0, properties=Properties(
                session_expiry_interval=3600, receive_maximum=10, maximum_packet_size=1024))),
    Fixture("connect-5-will-props", (V5,),
            "10 1b 0004 4d515454 05 06 003c 00 0001 63 05 18 0000000a 0001 74 0002 6869",
            Connect("c", V5, will=Will("t", b"hi", properties=Properties(
                will_delay_interval=10)))),
    Fixture("paho-connect-3.1", (V31,),
            "102800064d514973647003ee001e00067061686f2d310003772f74000362796500047573657200027077",
            Connect("paho-1", V31, True, 30, "user", b"pw", PAHO_WILL)),
    Fixture("paho-connect-3.1.1", (V311,),
            "102600044d51545404ee001e00067061686f2d310003772f74000362796500047573657200027077",
            Connect("paho-1", V311, True, 30, "user", b"pw", PAHO_WILL)),
    Fixture("paho-connect-5", (V5,),
            "102800044d51545405ee001e0000067061686f2d31000003772f740003627965000475736572"
            "00027077",
            Connect("paho-1", V5, True, 30, "user", b"pw", PAHO_WILL)),
    # CONNACK
    Fixture("connack-3.1", (V31,), "20 02 00 00", Connack()),
    Fixture("connack-3.1.1-present", (V311,), "20 02 01 00", Connack(session_present=True)),
    Fixture("connack-3.x-refused", V3, "20 02 00 05", Connack(reason_code=5)),
    Fixture("connack-5", (V5,), "20 03 00 00 00", Connack()),
    Fixture("connack-5-refused", (V5,), "20 03 00 87 00", Connack(reason_code=0x87)),
    Fixture("connack-5-props", (V5,), "20 09 01 00 06 21 0014 22 000a",
            Connack(True, 0, Properties(receive_maximum=20, topic_alias_maximum=10))),
    # PUBLISH
    Fixture("publish-qos0", V3, "30 0a 0003 612f62 68656c6c6f", Publish("a/b", b"hello")),
    Fixture("publish-qos2-dup-retain", V3, "3d 0c 0003 612f62 0007 68656c6c6f",
            Publish("a/b", b"hello", 2, retain=True, dup=True, packet_id=7)),
    Fixture("paho-publish-3.x", V3, "320c0003612f62000768656c6c6f",
            Publish("a/b", b"hello", 1, packet_id=7)),
    Fixture("publish-qos0-5", (V5,), "30 0b 0003 612f62 00 68656c6c6f", Publish("a/b", b"hello")),
    Fixture("paho-publish-5", (V5,), "32190003612f6200070c020000003c2600016b00017668656c6c6f",
            Publish("a/b", b"hello", 1, packet_id=7, properties=Properties(
                message_expiry_interval=60, user_properties=(("k", "v"),)))),
    Fixture("publish-alias-only-5", (V5,), "30 08 0000 03 23 0001 6869",
            Publish("", b"hi", properties=Properties(topic_alias=1))),
    Fixture("publish-empty-payload", ALL[:2], "31 05 0003 612f62", Publish("a/b", retain=True)),
    # PUBACK, PUBREC, PUBREL, PUBCOMP
    Fixture("puback", ALL, "40 02 0007", Puback(7)),
    Fixture("pubrec", ALL, "50 02 0007", Pubrec(7)),
    Fixture("pubrel", ALL, "62 02 0007", Pubrel(7)),
    Fixture("pubcomp", ALL, "70 02 0007", Pubcomp(7)),
    Fixture("puback-5-code", (V5,), "40 03 0007 10", Puback(7, 0x10)),
    Fixture("puback-5-code-props", (V5,), "40 09 0007 87 05 1f 0002 6e6f",
            Puback(7, 0x87, Properties(reason_string="no"))),
    Fixture("puback-5-empty-props", (V5,), "40 04 0007 00 00", Puback(7), canonical=False),
    Fixture("pubrel-5-not-found", (V5,), "62 03 0007 92", Pubrel(7, 0x92)),
    # SUBSCRIBE / SUBACK
    Fixture("paho-subscribe-3.x", V3, "820800010003612f2b01",
            Subscribe(1, (Subscription("a/+", 1),))),
    Fixture("paho-subscribe-5", (V5,), "82090001000003612f2b01",
            Subscribe(1, (Subscription("a/+", 1),))),
    Fixture("subscribe-5-options", (V5,), "82 0b 0002 02 0b 05 0003 612f23 2d",
            Subscribe(2, (Subscription("a/#", 1, True, True, 2),),
                      Properties(subscription_identifiers=(5,)))),
    Fixture("suback-3.x", V3, "90 04 0001 01 80", Suback(1, (1, 0x80))),
    Fixture("suback-5", (V5,), "90 06 0001 00 01 80 a2", Suback(1, (1, 0x80, 0xA2))),
    # UNSUBSCRIBE / UNSUBACK
    Fixture("paho-unsubscribe-3.x", V3, "a20700020003612f2b", Unsubscribe(2, ("a/+",))),
    Fixture("paho-unsubscribe-5", (V5,), "a2080002000003612f2b", Unsubscribe(2, ("a/+",))),
    Fixture("unsuback-3.x", V3, "b0 02 0002", Unsuback(2)),
    Fixture("unsuback-5", (V5,), "b0 05 0002 00 00 11", Unsuback(2, (0, 0x11))),
    # PINGREQ, PINGRESP
    Fixture("pingreq", ALL, "c0 00", Pingreq()),
    Fixture("pingresp", ALL, "d0 00", Pingresp()),
    # DISCONNECT
    Fixture("paho-disconnect", ALL, "e000", Disconnect()),
    Fixture("disconnect-5-will", (V5,), "e0 01 04", Disconnect(4)),
    Fixture("disconnect-5-props", (V5,), "e0 06 8b 04 1c 0001 78",
            Disconnect(0x8B, Properties(server_reference="x"))),
    # AUTH
    Fixture("auth-5", (V5,), "f0 00", Auth()),
    Fixture("auth-5-props", (V5,), "f0 06 18 04 15 0001 6d",
            Auth(0x18, Properties(authentication_method="m"))),
]
CASES = [pytest.param(f, v, id=f"{f.name}-v{int(v)}") for f in FIXTURES for v in f.versions]


@pytest.mark.parametrize(("fixture", "version"), CASES)
def test_decode_whole(fixture: Fixture, version: MQTTVersion) -> None:
    packet, used = decode_packet(fixture.data, version)
    assert packet == fixture.packet
    assert used == len(fixture.data)


@pytest.mark.parametrize(("fixture", "version"), CASES)
def test_encode(fixture: Fixture, version: MQTTVersion) -> None:
    if fixture.canonical:
        assert packet_bytes(fixture.packet, version) == fixture.data
    # Whatever the encoder writes decodes to the same packet.
    assert decode_packet(packet_bytes(fixture.packet, version), version)[0] == fixture.packet


@pytest.mark.parametrize(("fixture", "version"), CASES)
def test_trailing_bytes_left_alone(fixture: Fixture, version: MQTTVersion) -> None:
    data = fixture.data + b"\x30\x02\x00"
    packet, used = decode_packet(memoryview(data), version)
    assert packet == fixture.packet
    assert used == len(fixture.data)


@pytest.mark.parametrize(("fixture", "version"), CASES)
def test_every_strict_prefix_needs_more(fixture: Fixture, version: MQTTVersion) -> None:
    data = fixture.data
    for end in range(len(data)):
        with pytest.raises(InsufficientData):
            decode_packet(data[:end], version)


def _receiver(fixture: Fixture, version: MQTTVersion) -> Connection:
    """A connection in the state where the fixture's packet may arrive."""
    ptype = fixture.packet.packet_type.name
    server_sends = ptype in ("CONNACK", "SUBACK", "UNSUBACK", "PINGRESP")
    if ptype == "CONNECT":
        return Connection(Role.SERVER)
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.send(Connect("c", version)))
    server.next_event()
    if ptype == "CONNACK":
        return client
    client.receive_data(server.send(Connack(properties=Properties(topic_alias_maximum=5))
                                    if version is V5 else Connack()))
    client.next_event()
    if server_sends or (ptype == "DISCONNECT" and version is V5):
        return client
    return server


# An alias-only PUBLISH needs its alias set first: see test_mqtt_connection.py.
CONNECTION_CASES = [
    c for c in CASES
    if not (isinstance(c.values[0].packet, Publish) and c.values[0].packet.properties.topic_alias)
]


@pytest.mark.parametrize(("fixture", "version"), CONNECTION_CASES)
@pytest.mark.parametrize("chunk", [None, 1], ids=["whole", "bytewise"])
def test_fed_to_connection(fixture: Fixture, version: MQTTVersion, chunk: int | None) -> None:
    conn = _receiver(fixture, version)
    data = fixture.data
    if chunk is None:
        conn.receive_data(data)
    else:
        for i in range(len(data) - 1):
            conn.receive_data(data[i : i + 1])
            assert conn.next_event() is NEED_DATA
        conn.receive_data(data[-1:])
    assert conn.next_event() == fixture.packet
    assert conn.next_event() is NEED_DATA
    assert conn.state is not State.ERROR
