"""The commit-log record: the one byte layout every other part of the store derives from.

A record is self-describing. Recovery, ``lmq store verify``, the index rebuild and the
Spark reader all walk the log with :func:`decode_record` and nothing else. All integers
are big-endian; strings are UTF-8 with a length prefix and no terminator.

::

    0        4        8        12   13   14       16
    +--------+--------+--------+----+----+--------+
    | size   | magic  | crc32c |type|prot| flags  |        fixed header, 56 bytes
    +--------+--------+--------+----+----+--------+
    | position (u64)  | store_ms (u64)  | born_ms (u64)  |
    +-----------------+-----------------+----------------+
    | origin_len u16 | topic_len u16 | tag_len u16 | pad u16 |
    +----------------+---------------+-------------+---------+
    | props_len u32  | body_len u32  |
    +----------------+---------------+
    | origin | topic | tag | properties | body | dispatch list            variable part
    +--------+-------+-----+------------+------+---------------+
    dispatch list: count u32, then count x ( name_len u16 | name | lmq_offset u64 )
    properties:    repeated ( key_len u16 | key | value_len u32 | value bytes )

- ``size`` counts the whole record, the size field included.
- ``magic`` is ``0x4C4D5131`` ("LMQ1"); a different value means this is not a record
  (for example zeroes past the end of a preallocated or torn file).
- ``crc32c`` covers every byte after itself, ``[12, size)``.
- ``type``: 1 = message, 2 = LMQ removal (a control record written by cleanup so that a
  replay of the log removes the same LMQs at the same point; its dispatch list names the
  removed LMQs with the next offset they had).
  5 = transaction half message, 6 = transaction control record (commit, rollback, check,
  dead letter): :mod:`broker_core.transactions` defines their contents.
  7 = origin advance: raises the high-water mark of a copy origin (topic = the topic,
  body = the origin value, no dispatch list; :mod:`broker_core.origins`).
- ``prot``: the protocol that produced the message (0 internal, 1 MQTT, 2 AMQP).
- ``flags``: bits 0-1 QoS, bit 2 retain, bit 3 (0x08) delayed.
- Types 3 and 4 and the delayed flag are the durable timers (:mod:`broker_core.timers`,
  which documents their bodies): a *delayed* message (type 1, flag 0x08) is written once
  and not dispatched, its dispatch list naming the LMQs it will go to, each with its due
  time (epoch ms) where an offset would be; 3 = timer fire (dispatches the delayed
  record's position into those LMQs), 4 = timer change (cancel or reschedule).
- ``position`` is the record's own byte position in the log. A record copied to the wrong
  place (or a stale page) fails this check even if its CRC is intact.
- The dispatch list is the heart of atomic multi-dispatch: the (LMQ name, offset) pairs
  assigned in the same critical section as the append. Replaying it reproduces the
  consume-queue index exactly, so the index is derived data.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from crc32c import crc32c

from broker_core.errors import CorruptRecord, InsufficientData

MAGIC = 0x4C4D5131
HEADER = struct.Struct(">IIIBBHQQQHHHHII")
HEADER_SIZE = HEADER.size  # 56
_SIZE_MAGIC = struct.Struct(">II")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TARGET = struct.Struct(">Q")
_PROP_KEY = struct.Struct(">H")
_PROP_VAL = struct.Struct(">I")

MAX_STRING = 0xFFFF
#: A record can never be larger than this, whatever the configuration: it bounds what a
#: reader allocates for a corrupt size field.
MAX_RECORD_SIZE = 1 << 30

FLAG_QOS_MASK = 0x3
FLAG_RETAIN = 0x4


FLAG_DELAYED = 0x8


class RecordType(enum.IntEnum):
    MESSAGE = 1
    LMQ_REMOVAL = 2
    #: A due timer's dispatch (broker_core.timers).
    TIMER_FIRE = 3
    #: A timer cancelled or rescheduled (broker_core.timers).
    TIMER_CHANGE = 4
    #: A half message: stored, not dispatched (broker_core.transactions).
    TXN_HALF = 5
    #: The end, a check or the dead-lettering of a half message (broker_core.transactions).
    TXN_CONTROL = 6
    #: Raises a copy origin's high-water mark without a message (broker_core.origins).
    ORIGIN_ADVANCE = 7


class Protocol(enum.IntEnum):
    INTERNAL = 0
    MQTT = 1
    AMQP = 2


# enum lookups by value without EnumType.__call__ (measurable per decoded record)
_RECORD_TYPES = {int(t): t for t in RecordType}
_PROTOCOLS = {int(p): p for p in Protocol}


@dataclass(slots=True, eq=True)
class Message:
    """What a front end hands to the store. ``born_ms`` 0 means "the store time".

    Treat it as immutable once handed over. (It is not ``frozen``: a frozen dataclass
    costs about a microsecond more to build, and one is built per publish.)
    """

    topic: str
    body: bytes
    properties: Mapping[str, bytes] | None = None
    origin: str = ""
    tag: str = ""
    qos: int = 0
    retain: bool = False
    protocol: Protocol = Protocol.INTERNAL
    born_ms: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.qos <= 2:
            raise ValueError(f"qos must be 0, 1 or 2, not {self.qos}")


@dataclass(slots=True, eq=True)
class Record:
    """A decoded record, as read back from the log.

    Treat it as immutable. (It is not ``frozen``: a frozen dataclass of this many fields
    costs about 2 us more to build, and one is built per message read or appended to a
    listened LMQ.)
    """

    position: int
    size: int
    type: RecordType
    protocol: Protocol
    qos: int
    retain: bool
    store_ms: int
    born_ms: int
    origin: str
    topic: str
    tag: str
    properties: dict[str, bytes]
    body: bytes
    dispatch: tuple[tuple[str, int], ...]
    #: A delayed message (flag 0x08): not dispatched when written; ``dispatch`` names
    #: the LMQs it goes to when due, each with the due time (ms) in place of an offset.
    delayed: bool = False

    @property
    def next_position(self) -> int:
        return self.position + self.size

    @classmethod
    def of_message(
        cls,
        message: Message,
        *,
        position: int = 0,
        size: int = 0,
        store_ms: int,
        dispatch: tuple[tuple[str, int], ...] = (),
    ) -> Record:
        """The record ``message`` is (or would be) stored as, built from its fields
        rather than decoded: for a reader served from memory, or a message that never
        reaches the log (e.g. dead-lettered at publish)."""
        return record_of_message(message, position, size, store_ms, dispatch)


def record_of_message(
    message: Message,
    position: int,
    size: int,
    store_ms: int,
    dispatch: tuple[tuple[str, int], ...],
) -> Record:
    """:meth:`Record.of_message` with positional arguments, for the store's hot tail
    (one per message appended to a listened LMQ): keywords cost a third more."""
    protocol = message.protocol
    props = message.properties
    body = message.body
    return Record(
        position,
        size,
        RecordType.MESSAGE,
        protocol
        if type(protocol) is Protocol
        else _PROTOCOLS.get(int(protocol), Protocol.INTERNAL),
        message.qos,
        message.retain,
        store_ms,
        message.born_ms or store_ms,
        message.origin,
        message.topic,
        message.tag,
        dict(props) if props else {},
        body if type(body) is bytes else bytes(body),
        dispatch,
    )


_HEAD_REST = struct.Struct(">BBHQQQHHHHII")  # the header after size, magic and crc
_HEADER_UNPACK = HEADER.unpack_from
_SIZE_MAGIC_UNPACK = _SIZE_MAGIC.unpack_from
_U16_UNPACK = _U16.unpack_from
_U32_UNPACK = _U32.unpack_from
_U64_UNPACK = _U64.unpack_from
_COUNT_NLEN_UNPACK = struct.Struct(">IH").unpack_from  # a dispatch count and 1st name length
_SIZE_MAGIC_CRC = struct.Struct(">III")


def _utf8(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING:
        raise ValueError(f"{what} is {len(raw)} bytes; at most {MAX_STRING} fit in a record")
    return raw


# Encoded property names (length prefix + UTF-8): front ends use a handful of names.
_PROP_KEYS: dict[str, bytes] = {}
_PROP_KEYS_MAX = 4096


def encode_properties(properties: Mapping[str, bytes]) -> bytes:
    parts: list[bytes] = []
    keys = _PROP_KEYS
    pack_len = _PROP_VAL.pack
    for key, value in properties.items():
        head = keys.get(key)
        if head is None:
            raw_key = _utf8(key, "property name")
            head = _PROP_KEY.pack(len(raw_key)) + raw_key
            if len(keys) < _PROP_KEYS_MAX:
                keys[key] = head
        parts.append(head)
        parts.append(pack_len(len(value)))
        parts.append(value if type(value) is bytes else bytes(value))
    return b"".join(parts)


def dispatch_name(raw_name: bytes) -> bytes:
    """The wire form of one LMQ name in a dispatch list (length prefix + UTF-8), which a
    writer can cache per LMQ and pass to :func:`encode_dispatch_wire`."""
    return _U16.pack(len(raw_name)) + raw_name


def encode_dispatch_wire(wire_names: Sequence[bytes], offsets: Sequence[int]) -> bytes:
    """Encode a dispatch list from cached :func:`dispatch_name` forms."""
    if len(wire_names) == 1:
        return _U32.pack(1) + wire_names[0] + _TARGET.pack(offsets[0])
    parts = [_U32.pack(len(wire_names))]
    pack = _TARGET.pack
    for wire, offset in zip(wire_names, offsets, strict=True):
        parts.append(wire)
        parts.append(pack(offset))
    return b"".join(parts)


def encode_dispatch(targets: Sequence[tuple[bytes, int]]) -> bytes:
    """Encode a dispatch list whose names are already UTF-8 bytes."""
    return (
        encode_dispatch_wire([dispatch_name(n) for n, _ in targets], [o for _, o in targets])
        if targets
        else _U32.pack(0)
    )


def encode_record(
    *,
    position: int,
    store_ms: int,
    message: Message,
    dispatch: Sequence[tuple[bytes, int]],
    record_type: RecordType = RecordType.MESSAGE,
) -> bytes:
    """Return the bytes of one record; the caller decides where it goes (``position``)."""
    return encode_record_with_tail(
        position, store_ms, message, encode_dispatch(dispatch), record_type
    )


def encode_record_with_tail(
    position: int,
    store_ms: int,
    message: Message,
    tail: bytes,
    record_type: int = RecordType.MESSAGE,
    flags: int = 0,
) -> bytes:
    """The hot path of :func:`encode_record`, with the dispatch list already encoded;
    ``flags`` are added to the message's QoS and retain bits (:data:`FLAG_DELAYED`)."""
    origin = message.origin.encode() if message.origin else b""
    topic = message.topic.encode()
    tag = message.tag.encode() if message.tag else b""
    props = encode_properties(message.properties) if message.properties else b""
    body = message.body
    try:
        rest = _HEAD_REST.pack(
            record_type,
            message.protocol,
            message.qos | (FLAG_RETAIN if message.retain else 0) | flags,
            position,
            store_ms,
            message.born_ms or store_ms,
            len(origin),
            len(topic),
            len(tag),
            0,
            len(props),
            len(body),
        )
    except struct.error:
        for what, raw in (("origin", origin), ("topic", topic), ("tag", tag)):
            _utf8(raw.decode(), what)
        raise
    payload = b"".join((rest, origin, topic, tag, props, body, tail))
    size = 12 + len(payload)
    if size > MAX_RECORD_SIZE:
        raise ValueError(f"record of {size} bytes exceeds the hard limit {MAX_RECORD_SIZE}")
    return _SIZE_MAGIC_CRC.pack(size, MAGIC, crc32c(payload)) + payload


