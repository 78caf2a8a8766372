"""Protocol sniffing: which protocol a connection speaks, from its first bytes.

Each sniffer looks at the bytes received so far and answers ``True`` (this protocol),
``False`` (not this protocol) or ``None`` (cannot tell yet: need more bytes). The
unified listeners ask the sniffers of every registered front end (see
:mod:`gateway.frontends`) until one says ``True`` or all say ``False``. Every sniffer
decides within :data:`MAX_PREFIX` bytes, and no two of them claim the same bytes, so
their order does not matter (tests/gateway/test_sniff.py checks both with Hypothesis):

============  ==========================================================  ===========
protocol      first bytes                                                 decided by
============  ==========================================================  ===========
MQTT          ``10``, remaining length (1-4 byte varint, minimal), then   byte 15
              ``00 04 "MQTT"`` level 4 or 5, or ``00 06 "MQIsdp"`` level
              3, then connect flags with the reserved bit clear
AMQP          ``"AMQP"`` (any version: the front end answers the ones it  byte 4
              does not speak with its own header)
HTTP/1.x      a method and a space (``"GET "``, ``"POST "``, ...)         byte 8
h2 / gRPC     the HTTP/2 client preface ``"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n"``  byte 24
remoting      frame length below 2**28 (first byte ``00``-``0F``),         byte 11
              serialize type 0 (JSON) or 1 (ROCKETMQ), a header length
              that fits the frame, then ``{`` (JSON) or a binary header
              with a plausible language code
============  ==========================================================  ===========

The first bytes already separate them: ``10``, ``A``, an upper-case method letter,
``P`` (``PRI``; no HTTP method here starts ``PRI``) and ``00``-``0F``. A PROXY protocol
header (``"PROXY "`` or ``0D 0A 0D 0A 00 0D 0A 51 ...``) is none of them: it is read
before sniffing, where configured (:mod:`gateway.proxy_header`), and is unknown bytes
elsewhere (the remoting rule refuses the v2 signature at byte 8, ``U`` not ``{``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Sniffer = Callable[[bytes], bool | None]

#: Bytes a sniffer may ask for before it must decide (the h2 preface is the longest).
MAX_PREFIX = 24

MQTT_CONNECT = 0x10
#: Protocol name (with its length) and the protocol levels that go with it.
MQTT_NAMES: tuple[tuple[bytes, tuple[int, ...]], ...] = (
    (b"\x00\x04MQTT", (4, 5)),
    (b"\x00\x06MQIsdp", (3,)),
)
AMQP_SIGNATURE = b"AMQP"
HTTP_METHODS = (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"TRACE")
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: A remoting frame's length field stays below this (so its first byte is 00-0F);
#: ``remoting_max_frame`` cannot be set higher (gateway.config.REMOTING_FRAME_LIMIT).
REMOTING_LENGTH_LIMIT = 2**28
#: Smallest ROCKETMQ binary header: code i16, language i8, version i16, opaque i32,
#: flag i32, remark length i32, ext fields length i32.
REMOTING_BINARY_HEADER_MIN = 21
#: Language codes go to 13 (NODE_JS) today; room for more, not for arbitrary bytes.
REMOTING_LANGUAGE_LIMIT = 64


def sniff_mqtt(prefix: bytes) -> bool | None:
    if not prefix:
        return None
    if prefix[0] != MQTT_CONNECT:
        return False
    remaining = 0
    pos = 1
    while True:  # the remaining length: 1-4 bytes, 7 bits each, least significant first
        if pos >= len(prefix):
            return None
        byte = prefix[pos]
        remaining |= (byte & 0x7F) << (7 * (pos - 1))
        pos += 1
        if not byte & 0x80:
            if byte == 0 and pos > 2:
                return False  # not the minimal encoding (MQTT 5 1.5.5)
            break
        if pos == 5:
            return False  # a fourth byte with the continuation bit
    rest = prefix[pos:]
    undecided = False
    for name, levels in MQTT_NAMES:
        answer = _starts_with(rest, name)
        if answer is False:
            continue
        if answer is None:
            undecided = True
            continue
        # name, level, connect flags, keep-alive: the least a CONNECT's body holds
        if remaining < len(name) + 4:
            return False
        if len(rest) <= len(name) + 1:
            return None
        return rest[len(name)] in levels and not rest[len(name) + 1] & 0x01
    return None if undecided else False


def sniff_amqp(prefix: bytes) -> bool | None:
    return _starts_with(prefix, AMQP_SIGNATURE)


def sniff_http(prefix: bytes) -> bool | None:
    undecided = False
    for method in HTTP_METHODS:
        answer = _starts_with(prefix, method + b" ")
        if answer:
            return True
        undecided = undecided or answer is None
    return None if undecided else False


def sniff_h2(prefix: bytes) -> bool | None:
    """The HTTP/2 client preface (h2c prior knowledge, as gRPC clients send it)."""
    return _starts_with(prefix, H2_PREFACE)


def sniff_remoting(prefix: bytes) -> bool | None:
    """A RocketMQ remoting frame: ``int32 length | int32 (type << 24 | headerLen) |
    header | body``, big-endian."""
    if not prefix:
        return None
    if prefix[0] >= REMOTING_LENGTH_LIMIT >> 24:
        return False
    if len(prefix) < 5:
        return None
    serialize_type = prefix[4]
    if serialize_type not in (0, 1):
        return False
    if len(prefix) < 8:
        return None
    length = int.from_bytes(prefix[0:4], "big")
    header_length = int.from_bytes(prefix[5:8], "big")
    smallest = 2 if serialize_type == 0 else REMOTING_BINARY_HEADER_MIN  # "{}"
    if not smallest <= header_length <= length - 4:
        return False
    if serialize_type == 0:
        if len(prefix) < 9:
            return None
        return prefix[8] == ord("{")
    if len(prefix) < 11:
        return None
    return prefix[10] < REMOTING_LANGUAGE_LIMIT


def _starts_with(prefix: bytes, signature: bytes) -> bool | None:
    if len(prefix) >= len(signature):
        return prefix.startswith(signature)
    return None if signature.startswith(prefix) else False


def classify(prefix: bytes, sniffers: Sequence[tuple[str, Sniffer]]) -> str | bool | None:
    """The name of the protocol ``prefix`` belongs to; ``None`` when more bytes are
    needed to tell; ``False`` when no sniffer claims it (or it is already
    :data:`MAX_PREFIX` bytes long and still undecided)."""
    undecided = False
    for name, sniff in sniffers:
        answer = sniff(prefix)
        if answer:
            return name
        undecided = undecided or answer is None
    if undecided and len(prefix) < MAX_PREFIX:
        return None
    return False
