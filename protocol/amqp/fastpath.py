"""Hand-written codecs for the per-message AMQP methods and content frames.

pamqp costs ~10-15 µs to decode or encode one method because it walks attribute
lists and validates names; a message costs that four or five times over (publish,
header, deliver, header, ack). This module does exactly the per-message work with
precompiled ``struct`` formats and produces byte-identical frames (asserted against
pamqp in ``tests/protocol/amqp/test_amqp_fastpath.py``):

- decode ``Basic.Publish``, ``Basic.Ack``, ``Basic.Nack`` (consumer acks);
- encode ``Basic.Deliver``, ``Basic.GetOk``, ``Basic.Return``, ``Basic.Ack`` and
  ``Basic.Nack`` (publisher confirms);
- content headers are kept RAW: pamqp's decode/re-encode of a properties table is
  lossy (``'l'`` 5 comes back as ``'b'``, ``'d'`` as float32, non-UTF-8 ``'S'``
  fails), so :class:`ContentHeader` stores the received payload and parses only
  ``delivery_mode``, ``priority``, ``expiration`` and the span of ``headers``; the
  headers table is decoded (by pamqp) only when asked. A delivery re-frames the
  stored property bytes with a new body size (:func:`encode_content_header`);
- bodies are split into frames of at most ``frame_max - 8`` octets;
- a delivery (Deliver + header + body) is one join: :func:`encode_delivery`, and
  :class:`DeliveryEncoder` for a run of deliveries.

Decoders take a complete method payload (class-id, method-id, arguments) cut by
:class:`~protocol.amqp.framing.FrameReader`; on bad bytes they raise
``ConnectionLevelError(502 SYNTAX_ERROR)``, never "need more". Encoders return
``bytes`` ready for the socket. Strings may be ``str`` (encoded UTF-8) or ``bytes``.

How much faster than pamqp each codec is (about 10x) is measured by
``python -m bench.amqp_fastpath``; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from pamqp import decode as pamqp_decode

from .errors import SYNTAX_ERROR, ConnectionLevelError
from .framing import FRAME_END, FRAME_END_BYTE, FRAME_OVERHEAD

BASIC_CLASS = 60
PUBLISH_INDEX = 0x003C0028
RETURN_INDEX = 0x003C0032
DELIVER_INDEX = 0x003C003C
GET_OK_INDEX = 0x003C0047
ACK_INDEX = 0x003C0050
NACK_INDEX = 0x003C0078

# Property flag bits of the first flag word, in wire order (spec, Basic class).
FLAG_CONTENT_TYPE = 0x8000
FLAG_CONTENT_ENCODING = 0x4000
FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000
FLAG_PRIORITY = 0x0800
FLAG_CORRELATION_ID = 0x0400
FLAG_REPLY_TO = 0x0200
FLAG_EXPIRATION = 0x0100

#: Raw properties of a message without any property set: one zero flag word.
EMPTY_PROPERTIES = b"\x00\x00"

_ACK = struct.Struct(">QB")
_FRAME_HEADER = struct.Struct(">BHI")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_CONTENT_HEADER = struct.Struct(">HHQH")
# method frame header + method index + first shortstr length, in one pack
_METHOD_START = struct.Struct(">BHIIB")
# frame header + method index + delivery tag + bits (Ack, Nack): the whole frame
_ACK_FRAME = struct.Struct(">BHIIQBB")
_DELIVER_MID = struct.Struct(">QBB")  # delivery-tag, redelivered bit, len(exchange)
_GET_OK_START = struct.Struct(">BHIIQBB")  # ... delivery-tag, redelivered, len(exchange)
_RETURN_START = struct.Struct(">BHIIHB")  # ... reply-code, len(reply-text)
_HEADER_FRAME_START = struct.Struct(">BHIHHQ")  # frame header + class, weight, body size
_BYTE = struct.Struct("B")
_SHORT_LENGTHS = [_BYTE.pack(i) for i in range(256)]


@dataclass(slots=True)
class Publish:
    """``Basic.Publish`` as decoded by the fast path (attribute names as pamqp's)."""

    name: ClassVar[str] = "Basic.Publish"
    index: ClassVar[int] = PUBLISH_INDEX
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False


@dataclass(slots=True)
class Ack:
    """``Basic.Ack`` as decoded by the fast path (attribute names as pamqp's)."""

    name: ClassVar[str] = "Basic.Ack"
    index: ClassVar[int] = ACK_INDEX
    delivery_tag: int = 0
    multiple: bool = False


@dataclass(slots=True)
class Nack:
    """``Basic.Nack`` as decoded by the fast path (attribute names as pamqp's)."""

    name: ClassVar[str] = "Basic.Nack"
    index: ClassVar[int] = NACK_INDEX
    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = True


def _syntax_error(what: str, exc: Exception | None = None) -> ConnectionLevelError:
    return ConnectionLevelError(SYNTAX_ERROR, f"malformed {what}" + (f": {exc}" if exc else ""))


def decode_publish(payload: bytes) -> Publish:
    """``Basic.Publish`` from a complete method payload (starting at class-id)."""
    try:
        n = payload[6]
        p = 7 + n
        exchange = payload[7:p]
        m = payload[p]
        q = p + 1 + m
        routing_key = payload[p + 1 : q]
        bits = payload[q]
        return Publish(exchange.decode(), routing_key.decode(), bool(bits & 1), bool(bits & 2))
    except (IndexError, UnicodeDecodeError) as exc:
        raise _syntax_error("Basic.Publish", exc) from exc


def decode_ack(payload: bytes) -> Ack:
    """``Basic.Ack`` from a complete method payload."""
    try:
        tag, bits = _ACK.unpack_from(payload, 4)
    except struct.error as exc:
        raise _syntax_error("Basic.Ack", exc) from exc
    return Ack(tag, bool(bits & 1))


def decode_nack(payload: bytes) -> Nack:
    """``Basic.Nack`` from a complete method payload."""
    try:
        tag, bits = _ACK.unpack_from(payload, 4)
    except struct.error as exc:
        raise _syntax_error("Basic.Nack", exc) from exc
    return Nack(tag, bool(bits & 1), bool(bits & 2))


def _short(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 255:
        raise ValueError(f"short string of {len(raw)} octets exceeds 255")
    return raw


def encode_ack(channel: int, delivery_tag: int, multiple: bool = False) -> bytes:
    """One ``Basic.Ack`` method frame (publisher confirm)."""
    return _ACK_FRAME.pack(1, channel, 13, ACK_INDEX, delivery_tag, multiple, 0xCE)


def encode_nack(
    channel: int, delivery_tag: int, multiple: bool = False, requeue: bool = True
) -> bytes:
    """One ``Basic.Nack`` method frame (negative publisher confirm)."""
    return _ACK_FRAME.pack(
        1, channel, 13, NACK_INDEX, delivery_tag, multiple | (requeue << 1), 0xCE)


def encode_deliver(
    channel: int,
    consumer_tag: str | bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
) -> bytes:
    """One ``Basic.Deliver`` method frame."""
    ct, ex, rk = _short(consumer_tag), _short(exchange), _short(routing_key)
    size = 16 + len(ct) + len(ex) + len(rk)
    return b"".join((
        _METHOD_START.pack(1, channel, size, DELIVER_INDEX, len(ct)), ct,
        _DELIVER_MID.pack(delivery_tag, redelivered, len(ex)), ex,
        _SHORT_LENGTHS[len(rk)], rk, FRAME_END_BYTE,
    ))


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    message_count: int,
) -> bytes:
    """One ``Basic.GetOk`` method frame."""
    ex, rk = _short(exchange), _short(routing_key)
    size = 19 + len(ex) + len(rk)
    return b"".join((
        _GET_OK_START.pack(1, channel, size, GET_OK_INDEX, delivery_tag, redelivered, len(ex)),
        ex, _SHORT_LENGTHS[len(rk)], rk, _U32.pack(message_count), FRAME_END_BYTE,
    ))


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str | bytes,
    exchange: str | bytes,
    routing_key: str | bytes,
) -> bytes:
    """One ``Basic.Return`` method frame (e.g. 312 NO_ROUTE for a mandatory publish)."""
    rt, ex, rk = _short(reply_text), _short(exchange), _short(routing_key)
    size = 9 + len(rt) + len(ex) + len(rk)
    return b"".join((
        _RETURN_START.pack(1, channel, size, RETURN_INDEX, reply_code, len(rt)), rt,
        _SHORT_LENGTHS[len(ex)], ex, _SHORT_LENGTHS[len(rk)], rk, FRAME_END_BYTE,
    ))


