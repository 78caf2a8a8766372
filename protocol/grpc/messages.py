"""``apache.rocketmq.v2.Message`` <-> RocketMQ message properties (sans-IO).

The gateway stores a message the same way whichever RocketMQ protocol sent it: a
RocketMQ properties map (``TAGS``, ``KEYS``, ``UNIQ_KEY``, user properties...) that the
record format (``gateway.rocketmq.records``) keeps, so a gRPC producer's message reads
like a remoting producer's to every consumer and the other way round. This module is the
gRPC half of that: :func:`decode_message` turns a sent v2 ``Message`` into
:class:`Incoming` (the properties a remoting producer would have sent, as the Java
proxy's ``SendMessageActivity.buildMessageProperty`` builds them), and
:func:`encode_message` turns a stored message (:class:`Delivery`) into the v2 ``Message``
a consumer gets (``GrpcConverter.buildSystemProperties``).

==========================  =============================================================
v2 ``SystemProperties``     RocketMQ property
==========================  =============================================================
``tag``                     ``TAGS``
``keys``                    ``KEYS`` (joined with a space, RocketMQ's ``KEY_SEPARATOR``)
``message_id``              ``UNIQ_KEY`` (the client's id; a message without one, from
                            MQTT or AMQP, shows its offsetMsgId)
``message_group``           ``__SHARDINGKEY`` (FIFO)
``delivery_timestamp``      ``TIMER_DELIVER_MS`` (DELAY)
``message_type``            ``TRAN_MSG=true`` for TRANSACTION; on delivery derived from
                            the properties (TRANSACTION, DELAY, FIFO, NORMAL)
``born_host``               ``BORN_HOST``
``born_timestamp``          the record's born time (also ``BORN_TIMESTAMP``)
``trace_context``           ``TRACE_CONTEXT``
``user_properties``         themselves (names RocketMQ reserves are refused)
==========================  =============================================================

Bodies: a GZIP body is inflated on send (at most the maximum body size; the stored body
is plain, so MQTT and AMQP consumers read it); a delivered body is IDENTITY with an MD5
``body_digest`` (upper-case hex), as RocketMQ's proxy sends it: the clients' CRC32
checks disagree on the format (Python 8 hex digits, Node decimal), their MD5 checks do
not. A producer's CRC32 digest is accepted as hex or decimal. A record a remoting
producer compressed (sysFlag bit 0) is inflated for delivery too; if that fails (LZ4,
ZSTD, damaged) it goes as GZIP, as the proxy sends it.

Validation follows the proxy's (``GrpcValidator``, ``SendMessageActivity``), with its
status codes; every failure is a :class:`~protocol.grpc.StatusError`.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Container, Mapping
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from protocol.grpc.status import Code, StatusError

__all__ = [
    "Delivery",
    "Incoming",
    "body_digest",
    "digest_matches",
    "decode_message",
    "duration_ms",
    "encode_message",
    "inflate",
    "message_type_of",
    "millis",
    "timestamp",
]

TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
DELAY = "DELAY"
TRAN_MSG = "TRAN_MSG"
BORN_HOST = "BORN_HOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
TRACE_CONTEXT = "TRACE_CONTEXT"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
KEY_SEPARATOR = " "

#: The proxy's limits (``ProxyConfig``): user properties per message, their total size
#: (names, values, tag and keys, UTF-8), and a message group's size.
MAX_USER_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64


@dataclass(slots=True)
class Incoming:
    """A sent message as the gateway stores it."""

    topic: str
    body: bytes
    #: RocketMQ properties, as a remoting producer sends them (insertion ordered).
    properties: dict[str, str]
    #: ``definition_pb2.MessageType`` as the client declared it.
    message_type: int
    message_id: str
    #: The client's born time (ms), 0 when it sent none.
    born_ms: int = 0
    message_group: str = ""
    #: ``delivery_timestamp`` (ms) of a DELAY message, else None.
    delivery_ms: int | None = None


@dataclass(slots=True)
class Delivery:
    """What a consumer is given for one stored message."""

    topic: str
    body: bytes
    #: The message's RocketMQ properties (user properties among them).
    properties: Mapping[str, str]
    #: The message id when the properties carry no ``UNIQ_KEY`` (its offsetMsgId).
    fallback_message_id: str
    born_ms: int
    store_ms: int
    queue_id: int
    queue_offset: int
    #: Whether the stored body is compressed (a remoting producer's sysFlag bit 0).
    compressed: bool = False
    born_host: str = ""
    store_host: str = ""
    receipt_handle: str | None = None
    #: 1 on the first delivery (``reconsumeTimes + 1``).
    delivery_attempt: int = 1
    invisible_ms: int | None = None


# -- time ---------------------------------------------------------------------------


def millis(ts: object) -> int:
    """A ``google.protobuf.Timestamp`` in epoch ms (0 for an unset or negative one)."""
    seconds = getattr(ts, "seconds", 0)
    nanos = getattr(ts, "nanos", 0)
    if seconds < 0 or not 0 <= nanos < 1_000_000_000:
        return 0
    return seconds * 1000 + nanos // 1_000_000


def duration_ms(duration: object) -> int:
    """A ``google.protobuf.Duration`` in ms (negative for a negative one)."""
    return getattr(duration, "seconds", 0) * 1000 + getattr(duration, "nanos", 0) // 1_000_000


def timestamp(ms: int) -> Timestamp:
    """Epoch ms as a ``google.protobuf.Timestamp``."""
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# -- bodies -------------------------------------------------------------------------


def inflate(body: bytes, limit: int) -> bytes:
    """``body`` decompressed (gzip or zlib, by its header), at most ``limit`` bytes.
    :class:`ValueError` when it is not compressed data or inflates beyond ``limit``."""
    inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"the body is not gzip or zlib data: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise ValueError(f"the body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise ValueError("the compressed body is truncated")
    return out


def digest_matches(body: bytes, kind: int, checksum: str) -> bool:
    """Whether a producer's ``checksum`` of ``body`` is right. The clients write CRC32
    differently (Python: 8 hex digits; Java: hex without leading zeros; Node: decimal),
    so a CRC32 matches as hex or as decimal; MD5 and SHA1 as hex in either case. A digest
    type this gateway does not know is not checked."""
    if kind == pb.CRC32:
        value = zlib.crc32(body) & 0xFFFFFFFF
        for base in (16, 10):
            try:
                if int(checksum, base) == value:
                    return True
            except ValueError:
                pass
        return False
    try:
        return body_digest(body, kind) == checksum.upper()
    except ValueError:
        return True


def body_digest(body: bytes, kind: int = pb.CRC32) -> str:
    """The digest the clients compare: CRC32 as 8 upper-case hex digits, MD5 and SHA1 as
    upper-case hex."""
    if kind == pb.CRC32:
        return format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    if kind == pb.MD5:
        return hashlib.md5(body).hexdigest().upper()
    if kind == pb.SHA1:
        return hashlib.sha1(body).hexdigest().upper()
    raise ValueError(f"unknown digest type {kind}")


# -- checks -------------------------------------------------------------------------


#: Java's ``CharMatcher.javaIsoControl``: U+0000-U+001F and U+007F-U+009F.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control(text: str) -> bool:
    """Whether ``text`` holds a Java ISO control character (:data:`_CONTROL`; one
    C-level search, not a Python loop over the characters: it runs on every message's
    id and born host)."""
    return _CONTROL.search(text) is not None


def _check_tag(tag: str) -> None:
    if tag:
        if not tag.strip():
            raise StatusError(
                Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
        if "|" in tag:
            raise StatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
        if _has_control(tag):
            raise StatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def _check_key(key: str) -> None:
    if key:
        if not key.strip():
            raise StatusError(
                Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
        if _has_control(key):
            raise StatusError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")


def _check_group(group: str) -> None:
    if not group.strip():
        raise StatusError(
            Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace")
    if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
        raise StatusError(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message group exceed the max size {MAX_MESSAGE_GROUP_BYTES}")
    if _has_control(group):
        raise StatusError(
            Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")


# -- send ---------------------------------------------------------------------------


def decode_message(
    msg: pb.Message, *, reserved: Container[str], max_body: int, peer_host: str = ""
) -> Incoming:
    """The message a producer sent, checked (see the module doc). ``reserved``: the
    property names RocketMQ keeps for itself (a user property may not use them);
    ``max_body``: the largest body, after inflating; ``peer_host``: the producer's
    address, the born host when the message names none."""
    sysp = msg.system_properties
    body = msg.body
    if sysp.HasField("body_digest") and sysp.body_digest.checksum and not digest_matches(
        body, sysp.body_digest.type, sysp.body_digest.checksum
    ):
        raise StatusError(Code.MESSAGE_CORRUPTED, "the body does not match its digest")
    if sysp.body_encoding == pb.GZIP:
        try:
            body = inflate(body, max_body)
        except ValueError as exc:
            code = Code.MESSAGE_BODY_TOO_LARGE if "more than" in str(exc) else \
                Code.MESSAGE_CORRUPTED
            raise StatusError(code, str(exc)) from None
    elif sysp.body_encoding not in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        raise StatusError(
            Code.MESSAGE_CORRUPTED, f"unsupported body encoding {sysp.body_encoding}")
    if len(body) > max_body:
        raise StatusError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_body}")

    users = msg.user_properties
    if len(users) > MAX_USER_PROPERTIES:
        raise StatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {MAX_USER_PROPERTIES}")
    props: dict[str, str] = {}
    size = 0
    for name in sorted(users):
        value = users[name]
        if not name or name in reserved:
            raise StatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {name}")
        if _has_control(name):
            raise StatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the key of property cannot contain control character")
        if _has_control(value):
            raise StatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the value of property cannot contain control character")
        size += len(name.encode()) + len(value.encode())
        props[name] = value
    tag = sysp.tag
    _check_tag(tag)
    size += len(tag.encode())
    keys = list(sysp.keys)
    for key in keys:
        _check_key(key)
        size += len(key.encode())
    if size > MAX_PROPERTIES_BYTES:
        raise StatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_PROPERTIES_BYTES}")
    if tag:
        props[TAGS] = tag
    if keys:
        props[KEYS] = KEY_SEPARATOR.join(keys)
    message_id = sysp.message_id
    if not message_id.strip():
        raise StatusError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if _has_control(message_id):
        raise StatusError(Code.ILLEGAL_MESSAGE_ID, "message id cannot contain control character")
    props[UNIQ_KEY] = message_id
    kind = sysp.message_type
    if kind == pb.TRANSACTION:
        props[TRAN_MSG] = "true"
    delivery_ms = None
    if sysp.HasField("delivery_timestamp"):
        delivery_ms = millis(sysp.delivery_timestamp)
        props[TIMER_DELIVER_MS] = str(delivery_ms)
    group = sysp.message_group
    if group:
        _check_group(group)
        props[SHARDING_KEY] = group
    if sysp.trace_context:
        if _has_control(sysp.trace_context):
            raise StatusError(Code.BAD_REQUEST, "trace context cannot contain control character")
        props[TRACE_CONTEXT] = sysp.trace_context
    born_host = sysp.born_host.strip() or peer_host
    if born_host and not _has_control(born_host):
        props[BORN_HOST] = born_host
    born_ms = millis(sysp.born_timestamp) if sysp.HasField("born_timestamp") else 0
    if born_ms:
        props[BORN_TIMESTAMP] = str(born_ms)
    return Incoming(
        topic=msg.topic.name, body=body, properties=props, message_type=kind,
        message_id=message_id, born_ms=born_ms, message_group=group, delivery_ms=delivery_ms,
    )


def message_type_of(props: Mapping[str, str]) -> int:
    """The v2 message type of a stored message, from its properties (the proxy's
    order: TRANSACTION, DELAY, FIFO, NORMAL)."""
    if props.get(TRAN_MSG, "").lower() == "true":
        return pb.TRANSACTION
    if DELAY in props or TIMER_DELIVER_MS in props or TIMER_DELAY_SEC in props:
        return pb.DELAY
    if SHARDING_KEY in props:
        return pb.FIFO
    return pb.NORMAL


# -- delivery -----------------------------------------------------------------------


def encode_message(
    d: Delivery, *, reserved: Container[str], max_body: int, into: pb.Message | None = None
) -> pb.Message:
    """The v2 ``Message`` a consumer gets for ``d`` (see the module doc); written into
    ``into`` (an empty message, e.g. a response's ``message`` field, so that the
    response need not copy it) and returned when given."""
    props = d.properties
    body, encoding = d.body, pb.IDENTITY
    if d.compressed:
        try:
            body = inflate(d.body, max_body)
        except ValueError:
            encoding = pb.GZIP  # as stored; the client inflates what it can
    # Built in place, field by field: a sub-message given to a constructor is copied
    # into it, which cost more than the fields themselves (one Message per delivery).
    users = {k: v for k, v in props.items() if k not in reserved}
    if into is None:
        msg = pb.Message(body=body, user_properties=users)
    else:
        msg = into
        msg.body = body
        msg.user_properties.update(users)
    msg.topic.name = d.topic
    sysp = msg.system_properties
    sysp.message_id = props.get(UNIQ_KEY) or d.fallback_message_id
    # MD5, as RocketMQ's proxy sends it: every client checks it the same way (their
    # CRC32 checks disagree on the format)
    digest = sysp.body_digest
    digest.type = pb.MD5
    digest.checksum = body_digest(body, pb.MD5)
    sysp.body_encoding = encoding
    sysp.message_type = message_type_of(props)
    born_ms = d.born_ms or d.store_ms
    born = sysp.born_timestamp
    born.seconds, born.nanos = born_ms // 1000, (born_ms % 1000) * 1_000_000
    sysp.born_host = props.get(BORN_HOST) or d.born_host
    stored = sysp.store_timestamp
    stored.seconds, stored.nanos = d.store_ms // 1000, (d.store_ms % 1000) * 1_000_000
    sysp.store_host = d.store_host
    sysp.queue_id = d.queue_id
    sysp.queue_offset = d.queue_offset
    sysp.delivery_attempt = max(1, d.delivery_attempt)
    tag = props.get(TAGS)
    if tag is not None:
        sysp.tag = tag
    keys = props.get(KEYS)
    if keys:
        sysp.keys.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    group = props.get(SHARDING_KEY)
    if group is not None:
        sysp.message_group = group
    deliver = props.get(TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        sysp.delivery_timestamp.CopyFrom(timestamp(int(deliver)))
    trace = props.get(TRACE_CONTEXT)
    if trace is not None:
        sysp.trace_context = trace
    if d.receipt_handle is not None:
        sysp.receipt_handle = d.receipt_handle
    if d.invisible_ms is not None:
        sysp.invisible_duration.seconds = d.invisible_ms // 1000
        sysp.invisible_duration.nanos = (d.invisible_ms % 1000) * 1_000_000
    origin_topic = props.get(DLQ_ORIGIN_TOPIC)
    origin_id = props.get(DLQ_ORIGIN_MESSAGE_ID)
    if origin_topic is not None and origin_id is not None:
        sysp.dead_letter_queue.topic = origin_topic
        sysp.dead_letter_queue.message_id = origin_id
    return msg
