"""The LMQ table: each LMQ's dispatch state, an LRU in front of the index's metadata.

An LMQ's state (:class:`~broker_core.consume_queue.LmqMeta`: id, next offset, ...) is
cached in an LRU of ``lmq_cache_size`` entries; everything else lives in the index
RocksDB, so memory does not grow with the number of LMQs. The LRU is trimmed only after
a batch is committed, so an evicted entry is always in RocksDB. The table also holds the
two counters of the index checkpoint that are not positions: the next LMQ id to assign
and the log start the index was last trimmed to (``cleaned_to``).

Thread safety: writers (``meta_for_write``, ``forget``, ``trim``, the counters) hold the
store's append lock; ``meta_for_read`` and ``cached`` take no lock (an OrderedDict read
is atomic under the GIL, and a reader tolerates a meta that is one batch old).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker_core.consume_queue import Checkpoint, ConsumeQueueIndex, IndexBatch, LmqMeta
from broker_core.errors import InvalidLmqName


@dataclass(slots=True)
class Pending:
    """Per-batch bookkeeping so a failed batch can be undone in memory: the LMQs the
    batch loaded or created, the log end and the next id before it."""

    metas: dict[int, LmqMeta] = field(default_factory=dict)
    start: int = 0
    next_id: int = 0


class LmqTable:
    __slots__ = ("index", "cache", "cache_size", "max_name_bytes", "next_id", "cleaned_to")

    def __init__(self, index: ConsumeQueueIndex, cache_size: int, max_name_bytes: int) -> None:
        self.index = index
        #: name -> meta, least recently written first. The dispatcher reads it directly.
        self.cache: OrderedDict[str, LmqMeta] = OrderedDict()
        self.cache_size = cache_size
        self.max_name_bytes = max_name_bytes
        cp = index.checkpoint() or Checkpoint()
        self.next_id = cp.next_id
        self.cleaned_to = cp.cleaned_to

    def validate_name(self, name: str) -> bytes:
        """The name as UTF-8, or :class:`InvalidLmqName`."""
        try:
            raw = name.encode()
        except UnicodeEncodeError:
            raise InvalidLmqName(f"LMQ name {name!r} is not valid UTF-8") from None
        if not raw:
            raise InvalidLmqName("an LMQ name must not be empty")
        if len(raw) > self.max_name_bytes:
            raise InvalidLmqName(f"LMQ name of {len(raw)} bytes exceeds {self.max_name_bytes}")
        if b"\x00" in raw:
            raise InvalidLmqName(f"LMQ name {name!r} contains U+0000")
        return raw

    def meta_for_write(self, name: str, now: int, batch: IndexBatch, pending: Pending) -> LmqMeta:
        """The LMQ's cached state, loading or creating it. Append lock held. A created or
        loaded LMQ goes into ``pending.metas`` so a failed batch can forget it."""
        meta = self.cache.get(name)
        if meta is not None:
            self.cache.move_to_end(name)
            return meta
        raw = self.validate_name(name)
        lmq_id = self.index.lookup_id(raw)
        meta = self.index.meta(lmq_id) if lmq_id is not None else None
        if meta is None:
            meta = LmqMeta(self.next_id, name, created_ms=now, last_write_ms=now)
            self.next_id += 1
            batch.put_name(raw, meta.id)
        pending.metas[meta.id] = meta
        self.cache[name] = meta
        return meta

    def meta_for_read(self, name: str) -> LmqMeta | None:
        meta = self.cache.get(name)
        if meta is not None:
            return meta
        return self.index.meta_by_name(name)

    def current(self, meta: LmqMeta) -> LmqMeta:
        """The live (cached) version of a meta read from the index, if there is one."""
        cached = self.cache.get(meta.name)
        return cached if cached is not None else meta

    def by_id(self, lmq_id: int) -> LmqMeta | None:
        meta = self.index.meta(lmq_id)
        return None if meta is None else self.current(meta)

    def iter(self, prefix: str = "", after: str = "") -> Iterator[LmqMeta]:
        """Every LMQ whose name starts with ``prefix`` (and sorts after ``after``), by
        name, as live as the cache."""
        for meta in self.index.iter_meta(prefix, after):
            yield self.current(meta)

    def forget(self, name: str) -> LmqMeta | None:
        """Drop a cached LMQ (removed, or loaded by a failed batch). Append lock held."""
        return self.cache.pop(name, None)

    def undo(self, pending: Pending) -> None:
        """Forget what a failed batch loaded or created. Append lock held."""
        for meta in pending.metas.values():
            self.cache.pop(meta.name, None)
        self.next_id = pending.next_id

    def trim(self) -> None:
        """Evict least recently written LMQs past the cache size (after a commit)."""
        excess = len(self.cache) - self.cache_size
        for _ in range(max(0, excess)):
            self.cache.popitem(last=False)

    def checkpoint(self, dispatched_to: int) -> Checkpoint:
        """The checkpoint to commit with a batch that dispatched up to ``dispatched_to``."""
        return Checkpoint(dispatched_to, self.next_id, self.cleaned_to)

    def reset(self, log_start: int) -> None:
        """The index was dropped: no LMQ known, ids assigned afresh from 1."""
        self.cache.clear()
        self.next_id = 1
        self.cleaned_to = log_start
