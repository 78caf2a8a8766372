"""The one PUBLISH decoder and the one PUBLISH encoder of the codec.

* ``encode_publish_fields`` (one ``bytes.join``, with a properties argument) writes
  byte for byte what the two encoders it replaced wrote: the ``bytearray`` encoder with
  properties and the join-based one without. Both are kept here, frozen, as references.
* ``decode_publish_at`` and ``Publish.__post_init__`` say the same thing: the bytes of a
  PUBLISH decode to the packet the fields build, or both refuse with the same reason
  code. Wherever it starts in a buffer, it leaves the bytes around the packet alone, and
  every strict prefix asks for more data.
"""

from __future__ import annotations

from struct import Struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.mqtt import (
    EMPTY_PROPERTIES,
    InsufficientData,
    MQTTError,
    MQTTVersion,
    PacketTooLarge,
    Properties,
    ProtocolError,
    Publish,
    packet_bytes,
)
from protocol.mqtt.codec import decode_publish_at, encode_publish_fields
from protocol.mqtt.primitives import pack_u16, varint_bytes

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5
VERSIONS = [V31, V311, V5]

# -- the encoders encode_publish_fields replaced, as they were (references) -------------------


def _old_encode_publish_fields(
    buf: bytearray, version: MQTTVersion, topic: bytes, payload: bytes, qos: int,
    retain: bool, dup: bool, packet_id: int | None, props: bytes,
) -> None:
    length = 2 + len(topic) + len(payload)
    if qos:
        length += 2
    if version is V5:
        length += len(props)
    elif not topic:
        raise ProtocolError("empty topic name (a topic alias) needs MQTT 5")
    buf.append(0x30 | (dup << 3) | (qos << 1) | retain)
    buf += varint_bytes(length)
    buf += pack_u16(len(topic))
    buf += topic
    if qos:
        buf += pack_u16(packet_id)  # type: ignore[arg-type]
    if version is V5:
        buf += props
    buf += payload


_SHORT_PUBLISH_HEAD = Struct(">BBH")


def _old_encode_plain_publish(
    version: MQTTVersion, topic: bytes, payload: bytes, qos: int, retain: bool, dup: bool,
    packet_id: int | None,
) -> bytes:
    tlen = len(topic)
    length = 2 + tlen + len(payload)
    v5 = version is V5
    if qos:
        length += 2
        mid = pack_u16(packet_id) + b"\x00" if v5 else pack_u16(packet_id)  # type: ignore[arg-type]
    else:
        mid = b"\x00" if v5 else b""
    if v5:
        length += 1
    elif not tlen:
        raise ProtocolError("empty topic name (a topic alias) needs MQTT 5")
    first = 0x30 | (dup << 3) | (qos << 1) | retain
    if length < 0x80:
        head = _SHORT_PUBLISH_HEAD.pack(first, length, tlen)
    else:
        head = bytes((first,)) + varint_bytes(length) + pack_u16(tlen)
    return b"".join((head, topic, mid, payload))


# -- strategies --------------------------------------------------------------------------------

text = st.text(st.characters(min_codepoint=1, max_codepoint=0xD7FF), max_size=20)
topic_names = text.filter(lambda t: t and "+" not in t and "#" not in t)
# around the one- / two- / three-octet remaining length boundaries
payloads = st.one_of(
    st.binary(max_size=300),
    st.integers(100, 140).map(lambda n: b"p" * n),
    st.integers(16_370, 16_400).map(lambda n: b"q" * n),
)
publish_props = st.one_of(
    st.just(EMPTY_PROPERTIES),
    st.builds(
        Properties,
        payload_format_indicator=st.none() | st.integers(0, 1),
        message_expiry_interval=st.none() | st.integers(0, 0xFFFF_FFFF),
        content_type=st.none() | text,
        response_topic=st.none() | topic_names,
        correlation_data=st.none() | st.binary(max_size=16),
        user_properties=st.lists(st.tuples(text, text), max_size=2).map(tuple),
        topic_alias=st.none() | st.integers(1, 0xFFFF),
    ),
)


@st.composite
def publish_fields(draw: st.DrawFn) -> tuple[str, bytes, int, bool, bool, int | None, Properties]:
    qos = draw(st.integers(0, 2))
    return (draw(topic_names), draw(payloads), qos, draw(st.booleans()),
            draw(st.booleans()) if qos else False,
            draw(st.integers(1, 0xFFFF)) if qos else None, draw(publish_props))


# -- one encoder ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(fields=publish_fields(), version=st.sampled_from(VERSIONS))
def test_encoder_writes_what_the_two_old_encoders_wrote(
    fields: tuple[str, bytes, int, bool, bool, int | None, Properties], version: MQTTVersion
) -> None:
    topic, payload, qos, retain, dup, pid, props = fields
    raw = topic.encode()
    new = encode_publish_fields(version, raw, payload, qos, retain, dup, pid, props.wire())
    old = bytearray()
    _old_encode_publish_fields(old, version, raw, payload, qos, retain, dup, pid, props.wire())
    assert new == bytes(old)
    if props is EMPTY_PROPERTIES:
        assert new == _old_encode_plain_publish(version, raw, payload, qos, retain, dup, pid)
        assert new == encode_publish_fields(version, raw, payload, qos, retain, dup, pid)
    assert new == packet_bytes(Publish(topic, payload, qos, retain, dup, pid, props), version)


