"""The key index: (topic, key) -> log position, for messages whose properties name keys.

Which properties hold keys is :attr:`StoreConfig.key_index_properties` (a RocketMQ
gateway sets ``KEYS`` and ``UNIQ_KEY``); a property's value is split on spaces into
keys, as RocketMQ's ``KEYS`` is. The store knows nothing else of them. A message is
indexed under its topic's first level (the topic up to the first ``/``), so a lookup
under ``orders`` finds the keys of messages on ``orders`` and on ``orders/eu/42``.

Layout, in the index RocksDB beside the consume queues (:mod:`broker_core.consume_queue`
owns the other prefixes; integers big-endian)::

    b"B" | segment base u64 | topic_len u16 | topic | key_len u16 | key | position u64
        -> store_ms u64

``segment base`` is the base position of the commit-log segment that holds the record.

- One entry per (record, key): a lookup seeks the (topic, key) range of each live
  segment, newest segment first, and scans it backwards (positions ascend within it).
- Retention removes whole segments, and the new log start is the base of the first
  segment kept, so the trim is ONE range delete of every entry whose segment base is
  below it: no per-record bookkeeping. (The layout before kept a second, by-position
  entry per record for the trim to find its keys: two RocksDB puts per UNIQ_KEY instead
  of one, the largest part of a RocketMQ send's cost in the store. A store written with
  it, prefixes ``K``/``k``, has its index rebuilt from the log at the next open:
  :func:`has_legacy_entries`.)

Cost: a message with no properties costs one truthiness test of its properties; one with
properties but none of the named ones one C-level set test (the dispatcher checks
:attr:`KeyIndex.names` before calling :meth:`KeyIndex.put`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

from rocksdict import ReadOptions

from broker_core.consume_queue import ConsumeQueueIndex

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_pack_u16 = _U16.pack
_pack_u64 = _U64.pack
_PREFIX = b"B"
#: The prefixes of the layout before (see the module doc).
_LEGACY_PREFIXES = (b"K", b"k")
#: Longest indexed topic level or key in UTF-8 bytes; longer ones are not indexed.
MAX_PART = 0xFFFF

#: Topics whose key prefix is remembered (cleared when full).
_HEADS_MAX = 4096

#: ``put(key, value)`` of an index WriteBatch.
Putter = Callable[[bytes, bytes], None]


def index_topic(topic: str) -> str:
    """The topic a message is indexed under: its first ``/`` level."""
    return topic.partition("/")[0]


def _topic_key(topic: bytes, key: bytes) -> bytes:
    return _U16.pack(len(topic)) + topic + _U16.pack(len(key)) + key


def _segment_prefix(base: int) -> bytes:
    return _PREFIX + _U64.pack(base)


def has_legacy_entries(index: ConsumeQueueIndex) -> bool:
    """Whether the index holds key entries in the layout before (module doc)."""
    for prefix in _LEGACY_PREFIXES:
        opts = ReadOptions()
        opts.set_iterate_lower_bound(prefix)
        opts.set_iterate_upper_bound(_prefix_end(prefix))
        it = index.db.iter(opts)
        it.seek(prefix)
        if it.valid():
            return True
    return False


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
        #: topic -> its first level as it is in a key (``len | level``), or None for a
        #: level too long to index: built once per topic, not per message.
        self._heads: dict[str, bytes | None] = {}

    def put(
        self,
        put: Putter,
        topic: str,
        props: Mapping[str, bytes],
        position: int,
        store_ms: int,
        segment_base: int,
    ) -> None:
        """Put the key entries of the record at ``position`` (in the segment based at
        ``segment_base``), if its ``props`` name any key, through ``put``: the
        WriteBatch of that record's dispatch."""
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
            level = heads[topic]
        except KeyError:
            if len(heads) >= _HEADS_MAX:
                heads.clear()
            raw = topic.partition("/")[0].encode()
            level = heads[topic] = _pack_u16(len(raw)) + raw if len(raw) <= MAX_PART else None
        if level is None:
            return
        head = _PREFIX + _pack_u64(segment_base) + level
        tail = _pack_u64(position)
        stamp = _pack_u64(store_ms)
        for key in keys:
            if len(key) <= MAX_PART:
                put(head + _pack_u16(len(key)) + key + tail, stamp)

    def find(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int = 0,
        end_ms: int | None = None,
        min_position: int = 0,
        segment_bases: Sequence[int] = (0,),
    ) -> list[int]:
        """Positions of up to ``max_num`` records indexed under (the first level of)
        ``topic`` and ``key`` stored in ``[begin_ms, end_ms]``, at or after
        ``min_position``, in the segments based at ``segment_bases`` (ascending): the
        newest ones, returned oldest first."""
        if max_num <= 0:
            return []
        topic_key = _topic_key(index_topic(topic).encode(), key.encode())
        found: list[int] = []
        for base in reversed(segment_bases):
            prefix = _segment_prefix(base) + topic_key
            opts = ReadOptions()
            opts.set_iterate_lower_bound(prefix)
            opts.set_iterate_upper_bound(_prefix_end(prefix))
            it = self.index.db.iter(opts)
            it.seek_to_last()
            while it.valid():
                raw_key: bytes = it.key()
                if not raw_key.startswith(prefix) or len(raw_key) != len(prefix) + 8:
                    break  # the lower bound is not enforced by every Prev()
                (store_ms,) = _U64.unpack(it.value())
                (position,) = _U64.unpack_from(raw_key, len(prefix))
                if position < min_position or store_ms < begin_ms:
                    # older than the log start, or than the range (store times grow
                    # with positions, a clock stepped back excepted): so is all before
                    found.reverse()
                    return found
                if end_ms is None or store_ms <= end_ms:
                    found.append(position)
                    if len(found) >= max_num:
                        found.reverse()
                        return found
                it.prev()
        found.reverse()
        return found

    def trim(self, log_min: int) -> None:
        """Delete the key entries of records below ``log_min``, the base of the first
        segment retention kept: one range delete. Needs no lock: appends only add
        entries of the active segment."""
        batch = self.index.new_batch()
        batch.wb.delete_range(_segment_prefix(0), _segment_prefix(log_min))
        batch.commit()