def peek_size(view: memoryview | bytes) -> int:
    """The size a record at the start of ``view`` claims, after checking its magic."""
    if len(view) < 8:
        raise InsufficientData(8 - len(view))
    size, magic = _SIZE_MAGIC.unpack_from(view, 0)
    if magic != MAGIC:
        raise CorruptRecord(f"bad magic 0x{magic:08x}")
    if size < HEADER_SIZE + 4 or size > MAX_RECORD_SIZE:
        raise CorruptRecord(f"impossible record size {size}")
    return size


_MIN_SIZE = HEADER_SIZE + 4  # a header and an empty dispatch list
#: The 15 fields of :data:`HEADER` (Any: the callers give them their types as they go).
_Header = tuple[Any, ...]


def _checked_header(data: bytes, expected_position: int | None) -> _Header:
    """The header fields of the record that is exactly ``data``, once the checks that
    make a record valid have passed; :class:`CorruptRecord` otherwise. This is where
    "valid" is defined, for every reader (:func:`decode_record`, :func:`decode_plain`):

    - at least a header and an empty dispatch count, and the magic;
    - ``size`` equal to the bytes given (a caller with a longer buffer cuts the record
      first, after :func:`peek_size`; a shorter one is :class:`InsufficientData`
      there, not here);
    - the CRC32C over ``[12, size)``;
    - the stored position equal to ``expected_position`` (unless that is None).

    What it does not check is left to the reader that needs it: field lengths against
    the size (both readers), the record type and protocol, UTF-8 and the dispatch list
    (:func:`decode_record` only; the serving path of :func:`decode_plain` passes the
    topic on as bytes and does not use the dispatch list, and the CRC covers both).
    """
    have = len(data)
    if have < _MIN_SIZE:
        raise CorruptRecord(f"record of {have} bytes at {expected_position} is too short")
    header: _Header = _HEADER_UNPACK(data, 0)
    size, magic, crc, _, _, _, position, _, _, _, _, _, _, _, _ = header
    # one test per pair on the valid path; the error says which part failed
    if magic != MAGIC or size != have:
        if magic != MAGIC:
            raise CorruptRecord(f"bad magic 0x{magic:08x}")
        raise CorruptRecord(f"record at {expected_position} claims {size} bytes, not {have}")
    if crc32c(data[12:]) != crc or (
        position != expected_position and expected_position is not None
    ):
        if crc32c(data[12:]) != crc:
            raise CorruptRecord(f"CRC mismatch in record at {position}")
        raise CorruptRecord(f"record claims position {position}, found at {expected_position}")
    return header


