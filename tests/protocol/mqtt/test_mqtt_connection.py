"""The connection state machine: a client machine and a server machine back to back."""

from __future__ import annotations

import pytest

from protocol.mqtt import (
    EMPTY_PROPERTIES,
    NEED_DATA,
    PAUSED,
    Auth,
    Connack,
    Connect,
    Connection,
    ConnectionClosed,
    Disconnect,
    LocalProtocolError,
    MQTTVersion,
    OutgoingPacketTooLarge,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    RemoteProtocolError,
    Role,
    State,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    packet_bytes,
)

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5
VERSIONS = pytest.mark.parametrize("version", [V31, V311, V5], ids=lambda v: f"v{int(v)}")



def assert_disconnect(data: bytes, code: int) -> None:
    """An MQTT 5 DISCONNECT with ``code`` and a reason string saying why."""
    from protocol.mqtt import decode_packet

    packet, used = decode_packet(memoryview(data), V5)
    assert used == len(data)
    assert isinstance(packet, Disconnect) and packet.reason_code == code
    assert packet.properties.reason_string

def transfer(sender: Connection, receiver: Connection, packet: Packet) -> Packet:
    """Send one packet and return the single event the receiver gets from it."""
    receiver.receive_data(sender.send(packet))
    event = receiver.next_event()
    assert receiver.next_event() is NEED_DATA
    return event  # type: ignore[return-value]


def connected_pair(
    version: MQTTVersion = V5,
    connect_props: Properties = EMPTY_PROPERTIES,
    connack_props: Properties = EMPTY_PROPERTIES,
    **client_options: bool,
) -> tuple[Connection, Connection]:
    client = Connection(Role.CLIENT, **client_options)  # type: ignore[arg-type]
    server = Connection(Role.SERVER)
    connect = Connect("dev-1", version, keep_alive=30, properties=connect_props)
    assert transfer(client, server, connect) == connect
    assert server.state is State.AWAITING_CONNACK
    connack = Connack(properties=connack_props)
    assert transfer(server, client, connack) == connack
    assert client.state is server.state is State.CONNECTED
    return client, server


@VERSIONS
def test_full_session_back_to_back(version: MQTTVersion) -> None:
    client, server = connected_pair(version)
    assert server.version is client.version is version
    assert server.keep_alive == client.keep_alive == 30
    sub = Subscribe(1, (Subscription("a/#", 2),))
    assert transfer(client, server, sub) == sub
    assert transfer(server, client, Suback(1, (2,))) == Suback(1, (2,))
    # QoS 0, 1 and 2 in both directions.
    for sender, receiver in ((client, server), (server, client)):
        assert transfer(sender, receiver, Publish("a/b", b"0")) == Publish("a/b", b"0")
        assert transfer(sender, receiver, Publish("a/b", b"1", 1, packet_id=5)).qos == 1
        assert transfer(receiver, sender, Puback(5)) == Puback(5)
        assert transfer(sender, receiver, Publish("a/b", b"2", 2, packet_id=6)).qos == 2
        assert transfer(receiver, sender, Pubrec(6)) == Pubrec(6)
        assert transfer(sender, receiver, Pubrel(6)) == Pubrel(6)
        assert transfer(receiver, sender, Pubcomp(6)) == Pubcomp(6)
    assert transfer(client, server, Pingreq()) == Pingreq()
    assert transfer(server, client, Pingresp()) == Pingresp()
    unsub = Unsubscribe(2, ("a/#",))
    assert transfer(client, server, unsub) == unsub
    unsuback = Unsuback(2, (0,) if version is V5 else ())
    assert transfer(server, client, unsuback) == unsuback
    assert transfer(client, server, Disconnect()) == Disconnect()
    assert client.state is server.state is State.CLOSED
    server.receive_data(b"")
    assert server.next_event() == ConnectionClosed()


def test_many_packets_in_one_read_and_split_reads() -> None:
    client, server = connected_pair(V311)
    data = b"".join(client.send(Publish("t", bytes([i]) * 100, 1, packet_id=i + 1))
                    for i in range(20))
    server.receive_data(data[:1000])
    got = []
    while (event := server.next_event()) is not NEED_DATA:
        got.append(event)
    server.receive_data(data[1000:])
    while (event := server.next_event()) is not NEED_DATA:
        got.append(event)
    assert [p.packet_id for p in got] == list(range(1, 21))  # type: ignore[union-attr]