class ContentHeader:
    """A received content header, kept raw; only the fields the broker needs parsed.

    ``raw`` is the whole header-frame payload (class-id, weight, body-size, flags,
    properties). ``properties_raw`` (flags + properties) is what to store and what
    :func:`encode_content_header` re-frames for a delivery, unchanged. ``headers``
    is decoded with pamqp on first access (``None`` when the property is absent).
    """

    __slots__ = ("raw", "properties_raw", "class_id", "body_size", "delivery_mode",
                 "priority", "expiration", "_headers_span", "_headers")

    def __init__(self, raw: bytes) -> None:
        try:
            class_id, _weight, body_size, flags = _CONTENT_HEADER.unpack_from(raw)
            p = 14
            word = flags
            while word & 1:  # continuation: more flag words follow (none defined in 0-9-1)
                (word,) = _U16.unpack_from(raw, p)
                p += 2
            delivery_mode = priority = expiration = headers_span = None
            if flags & FLAG_CONTENT_TYPE:
                p += 1 + raw[p]
            if flags & FLAG_CONTENT_ENCODING:
                p += 1 + raw[p]
            if flags & FLAG_HEADERS:
                (n,) = _U32.unpack_from(raw, p)
                headers_span = (p, p + 4 + n)
                p += 4 + n
            if flags & FLAG_DELIVERY_MODE:
                delivery_mode = raw[p]
                p += 1
            if flags & FLAG_PRIORITY:
                priority = raw[p]
                p += 1
            if flags & FLAG_CORRELATION_ID:
                p += 1 + raw[p]
            if flags & FLAG_REPLY_TO:
                p += 1 + raw[p]
            if flags & FLAG_EXPIRATION:
                n = raw[p]
                expiration = raw[p + 1 : p + 1 + n].decode()
                p += 1 + n
            if p > len(raw):
                raise IndexError("properties run past the end of the frame")
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise _syntax_error("content header", exc) from exc
        self.raw = raw
        #: Flag words + property list, exactly as received.
        self.properties_raw: bytes = raw[12:]
        self.class_id: int = class_id
        self.body_size: int = body_size
        self.delivery_mode: int | None = delivery_mode
        self.priority: int | None = priority
        self.expiration: str | None = expiration
        self._headers_span = headers_span
        self._headers: dict[str, Any] | None = None

    @property
    def headers(self) -> dict[str, Any] | None:
        """The ``headers`` table (pamqp's decoder), parsed once on first access."""
        if self._headers is None and self._headers_span is not None:
            start, end = self._headers_span
            try:
                self._headers = pamqp_decode.field_table(self.raw[start:end])[1]
            except (ValueError, struct.error, IndexError) as exc:
                raise _syntax_error("headers table", exc) from exc
            except RecursionError:  # pamqp recurses into nested tables and arrays
                raise _syntax_error("headers table: nested too deeply") from None
        return self._headers

    def __repr__(self) -> str:
        return (f"ContentHeader(body_size={self.body_size}, delivery_mode={self.delivery_mode},"
                f" priority={self.priority}, expiration={self.expiration!r})")