#: The checks every reader makes (a timer fire reads only a few fields: broker_core.timers).
checked_header = _checked_header


def decode_record(view: memoryview | bytes, expected_position: int | None = None) -> Record:
    """Decode the record at the start of ``view``.

    Raises :class:`InsufficientData` when ``view`` holds only part of a record that looks
    valid so far (a torn tail or a reader ahead of the writer) and :class:`CorruptRecord`
    when the bytes cannot be a record: bad magic, bad size, CRC mismatch, inconsistent
    lengths, or a position other than ``expected_position``.

    The fields are cut from a ``bytes`` object holding exactly the record (the input
    itself when it is one, the common case of a pull; else a copy of the record's
    bytes): slicing and decoding ``bytes`` costs about a quarter less per record than
    the same on a ``memoryview``, and the body is a copy either way.
    """
    have = len(view)
    # peek_size, inlined (one call less per record read)
    if have < 8:
        raise InsufficientData(8 - have)
    size, magic = _SIZE_MAGIC_UNPACK(view, 0)
    if magic != MAGIC:
        raise CorruptRecord(f"bad magic 0x{magic:08x}")
    if size < HEADER_SIZE + 4 or size > MAX_RECORD_SIZE:
        raise CorruptRecord(f"impossible record size {size}")
    if have < size:
        raise InsufficientData(size - have)
    data = view if have == size and type(view) is bytes else bytes(memoryview(view)[:size])
    (
        _,
        _,
        _,
        rtype,
        proto,
        flags,
        position,
        store_ms,
        born_ms,
        origin_len,
        topic_len,
        tag_len,
        _pad,
        props_len,
        body_len,
    ) = _checked_header(data, expected_position)
    rtype = _RECORD_TYPES.get(rtype)
    proto = _PROTOCOLS.get(proto)
    if rtype is None or proto is None:
        raise CorruptRecord(f"unknown record type or protocol in record at {position}")
    pos = HEADER_SIZE
    end_fixed = pos + origin_len + topic_len + tag_len + props_len + body_len + 4
    if end_fixed > size:
        raise CorruptRecord(f"field lengths overrun the record at {position}")
    # Empty origin, tag and properties (the common case) cost no slice and no decode.
    dispatch: tuple[tuple[str, int], ...]
    try:
        if origin_len:
            origin = data[pos : pos + origin_len].decode()
            pos += origin_len
        else:
            origin = ""
        topic = data[pos : pos + topic_len].decode()
        pos += topic_len
        if tag_len:
            tag = data[pos : pos + tag_len].decode()
            pos += tag_len
        else:
            tag = ""
        if props_len:
            properties = decode_properties(memoryview(data)[pos : pos + props_len])
            pos += props_len
        else:
            properties = {}
        body = data[pos : pos + body_len]
        pos += body_len
        # the dispatch list; one LMQ (the common case) inline, else decode_dispatch
        # (an empty list, count 0, is 4 bytes: too short for the pair)
        count, nlen = _COUNT_NLEN_UNPACK(data, pos) if pos + 6 <= size else (0, 0)
        if count == 1:
            at = pos + 6
            if at + nlen + 8 > size:
                raise CorruptRecord("dispatch entry overruns the record")
            dispatch = ((data[at : at + nlen].decode(), _U64_UNPACK(data, at + nlen)[0]),)
            used = 14 + nlen
        else:
            dispatch, used = decode_dispatch(memoryview(data)[pos:])
    except (UnicodeDecodeError, struct.error) as exc:
        raise CorruptRecord(f"undecodable field in record at {position}: {exc}") from None
    if pos + used != size:
        raise CorruptRecord(f"trailing bytes in record at {position}")
    return Record(
        position,
        size,
        rtype,
        proto,
        flags & FLAG_QOS_MASK,
        bool(flags & FLAG_RETAIN),
        store_ms,
        born_ms,
        origin,
        topic,
        tag,
        properties,
        body,
        dispatch,
        bool(flags & FLAG_DELAYED),
    )