@pytest.mark.parametrize("first", [Pingreq(), Publish("a"), Subscribe(1, (Subscription("a"),))])
def test_first_packet_must_be_connect(first: Packet) -> None:
    server = Connection(Role.SERVER)
    server.receive_data(packet_bytes(first, V311))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR
    assert server.state is State.ERROR
    assert server.error_response() == b""  # no CONNECT, no version: just close
    # ERROR refuses further input.
    with pytest.raises(RemoteProtocolError):
        server.receive_data(b"\xc0\x00")
    with pytest.raises(RemoteProtocolError):
        server.next_event()


@VERSIONS
def test_second_connect_is_a_protocol_error(version: MQTTVersion) -> None:
    client, server = connected_pair(version)
    server.receive_data(packet_bytes(Connect("again", version)))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR
    # MQTT 5 says why with a DISCONNECT; 3.x just closes.
    if version is V5:
        assert_disconnect(server.error_response(), ReasonCode.PROTOCOL_ERROR)
    else:
        assert server.error_response() == b""


def test_unsupported_protocol_level() -> None:
    server = Connection(Role.SERVER)
    server.receive_data(bytes.fromhex("100d00044d51545406020000000163"))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert info.value.connack_return_code == 1
    assert server.error_response() == bytes.fromhex("20020001")


def test_malformed_v5_connect_gets_a_v5_connack() -> None:
    server = Connection(Role.SERVER)
    data = bytearray(packet_bytes(Connect("c", V5)))
    data[9] |= 0x01  # the reserved CONNECT flag
    server.receive_data(bytes(data))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.MALFORMED_PACKET
    assert server.error_response() == bytes.fromhex("2003008100")


@pytest.mark.parametrize(("version", "clean"), [(V31, True), (V311, False)])
def test_empty_client_id_rejected_in_3x(version: MQTTVersion, clean: bool) -> None:
    server = Connection(Role.SERVER)
    server.receive_data(packet_bytes(Connect("", version, clean_start=clean)))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
    assert server.error_response() == bytes.fromhex("20020002")


def test_empty_client_id_accepted_where_allowed() -> None:
    for version, clean in ((V311, True), (V5, False)):
        server = Connection(Role.SERVER)
        server.receive_data(packet_bytes(Connect("", version, clean_start=clean)))
        assert isinstance(server.next_event(), Connect)


def test_refused_connack_closes_both_sides() -> None:
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    transfer(client, server, Connect("c", V311))
    event = transfer(server, client, Connack(reason_code=ReasonCode.NOT_AUTHORIZED))
    assert event == Connack(reason_code=5)  # mapped to the 3.x return code
    assert client.state is server.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        client.send(Publish("t"))


def test_server_pauses_pipelined_packets_until_connack() -> None:
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    data = client.send(Connect("c", V5)) + client.send(Publish("t", b"early"))
    server.receive_data(data)
    assert isinstance(server.next_event(), Connect)
    assert server.next_event() is PAUSED
    assert server.next_event() is PAUSED
    client.receive_data(server.send(Connack()))
    assert server.next_event() == Publish("t", b"early")
    assert client.next_event() == Connack()


def test_enhanced_auth_before_connack() -> None:
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    method = Properties(authentication_method="SCRAM", authentication_data=b"1")
    transfer(client, server, Connect("c", V5, properties=method))
    cont = Auth(ReasonCode.CONTINUE_AUTHENTICATION, method)
    assert transfer(server, client, cont) == cont
    assert transfer(client, server, cont) == cont
    assert transfer(server, client, Connack()) == Connack()


def test_max_packet_size_inbound_before_body_arrives() -> None:
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER, max_packet_size=100)
    transfer(client, server, Connect("c", V5))
    transfer(server, client, Connack(properties=Properties(maximum_packet_size=100)))
    with pytest.raises(OutgoingPacketTooLarge):  # the client knows the limit too
        client.send(Publish("t", b"x" * 200))
    server.receive_data(packet_bytes(Publish("t", b"x" * 200))[:3])  # only the fixed header
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert_disconnect(server.error_response(), ReasonCode.PACKET_TOO_LARGE)


