"""Packet codec: bytes <-> packet dataclasses, for MQTT 3.1, 3.1.1 and 5.0.

Fixed header (every packet)::

    +--------+--------+-----+------------------+-------------------------------+
    | type:4 | flags:4| remaining length: Variable Byte Integer, 1..4 bytes     |
    +--------+--------+-----+------------------+-------------------------------+
    | variable header and payload: exactly "remaining length" bytes           |

Flags are fixed per type (0b0010 for PUBREL, SUBSCRIBE, UNSUBSCRIBE; 0 for the others)
except PUBLISH's DUP:1 QoS:2 RETAIN:1. Wrong flags, QoS 3, type 0 (and type 15, AUTH,
before MQTT 5) are malformed. The body decoders must consume exactly the remaining length;
short or long content is malformed. :func:`decode_packet` raises
:class:`InsufficientData` only while the packet is incomplete, and checks the packet size
against ``max_packet_size`` as soon as the fixed header is known, before waiting for (and
buffering) the body.

Version rules: the properties sections and reason codes of acknowledgements exist only in
MQTT 5 and are not encoded for 3.x (an MQTT 5 CONNACK reason code is mapped onto a 3.x
return code; a failure PUBACK/PUBREC, which 3.x cannot express, is refused; AUTH is
refused). CONNECT carries its own version.

PUBLISH has one decoder and one encoder, shared by every caller:
:func:`decode_publish_at` is where the wire rules of a received PUBLISH are checked
(:func:`decode_packet` and the connection machine both call it), and
:func:`encode_publish_fields` encodes one from its fields (:func:`encode_publish` and the
machine's ``send_publish``). :class:`PlainPublishEncoder` is the one specialisation: runs
of QoS 0 PUBLISH without properties, byte for byte what :func:`encode_publish_fields`
writes. Their cost is measured by ``python -m bench.mqtt_codec`` (figures in docs/mqtt.md).
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

from .errors import (
    InsufficientData,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    UnsupportedProtocolVersion,
)
from .packet_types import MQTTVersion, PacketType
from .packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    _PacketIdAck,
    check_topic_name,
)
from .primitives import (
    Reader,
    decode_varint,
    pack_u16,
    utf8_bytes,
    utf8_text,
    varint_bytes,
)
from .properties import EMPTY_PROPERTIES, WILL, read_properties
from .reason_codes import (
    AUTH_REASON_CODES,
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    SUBACK_REASON_CODES,
    SUBACK_RETURN_CODES_V3,
    UNSUBACK_REASON_CODES,
    ConnackReturnCode,
    connack_return_code,
    reason_code,
)

V3_1 = MQTTVersion.V3_1
V5 = MQTTVersion.V5
#: The largest packet the protocol can express: 1 + 4 + 268,435,455.
MAX_PACKET_SIZE = 268_435_460
_PT = PacketType
_FIXED_FLAGS = {t: (2 if t in (_PT.PUBREL, _PT.SUBSCRIBE, _PT.UNSUBSCRIBE) else 0) for t in _PT}
_TYPES: tuple[PacketType | None, ...] = (None, *PacketType)
_new = object.__new__


# -- encoding -----------------------------------------------------------------------------


def _frame(first: int, body: bytes | bytearray, buf: bytearray) -> None:
    buf.append(first)
    buf += varint_bytes(len(body))
    buf += body


def _u16_string(text: str) -> bytes:
    raw = utf8_bytes(text)
    return pack_u16(len(raw)) + raw


def _u16_binary(data: bytes) -> bytes:
    return pack_u16(len(data)) + data


def encode_connect(p: Connect, buf: bytearray, version: MQTTVersion | None = None) -> None:
    """Encode a CONNECT; its own ``protocol_version`` decides the format."""
    version = p.protocol_version
    v5 = version is V5
    will = p.will
    flags = 0x02 if p.clean_start else 0
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if p.password is not None:
        flags |= 0x40
    if p.username is not None:
        flags |= 0x80
    body = bytearray(_u16_string(version.protocol_name))
    body.append(version)
    body.append(flags)
    body += pack_u16(p.keep_alive)
    if v5:
        body += p.properties.wire()
    body += _u16_string(p.client_id)
    if will is not None:
        if v5:
            body += will.properties.wire()
        body += _u16_string(will.topic)
        body += _u16_binary(will.payload)
    if p.username is not None:
        body += _u16_string(p.username)
    if p.password is not None:
        body += _u16_binary(p.password)
    _frame(0x10, body, buf)


def encode_connack(p: Connack, buf: bytearray, version: MQTTVersion) -> None:
    if version is V5:
        if 0 < p.reason_code <= 5:
            raise ProtocolError(f"3.x return code {p.reason_code} in an MQTT 5 CONNACK")
        _frame(0x20, bytes((p.session_present, p.reason_code)) + p.properties.wire(), buf)
    else:
        present = p.session_present and version is not V3_1
        buf += bytes((0x20, 2, present, connack_return_code(p.reason_code)))


def encode_publish(p: Publish, buf: bytearray, version: MQTTVersion) -> None:
    buf += encode_publish_fields(
        version, p._topic_bytes, p.payload, p.qos, p.retain, p.dup, p.packet_id,
        p.properties._wire,
    )


#: A PUBLISH's first byte, a one-byte remaining length, and the topic length.
_SHORT_PUBLISH_HEAD = Struct(">BBH")


def encode_publish_fields(
    version: MQTTVersion,
    topic: bytes,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    props: bytes = b"\x00",
) -> bytes:
    """The PUBLISH encoder, on fields known to be valid (a :class:`Publish` validated
    when built, or a stored message validated when it was received): ``topic`` is the
    UTF-8 topic name (empty only with a topic alias), ``packet_id`` is given exactly
    when ``qos`` is 1 or 2, ``props`` is an encoded properties section (ignored before
    MQTT 5). Returns the packet as one ``bytes.join`` of its pieces."""
    tlen = len(topic)
    if version is V5:
        mid = pack_u16(packet_id) + props if qos else props  # type: ignore[arg-type]
    elif not tlen:
        raise ProtocolError("empty topic name (a topic alias) needs MQTT 5")
    else:
        mid = pack_u16(packet_id) if qos else b""  # type: ignore[arg-type]
    length = 2 + tlen + len(mid) + len(payload)
    first = 0x30 | (dup << 3) | (qos << 1) | retain
    if length < 0x80:
        head = _SHORT_PUBLISH_HEAD.pack(first, length, tlen)
    else:
        head = bytes((first,)) + varint_bytes(length) + pack_u16(tlen)
    return b"".join((head, topic, mid, payload))


class PlainPublishEncoder:
    """PUBLISH packets of QoS 0 with no properties, for a server forwarding a run of
    stored messages to one connection: byte for byte what :func:`encode_publish_fields`
    writes for them (``qos=0``, ``dup=False``, an empty properties section on MQTT 5),
    appended to a list of pieces for one join per run.

    The topic's length prefix and encoding (and MQTT 5's empty properties octet) are
    kept per topic: a fleet's topics repeat, and building them is most of the cost of
    such a packet. At most ``MAX_TOPICS`` are kept (all dropped when full).
    """

    MAX_TOPICS = 16384
    __slots__ = ("_tail", "_topics", "max_packet_size")

    def __init__(self, version: MQTTVersion, max_packet_size: int) -> None:
        self._tail = b"\x00" if version is V5 else b""  # the empty properties section
        self._topics: dict[str, bytes] = {}
        #: Packets larger than this are refused (the peer's Maximum Packet Size).
        self.max_packet_size = max_packet_size

    def add(self, parts: list[bytes], topic: str, payload: bytes, retain: bool) -> bool:
        """Append the pieces of one PUBLISH to ``parts``; False (nothing appended) if
        the packet would exceed ``max_packet_size`` or the topic is empty (an alias:
        the general path decides)."""
        prefix = self._topics.get(topic)
        if prefix is None:
            if not topic:
                return False
            raw = topic.encode()
            prefix = pack_u16(len(raw)) + raw + self._tail
            if len(self._topics) >= self.MAX_TOPICS:
                self._topics.clear()
            self._topics[topic] = prefix
        length = len(prefix) + len(payload)
        if length < 128:
            if length + 2 > self.max_packet_size:
                return False
            parts.append(_PLAIN_HEADS[retain][length])
        else:
            head = bytes((0x31 if retain else 0x30,)) + varint_bytes(length)
            if length + len(head) > self.max_packet_size:
                return False
            parts.append(head)
        parts.append(prefix)
        parts.append(payload)
        return True


# fixed headers of QoS 0 PUBLISH packets with a one-octet remaining length, by retain
_PLAIN_HEADS = (
    [bytes((0x30, n)) for n in range(128)],
    [bytes((0x31, n)) for n in range(128)],
)


def encode_packet_id_ack(p: _PacketIdAck, buf: bytearray, version: MQTTVersion) -> None:
    """PUBACK, PUBREC, PUBREL, PUBCOMP."""
    first = (p.packet_type << 4) | (2 if p.packet_type is _PT.PUBREL else 0)
    code = p.reason_code
    if version is not V5:
        if code >= 0x80 and p.packet_type in (_PT.PUBACK, _PT.PUBREC):
            raise ProtocolError(f"MQTT 3.x cannot refuse a PUBLISH (reason code 0x{code:02X})")
        buf += bytes((first, 2)) + pack_u16(p.packet_id)
    elif p.properties:
        _frame(first, pack_u16(p.packet_id) + bytes((code,)) + p.properties.wire(), buf)
    elif code:
        buf += bytes((first, 3)) + pack_u16(p.packet_id) + bytes((code,))
    else:
        buf += bytes((first, 2)) + pack_u16(p.packet_id)


def encode_subscribe(p: Subscribe, buf: bytearray, version: MQTTVersion) -> None:
    body = bytearray(pack_u16(p.packet_id))
    v5 = version is V5
    if v5:
        body += p.properties.wire()
    for sub in p.subscriptions:
        body += _u16_string(sub.topic_filter)
        options = sub.qos
        if v5:
            options |= (
                (sub.no_local << 2) | (sub.retain_as_published << 3) | (sub.retain_handling << 4)
            )
        body.append(options)
    _frame(0x82, body, buf)


def encode_suback(p: Suback, buf: bytearray, version: MQTTVersion) -> None:
    body = bytearray(pack_u16(p.packet_id))
    if version is V5:
        body += p.properties.wire()
        body += bytes(p.reason_codes)
    else:
        body += bytes(c if c < 0x80 else 0x80 for c in p.reason_codes)
    _frame(0x90, body, buf)


def encode_unsubscribe(p: Unsubscribe, buf: bytearray, version: MQTTVersion) -> None:
    body = bytearray(pack_u16(p.packet_id))
    if version is V5:
        body += p.properties.wire()
    for topic_filter in p.topic_filters:
        body += _u16_string(topic_filter)
    _frame(0xA2, body, buf)


def encode_unsuback(p: Unsuback, buf: bytearray, version: MQTTVersion) -> None:
    body = bytearray(pack_u16(p.packet_id))
    if version is V5:
        body += p.properties.wire()
        body += bytes(p.reason_codes)
    _frame(0xB0, body, buf)


def encode_pingreq(p: Pingreq, buf: bytearray, version: MQTTVersion) -> None:
    buf += b"\xc0\x00"


def encode_pingresp(p: Pingresp, buf: bytearray, version: MQTTVersion) -> None:
    buf += b"\xd0\x00"


def _encode_code_and_properties(
    first: int, code: int, props: object, wire: bytes, buf: bytearray
) -> None:
    if props:
        _frame(first, bytes((code,)) + wire, buf)
    elif code:
        buf += bytes((first, 1, code))
    else:
        buf += bytes((first, 0))


def encode_disconnect(p: Disconnect, buf: bytearray, version: MQTTVersion) -> None:
    if version is V5:
        _encode_code_and_properties(0xE0, p.reason_code, p.properties, p.properties.wire(), buf)
    else:
        buf += b"\xe0\x00"


def encode_auth(p: Auth, buf: bytearray, version: MQTTVersion) -> None:
    if version is not V5:
        raise ProtocolError("AUTH needs MQTT 5")
    _encode_code_and_properties(0xF0, p.reason_code, p.properties, p.properties.wire(), buf)


_ENCODERS: dict[type, Callable[..., None]] = {
    Connect: encode_connect, Connack: encode_connack, Publish: encode_publish,
    Puback: encode_packet_id_ack, Pubrec: encode_packet_id_ack, Pubrel: encode_packet_id_ack,
    Pubcomp: encode_packet_id_ack, Subscribe: encode_subscribe, Suback: encode_suback,
    Unsubscribe: encode_unsubscribe, Unsuback: encode_unsuback, Pingreq: encode_pingreq,
    Pingresp: encode_pingresp, Disconnect: encode_disconnect, Auth: encode_auth,
}


def encode_packet(packet: Packet, buf: bytearray, version: MQTTVersion = V5) -> None:
    """Append the encoding of ``packet`` for protocol ``version`` to ``buf``."""
    try:
        encoder = _ENCODERS[type(packet)]
    except KeyError:
        raise TypeError(f"not an MQTT packet: {packet!r}") from None
    encoder(packet, buf, version)


def packet_bytes(packet: Packet, version: MQTTVersion = V5) -> bytes:
    """The encoding of ``packet`` as a new ``bytes``."""
    buf = bytearray()
    encode_packet(packet, buf, version)
    return bytes(buf)


# -- decoding -----------------------------------------------------------------------------


def _done(r: Reader, name: str) -> None:
    if r.pos != r.end:
        raise MalformedPacket(f"{r.end - r.pos} bytes after the content of {name}")


def _decode_connect(flags: int, body: memoryview, version: MQTTVersion | None) -> Connect:
    r = Reader(body)
    name = r.utf8()
    level = r.u8()
    if not ((name == "MQTT" and level in (4, 5)) or (name == "MQIsdp" and level == 3)):
        known = name in ("MQTT", "MQIsdp")
        raise UnsupportedProtocolVersion(
            f"unsupported protocol {name!r} level {level}",
            connack_return_code=ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION if known else None,
        )
    proto = MQTTVersion(level)
    v5 = proto is V5
    cflags = r.u8()
    if cflags & 0x01:
        raise MalformedPacket("CONNECT reserved flag set")
    will_flag = cflags & 0x04
    will_qos = (cflags >> 3) & 0x03
    will_retain = bool(cflags & 0x20)
    if not will_flag and (will_qos or will_retain):
        raise MalformedPacket("will QoS or will retain set without the will flag")
    if will_qos == 3:
        raise MalformedPacket("will QoS 3")
    if not v5 and cflags & 0x40 and not cflags & 0x80:
        raise MalformedPacket("password flag without user name flag before MQTT 5")
    keep_alive = r.u16()
    props = read_properties(r, _PT.CONNECT) if v5 else EMPTY_PROPERTIES
    client_id = r.utf8()
    will = None
    if will_flag:
        will_props = read_properties(r, WILL) if v5 else EMPTY_PROPERTIES
        will = Will(r.utf8(), r.binary(), will_qos, will_retain, will_props)
    username = r.utf8() if cflags & 0x80 else None
    password = r.binary() if cflags & 0x40 else None
    _done(r, "CONNECT")
    return Connect(
        client_id, proto, bool(cflags & 0x02), keep_alive, username, password, will, props
    )


def _decode_connack(flags: int, body: memoryview, version: MQTTVersion) -> Connack:
    r = Reader(body)
    ack_flags = r.u8()
    code = r.u8()
    if version is V5:
        if ack_flags & 0xFE:
            raise MalformedPacket("CONNACK reserved flags set")
        if code not in CONNACK_REASON_CODES:
            raise MalformedPacket(f"reason code 0x{code:02X} not valid in CONNACK")
        props = read_properties(r, _PT.CONNACK)
        _done(r, "CONNACK")
        return Connack(bool(ack_flags), reason_code(code), props)
    _done(r, "CONNACK")
    if version is V3_1:
        ack_flags = 0  # 3.1: a reserved byte, no session present
    elif ack_flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags set")
    if code > 5:
        raise MalformedPacket(f"CONNACK return code {code} is reserved")
    return Connack(bool(ack_flags), ConnackReturnCode(code))


def decode_publish_at(
    buf: bytes | bytearray | memoryview,
    pos: int,
    version: MQTTVersion,
    max_packet_size: int = MAX_PACKET_SIZE,
) -> tuple[Publish, int]:
    """Decode the PUBLISH whose fixed header starts at ``buf[pos]``: (packet, the
    position after it). The caller has seen packet type 3 in ``buf[pos]``.

    This is where the wire rules of a received PUBLISH live, for :func:`decode_packet`
    and the connection machine alike; they are the rules :class:`Publish` checks when
    built, plus those of the encoding. In order: the remaining length (shortest form)
    and ``max_packet_size`` (:class:`PacketTooLarge` before the body is waited for), the
    whole packet present (else :class:`InsufficientData`); then the encoding:
    :class:`MalformedPacket` for QoS 3, a topic or packet identifier past the end, a
    properties section that is malformed or holds a property not allowed in PUBLISH
    (MQTT 5); then the fields, in :class:`Publish`'s order: DUP on QoS 0 (malformed),
    packet identifier 0 (:class:`ProtocolError`), a topic not valid UTF-8 or holding
    U+0000 (malformed), a topic that is empty without a Topic Alias or holds a wildcard
    (0x90). What needs the connection's state (alias resolution, who may send a
    Subscription Identifier) is the machine's.
    """
    n = len(buf)
    if n - pos < 2:
        raise InsufficientData("fixed header incomplete")
    first = buf[pos]
    length = buf[pos + 1]
    if length < 0x80:
        start = pos + 2
    else:
        length, used = decode_varint(buf, pos + 1)
        start = pos + 1 + used
    end = start + length
    if end - pos > max_packet_size:
        raise PacketTooLarge(
            f"packet of {end - pos} bytes exceeds the maximum of {max_packet_size}")
    if end > n:
        raise InsufficientData(f"packet needs {end - pos} bytes, have {n - pos}")
    qos = (first >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH QoS 3")
    if length < 2:
        raise MalformedPacket("PUBLISH shorter than its topic length")
    t = start + 2 + ((buf[start] << 8) | buf[start + 1])
    if t > end:
        raise MalformedPacket("PUBLISH shorter than its topic")
    raw = bytes(buf[start + 2 : t])
    packet_id = None
    if qos:
        if t + 2 > end:
            raise MalformedPacket("PUBLISH shorter than its packet identifier")
        packet_id = (buf[t] << 8) | buf[t + 1]
        t += 2
    props = EMPTY_PROPERTIES
    if version is V5:
        if t < end and buf[t] == 0:
            t += 1
        else:
            r = Reader(memoryview(buf)[start:end], t - start)
            props = read_properties(r, _PT.PUBLISH)
            t = start + r.pos
    # the rules of the fields, in the order Publish.__post_init__ checks them
    if qos == 0:
        if first & 8:
            raise MalformedPacket("DUP flag set on a QoS 0 PUBLISH")
    elif not packet_id:
        raise ProtocolError(f"packet identifier must be 1..65535, got {packet_id!r}")
    try:
        topic = raw.decode()
    except UnicodeDecodeError:
        topic = utf8_text(raw)  # raises MalformedPacket
    if "\x00" in topic:
        utf8_text(raw)  # raises MalformedPacket
    if not raw or "+" in topic or "#" in topic:
        check_topic_name(topic, raw, props.topic_alias)
    # one copy of a large payload, not two (a bytearray slice, then bytes of it)
    payload = bytes(buf[t:end]) if end - t < 4096 else bytes(memoryview(buf)[t:end])
    # every rule is checked: fill the slots without __post_init__
    p: Publish = _new(Publish)
    p.topic = topic
    p.payload = payload
    p.qos = qos
    p.retain = bool(first & 1)
    p.dup = bool(first & 8)
    p.packet_id = packet_id
    p.properties = props
    p._topic_bytes = raw
    return p, end


def _packet_id_ack_decoder(cls: type[_PacketIdAck]) -> Callable[..., _PacketIdAck]:
    ptype = cls.packet_type

    def decode(flags: int, body: memoryview, version: MQTTVersion) -> _PacketIdAck:
        if len(body) == 2:  # the common case: a packet identifier, nothing else
            return cls((body[0] << 8) | body[1])
        r = Reader(body)
        packet_id = r.u16()
        if version is not V5 or r.pos == r.end:
            _done(r, ptype.name)
            return cls(packet_id)
        code = r.u8()
        if code not in cls.reason_codes:
            raise MalformedPacket(f"reason code 0x{code:02X} not valid in {ptype.name}")
        props = read_properties(r, ptype) if r.pos < r.end else EMPTY_PROPERTIES
        _done(r, ptype.name)
        return cls(packet_id, reason_code(code), props)

    return decode


def _decode_subscribe(flags: int, body: memoryview, version: MQTTVersion) -> Subscribe:
    r = Reader(body)
    packet_id = r.u16()
    v5 = version is V5
    props = read_properties(r, _PT.SUBSCRIBE) if v5 else EMPTY_PROPERTIES
    subs = []
    while r.pos < r.end:
        topic_filter = r.utf8()
        options = r.u8()
        if options & (0xC0 if v5 else 0xFC):
            raise MalformedPacket("subscription options reserved bits set")
        if options & 0x03 == 3:
            raise MalformedPacket("subscription QoS 3")
        subs.append(Subscription(
            topic_filter, options & 0x03, bool(options & 0x04), bool(options & 0x08),
            (options >> 4) & 0x03,
        ))
    return Subscribe(packet_id, tuple(subs), props)


def _decode_suback(flags: int, body: memoryview, version: MQTTVersion) -> Suback:
    r = Reader(body)
    packet_id = r.u16()
    if version is V5:
        props = read_properties(r, _PT.SUBACK)
        codes = tuple(reason_code(c) for c in r.rest())
        for code in codes:
            if code not in SUBACK_REASON_CODES:
                raise MalformedPacket(f"reason code 0x{code:02X} not valid in SUBACK")
        return Suback(packet_id, codes, props)
    codes = tuple(reason_code(c) for c in r.rest())
    for code in codes:
        if code not in SUBACK_RETURN_CODES_V3:
            raise MalformedPacket(f"SUBACK return code 0x{code:02X} is reserved")
    return Suback(packet_id, codes)


def _decode_unsubscribe(flags: int, body: memoryview, version: MQTTVersion) -> Unsubscribe:
    r = Reader(body)
    packet_id = r.u16()
    props = read_properties(r, _PT.UNSUBSCRIBE) if version is V5 else EMPTY_PROPERTIES
    filters = []
    while r.pos < r.end:
        filters.append(r.utf8())
    return Unsubscribe(packet_id, tuple(filters), props)


def _decode_unsuback(flags: int, body: memoryview, version: MQTTVersion) -> Unsuback:
    r = Reader(body)
    packet_id = r.u16()
    if version is not V5:
        _done(r, "UNSUBACK")
        return Unsuback(packet_id)
    props = read_properties(r, _PT.UNSUBACK)
    codes = tuple(reason_code(c) for c in r.rest())
    for code in codes:
        if code not in UNSUBACK_REASON_CODES:
            raise MalformedPacket(f"reason code 0x{code:02X} not valid in UNSUBACK")
    return Unsuback(packet_id, codes, props)


def _empty_decoder(packet: Packet) -> Callable[..., Packet]:
    name = packet.packet_type.name

    def decode(flags: int, body: memoryview, version: MQTTVersion) -> Packet:
        if len(body):
            raise MalformedPacket(f"{name} with a remaining length of {len(body)}")
        return packet

    return decode


def _code_and_properties_decoder(cls: type[Disconnect] | type[Auth]) -> Callable[..., Packet]:
    ptype = cls.packet_type
    allowed = DISCONNECT_REASON_CODES if cls is Disconnect else AUTH_REASON_CODES

    def decode(flags: int, body: memoryview, version: MQTTVersion) -> Packet:
        r = Reader(body)
        if version is not V5 or r.end == 0:
            _done(r, ptype.name)
            return cls()
        code = r.u8()
        if code not in allowed:
            raise MalformedPacket(f"reason code 0x{code:02X} not valid in {ptype.name}")
        props = read_properties(r, ptype) if r.pos < r.end else EMPTY_PROPERTIES
        _done(r, ptype.name)
        return cls(reason_code(code), props)

    return decode


_DECODERS: dict[int, Callable[..., Any]] = {
    _PT.CONNECT: _decode_connect,
    _PT.CONNACK: _decode_connack,
    _PT.PUBACK: _packet_id_ack_decoder(Puback),
    _PT.PUBREC: _packet_id_ack_decoder(Pubrec),
    _PT.PUBREL: _packet_id_ack_decoder(Pubrel),
    _PT.PUBCOMP: _packet_id_ack_decoder(Pubcomp),
    _PT.SUBSCRIBE: _decode_subscribe,
    _PT.SUBACK: _decode_suback,
    _PT.UNSUBSCRIBE: _decode_unsubscribe,
    _PT.UNSUBACK: _decode_unsuback,
    _PT.PINGREQ: _empty_decoder(Pingreq()),
    _PT.PINGRESP: _empty_decoder(Pingresp()),
    _PT.DISCONNECT: _code_and_properties_decoder(Disconnect),
    _PT.AUTH: _code_and_properties_decoder(Auth),
}


def decode_packet(
    view: memoryview | bytes | bytearray,
    version: MQTTVersion | None = V5,
    max_packet_size: int = MAX_PACKET_SIZE,
) -> tuple[Packet, int]:
    """Decode the packet at the start of ``view``: (packet, bytes consumed).

    Bytes after the packet are left alone. ``version`` is the connection's protocol
    version; it is ignored for CONNECT, which carries its own (``None`` is allowed only
    for a CONNECT). Raises :class:`InsufficientData` if the packet is incomplete,
    :class:`PacketTooLarge` if its total size exceeds ``max_packet_size`` (as soon as the
    fixed header is complete), and :class:`MalformedPacket` / :class:`ProtocolError` (or a
    subclass) for bad content.
    """
    if len(view) < 2:
        raise InsufficientData("fixed header incomplete")
    first = view[0]
    if first >> 4 == 3 and version is not None:  # (with no version: the error below)
        return decode_publish_at(view, 0, version, max_packet_size)
    ptype = _TYPES[first >> 4]
    if ptype is None or (ptype is _PT.AUTH and version is not V5 and version is not None):
        raise MalformedPacket(f"reserved packet type {first >> 4}")
    if ptype is not _PT.PUBLISH and first & 0x0F != _FIXED_FLAGS[ptype]:
        raise MalformedPacket(f"wrong fixed header flags 0x{first & 0x0F:X} for {ptype.name}")
    if type(view) is not memoryview:
        view = memoryview(view)
    length = view[1]
    if length < 0x80:
        start = 2
    else:
        length, used = decode_varint(view, 1)
        start = 1 + used
    total = start + length
    if total > max_packet_size:
        raise PacketTooLarge(f"packet of {total} bytes exceeds the maximum of {max_packet_size}")
    if len(view) < total:
        raise InsufficientData(f"packet needs {total} bytes, have {len(view)}")
    if version is None and ptype is not _PT.CONNECT:
        raise ProtocolError(f"{ptype.name} before CONNECT: version unknown")
    return _DECODERS[ptype](first & 0x0F, view[start:total], version), total  # type: ignore[arg-type]