_MAGIC_BYTES = MAGIC.to_bytes(4, "big")


def find_record(
    data: bytes | mmap.mmap,
    base: int,
    start: int,
    stop: int,
    end: int,
    view: memoryview | None = None,
) -> int | None:
    """Resynchronise after damage: the offset in ``data`` of the first valid record (one
    that :func:`decode_record` accepts, its stored position ``base`` + offset) that
    starts in ``[start, stop)`` and ends by ``end``; None if there is none.

    ``data`` holds log bytes from the log position ``base`` (bytes, or an mmap of a
    segment: searched with ``find``, never copied whole); ``view`` is a memoryview of it
    if the caller has one. The one resync of the commit log's recovery scan and of the
    Spark reader.
    """
    if view is None:
        view = memoryview(data)
    i = start + 4
    magic_end = min(stop + 4, end)
    while True:
        j = data.find(_MAGIC_BYTES, i, magic_end)
        if j < 0:
            return None
        candidate = j - 4
        try:
            decode_record(view[candidate:end], expected_position=base + candidate)
        except (InsufficientData, CorruptRecord):
            i = j + 1
            continue
        return candidate


class PlainMessage(NamedTuple):
    """What a subscriber needs of a *plain* message record: a message (type 1) of the
    internal or MQTT protocol with no tag and no properties, the common MQTT case. The
    topic and origin stay UTF-8 bytes (what an MQTT PUBLISH carries). Built by
    :func:`decode_plain`; ``offset`` is the message's offset in the LMQ it was read from.
    A NamedTuple: one is built per message read (a Record costs more to build)."""

    offset: int
    protocol: int
    qos: int
    retain: bool
    origin: bytes
    topic: bytes
    body: bytes