def test_client_max_packet_size_on_output() -> None:
    client, server = connected_pair(
        V5, connect_props=Properties(maximum_packet_size=40))
    assert server.peer_max_packet_size == 40
    with pytest.raises(OutgoingPacketTooLarge) as info:
        server.send(Publish("t", b"x" * 100))
    assert info.value.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert server.state is State.CONNECTED  # skip the message, carry on
    # An acknowledgement loses its reason string and user properties to fit.
    wordy = Puback(3, ReasonCode.NOT_AUTHORIZED, Properties(
        reason_string="you may not publish on this topic", user_properties=(("k", "v"),)))
    event = transfer(server, client, wordy)
    assert event == Puback(3, ReasonCode.NOT_AUTHORIZED)
    assert transfer(server, client, Publish("t", b"fits")) == Publish("t", b"fits")


def test_inbound_topic_aliases() -> None:
    client, server = connected_pair(
        V5, connack_props=Properties(topic_alias_maximum=2))
    assert client.peer_topic_alias_maximum == 2 and server.topic_alias_maximum == 2
    first = Publish("sensors/1/temp", b"20", properties=Properties(topic_alias=1))
    assert transfer(client, server, first) == Publish("sensors/1/temp", b"20")
    again = Publish("", b"21", properties=Properties(topic_alias=1))
    assert transfer(client, server, again) == Publish("sensors/1/temp", b"21")
    with pytest.raises(LocalProtocolError):  # the client checks the server's maximum too
        client.send(Publish("x", properties=Properties(topic_alias=3)))


@pytest.mark.parametrize(("alias_hex", "code"), [
    ("0003", ReasonCode.TOPIC_ALIAS_INVALID),
    ("0000", ReasonCode.TOPIC_ALIAS_INVALID),
])
def test_inbound_topic_alias_out_of_range(alias_hex: str, code: ReasonCode) -> None:
    client, server = connected_pair(V5, connack_props=Properties(topic_alias_maximum=2))
    server.receive_data(bytes.fromhex(f"300900017403 23 {alias_hex} 6869".replace(" ", "")))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == code
    assert_disconnect(server.error_response(), ReasonCode.TOPIC_ALIAS_INVALID)


def test_unknown_inbound_alias_is_a_protocol_error() -> None:
    client, server = connected_pair(V5, connack_props=Properties(topic_alias_maximum=2))
    server.receive_data(packet_bytes(Publish("", properties=Properties(topic_alias=2))))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR


def test_alias_without_advertised_maximum() -> None:
    client, server = connected_pair(V5)
    server.receive_data(packet_bytes(Publish("t", properties=Properties(topic_alias=1))))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.TOPIC_ALIAS_INVALID


def test_automatic_outbound_topic_aliases() -> None:
    client, server = connected_pair(
        V5, connack_props=Properties(topic_alias_maximum=1), outbound_topic_aliases=True)
    first = client.send(Publish("a/long/topic/name", b"1"))
    second = client.send(Publish("a/long/topic/name", b"2"))
    third = client.send(Publish("other", b"3"))  # the table is full: sent in full
    assert len(second) < len(first)
    server.receive_data(first + second + third)
    assert server.next_event() == Publish("a/long/topic/name", b"1")
    assert server.next_event() == Publish("a/long/topic/name", b"2")
    assert server.next_event() == Publish("other", b"3")


def test_client_publish_with_subscription_identifier() -> None:
    client, server = connected_pair(V5)
    server.receive_data(packet_bytes(
        Publish("t", properties=Properties(subscription_identifiers=(1,)))))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR


def test_server_keep_alive_overrides() -> None:
    client, server = connected_pair(V5, connack_props=Properties(server_keep_alive=10))
    assert client.keep_alive == server.keep_alive == 10


def test_disconnect_session_expiry_after_zero() -> None:
    client, server = connected_pair(V5)
    server.receive_data(packet_bytes(
        Disconnect(properties=Properties(session_expiry_interval=5))))
    with pytest.raises(RemoteProtocolError):
        server.next_event()


@VERSIONS
def test_server_disconnect(version: MQTTVersion) -> None:
    client, server = connected_pair(version)
    data = server.send(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN))
    assert server.state is State.CLOSED
    if version is V5:
        assert data == b"\xe0\x01\x8b"
        client.receive_data(data)
        assert client.next_event() == Disconnect(ReasonCode.SERVER_SHUTTING_DOWN)
    else:
        assert data == b""  # 3.x has no server DISCONNECT: just close


