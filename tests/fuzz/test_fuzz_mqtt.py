"""Fuzzing the MQTT codec and the server-side connection state machine.

Contracts checked (protocol/mqtt/codec.py, connection.py, errors.py):

* ``decode_packet`` on any bytes, any version, any maximum size returns
  ``(packet, consumed)`` or raises :class:`InsufficientData` (only when the bytes really
  are an incomplete packet) or an :class:`MQTTError` subclass with a ``ReasonCode``;
  nothing else (no IndexError, struct.error, UnicodeDecodeError, RecursionError...).
* Every decoded packet re-encodes and decodes to an equal packet.
* Every strict prefix of a valid encoding is :class:`InsufficientData`.
* ``Connection`` (server): ``receive_data``/``next_event`` raise only
  :class:`RemoteProtocolError`, never loop (every call either consumes bytes or asks for
  more), stay in ERROR once there, and ``error_response()`` yields a decodable CONNACK or
  DISCONNECT (or nothing). A valid client stream cut into arbitrary chunks gives exactly
  its packets as events and never an error.

Inputs: random bytes; valid packets of every type and version, mutated (bit flips,
interesting bytes, length-field damage, insert/delete/duplicate, truncation, splices of
two packets); whole client sessions (CONNECT + packets + DISCONNECT), mutated and chunked.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from protocol.mqtt import (
    EMPTY_PROPERTIES,
    NEED_DATA,
    PAUSED,
    PROPERTY_SPECS,
    Auth,
    Connack,
    Connect,
    Connection,
    ConnectionClosed,
    Disconnect,
    InsufficientData,
    MQTTError,
    MQTTVersion,
    OutgoingPacketTooLarge,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    PropertyId,
    PropertyType,
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
    Will,
    decode_packet,
    packet_bytes,
)
from protocol.mqtt.properties import WILL
from protocol.mqtt.reason_codes import (
    AUTH_REASON_CODES,
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    PUBACK_REASON_CODES,
    PUBREL_REASON_CODES,
    SUBACK_REASON_CODES,
    UNSUBACK_REASON_CODES,
)

from ._support import chunked, corpus, examples, mutate, splice

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5
VERSIONS = (V31, V311, V5)
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
FAST = settings(max_examples=examples(120), deadline=None, suppress_health_check=HEALTH)
#: For the cheap byte-level fuzzers.
MANY = settings(max_examples=examples(1000), deadline=None, suppress_health_check=HEALTH)

# -- valid packets ------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=10)
topic_names = text.filter(lambda t: t and "+" not in t and "#" not in t)
topic_filters = text.filter(bool)
binary = st.binary(max_size=16)
packet_ids = st.integers(1, 65535)
qos = st.integers(0, 2)
_FLAGS = {PropertyId.PAYLOAD_FORMAT_INDICATOR, PropertyId.REQUEST_PROBLEM_INFORMATION,
          PropertyId.REQUEST_RESPONSE_INFORMATION, PropertyId.MAXIMUM_QOS,
          PropertyId.RETAIN_AVAILABLE, PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
          PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE, PropertyId.SHARED_SUBSCRIPTION_AVAILABLE}
_NONZERO = {PropertyId.RECEIVE_MAXIMUM, PropertyId.MAXIMUM_PACKET_SIZE, PropertyId.TOPIC_ALIAS}
_VALUES = {
    PropertyType.BYTE: st.integers(0, 255),
    PropertyType.TWO_BYTE_INTEGER: st.integers(0, 0xFFFF),
    PropertyType.FOUR_BYTE_INTEGER: st.integers(0, 0xFFFF_FFFF),
    PropertyType.UTF8_STRING: text,
    PropertyType.BINARY_DATA: binary,
}


@st.composite
def properties(draw: st.DrawFn, context: PacketType | str, from_client: bool = False,
               exclude: frozenset[PropertyId] = frozenset()) -> Properties:
    allowed = [s for s in PROPERTY_SPECS.values()
               if context in s.packets and s.id is not PropertyId.TOPIC_ALIAS
               and s.id not in exclude
               and not (from_client and s.id is PropertyId.SUBSCRIPTION_IDENTIFIER
                        and context is PacketType.PUBLISH)]  # a client may not send one
    kwargs: dict[str, Any] = {}
    for spec in draw(st.lists(st.sampled_from(allowed), max_size=3, unique=True)):
        if spec.id is PropertyId.USER_PROPERTY:
            kwargs["user_properties"] = tuple(draw(st.lists(st.tuples(text, text), max_size=2)))
        elif spec.id is PropertyId.SUBSCRIPTION_IDENTIFIER:
            most = 1 if context is PacketType.SUBSCRIBE else 3
            kwargs["subscription_identifiers"] = tuple(
                draw(st.lists(st.integers(1, 268_435_455), min_size=1, max_size=most)))
        elif spec.id in _FLAGS:
            kwargs[spec.name] = draw(st.integers(0, 1))
        else:
            strategy = _VALUES[spec.type]
            kwargs[spec.name] = draw(strategy.filter(bool) if spec.id in _NONZERO else strategy)
    return Properties(**kwargs)


def props(version: MQTTVersion, context: PacketType | str, **kw: Any) -> st.SearchStrategy:
    return properties(context, **kw) if version is V5 else st.just(Properties())


def codes(version: MQTTVersion, allowed: frozenset[int]) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(allowed)) if version is V5 else st.just(0)


@st.composite
def publishes(draw: st.DrawFn, version: MQTTVersion, from_client: bool = False) -> Publish:
    q = draw(qos)
    return Publish(draw(topic_names), draw(st.binary(max_size=40)), q, draw(st.booleans()),
                   draw(st.booleans()) if q else False, draw(packet_ids) if q else None,
                   draw(props(version, PacketType.PUBLISH, from_client=from_client)))


@st.composite
def connects(draw: st.DrawFn, version: MQTTVersion) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(draw(topic_names), draw(binary), draw(qos), draw(st.booleans()),
                    draw(props(version, WILL)))
    username = draw(st.none() | text)
    password = draw(st.none() | binary)
    if version is not V5 and username is None:
        password = None
    # No authentication data without a method (the server refuses it): leave both out.
    no_auth = frozenset({PropertyId.AUTHENTICATION_DATA, PropertyId.AUTHENTICATION_METHOD})
    return Connect(draw(text.filter(bool)), version, draw(st.booleans()),
                   draw(st.integers(0, 65535)), username, password, will,
                   draw(props(version, PacketType.CONNECT, exclude=no_auth)))


@st.composite
def connacks(draw: st.DrawFn, version: MQTTVersion) -> Connack:
    code = draw(st.sampled_from(sorted(CONNACK_REASON_CODES)) if version is V5
                else st.integers(0, 5))
    present = False if code or version is V31 else draw(st.booleans())
    return Connack(present, code, draw(props(version, PacketType.CONNACK)))


def acks(cls: type, allowed: frozenset[int], version: MQTTVersion) -> st.SearchStrategy:
    return st.builds(cls, packet_ids, codes(version, allowed), props(version, cls.packet_type))


@st.composite
def subscribes(draw: st.DrawFn, version: MQTTVersion) -> Subscribe:
    subs = []
    for _ in range(draw(st.integers(1, 3))):
        if version is V5:
            f = draw(topic_filters.filter(lambda f: not f.startswith("$share/")))
            subs.append(Subscription(f, draw(qos), draw(st.booleans()), draw(st.booleans()),
                                     draw(st.integers(0, 2))))
        else:
            subs.append(Subscription(draw(topic_filters), draw(qos)))
    return Subscribe(draw(packet_ids), tuple(subs), draw(props(version, PacketType.SUBSCRIBE)))


def unsubscribes(version: MQTTVersion) -> st.SearchStrategy:
    return st.builds(Unsubscribe, packet_ids, st.lists(topic_filters, min_size=1, max_size=3)
                     .map(tuple), props(version, PacketType.UNSUBSCRIBE))


def client_packets(version: MQTTVersion) -> st.SearchStrategy[Packet]:
    """What a client may send after its CONNECT (DISCONNECT excluded: it ends the stream)."""
    options: list[st.SearchStrategy[Any]] = [
        publishes(version, from_client=True),
        acks(Puback, PUBACK_REASON_CODES, version), acks(Pubrec, PUBACK_REASON_CODES, version),
        acks(Pubrel, PUBREL_REASON_CODES, version), acks(Pubcomp, PUBREL_REASON_CODES, version),
        subscribes(version), unsubscribes(version), st.just(Pingreq()),
    ]
    if version is V5:
        options.append(st.builds(Auth, st.sampled_from(sorted(AUTH_REASON_CODES)),
                                 properties(PacketType.AUTH)))
    return st.one_of(options)


def any_packet(version: MQTTVersion) -> st.SearchStrategy[Packet]:
    """Every packet type, either direction."""
    server_side: list[st.SearchStrategy[Any]] = [
        connects(version), connacks(version), publishes(version),
        st.builds(Suback, packet_ids, st.lists(st.sampled_from(
            sorted(SUBACK_REASON_CODES) if version is V5 else [0, 1, 2, 0x80]),
            min_size=1, max_size=3).map(tuple), props(version, PacketType.SUBACK)),
        st.builds(Unsuback, packet_ids) if version is not V5 else st.builds(
            Unsuback, packet_ids, st.lists(st.sampled_from(sorted(UNSUBACK_REASON_CODES)),
                                           max_size=3).map(tuple),
            properties(PacketType.UNSUBACK)),
        st.just(Pingresp()),
        st.builds(Disconnect, codes(version, DISCONNECT_REASON_CODES),
                  props(version, PacketType.DISCONNECT)),
    ]
    return st.one_of(client_packets(version), *server_side)


@st.composite
def encoded(draw: st.DrawFn) -> tuple[MQTTVersion, bytes]:
    version = draw(st.sampled_from(VERSIONS))
    return version, packet_bytes(draw(any_packet(version)), version)


# -- the decode_packet contract -----------------------------------------------------------


def _declared_total(data: bytes) -> int | None:
    """Total size the fixed header announces; None while the header is incomplete."""
    if len(data) < 2:
        return None
    value = 0
    for i in range(4):
        if 1 + i >= len(data):
            return None
        byte = data[1 + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return 2 + i + value
    return -1  # five-byte varint: malformed, never "incomplete"


def check_decode(data: bytes, version: MQTTVersion | None,
                 max_size: int = 268_435_460) -> Packet | None:
    """Apply the decode_packet contract to ``data``; the packet if one was decoded."""
    try:
        packet, used = decode_packet(data, version, max_size)
    except InsufficientData:
        total = _declared_total(data)
        assert total is None or total > len(data), (
            f"InsufficientData for a complete packet: {data.hex()}")
        return None
    except MQTTError as exc:
        assert isinstance(exc.reason_code, ReasonCode)
        return None
    assert 2 <= used <= min(len(data), max_size)
    assert used == _declared_total(data)
    again = decode_packet(bytes(data[:used]), version, max_size)
    assert again == (packet, used)
    check_round_trip(packet, version)
    return packet


def check_round_trip(packet: Packet, version: MQTTVersion | None) -> None:
    if isinstance(packet, Connect):
        version = packet.protocol_version
    assert version is not None
    wire = packet_bytes(packet, version)
    decoded, used = decode_packet(wire, version)
    assert used == len(wire)
    assert decoded == packet, f"round trip changed {packet!r} into {decoded!r}"


VERSION_ARGS = st.sampled_from((None, V31, V311, V5))


@MANY
@given(st.binary(max_size=64), VERSION_ARGS)
def test_random_bytes(data: bytes, version: MQTTVersion | None) -> None:
    check_decode(data, version)


@MANY
@given(st.integers(0, 255), st.binary(max_size=40), VERSION_ARGS)
def test_random_body_with_a_consistent_fixed_header(
    first: int, body: bytes, version: MQTTVersion | None
) -> None:
    # Random bytes rarely get past the fixed header; give them a correct length field.
    from protocol.mqtt.primitives import varint_bytes

    check_decode(bytes((first,)) + varint_bytes(len(body)) + body, version)


@FAST
@given(st.data())
def test_mutated_packets(data: st.DataObject) -> None:
    version, wire = data.draw(encoded())
    damaged = data.draw(mutate(wire))
    for v in {version, *data.draw(st.lists(VERSION_ARGS, max_size=2))}:
        check_decode(damaged, v)


@FAST
@given(st.data())
def test_length_fields_rewritten(data: st.DataObject) -> None:
    """Overwrite a two-byte or varint length at a random place with another value."""
    version, wire = data.draw(encoded())
    buf = bytearray(wire)
    at = data.draw(st.integers(0, max(0, len(buf) - 2)))
    if data.draw(st.booleans()):
        buf[at : at + 2] = data.draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    else:
        from protocol.mqtt.primitives import varint_bytes

        value = data.draw(st.integers(0, 268_435_455))
        buf[at : at + data.draw(st.integers(1, 4))] = varint_bytes(value)
    check_decode(bytes(buf), version)


@FAST
@given(st.data())
def test_spliced_packets(data: st.DataObject) -> None:
    version, first = data.draw(encoded())
    _, second = data.draw(encoded())
    check_decode(data.draw(splice(first, second)), version)


@FAST
@given(st.data())
def test_valid_packets_decode_and_prefixes_ask_for_more(data: st.DataObject) -> None:
    version, wire = data.draw(encoded())
    packet = check_decode(wire + data.draw(st.binary(max_size=4)), version)
    assert packet is not None
    for cut in range(len(wire)):
        with pytest.raises(InsufficientData):
            decode_packet(wire[:cut], version)


@FAST
@given(st.data())
def test_maximum_packet_size_is_checked_before_the_body(data: st.DataObject) -> None:
    from protocol.mqtt import PacketTooLarge

    version, wire = data.draw(encoded())
    limit = data.draw(st.integers(2, len(wire) + 2))
    cut = data.draw(st.integers(0, len(wire)))
    total = _declared_total(wire)
    assert total == len(wire)
    try:
        decode_packet(wire[:cut], version, limit)
    except InsufficientData:
        header_known = _declared_total(wire[:cut]) is not None
        assert not (header_known and total > limit), "waited for the body of a too-large packet"
    except PacketTooLarge:
        assert total > limit
    except MQTTError:
        pass
    else:
        assert cut == len(wire) and total <= limit


# -- the server connection ----------------------------------------------------------------


@st.composite
def client_sessions(draw: st.DrawFn) -> tuple[MQTTVersion, list[Packet], bytes]:
    version = draw(st.sampled_from(VERSIONS))
    packets: list[Packet] = [draw(connects(version))]
    packets += draw(st.lists(client_packets(version), max_size=6))
    if draw(st.booleans()):
        no_expiry = frozenset({PropertyId.SESSION_EXPIRY_INTERVAL})
        packets.append(Disconnect(draw(codes(version, DISCONNECT_REASON_CODES)),
                                  draw(props(version, PacketType.DISCONNECT, exclude=no_expiry))))
    return version, packets, b"".join(packet_bytes(p, version) for p in packets)


def drive_server(chunks: list[bytes], eof: bool, connack_props: Properties = EMPTY_PROPERTIES,
                 max_packet_size: int = 268_435_460,
                 refuse: bool = False) -> tuple[list[Any], RemoteProtocolError | None]:
    """Feed ``chunks`` to a server Connection and answer like the gateway would.

    Returns the events and the protocol error (if any); asserts the connection
    contract on the way.
    """
    conn = Connection(Role.SERVER, max_packet_size=max_packet_size)
    events: list[Any] = []
    total = sum(len(c) for c in chunks)
    calls = 0
    feed = [*chunks, b""] if eof else list(chunks)
    for chunk in feed:
        try:
            conn.receive_data(chunk)
        except RemoteProtocolError as exc:  # only once in ERROR
            assert conn.state is State.ERROR
            return events, exc
        while True:
            calls += 1
            # Every call consumes at least 2 bytes, answers PAUSED once per CONNECT, or
            # stops the loop: far fewer calls than bytes.
            assert calls <= total + 2 * len(feed) + 8, "next_event does not make progress"
            try:
                event = conn.next_event()
            except RemoteProtocolError as exc:
                check_error_state(conn)
                return events, exc
            if event is NEED_DATA:
                break
            try:
                if event is PAUSED:
                    assert conn.state is State.AWAITING_CONNACK
                    if refuse:
                        code = 0x87 if conn.version is V5 else 5
                        conn.send(Connack(reason_code=code))
                    else:
                        conn.send(Connack(properties=connack_props if conn.version is V5
                                          else Properties()))
                    continue
                events.append(event)
                if isinstance(event, ConnectionClosed):
                    assert conn.state is State.CLOSED
                    return events, None
                answer_event(conn, event)
            except OutgoingPacketTooLarge:
                # The client's Maximum Packet Size is below our answer (a CONNACK is at
                # least 3 bytes): the gateway closes such a connection.
                return events, None
    return events, None


def answer_event(conn: Connection, event: Any) -> None:
    """Exercise the send side the way the gateway does (only legal answers)."""
    if conn.state is not State.CONNECTED:
        return
    if isinstance(event, Pingreq):
        assert conn.send(Pingresp()) == b"\xd0\x00"
    elif isinstance(event, Subscribe):
        conn.send(Suback(event.packet_id, tuple(s.qos for s in event.subscriptions)))
    elif isinstance(event, Unsubscribe):
        codes_ = tuple(0 for _ in event.topic_filters) if conn.version is V5 else ()
        conn.send(Unsuback(event.packet_id, codes_))


def check_error_state(conn: Connection) -> None:
    assert conn.state is State.ERROR
    assert conn.error is not None
    response = conn.error_response()
    assert isinstance(response, bytes)
    if response:
        # MQTT-3.1.2-24: nothing larger than the client's Maximum Packet Size goes out.
        assert len(response) <= conn.peer_max_packet_size, (len(response), response)
        version = conn.version or V311
        packet, used = decode_packet(response, version)
        assert used == len(response)
        assert isinstance(packet, Connack | Disconnect)
    # ERROR is final.
    for _ in range(2):
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
        with pytest.raises(RemoteProtocolError):
            conn.receive_data(b"\xc0\x00")
        assert conn.state is State.ERROR


@FAST
@given(client_sessions(), st.data())
def test_valid_sessions_in_any_chunking_give_their_packets(session: Any, data: Any) -> None:
    version, packets, wire = session
    # A client Maximum Packet Size below our answers (CONNACK, SUBACK) ends the session.
    assume((packets[0].properties.maximum_packet_size or 1024) >= 1024)
    chunks = data.draw(chunked(wire))
    events, error = drive_server(chunks, eof=data.draw(st.booleans()))
    assert error is None, f"valid stream refused: {error!r} ({wire.hex()})"
    got = [e for e in events if not isinstance(e, ConnectionClosed)]
    assert got == packets


@FAST
@given(client_sessions(), st.data())
def test_mutated_sessions(session: Any, data: Any) -> None:
    _, _, wire = session
    damaged = data.draw(mutate(wire, max_mutations=6))
    alias_max = data.draw(st.integers(0, 4))
    connack_props = Properties(topic_alias_maximum=alias_max or None,
                               maximum_packet_size=data.draw(st.none() | st.integers(16, 512)))
    drive_server(data.draw(chunked(damaged)), eof=data.draw(st.booleans()),
                 connack_props=connack_props,
                 max_packet_size=data.draw(st.sampled_from((268_435_460, 64, 300))),
                 refuse=data.draw(st.booleans()))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=HEALTH)
@given(st.data())
def test_garbage_after_a_valid_connect(data: Any) -> None:
    version = data.draw(st.sampled_from(VERSIONS))
    wire = packet_bytes(data.draw(connects(version)), version)
    tail = data.draw(st.binary(max_size=64) | st.lists(any_packet(version), max_size=3).map(
        lambda ps: b"".join(packet_bytes(p, version) for p in ps)))
    drive_server(data.draw(chunked(wire + tail)), eof=data.draw(st.booleans()),
                 connack_props=Properties(topic_alias_maximum=data.draw(st.integers(1, 3))))


@MANY
@given(st.binary(max_size=80), st.booleans())
def test_random_bytes_to_a_server(data: bytes, eof: bool) -> None:
    drive_server([data] if data else [], eof)


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_topic_alias_streams(data: Any) -> None:
    """MQTT 5 PUBLISH streams that set and use topic aliases, some of them wrongly."""
    conn_packet = Connect("c", V5)
    parts = [packet_bytes(conn_packet, V5)]
    for _ in range(data.draw(st.integers(1, 6))):
        alias = data.draw(st.integers(1, 6))
        topic = data.draw(st.sampled_from(["", "a/b", "x"]))
        body = bytearray(b"\x00" + bytes((len(topic),)) + topic.encode())
        body += b"\x03\x23" + alias.to_bytes(2, "big")  # properties: Topic Alias
        body += data.draw(st.binary(max_size=4))
        parts.append(bytes((0x30, len(body))) + body)
    events, error = drive_server(data.draw(chunked(b"".join(parts))), eof=False,
                                 connack_props=Properties(topic_alias_maximum=3))
    for event in events:
        if isinstance(event, Publish):
            assert event.topic and event.properties.topic_alias is None


# -- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "data"), corpus("mqtt"))
def test_corpus(kind: str, data: bytes) -> None:
    if kind == "packet":
        for version in (None, *VERSIONS):
            check_decode(data, version)
    elif kind == "server":
        drive_server([data], eof=True)
        drive_server([data[i : i + 1] for i in range(len(data))], eof=False)
    else:  # pragma: no cover
        raise AssertionError(f"unknown corpus kind {kind!r}")