def encode_content_header(channel: int, properties_raw: bytes, body_size: int) -> bytes:
    """A content-header frame for class Basic from stored raw properties."""
    return b"".join((
        _HEADER_FRAME_START.pack(2, channel, 12 + len(properties_raw), BASIC_CLASS, 0, body_size),
        properties_raw, FRAME_END_BYTE,
    ))


def body_frame_parts(channel: int, body: bytes, frame_max: int) -> list[Any]:
    """The pieces of the body frames for ``body``, each payload <= frame_max - 8.

    Returned as a list for ``b"".join``; large bodies are sliced through a
    memoryview, so the only copy is the join. An empty body has no body frame.
    ``frame_max`` 0 means no limit.
    """
    size = len(body)
    chunk = frame_max - FRAME_OVERHEAD if frame_max else size
    if size <= chunk:
        if not size:
            return []
        return [_FRAME_HEADER.pack(3, channel, size), body, FRAME_END_BYTE]
    view = memoryview(body)
    parts: list[Any] = []
    for offset in range(0, size, chunk):
        piece = view[offset : offset + chunk]
        parts += (_FRAME_HEADER.pack(3, channel, len(piece)), piece, FRAME_END_BYTE)
    return parts


def encode_body(channel: int, body: bytes, frame_max: int) -> bytes:
    """Body frames for ``body`` as one bytes object."""
    return b"".join(body_frame_parts(channel, body, frame_max))


