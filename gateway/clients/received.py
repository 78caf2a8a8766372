"""Pulled and popped messages as the client hands them out: :class:`ReceivedMessage`,
and :func:`decode_messages`, which reads a PULL or POP body (RocketMQ's stored-message
layout, see :mod:`protocol.remoting.messages`) straight into them.

:func:`protocol.remoting.messages.decode_stored` is the codec's definition of the
layout; :func:`decode_messages` reads the same records in one pass over the body
(fixed fields with one ``struct`` call each, no reader object, no intermediate
``StoredMessage``), several times faster per message. Anything it does not expect
(a length that does not fit, an unknown magic, bad UTF-8, a compressed body it
cannot inflate) sends the whole body to ``decode_stored``, which raises the codec's
:class:`~protocol.remoting.errors.MessageError` naming the record. A test checks that
both give the same messages, and the same errors, for any body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.remoting import SysFlag
from protocol.remoting import messages as wire


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A pulled or popped message (RocketMQ's ``MessageExt`` as a client sees it).

    ``msg_id`` is the UNIQ_KEY the producer set, or the store's ``offset_msg_id`` when
    there is none (as the Java client's ``getMsgId``); the body is inflated if it was
    sent compressed.
    """

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    offset_msg_id: str
    reconsume_times: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    sys_flag: int = 0
    flag: int = 0

    @property
    def msg_id(self) -> str:
        return self.properties.get("UNIQ_KEY") or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        """The keys, space-separated as KEYS carries them."""
        return self.properties.get("KEYS")

    @classmethod
    def from_stored(cls, m: wire.StoredMessage) -> ReceivedMessage:
        return cls(
            topic=m.topic,
            body=m.body,
            properties=m.properties,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            commit_log_offset=m.commit_log_offset,
            offset_msg_id=m.msg_id,
            reconsume_times=m.reconsume_times,
            born_timestamp=m.born_timestamp,
            store_timestamp=m.store_timestamp,
            sys_flag=m.sys_flag,
            flag=m.flag,
        )


# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
# BORNTIMESTAMP: 48 bytes
_HEAD = struct.Struct(">iiiiiqqiq")
_head_unpack = _HEAD.unpack_from
_i64_unpack = struct.Struct(">q").unpack_from
_i16_unpack = struct.Struct(">h").unpack_from
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED_TX_OFFSET, BODYLEN
_tail_unpack = _TAIL.unpack_from
_BORN_V6 = int(SysFlag.BORNHOST_V6)
_STORE_V6 = int(SysFlag.STOREHOST_V6)
_COMPRESSED = int(SysFlag.COMPRESSED)
_MAGIC_V1 = wire.MAGIC_V1
_MAGIC_V2 = wire.MAGIC_V2
_MAPPED = bytes(10) + b"\xff\xff"  # an IPv4-mapped IPv6 address starts so


class _Fallback(Exception):
    """Something :func:`decode_messages` leaves to the codec to report."""


def decode_messages(body: bytes) -> list[ReceivedMessage]:
    """The messages of a PULL or POP response body (see the module doc)."""
    if not body:
        return []
    try:
        return _decode(body)
    except (_Fallback, struct.error, IndexError, UnicodeDecodeError, wire.MessageError):
        return [ReceivedMessage.from_stored(m) for m in wire.decode_stored(body)]


def _decode(body: bytes) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    append = out.append
    end = len(body)
    pos = 0
    decode_properties = wire.decode_properties
    while pos < end:
        (size, magic, _crc, queue_id, flag, queue_offset, position, sys_flag,
         born_ms) = _head_unpack(body, pos)
        stop = pos + size
        if size <= 0 or stop > end or (magic != _MAGIC_V1 and magic != _MAGIC_V2):
            raise _Fallback
        at = pos + 48 + (20 if sys_flag & _BORN_V6 else 8)
        (store_ms,) = _i64_unpack(body, at)
        at += 8
        if sys_flag & _STORE_V6:
            store = body[at : at + 20]
            at += 20
            if store[:12] == _MAPPED:  # the message id packs it as IPv4
                store = store[12:]
        else:
            store = body[at : at + 8]
            at += 8
        reconsume, _prepared, body_len = _tail_unpack(body, at)
        at += 16
        if body_len < 0:
            raise _Fallback
        payload = body[at : at + body_len]
        at += body_len
        if magic == _MAGIC_V1:
            topic_len = body[at]
            at += 1
            if topic_len > 127:  # an i8: negative
                raise _Fallback
        else:
            (topic_len,) = _i16_unpack(body, at)
            at += 2
            if topic_len < 0:
                raise _Fallback
        topic = body[at : at + topic_len].decode()
        at += topic_len
        (props_len,) = _i16_unpack(body, at)
        at += 2
        if props_len < 0 or at + props_len != stop or len(payload) != body_len:
            raise _Fallback
        properties = decode_properties(body[at:stop].decode())
        if sys_flag & _COMPRESSED:
            payload = wire.decompress_body(payload, sys_flag)
            sys_flag &= ~_COMPRESSED
        append(ReceivedMessage(  # positional: the fields in their declared order
            topic, payload, properties, queue_id, queue_offset, position,
            (store + body[pos + 28 : pos + 36]).hex().upper(), reconsume, born_ms, store_ms,
            sys_flag, flag))
        pos = stop
    return out
