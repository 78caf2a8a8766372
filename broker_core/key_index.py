"""The key index: (topic, key) -> log position, for messages whose properties name keys.

Which properties hold keys is :attr:`StoreConfig.key_index_properties` (a RocketMQ
gateway sets ``KEYS`` and ``UNIQ_KEY``); a property's value is split on spaces into
keys, as RocketMQ's ``KEYS`` is. The store knows nothing else of them. A message is
indexed under its topic's first level (the topic up to the first ``/``), so a lookup
under ``orders`` finds the keys of messages on ``orders`` and on ``orders/eu/42``.

Layout, in the index RocksDB beside the consume queues (:mod:`broker_core.consume_queue`
owns the other prefixes; integers big-endian)::

    key      b"K" | topic_len u16 | topic | key_len u16 | key | position u64 -> store_ms u64
    by-pos   b"k" | position u64  ->  the suffixes after b"K" of that record's key keys,
                                      each as len u16 | suffix

- Keys of one (topic, key) are one contiguous range sorted by position, so a lookup is
  one seek and a scan of that key's own entries, newest first.
- The by-position keys exist so retention can find the key entries of the records it
  removed without a scan of every key: they sort by position, and the trim walks them
  from the old log start to the new one.

Atomicity: the dispatcher puts a record's key entries into the same WriteBatch as its
consume-queue entries and the "dispatched up to" checkpoint, so after a crash a record is
either indexed everywhere or nowhere, and recovery's replay of the log after the
checkpoint (:mod:`broker_core.recovery`) puts the missing ones exactly as the live append
would (puts of the same keys and values: idempotent). An index rebuild rebuilds them
from the log.

Cost: a message with no properties costs one truthiness test of its properties; one with
properties but none of the named ones one C-level set test (the dispatcher checks
:attr:`KeyIndex.names` before calling :meth:`KeyIndex.put`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from rocksdict import ReadOptions

from broker_core import rocks
from broker_core.consume_queue import ConsumeQueueIndex

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_pack_u16 = _U16.pack
_pack_u64 = _U64.pack
_KEY_PREFIX = b"K"
_POS_PREFIX = b"k"
#: Longest indexed topic level or key in UTF-8 bytes; longer ones are not indexed.
MAX_PART = 0xFFFF

_TRIM_CHUNK = 4096
#: Topics whose key prefix is remembered (cleared when full).
_HEADS_MAX = 4096

#: ``put(key, value)`` of an index WriteBatch.
Putter = Callable[[bytes, bytes], None]


def index_topic(topic: str) -> str:
    """The topic a message is indexed under: its first ``/`` level."""
    return topic.partition("/")[0]


def _lookup_prefix(topic: bytes, key: bytes) -> bytes:
    return _KEY_PREFIX + _U16.pack(len(topic)) + topic + _U16.pack(len(key)) + key


def _pos_key(position: int) -> bytes:
    return _POS_PREFIX + _U64.pack(position)


def _prefix_end(prefix: bytes) -> bytes:
    """The first key past every key that starts with ``prefix``."""
    raw = bytearray(prefix)
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b"\xff" * (len(prefix) + 1)
    raw[-1] += 1
    return bytes(raw)


class KeyIndex:
    """Writes and reads the key index of one store's index RocksDB."""

    __slots__ = ("index", "properties", "names", "_heads")

    def __init__(self, index: ConsumeQueueIndex, properties: tuple[str, ...]) -> None:
        self.index = index
        #: The property names whose values are keys; empty: nothing is indexed.
        self.properties = properties
        #: The same as a set, for ``names.isdisjoint(props)``.
        self.names = frozenset(properties)
        #: topic -> the key prefix of its first level (``b"K" | len | level``), or
        #: None for a level too long to index: built once per topic, not per message.
        self._heads: dict[str, bytes | None] = {}

    def put(
        self,
        put: Putter,
        topic: str,
        props: Mapping[str, bytes],
        position: int,
        store_ms: int,
    ) -> None:
        """Put the key entries of the record at ``position`` (if its ``props`` name any
        key) through ``put``, the WriteBatch of that record's dispatch."""
        keys: list[bytes] | None = None
        for name in self.properties:
            value = props.get(name)
            if value:
                if keys is None:
                    keys = value.split()
                else:
                    keys += value.split()
        if not keys:
            return
        if len(keys) > 1:
            keys = list(dict.fromkeys(keys))
        heads = self._heads
        try:
            head = heads[topic]
        except KeyError:
            if len(heads) >= _HEADS_MAX:
                heads.clear()
            level = topic.partition("/")[0].encode()
            head = heads[topic] = (
                _KEY_PREFIX + _pack_u16(len(level)) + level if len(level) <= MAX_PART else None)
        if head is None:
            return
        packed_pos = _pack_u64(position)
        stamp = _pack_u64(store_ms)
        if len(keys) == 1:  # the common case: a UNIQ_KEY alone
            key = keys[0]
            if len(key) <= MAX_PART:
                full = head + _pack_u16(len(key)) + key + packed_pos
                put(full, stamp)
                put(_POS_PREFIX + packed_pos, _pack_u16(len(full) - 1) + full[1:])
            else:
                put(_POS_PREFIX + packed_pos, b"")
            return
        listed = []
        for key in keys:
            if len(key) <= MAX_PART:
                full = head + _pack_u16(len(key)) + key + packed_pos
                put(full, stamp)
                listed.append(_pack_u16(len(full) - 1) + full[1:])
        put(_POS_PREFIX + packed_pos, b"".join(listed))

    def find(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int = 0,
        end_ms: int | None = None,
        min_position: int = 0,
    ) -> list[int]:
        """Positions of up to ``max_num`` records indexed under (the first level of)
        ``topic`` and ``key`` stored in ``[begin_ms, end_ms]``, at or after
        ``min_position``: the newest ones, returned oldest first."""
        if max_num <= 0:
            return []
        prefix = _lookup_prefix(index_topic(topic).encode(), key.encode())
        opts = ReadOptions()
        opts.set_iterate_lower_bound(prefix)
        opts.set_iterate_upper_bound(_prefix_end(prefix))
        it = self.index.db.iter(opts)
        it.seek_to_last()
        found: list[int] = []
        while it.valid():
            raw_key: bytes = it.key()
            if not raw_key.startswith(prefix):
                break  # the lower bound is not enforced by every Prev()
            (store_ms,) = _U64.unpack(it.value())
            (position,) = _U64.unpack_from(raw_key, len(raw_key) - 8)
            if position < min_position:
                break  # older than the log start (not yet trimmed), as is every earlier
            if store_ms < begin_ms:
                break  # store times grow with positions (a clock stepped back excepted)
            if end_ms is None or store_ms <= end_ms:
                found.append(position)
                if len(found) >= max_num:
                    break
            it.prev()
        found.reverse()
        return found

    def trim(self, log_min: int) -> int:
        """Delete the key entries of records below ``log_min`` (retention removed them);
        returns how many. Needs no lock: appends only add entries past the log end."""
        index = self.index
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_pos_key(log_min))
        removed = 0
        batch = index.new_batch()
        pending = 0
        for _pos, listed in rocks.items(index.db, _POS_PREFIX, opts):
            at = 0
            while at < len(listed):
                (size,) = _U16.unpack_from(listed, at)
                batch.wb.delete(_KEY_PREFIX + listed[at + 2 : at + 2 + size])
                at += 2 + size
                removed += 1
                pending += 1
            if pending >= _TRIM_CHUNK:
                batch.commit()
                batch = index.new_batch()
                pending = 0
        # the by-position keys last: a crash before this leaves them, and the next trim
        # deletes the same key entries again (a delete of a missing key is a no-op)
        batch.wb.delete_range(_pos_key(0), _pos_key(log_min))
        batch.commit()
        return removed