_new_tuple = tuple.__new__


def decode_plain(data: bytes, expected_position: int, offset: int) -> PlainMessage | None:
    """:func:`decode_record` for a subscriber's read of a plain message (see
    :class:`PlainMessage`), or None if the record is not one (the caller decodes it in
    full). ``data`` is exactly the record's bytes (as the index gives its size).

    The same checks protect it: magic, size, CRC32C over ``[12, size)``, the stored
    position, and field lengths within the record (:class:`CorruptRecord` otherwise).
    Not done, for speed: decoding the topic and origin (written from ``str``, and the
    CRC covers them) and walking the dispatch list, which a subscriber does not use.
    """
    (
        size,
        _,
        _,
        rtype,
        proto,
        flags,
        position,
        _store_ms,
        _born_ms,
        origin_len,
        topic_len,
        tag_len,
        _pad,
        props_len,
        body_len,
    ) = _checked_header(data, expected_position)
    if rtype != 1 or proto > 1 or props_len or tag_len:
        return None  # not plain (or an unknown type / protocol: decode_record says which)
    topic = HEADER_SIZE + origin_len
    body = topic + topic_len
    end = body + body_len
    if end + 4 > size:
        raise CorruptRecord(f"field lengths overrun the record at {position}")
    return _new_tuple(  # PlainMessage(...) without the NamedTuple's Python __new__
        PlainMessage,
        (
            offset,
            proto,
            flags & FLAG_QOS_MASK,
            bool(flags & FLAG_RETAIN),
            data[HEADER_SIZE:topic],
            data[topic:body],
            data[body:end],
        ),
    )


class RawMessage(NamedTuple):
    """A message record checked but not decoded: its fields as the bytes they are stored
    as, for a reader that re-encodes them into another protocol's layout (RocketMQ's
    stored-message layout) without building a :class:`Record`. Built by
    :func:`decode_raw`; ``offset`` is the message's offset in the LMQ it was read from.
    ``properties`` is the encoded properties block (:func:`raw_properties` reads it)."""

    offset: int
    position: int
    protocol: int
    store_ms: int
    born_ms: int
    topic: bytes
    tag: bytes
    properties: bytes
    body: bytes


