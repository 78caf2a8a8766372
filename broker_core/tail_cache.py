"""Two caches of decoded records that spare readers at the tail the index and the log.

- **The hot tail**: ``(lmq id, offset) -> Record`` for LMQs somebody listens to, filled
  by the dispatcher as it builds records, so a reader at the tail is served from memory
  without the index, a read or a decode. Keyed by the LMQ's id, never reused for another
  LMQ in this process, so a removed LMQ's entries simply age out (no scan at removal).
  Two generations: new records go to ``young``; when it holds ``generation`` entries it
  becomes the old one and the previous old one is dropped whole (one C-level free
  instead of an eviction per append). It thus holds between ``generation`` and twice
  that (plus one append batch) of the latest records.
- **The decoded-record cache**: ``log position -> Record``, FIFO-bounded, for readers
  that go through the index (many subscribers at the tail of LMQs sharing records
  decode each record once).

Both are caches: emptying them is always correct. A failed append batch empties the
young generation (its offsets will be reused) and the record cache (its positions will
be reused); an index rebuild empties the hot tail (it assigns LMQ ids anew).

Thread safety: the young generation is written under the append lock; readers take no
lock (dict reads are atomic under the GIL, and a record once put is never changed).
"""

from __future__ import annotations

from collections import deque

from broker_core.record import Record

#: Entries of one generation of the hot tail.
HOT_GENERATION = 8192
#: Decoded records kept by log position.
RECORD_CACHE = 4096


class TailCache:
    __slots__ = ("young", "old", "generation", "records", "_record_order", "record_limit")

    def __init__(self, generation: int | None = None, record_limit: int | None = None) -> None:
        #: The young generation. The dispatcher puts into it directly (its hot path).
        self.young: dict[tuple[int, int], Record] = {}
        self.old: dict[tuple[int, int], Record] = {}
        self.generation = HOT_GENERATION if generation is None else generation
        #: The decoded-record cache (position -> record); see :meth:`put_record`.
        self.records: dict[int, Record] = {}
        self._record_order: deque[int] = deque()  # its keys, oldest first
        self.record_limit = RECORD_CACHE if record_limit is None else record_limit

    # -- the hot tail ------------------------------------------------------------------

    def get(self, lmq_id: int, offset: int) -> Record | None:
        key = (lmq_id, offset)
        record = self.young.get(key)
        return self.old.get(key) if record is None else record

    def rotate(self) -> None:
        """After a batch: a full young generation becomes the old one."""
        if len(self.young) >= self.generation:
            self.old = self.young
            self.young = {}

    def drop_young(self) -> None:
        """A batch failed: its offsets will be reused."""
        self.young.clear()

    def clear_hot(self) -> None:
        self.young.clear()
        self.old.clear()

    # -- decoded records ---------------------------------------------------------------

    def put_record(self, position: int, record: Record) -> None:
        """Remember a decoded record; :meth:`trim_records` bounds the cache."""
        self.records[position] = record
        self._record_order.append(position)

    def trim_records(self) -> None:
        # oldest first, O(1) each: any iteration from the front of the dict would walk
        # over the slots every earlier eviction left there (as for the hot table)
        order, records = self._record_order, self.records
        while len(order) > self.record_limit:
            records.pop(order.popleft(), None)

    def clear_records(self) -> None:
        """Positions past a failed batch's start will be reused."""
        self.records.clear()
        self._record_order.clear()
