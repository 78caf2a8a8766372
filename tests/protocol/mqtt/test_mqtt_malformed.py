"""Malformed and illegal input: each case asserts the exception class and reason code."""

from __future__ import annotations

import pytest

from protocol.mqtt import (
    Connect,
    InsufficientData,
    MalformedPacket,
    MQTTError,
    MQTTVersion,
    PacketTooLarge,
    Properties,
    ProtocolError,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    TopicAliasInvalid,
    UnsupportedProtocolVersion,
    decode_packet,
    packet_bytes,
)
from protocol.mqtt.primitives import (
    decode_utf8,
    decode_varint,
    encode_utf8,
    encode_varint,
)

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5
RC = ReasonCode


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# (id, version, bytes, exception, reason code)
BAD = [
    # fixed header
    ("varint-5-bytes", V5, "30 ff ff ff ff 7f", MalformedPacket, RC.MALFORMED_PACKET),
    ("varint-4-continued", V5, "30 ff ff ff ff", MalformedPacket, RC.MALFORMED_PACKET),
    ("varint-not-shortest", V311, "c0 80 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("type-0", V311, "00 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("auth-in-3.1.1", V311, "f0 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("pubrel-flags-0", V311, "60 02 0001", MalformedPacket, RC.MALFORMED_PACKET),
    ("subscribe-flags-0", V311, "80 08 0001 0003 612f2b 01", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("unsubscribe-flags-0", V311, "a0 07 0002 0003 612f2b", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("puback-flags-1", V311, "41 02 0001", MalformedPacket, RC.MALFORMED_PACKET),
    ("pingreq-flags", V5, "c1 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-flags", V5, "12 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("publish-qos3", V311, "36 07 0003 612f62 0001", MalformedPacket, RC.MALFORMED_PACKET),
    ("publish-dup-qos0", V311, "38 05 0003 612f62", MalformedPacket, RC.MALFORMED_PACKET),
    # strings
    ("utf8-invalid-byte", V311, "30 05 0003 61ff62", MalformedPacket, RC.MALFORMED_PACKET),
    ("utf8-overlong", V311, "30 05 0003 c0af62", MalformedPacket, RC.MALFORMED_PACKET),
    ("utf8-surrogate", V311, "30 05 0003 eda080", MalformedPacket, RC.MALFORMED_PACKET),
    ("utf8-nul", V311, "30 05 0003 610062", MalformedPacket, RC.MALFORMED_PACKET),
    ("topic-wildcard", V311, "30 05 0003 612f23", ProtocolError, RC.TOPIC_NAME_INVALID),
    ("topic-empty-3.1.1", V311, "30 02 0000", ProtocolError, RC.TOPIC_NAME_INVALID),
    # packet identifiers
    ("publish-packet-id-0", V311, "32 07 0003 612f62 0000", ProtocolError, RC.PROTOCOL_ERROR),
    ("subscribe-packet-id-0", V311, "82 08 0000 0003 612f2b 01", ProtocolError,
     RC.PROTOCOL_ERROR),
    ("unsubscribe-packet-id-0", V5, "a2 08 0000 00 0003 612f2b", ProtocolError,
     RC.PROTOCOL_ERROR),
    ("puback-packet-id-0", V311, "40 02 0000", ProtocolError, RC.PROTOCOL_ERROR),
    # remaining length versus content
    ("puback-too-long", V311, "40 03 0001 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("pingreq-with-body", V311, "c0 01 00", MalformedPacket, RC.MALFORMED_PACKET),
    ("publish-topic-beyond", V311, "30 03 0005 61", MalformedPacket, RC.MALFORMED_PACKET),
    ("publish-no-packet-id", V311, "32 05 0003 612f62", MalformedPacket, RC.MALFORMED_PACKET),
    ("subscribe-no-options", V311, "82 07 0001 0003 612f2b", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("connect-trailing-byte", V311, "10 0e 0004 4d515454 04 02 003c 0001 63 00",
     MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-short", V311, "10 0c 0004 4d515454 04 02 003c 0001", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("properties-beyond-packet", V5, "30 08 0003 612f62 09 01 01", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("disconnect-3.1.1-body", V311, "e0 01 00", MalformedPacket, RC.MALFORMED_PACKET),
    # properties
    ("property-not-allowed", V5, "30 0b 0003 612f62 05 11 0000000a", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("property-unknown", V5, "30 08 0003 612f62 02 7f 00", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("property-duplicate", V5, "30 10 0003 612f62 0a 02 0000000a 02 0000000b", ProtocolError,
     RC.PROTOCOL_ERROR),
    ("subscription-id-twice-in-subscribe", V5, "82 0d 0001 04 0b 01 0b 02 0003 612f2b 01",
     ProtocolError, RC.PROTOCOL_ERROR),
    ("subscription-id-0", V5, "82 0a 0001 02 0b 00 0003 612f2b 01", ProtocolError,
     RC.PROTOCOL_ERROR),
    ("payload-format-2", V5, "30 08 0003 612f62 02 01 02", ProtocolError, RC.PROTOCOL_ERROR),
    ("topic-alias-0", V5, "30 09 0003 612f62 03 23 0000", TopicAliasInvalid,
     RC.TOPIC_ALIAS_INVALID),
    ("receive-maximum-0", V5, "20 06 00 00 03 21 0000", ProtocolError, RC.PROTOCOL_ERROR),
    ("maximum-qos-2", V5, "20 05 00 00 02 24 02", ProtocolError, RC.PROTOCOL_ERROR),
    ("reason-code-invalid", V5, "40 03 0001 05", MalformedPacket, RC.MALFORMED_PACKET),
    ("connack-3.1.1-code-6", V311, "20 02 00 06", MalformedPacket, RC.MALFORMED_PACKET),
    ("suback-3.1.1-code-3", V311, "90 03 0001 03", MalformedPacket, RC.MALFORMED_PACKET),
    # CONNECT
    ("connect-reserved-bit", V5, "10 0d 0004 4d515454 04 03 003c 0001 63", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("connect-will-qos-without-will", V311, "10 0d 0004 4d515454 04 0a 003c 0001 63",
     MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-will-retain-without-will", V311, "10 0d 0004 4d515454 04 22 003c 0001 63",
     MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-will-qos-3", V311, "10 13 0004 4d515454 04 1e 003c 0001 63 0001 74 0001 78",
     MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-password-without-user-3.1.1", V311,
     "10 11 0004 4d515454 04 42 003c 0001 63 0002 7077", MalformedPacket, RC.MALFORMED_PACKET),
    ("connect-level-6", V5, "10 0d 0004 4d515454 06 02 003c 0001 63",
     UnsupportedProtocolVersion, RC.UNSUPPORTED_PROTOCOL_VERSION),
    ("connect-mqisdp-level-4", V5, "10 0f 0006 4d5149736470 04 02 003c 0001 63",
     UnsupportedProtocolVersion, RC.UNSUPPORTED_PROTOCOL_VERSION),
    # SUBSCRIBE
    ("subscribe-empty", V311, "82 02 0001", ProtocolError, RC.PROTOCOL_ERROR),
    ("subscribe-qos3", V311, "82 08 0001 0003 612f2b 03", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("subscribe-3.1.1-reserved-bits", V311, "82 08 0001 0003 612f2b 05", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("subscribe-5-reserved-bits", V5, "82 09 0001 00 0003 612f2b 41", MalformedPacket,
     RC.MALFORMED_PACKET),
    ("subscribe-retain-handling-3", V5, "82 09 0001 00 0003 612f2b 31", ProtocolError,
     RC.PROTOCOL_ERROR),
    ("subscribe-no-local-shared", V5, "82 10 0001 00 000a 2473686172652f672f61 04",
     ProtocolError, RC.PROTOCOL_ERROR),
    ("unsubscribe-empty", V5, "a2 03 0001 00", ProtocolError, RC.PROTOCOL_ERROR),
]


@pytest.mark.parametrize(
    ("version", "hexdata", "exc_type", "code"),
    [pytest.param(v, d, e, c, id=i) for i, v, d, e, c in BAD],
)
def test_bad_input(version: MQTTVersion, hexdata: str, exc_type: type[MQTTError],
                   code: ReasonCode) -> None:
    with pytest.raises(exc_type) as info:
        decode_packet(h(hexdata), version)
    assert info.value.reason_code == code
    assert isinstance(info.value, MQTTError)
    assert not isinstance(info.value, InsufficientData)


def test_unsupported_level_asks_for_connack_return_code_1() -> None:
    with pytest.raises(UnsupportedProtocolVersion) as info:
        decode_packet(h("10 0d 0004 4d515454 06 02 003c 0001 63"), V5)
    assert info.value.connack_return_code == 1
    with pytest.raises(UnsupportedProtocolVersion) as info:
        decode_packet(h("10 0d 0004 4d515459 04 02 003c 0001 63"), V5)  # "MQTY"
    assert info.value.connack_return_code is None  # not MQTT at all: just close


def test_packet_too_large_is_known_from_the_fixed_header() -> None:
    header = h("30 ff 7f")  # remaining length 16383: the body has not arrived
    with pytest.raises(PacketTooLarge) as info:
        decode_packet(header, V5, max_packet_size=1024)
    assert info.value.reason_code == RC.PACKET_TOO_LARGE
    with pytest.raises(InsufficientData):
        decode_packet(header, V5, max_packet_size=16386)
    exact = packet_bytes(Publish("t", b"x" * 10), V5)
    assert decode_packet(exact, V5, max_packet_size=len(exact))[1] == len(exact)
    with pytest.raises(PacketTooLarge):
        decode_packet(exact, V5, max_packet_size=len(exact) - 1)


def test_password_without_user_name_is_fine_in_mqtt5() -> None:
    data = h("10 12 0004 4d515454 05 42 003c 00 0001 63 0002 7077")
    assert decode_packet(data, V5)[0] == Connect("c", V5, username=None, password=b"pw")


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (127, "7f"), (128, "8001"), (16383, "ff7f"), (16384, "808001"),
     (2097151, "ffff7f"), (2097152, "80808001"), (268435455, "ffffff7f")],
)
def test_varint_spec_table(value: int, encoded: str) -> None:
    buf = bytearray()
    encode_varint(value, buf)
    assert buf.hex() == encoded
    assert decode_varint(h(encoded) + b"\xff") == (value, len(encoded) // 2)
    for end in range(len(encoded) // 2):
        with pytest.raises(InsufficientData):
            decode_varint(h(encoded)[:end])


@pytest.mark.parametrize("value", [-1, 268435456])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value, bytearray())


def test_utf8_rules() -> None:
    buf = bytearray()
    encode_utf8("a\u00e9\U0001f600", buf)
    assert decode_utf8(bytes(buf)) == ("a\u00e9\U0001f600", len(buf))
    # A BOM is a character like any other: kept, not stripped (MQTT-1.5.4-3).
    assert decode_utf8(h("0003 efbbbf"))[0] == "\ufeff"
    for bad in ("a\x00b", "\ud800"):
        with pytest.raises(MalformedPacket):
            encode_utf8(bad, bytearray())
    with pytest.raises(MalformedPacket):
        encode_utf8("x" * 65536, bytearray())
    with pytest.raises(InsufficientData):
        decode_utf8(h("0005 6162"))


# Building packets validates them with the same rules and codes.
BUILD_BAD = [
    (lambda: Publish("a", qos=1), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Publish("a", qos=1, packet_id=0), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Publish("a", qos=1, packet_id=65536), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Publish("a", packet_id=1), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Publish("a", qos=3, packet_id=1), MalformedPacket, RC.MALFORMED_PACKET),
    (lambda: Publish("a/+"), ProtocolError, RC.TOPIC_NAME_INVALID),
    (lambda: Publish(""), ProtocolError, RC.TOPIC_NAME_INVALID),
    (lambda: Publish("a", properties=Properties(session_expiry_interval=1)), MalformedPacket,
     RC.MALFORMED_PACKET),
    (lambda: Properties(topic_alias=0), TopicAliasInvalid, RC.TOPIC_ALIAS_INVALID),
    (lambda: Properties(maximum_packet_size=0), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Properties(subscription_identifiers=(0,)), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Properties(message_expiry_interval=2**32), MalformedPacket, RC.MALFORMED_PACKET),
    (lambda: Properties(content_type="a\x00"), MalformedPacket, RC.MALFORMED_PACKET),
    (lambda: Subscribe(1, ()), ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Subscribe(1, (Subscription("a"),), Properties(subscription_identifiers=(1, 2))),
     ProtocolError, RC.PROTOCOL_ERROR),
    (lambda: Connect("c", V311, password=b"x"), MalformedPacket, RC.MALFORMED_PACKET),
    (lambda: Connect("c", V311, properties=Properties(receive_maximum=1)), ProtocolError,
     RC.PROTOCOL_ERROR),
    (lambda: Connect("c", 6), ProtocolError, RC.UNSUPPORTED_PROTOCOL_VERSION),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("build", "exc_type", "code"), BUILD_BAD)
def test_building_invalid_packets(build, exc_type, code) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc_type) as info:
        build()
    assert info.value.reason_code == code
    assert isinstance(info.value, ValueError)


def test_version_specific_encoding_refusals() -> None:
    from protocol.mqtt import Auth, Connack, Puback

    with pytest.raises(ProtocolError):
        packet_bytes(Auth(), V311)
    with pytest.raises(ProtocolError):
        packet_bytes(Puback(1, RC.NOT_AUTHORIZED), V311)
    with pytest.raises(ProtocolError):
        packet_bytes(Publish("", properties=Properties(topic_alias=1)), V311)
    with pytest.raises(ProtocolError):
        packet_bytes(Connack(reason_code=2), V5)  # a 3.x return code in MQTT 5
    # An MQTT 5 reason code is mapped for 3.x; properties are not written.
    assert packet_bytes(Connack(reason_code=RC.BAD_USER_NAME_OR_PASSWORD), V311) == h("20020004")
    assert packet_bytes(Connack(reason_code=RC.SERVER_BUSY), V31) == h("20020003")
    assert packet_bytes(Puback(1, RC.NO_MATCHING_SUBSCRIBERS), V311) == h("40020001")
    props = Properties(message_expiry_interval=5)
    assert packet_bytes(Publish("t", b"", properties=props), V311) == h("30030001 74")