def test_wrong_direction_packets() -> None:
    client, server = connected_pair(V311)
    server.receive_data(packet_bytes(Pingresp()))
    with pytest.raises(RemoteProtocolError):
        server.next_event()
    with pytest.raises(LocalProtocolError):
        client.send(Suback(1, (0,)))
    assert client.state is State.ERROR


def test_eof_mid_packet() -> None:
    client, server = connected_pair(V311)
    server.receive_data(client.send(Publish("t", b"abc"))[:4])
    assert server.next_event() is NEED_DATA
    server.receive_data(b"")
    assert server.next_event() == ConnectionClosed()
    assert server.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        server.receive_data(b"more")


def test_client_rejects_packets_before_connack() -> None:
    client = Connection(Role.CLIENT)
    client.send(Connect("c", V311))
    client.receive_data(packet_bytes(Publish("t"), V311))
    with pytest.raises(RemoteProtocolError):
        client.next_event()


def test_error_response_after_send_error_in_error_state() -> None:
    client, server = connected_pair(V5)
    server.receive_data(b"\x30\x01\x00")  # topic length cut by the remaining length
    with pytest.raises(RemoteProtocolError):
        server.next_event()
    assert server.send(Disconnect(ReasonCode.MALFORMED_PACKET)) == b"\xe0\x01\x81"
    with pytest.raises(LocalProtocolError):
        server.send(Publish("t"))


def test_replacing_properties_re_encodes() -> None:
    """Decoded properties keep the received bytes; replace() must not carry them over."""
    import dataclasses

    from protocol.mqtt import decode_packet

    data = packet_bytes(Publish("t", properties=Properties(topic_alias=1, content_type="x")))
    decoded = decode_packet(data)[0]
    assert isinstance(decoded, Publish)
    assert packet_bytes(decoded) == data
    stripped = dataclasses.replace(decoded.properties, topic_alias=None)
    assert stripped == Properties(content_type="x")
    assert stripped.wire() == Properties(content_type="x").wire()


def test_publish_fast_path_matches_the_transition_table() -> None:
    """next_event skips the transition lookup for a PUBLISH in CONNECTED: that is only
    right while the table says PUBLISH keeps CONNECTED for both roles."""
    from protocol.mqtt._state import TRANSITIONS, Role, State
    from protocol.mqtt.packet_types import PacketType

    for role in Role:
        assert TRANSITIONS[State.CONNECTED][(role, PacketType.PUBLISH)] is State.CONNECTED


# ------------------------------------------------------- plain QoS 0 PUBLISH encoder

PLAIN_TOPICS = ["t", "a/b/c", "ü/°/x", "x" * 200, "sensors/kitchen/temp"]
PLAIN_PAYLOADS = [b"", b"p", b"y" * 100, b"z" * 130, b"w" * 20000]


@VERSIONS
def test_plain_publish_encoder_is_send_publish_byte_for_byte(version: MQTTVersion) -> None:
    """Every topic and payload size (one- and multi-octet remaining lengths), retain set
    or not, repeated (the kept topic prefixes) and interleaved: the pieces joined are
    what send_publish returns, and the client decodes each to the same PUBLISH."""
    client, server = connected_pair(version)
    plain = server.plain_publish_encoder()
    assert plain is not None and server.plain_publish_encoder() is plain
    for _ in range(2):
        for topic in PLAIN_TOPICS:
            for payload in PLAIN_PAYLOADS:
                for retain in (False, True):
                    parts: list[bytes] = []
                    assert plain.add(parts, topic, payload, retain)
                    data = b"".join(parts)
                    assert data == server.send_publish(
                        topic, payload, 0, retain, False, None, EMPTY_PROPERTIES)
                    client.receive_data(data)
                    assert client.next_event() == Publish(topic, payload, retain=retain)


def test_plain_publish_encoder_refuses_what_send_publish_refuses() -> None:
    """The peer's Maximum Packet Size, at the boundary; an empty topic (an alias)."""
    for limit in (20, 128, 131, 200):
        client, server = connected_pair(
            V5, connect_props=Properties(maximum_packet_size=limit))
        plain = server.plain_publish_encoder()
        assert plain is not None
        for n in range(limit - 12, limit + 3):
            parts: list[bytes] = []
            try:
                expected: bytes | None = server.send_publish(
                    "t/x", b"p" * n, 0, False, False, None, EMPTY_PROPERTIES)
            except OutgoingPacketTooLarge:
                expected = None
            ok = plain.add(parts, "t/x", b"p" * n, False)
            assert ok is (expected is not None), (limit, n)
            assert (b"".join(parts) if ok else None) == expected
            assert ok or parts == []
    assert not plain.add([], "", b"x", False)