def decode_raw(data: bytes, expected_position: int, offset: int) -> RawMessage | None:
    """:func:`decode_record` cut short for a re-encoding reader: the record that is
    exactly ``data`` as a :class:`RawMessage`, or None if it is not a message of a known
    protocol (the caller decodes it in full, which says what is wrong).

    The checks of every read protect it (magic, size, CRC32C over ``[12, size)``, the
    stored position; :class:`CorruptRecord` otherwise) and the field lengths must fit
    the record. Not done: UTF-8 decoding of the strings (written from ``str``, covered
    by the CRC) and the dispatch list, which such a reader does not use."""
    (
        size,
        _,
        _,
        rtype,
        proto,
        _flags,
        position,
        store_ms,
        born_ms,
        origin_len,
        topic_len,
        tag_len,
        _pad,
        props_len,
        body_len,
    ) = _checked_header(data, expected_position)
    if rtype != 1 or proto > 2:
        return None
    topic = HEADER_SIZE + origin_len
    tag = topic + topic_len
    props = tag + tag_len
    body = props + props_len
    end = body + body_len
    if end + 4 > size:
        raise CorruptRecord(f"field lengths overrun the record at {position}")
    return _new_tuple(
        RawMessage,
        (
            offset,
            position,
            proto,
            store_ms,
            born_ms,
            data[topic:tag],
            data[tag:props] if tag_len else b"",
            data[props:body] if props_len else b"",
            data[body:end],
        ),
    )


def raw_properties(block: bytes) -> dict[bytes, bytes]:
    """The properties of an encoded properties block (a :class:`RawMessage`'s), names
    and values left as bytes (:func:`decode_properties` decodes the names)."""
    props: dict[bytes, bytes] = {}
    pos, end = 0, len(block)
    try:
        while pos < end:
            klen = (block[pos] << 8) | block[pos + 1]
            at = pos + 2 + klen
            key = block[pos + 2 : at]
            (vlen,) = _U32_UNPACK(block, at)
            pos = at + 4 + vlen
            if pos > end:
                raise CorruptRecord("property value overruns the properties block")
            props[key] = block[at + 4 : pos]
    except (IndexError, struct.error):
        raise CorruptRecord("property name overruns the properties block") from None
    return props


def decode_properties(view: memoryview) -> dict[str, bytes]:
    props: dict[str, bytes] = {}
    pos, end = 0, len(view)
    while pos < end:
        (klen,) = _PROP_KEY.unpack_from(view, pos)
        pos += 2
        if pos + klen > end:
            raise CorruptRecord("property name overruns the properties block")
        key = str(view[pos : pos + klen], "utf-8")
        pos += klen
        (vlen,) = _PROP_VAL.unpack_from(view, pos)
        pos += 4
        if pos + vlen > end:
            raise CorruptRecord("property value overruns the properties block")
        props[key] = bytes(view[pos : pos + vlen])
        pos += vlen
    return props


def decode_dispatch(view: memoryview) -> tuple[tuple[tuple[str, int], ...], int]:
    (count,) = _U32.unpack_from(view, 0)
    pos, end = 4, len(view)
    if count > end:  # every entry takes at least 10 bytes; this only bounds the loop
        raise CorruptRecord(f"dispatch count {count} overruns the record")
    out = []
    for _ in range(count):
        (nlen,) = _U16.unpack_from(view, pos)
        pos += 2
        if pos + nlen + 8 > end:
            raise CorruptRecord("dispatch entry overruns the record")
        name = str(view[pos : pos + nlen], "utf-8")
        pos += nlen
        (offset,) = _TARGET.unpack_from(view, pos)
        pos += 8
        out.append((name, offset))
    return tuple(out), pos


def iter_records(
    view: memoryview | bytes, base_position: int
) -> Iterator[tuple[Record | None, int, Exception | None]]:
    """Walk the records of one segment's bytes.

    Yields ``(record, position, None)`` for each valid record and, if the walk stops
    before the end of ``view``, one final ``(None, position, error)`` naming where and
    why (a torn tail gives :class:`InsufficientData`, damage :class:`CorruptRecord`).
    """
    view = memoryview(view)
    pos = 0
    end = len(view)
    while pos < end:
        try:
            record = decode_record(view[pos:], expected_position=base_position + pos)
        except (InsufficientData, CorruptRecord) as exc:
            yield None, base_position + pos, exc
            return
        yield record, base_position + pos, None
        pos += record.size