def encode_message(
    method_frame: bytes, channel: int, properties_raw: bytes, body: bytes, frame_max: int
) -> bytes:
    """Method frame + content header + body frames as ONE chunk.

    Content frames of one channel must not interleave with another message's, so a
    delivery is always written with a single ``write()``.
    """
    parts = [
        method_frame,
        _HEADER_FRAME_START.pack(2, channel, 12 + len(properties_raw), BASIC_CLASS, 0, len(body)),
        properties_raw, FRAME_END_BYTE,
    ]
    parts += body_frame_parts(channel, body, frame_max)
    return b"".join(parts)


# frame end of the previous frame + a content-header frame's start (class, weight, size)
_END_HEADER_START = struct.Struct(">BBHIHHQ")
# frame end of the previous frame + a body frame's header
_END_BODY_START = struct.Struct(">BBHI")


def encode_delivery(
    channel: int,
    consumer_tag: str | bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """``encode_message(encode_deliver(...), ...)`` in one step, byte for byte the same:
    one :class:`DeliveryEncoder` delivery (a run of deliveries keeps one encoder)."""
    return DeliveryEncoder().encode(channel, consumer_tag, delivery_tag, redelivered,
                                    exchange, routing_key, properties_raw, body, frame_max)


_TAG_REDELIVERED = struct.Struct(">QB")


class DeliveryEncoder:
    """Deliveries (Deliver + content header + body frames) as one join each, byte for
    byte ``encode_message(encode_deliver(...), ...)``, keeping the pieces of the last
    one which do not depend on its delivery tag, redelivered flag or body.

    A consumer mostly gets runs of messages with the same exchange, routing key,
    properties and body size; for those, a delivery is one ``pack`` and one join. A
    body that needs more than one frame goes the general way.
    """

    __slots__ = ("_key", "_head", "_tail")

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._head = b""  # Deliver frame up to the delivery tag
        self._tail = b""  # from the exchange to the body frame header

    def encode(
        self,
        channel: int,
        consumer_tag: str | bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange: str | bytes,
        routing_key: str | bytes,
        properties_raw: bytes,
        body: bytes,
        frame_max: int,
    ) -> bytes:
        size = len(body)
        key = (channel, consumer_tag, exchange, routing_key, properties_raw, size)
        if frame_max and size > frame_max - FRAME_OVERHEAD:  # a body of several frames
            return encode_message(
                encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange,
                               routing_key), channel, properties_raw, body, frame_max)
        if key != self._key:
            ct = consumer_tag.encode() if isinstance(consumer_tag, str) else consumer_tag
            ex = exchange.encode() if isinstance(exchange, str) else exchange
            rk = routing_key.encode() if isinstance(routing_key, str) else routing_key
            n_ct, n_ex, n_rk = len(ct), len(ex), len(rk)
            if n_ct > 255 or n_ex > 255 or n_rk > 255:
                raise ValueError(f"short string of {max(n_ct, n_ex, n_rk)} octets exceeds 255")
            self._head = _METHOD_START.pack(
                1, channel, 16 + n_ct + n_ex + n_rk, DELIVER_INDEX, n_ct) + ct
            self._tail = b"".join((
                _SHORT_LENGTHS[n_ex], ex, _SHORT_LENGTHS[n_rk], rk,
                _END_HEADER_START.pack(
                    FRAME_END, 2, channel, 12 + len(properties_raw), BASIC_CLASS, 0, size),
                properties_raw,
                _END_BODY_START.pack(FRAME_END, 3, channel, size) if size else b"",
            ))
            self._key = key
        return b"".join((self._head, _TAG_REDELIVERED.pack(delivery_tag, redelivered),
                         self._tail, body, FRAME_END_BYTE))