def test_plain_publish_encoder_only_when_connected_without_outbound_aliases() -> None:
    server = Connection(Role.SERVER)
    assert server.plain_publish_encoder() is None  # not connected
    client, server = connected_pair(V5)
    assert server.plain_publish_encoder() is not None
    server.receive_data(client.send(Disconnect()))
    assert isinstance(server.next_event(), Disconnect)
    assert server.plain_publish_encoder() is None
    # the client side with aliases in use: the encoder would skip the alias table
    client, server = connected_pair(
        V5, connack_props=Properties(topic_alias_maximum=4), outbound_topic_aliases=True)
    assert client.plain_publish_encoder() is None
    client, server = connected_pair(V5, outbound_topic_aliases=True)  # no peer maximum
    assert client.plain_publish_encoder() is not None


def test_plain_publish_encoder_bounds_its_topics() -> None:
    client, server = connected_pair(V311)
    plain = server.plain_publish_encoder()
    assert plain is not None
    for i in range(plain.MAX_TOPICS + 10):
        plain.add([], f"t/{i}", b"", False)
    assert 0 < len(plain._topics) <= plain.MAX_TOPICS
    parts: list[bytes] = []
    assert plain.add(parts, "t/3", b"x", False)
    assert b"".join(parts) == server.send_publish(
        "t/3", b"x", 0, False, False, None, EMPTY_PROPERTIES)


# ------------------------------------------------------------- one-step PUBLISH decode


def _raw_publish(first: int, topic: bytes, rest: bytes = b"", length: bytes | None = None,
                 topic_len: int | None = None) -> bytes:
    """A PUBLISH built by hand, right or wrong: fixed header byte, remaining length
    (encoded shortest unless given), topic length (the topic's unless given), rest."""
    body = (len(topic) if topic_len is None else topic_len).to_bytes(2, "big") + topic + rest
    if length is None:
        n, out = len(body), bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                break
        length = bytes(out)
    return bytes((first,)) + length + body


def _fast_path_pieces(version: MQTTVersion) -> list[bytes]:
    v5 = version is V5
    e = b"\x00" if v5 else b""  # the empty properties section
    pid = b"\x00\x07"
    return [
        _raw_publish(0x30, b"a/b", e + b"x" * 100),  # QoS 0
        _raw_publish(0x31, b"a/b", e + b"retained"),
        _raw_publish(0x32, b"a/b", pid + e + b"q1"),
        _raw_publish(0x3C, b"a/b", pid + e + b"q2 dup"),
        _raw_publish(0x30, b"\xc3\xbc/t", e + b"y" * 300),  # two-octet length
        _raw_publish(0x30, b"big", e + b"z" * 20000),  # three-octet length
        _raw_publish(0x30, b"a/b", e),  # empty payload
        _raw_publish(0x30, b"a/b", e + b"p", length=b"\x85\x00"),  # not shortest form
        _raw_publish(0x36, b"a/b", pid + e + b"q3"),  # QoS 3
        _raw_publish(0x38, b"a/b", e + b"dup0"),  # DUP on QoS 0
        _raw_publish(0x32, b"a/b", b"\x00\x00" + e + b"pid0"),
        _raw_publish(0x32, b"a/b"),  # QoS 1 without its packet id
        _raw_publish(0x30, b"", e + b"no topic"),
        _raw_publish(0x30, b"a/+", e + b"wild"),
        _raw_publish(0x30, b"a/#", e + b"wild"),
        _raw_publish(0x30, b"a\x00b", e + b"nul"),
        _raw_publish(0x30, b"\xff\xfe", e + b"not utf-8"),
        _raw_publish(0x30, b"a/b", e + b"short", topic_len=200),  # topic past the end
        bytes((0x30, 1, 0)),  # shorter than a topic length
        bytes((0x30, 0)),
        _raw_publish(0x30, b"a/b", b"\x03\x01\x01\x00" + b"with props" if v5 else b"p"),
        _raw_publish(0x30, b"a/b", b"\x02\x23\x00" if v5 else b"p"),  # alias 0: error
        _raw_publish(0x30, b"a/b", b"\x05" if v5 else b"p"),  # properties past the end
        _raw_publish(0x30, b"a/b", b"x" * 500),  # above max_packet_size (300)
        b"\xc0\x00",  # PINGREQ
        b"\x40\x02\x00\x07",  # PUBACK
        b"\x30",  # a lone first byte
    ]