def test_encoder_refuses_an_empty_topic_before_mqtt_5() -> None:
    for version in (V31, V311):
        with pytest.raises(ProtocolError):
            encode_publish_fields(version, b"", b"x", 0, False, False, None)
    aliased = encode_publish_fields(V5, b"", b"x", 0, False, False, None,
                                    Properties(topic_alias=1).wire())
    assert aliased == b"\x30\x07\x00\x00\x03\x23\x00\x01x"


# -- one decoder ---------------------------------------------------------------------------------


def _wire(first: int, topic: bytes, pid: int | None, props: bytes, payload: bytes) -> bytes:
    body = pack_u16(len(topic)) + topic + (b"" if pid is None else pack_u16(pid)) + props + payload
    return bytes((first,)) + varint_bytes(len(body)) + body


def _code(exc: BaseException) -> int:
    assert isinstance(exc, MQTTError), exc
    return int(exc.reason_code)


# topics and packet ids right and wrong, flags with QoS 3 and DUP on QoS 0
any_topics = st.one_of(topic_names, st.sampled_from(["", "a/+", "#", "a\x00b", "ü/x", "+/#"]))
any_pids = st.sampled_from([None, 0, 1, 0xFFFF])


@settings(max_examples=400, deadline=None)
@given(topic=any_topics, pid=any_pids, qos=st.integers(0, 3), dup=st.booleans(),
       retain=st.booleans(), payload=st.binary(max_size=40),
       alias=st.none() | st.integers(1, 9), version=st.sampled_from(VERSIONS))
def test_decoder_and_constructor_agree(
    topic: str, pid: int | None, qos: int, dup: bool, retain: bool, payload: bytes,
    alias: int | None, version: MQTTVersion,
) -> None:
    """The bytes of a PUBLISH decode to what its fields build, or both refuse with the
    same reason code: the PUBLISH rules mean one thing on both sides."""
    if qos and pid is None:
        pid = 7  # the wire has a packet id exactly when the QoS has one
    if not qos:
        pid = None
    props = Properties(topic_alias=alias) if alias is not None and version is V5 \
        else EMPTY_PROPERTIES
    first = 0x30 | (dup << 3) | (qos << 1) | retain
    data = _wire(first, topic.encode(), pid, props.wire() if version is V5 else b"", payload)
    built: Publish | BaseException
    try:
        built = Publish(topic, payload, qos, retain, dup, pid, props)
    except MQTTError as exc:
        built = exc
    try:
        decoded, end = decode_publish_at(data, 0, version)
    except MQTTError as exc:
        assert isinstance(built, BaseException), (built, exc)
        assert _code(exc) == _code(built), (exc, built)
        return
    assert not isinstance(built, BaseException), (decoded, built)
    assert end == len(data)
    assert decoded == built
    assert decoded._topic_bytes == built._topic_bytes


@settings(max_examples=200, deadline=None)
@given(fields=publish_fields(), version=st.sampled_from(VERSIONS),
       before=st.binary(max_size=8), after=st.binary(max_size=8))
def test_decoder_reads_in_place_and_asks_for_more(
    fields: tuple[str, bytes, int, bool, bool, int | None, Properties], version: MQTTVersion,
    before: bytes, after: bytes,
) -> None:
    """At any offset of a bytes / bytearray / memoryview buffer: the packet, the position
    after it, the bytes around it untouched; every strict prefix is InsufficientData."""
    topic, payload, qos, retain, dup, pid, props = fields
    if version is not V5:
        props = EMPTY_PROPERTIES
    packet = Publish(topic, payload, qos, retain, dup, pid, props)
    data = packet_bytes(packet, version)
    for buf in (before + data + after, bytearray(before + data + after)):
        for view in (buf, memoryview(buf)):
            decoded, end = decode_publish_at(view, len(before), version)
            assert decoded == packet and end == len(before) + len(data)
    for cut in sorted({0, 1, 2, 3, len(data) // 2, len(data) - 1}):
        if cut < len(data):
            with pytest.raises(InsufficientData):
                decode_publish_at(bytearray(before + data[:cut]), len(before), version)


def test_decoder_checks_the_size_before_the_body_arrives() -> None:
    data = packet_bytes(Publish("t", b"x" * 500), V311)
    with pytest.raises(PacketTooLarge):
        decode_publish_at(data[:4], 0, V311, max_packet_size=300)
    decoded, _ = decode_publish_at(data, 0, V311, max_packet_size=len(data))
    assert decoded.payload == b"x" * 500


def test_decoder_copies_a_large_payload_once_into_bytes() -> None:
    data = bytearray(packet_bytes(Publish("t", b"y" * 100_000), V5))
    decoded, _ = decode_publish_at(data, 0, V5)
    assert type(decoded.payload) is bytes and decoded.payload == b"y" * 100_000
    data.clear()  # the buffer is not held by the packet (no export left behind)
