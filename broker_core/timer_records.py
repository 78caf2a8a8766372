"""The bodies of the timer control records and the fire path's record codec
(:mod:`broker_core.timers` documents the records; :mod:`broker_core.record` the layout).

The fire path does not decode a delayed record in full: :func:`fire_fields` checks it
as every reader does and cuts out only what a fire needs, and :func:`fire_record`
encodes the fire record directly (the same bytes as
:func:`broker_core.record.encode_record_with_tail`; a Hypothesis test compares them)."""

from __future__ import annotations

import struct

from crc32c import crc32c

from broker_core.errors import CorruptRecord
from broker_core.record import FLAG_DELAYED, HEADER_SIZE, MAGIC, RecordType, checked_header

FIRE_BODY = struct.Struct(">QIIQ")
CHANGE_BODY = struct.Struct(">QIQQ")
RELOCATE_TAIL = struct.Struct(">QQ")  # after CHANGE_BODY: new position, origin
_U16 = struct.Struct(">H")
_HEAD_REST = struct.Struct(">BBHQQQHHHHII")  # record.HEADER after size, magic and crc
_SIZE_MAGIC_CRC = struct.Struct(">III")

COUNT = struct.Struct(">I")
#: A fire record's bytes but its topic, tag and dispatch list: size, magic, CRC, the
#: rest of the header and the body.
FIRE_FIXED = HEADER_SIZE + FIRE_BODY.size


def fire_fields(raw: bytes, position: int) -> tuple[bytes, bytes, int, list[bytes]]:
    """What a fire needs from the delayed record ``raw`` at ``position``: its topic and
    tag (UTF-8 bytes), body size and the wire forms of its LMQ names (``name_len u16 |
    name``, as :func:`dispatch_name` makes them). The record is checked as every reader
    checks it (:func:`broker_core.record.checked_header`: magic, size, CRC32C over the
    whole record, position), then its field lengths against its size; the properties
    and body are skipped, not decoded. :class:`CorruptRecord` otherwise."""
    (size, _, _, rtype, _, flags, _, _, _, origin_len, topic_len, tag_len, _, props_len,
     body_len) = checked_header(raw, position)
    if rtype != RecordType.MESSAGE or not flags & FLAG_DELAYED:
        raise CorruptRecord(f"the record at {position} is not a delayed message")
    at = HEADER_SIZE + origin_len
    topic = raw[at : at + topic_len]
    at += topic_len
    tag = raw[at : at + tag_len]
    at += tag_len + props_len + body_len
    if at + 4 > size:
        raise CorruptRecord(f"field lengths overrun the record at {position}")
    count = COUNT.unpack_from(raw, at)[0]
    at += 4
    wires: list[bytes] = []
    for _ in range(count):
        if at + 2 > size:
            raise CorruptRecord(f"dispatch list overruns the record at {position}")
        end = at + 2 + _U16.unpack_from(raw, at)[0]
        if end + 8 > size:
            raise CorruptRecord(f"dispatch list overruns the record at {position}")
        wires.append(raw[at:end])
        at = end + 8
    return topic, tag, body_len, wires


def fire_record(
    position: int, now: int, topic: bytes, tag: bytes, body: bytes, tail: bytes
) -> bytes:
    """A fire record, encoded directly: the bytes :func:`encode_record_with_tail` makes
    of ``Message(topic, body, tag=tag)`` as a :attr:`RecordType.TIMER_FIRE` record
    (internal protocol, no flags, origin or properties, born at store time)."""
    payload = b"".join((
        _HEAD_REST.pack(RecordType.TIMER_FIRE, 0, 0, position, now, now, 0, len(topic),
                        len(tag), 0, 0, len(body)),
        topic, tag, body, tail,
    ))
    return _SIZE_MAGIC_CRC.pack(12 + len(payload), MAGIC, crc32c(payload)) + payload