def _codec_answers(data: bytes, version: MQTTVersion) -> list[object]:
    """What the machine must answer for ``data`` in CONNECTED, from the codec alone:
    ``decode_packet`` packet after packet (maximum packet size 300), then the machine's
    own rule for the one alias these pieces use (0: invalid, 0x94); stops at the first
    error (type, reason code, message) or at an incomplete packet."""
    from protocol.mqtt import MQTTError, decode_packet
    from protocol.mqtt.errors import InsufficientData

    seen: list[object] = []
    pos = 0
    while pos < len(data):
        try:
            packet, used = decode_packet(data[pos:], version, 300)
            if isinstance(packet, Publish) and packet.properties.topic_alias == 0:
                raise MQTTError("topic alias 0 outside 1..0", ReasonCode.TOPIC_ALIAS_INVALID)
        except InsufficientData:
            break
        except MQTTError as exc:
            seen.append(("RemoteProtocolError", exc.reason_code))
            break
        seen.append(packet)
        pos += used
    return seen


@VERSIONS
def test_publish_fast_path_answers_like_the_general_path(version: MQTTVersion) -> None:
    """Every sequence of valid, near-miss and malformed PUBLISHes (and a few other
    packets), fed whole, split at each packet boundary and one byte at a time, gives
    the same events, errors and error responses; and those are what the codec's
    decode_packet gives for the same bytes, packet after packet."""
    import random

    pieces = _fast_path_pieces(version)
    rnd = random.Random(11)
    sequences = [[p] for p in pieces] + [rnd.sample(pieces, rnd.randint(2, 5))
                                         for _ in range(60)]

    def run(chunks: list[bytes]) -> list[object]:
        client, server = connected_pair(version)
        server.max_packet_size = 300
        seen: list[object] = []
        try:
            for chunk in chunks:
                server.receive_data(chunk)
                while (event := server.next_event()) is not NEED_DATA:
                    seen.append(event)
        except RemoteProtocolError as exc:
            seen.append((type(exc).__name__, exc.reason_code, str(exc),
                         server.error_response()))
        return seen

    for seq in sequences:
        data = b"".join(seq)
        bounds = [sum(len(p) for p in seq[:i]) for i in range(1, len(seq))]
        expected = run([data])
        assert [e[:2] if isinstance(e, tuple) else e for e in expected] == \
            _codec_answers(data, version), seq
        assert run([data[i:i + 1] for i in range(len(data))]) == expected, seq
        for k in bounds:
            assert run([data[:k], data[k:]]) == expected, (seq, k)


def test_publish_fast_path_takes_the_common_packets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: in CONNECTED, PUBLISHes (valid ones, with properties or not, and
    malformed ones) are decoded by decode_publish_at alone, never by the general
    decode_packet dispatch."""
    import protocol.mqtt.connection as connection_module

    def general(*args: object) -> None:
        raise AssertionError("decode_packet called for a PUBLISH in CONNECTED")

    for version in (V311, V5):
        client, server = connected_pair(version)
        sent = [Publish("a/b", b"x" * 100), Publish("c", b"y" * 300, qos=1, packet_id=9),
                Publish("d/e", b"", qos=2, packet_id=1, retain=True)]
        if version is V5:
            sent.append(Publish("f", b"z", properties=Properties(content_type="t")))
        data = b"".join(client.send(p) for p in sent)
        monkeypatch.setattr(connection_module, "decode_packet", general)
        server.receive_data(data)
        assert [server.next_event() for _ in sent] == sent
        assert server.next_event() is NEED_DATA
        server.receive_data(b"\x36\x05\x00\x01a\x00\x01")  # QoS 3
        with pytest.raises(RemoteProtocolError) as err:
            server.next_event()
        assert err.value.reason_code == ReasonCode.MALFORMED_PACKET
        monkeypatch.undo()


def test_puback_batch_matches_the_transition_table() -> None:
    """With batch_pubacks, next_event takes plain PUBACKs without the transition lookup:
    only right while the table says PUBACK keeps CONNECTED for both roles."""
    from protocol.mqtt._state import TRANSITIONS, Role, State
    from protocol.mqtt.packet_types import PacketType

    for role in Role:
        assert TRANSITIONS[State.CONNECTED][(role, PacketType.PUBACK)] is State.CONNECTED


def batching_pair(version: MQTTVersion) -> tuple[Connection, Connection]:
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER, batch_pubacks=True)
    transfer(client, server, Connect("dev-1", version))
    transfer(server, client, Connack())
    return client, server


def events(conn: Connection) -> list[object]:
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
    return out


@VERSIONS
def test_batched_pubacks_cover_plain_ones_only(version: MQTTVersion) -> None:
    from protocol.mqtt import Pubacks

    client, server = batching_pair(version)
    plain = b"".join(client.send(Puback(i)) for i in (1, 2, 3))
    assert len(plain) == 12
    odd = [Publish("a", b"x", 1, packet_id=9), Puback(7)]
    if version is V5:  # a reason code or properties: an ordinary Puback event
        odd.append(Puback(8, ReasonCode.NO_MATCHING_SUBSCRIBERS))
    tail = b"".join(client.send(p) for p in odd)
    more = client.send(Puback(65535))
    # the last PUBACK split across reads: taken only once complete
    server.receive_data(plain + tail + more[:3])
    got = events(server)
    assert isinstance(got[0], Pubacks) and got[0].packet_ids == [1, 2, 3]
    assert got[1] == odd[0]
    assert isinstance(got[2], Pubacks) and got[2].packet_ids == [7]
    assert got[3:] == odd[2:]
    server.receive_data(more[3:])
    (last,) = events(server)
    assert isinstance(last, Pubacks) and last.packet_ids == [65535]
    assert server.state is State.CONNECTED


def test_batched_puback_with_packet_id_zero_is_still_an_error() -> None:
    client, server = batching_pair(V311)
    server.receive_data(client.send(Puback(4)) + b"\x40\x02\x00\x00")
    first = server.next_event()
    assert first.packet_ids == [4]  # type: ignore[union-attr]
    with pytest.raises(RemoteProtocolError):
        server.next_event()


def test_pubacks_not_batched_before_connack_or_by_default() -> None:
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER, batch_pubacks=True)
    server.receive_data(client.send(Connect("dev-1", V311)) + b"\x40\x02\x00\x05")
    assert isinstance(server.next_event(), Connect)
    assert server.next_event() is PAUSED  # held back until the CONNACK, as any packet
    client2, server2 = connected_pair(V311)
    server2.receive_data(b"\x40\x02\x00\x05\x40\x02\x00\x06")
    assert events(server2) == [Puback(5), Puback(6)]


@VERSIONS
@pytest.mark.parametrize("qos, dup, retain", [(0, False, False), (1, True, True), (2, False, True)])
@pytest.mark.parametrize("size", [0, 100, 117, 118, 200, 20000, 3_000_000])
def test_send_publish_with_topic_bytes_is_send_publish(
    version: MQTTVersion, qos: int, dup: bool, retain: bool, size: int
) -> None:
    _, server = connected_pair(version)
    pid = 0xFFFE if qos else None
    topic = "a/\u00e9t\u00e9/b"
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    plain = server.send_publish(topic.encode(), body, qos, retain, dup, pid)
    assert plain == server.send_publish(topic, body, qos, retain, dup, pid, EMPTY_PROPERTIES)
    assert plain == server.send(
        Publish(topic, body, qos, retain=retain, dup=dup, packet_id=pid))


def test_send_publish_with_topic_bytes_too_large_and_with_aliases() -> None:
    _, server = connected_pair(V5, connect_props=Properties(maximum_packet_size=40))
    with pytest.raises(OutgoingPacketTooLarge):
        server.send_publish(b"t", b"x" * 100, 1, False, False, 5)
    assert server.state is State.CONNECTED
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER, outbound_topic_aliases=True)
    transfer(client, server, Connect("dev-1", V5, properties=Properties(topic_alias_maximum=2)))
    transfer(server, client, Connack())
    first = server.send_publish(b"a/long/topic/name", b"1", 0, False, False, None)
    second = server.send_publish(b"a/long/topic/name", b"2", 0, False, False, None)
    assert len(second) < len(first)  # the alias applies as with send_publish
    client.receive_data(first + second)
    assert client.next_event() == Publish("a/long/topic/name", b"1")
    assert client.next_event() == Publish("a/long/topic/name", b"2")
