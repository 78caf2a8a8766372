"""The two in-flight tables of pop: where unsettled deliveries are tracked.

A pop group's deliveries are tracked by one of two tables, chosen per group
(:meth:`broker_core.pop.PopConsumer.set_memory_inflight`):

- :class:`DurableInflight`: one record per delivery in the state RocksDB's
  time-ordered pop table (``inflight`` keys, :mod:`broker_core.consumer_state`), with
  their ``(visible_at, key)`` mirrored in memory, loaded on first use, so whether
  anything is due is a lookup, not a RocksDB scan (which would also step over the
  tombstones every ack leaves). Retries popped again, and memory deliveries whose
  invisible time is changed, always go here.
- :class:`MemoryInflight`: the FIRST delivery of each message of a memory group, held
  in memory per (group, LMQ) table and durably as ONE ``fresh`` record per pop call (a
  bit per unsettled message); an ack clears bits. After a crash each set bit becomes a
  retry with one delivery.

Both answer the :class:`InflightTable` questions the orchestration in
:mod:`broker_core.pop` asks: when is the next delivery due, and which are due now
(their records deleted in the caller's batch). Writes go to the caller's
:class:`~broker_core.consumer_state.StateBatch`; memory changes that depend on a write
are applied only after it succeeded (``apply``).

Thread safety: none of their own; every call is made under the store's pop lock.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from typing import Protocol

from sortedcontainers import SortedList

from broker_core.consumer_state import (
    ConsumerState,
    Inflight,
    InflightKey,
    StateBatch,
    fresh_prefix,
)
from broker_core.errors import UnknownReceipt
from broker_core.receipts import decode_receipt, memory_prefix, parse_memory


class InflightTable(Protocol):
    def next_due(self) -> int | None:
        """When the earliest tracked delivery's invisible time runs out (ms), or None."""
        ...

    def take_due(self, now: int, batch: StateBatch, limit: int) -> list[Inflight]:
        """Up to about ``limit`` deliveries due at ``now``: their records deleted in
        ``batch`` and no longer tracked here. The caller retries or dead-letters them."""
        ...


class DurableInflight:
    """The time-ordered pop table of the state RocksDB, and its schedule in memory."""

    __slots__ = ("state", "_times")

    def __init__(self, state: ConsumerState) -> None:
        self.state = state
        self._times: SortedList | None = None

    @property
    def loaded(self) -> bool:
        return self._times is not None

    def schedule(self) -> SortedList:
        """The ``(visible_at, encoded key)`` of every record, loaded on first use. Load
        it before writing a batch that adds records, so they are not counted twice."""
        if self._times is None:
            self._times = SortedList(
                (item.key.visible_at, item.key.encode()) for item in self.state.all_inflight()
            )
        return self._times

    def forget(self) -> None:
        """Drop the schedule: the records changed behind it (the replicated state of a
        slave); the next use loads it again."""
        self._times = None

    def added(self, keys: Iterable[InflightKey]) -> None:
        """Records of ``keys`` were written."""
        times = self.schedule()
        for key in keys:
            times.add((key.visible_at, key.encode()))

    def removed(self, keys: Iterable[InflightKey]) -> None:
        """Records of ``keys`` were deleted (by this table or outside it: LMQ removal)."""
        times = self._times
        if times is not None:
            for key in keys:
                times.discard((key.visible_at, key.encode()))

    def next_due(self) -> int | None:
        times = self.schedule()
        return times[0][0] if times else None

    def take_due(self, now: int, batch: StateBatch, limit: int) -> list[Inflight]:
        due = self.state.due_inflight(now, limit)
        times = self.schedule()
        for item in due:
            batch.delete_inflight(item.key)
            times.discard((item.key.visible_at, item.key.encode()))
        return due

    def prune(self, now: int) -> None:
        """Forget schedule entries due by ``now`` whose records are gone (deleted
        without this table knowing)."""
        times = self.schedule()
        while times and times[0][0] <= now:
            del times[0]


class FreshBatch:
    """The first-time deliveries of one pop call (one ``fresh`` record)."""

    __slots__ = ("first", "count", "bits", "visible_at", "popped_ms")

    def __init__(self, first: int, count: int, bits: int, visible_at: int,
                 popped_ms: int) -> None:
        self.first = first
        self.count = count
        self.bits = bits  # bit i set: offset first + i popped and not settled
        self.visible_at = visible_at
        self.popped_ms = popped_ms


class FreshTable:
    """Memory in-flight state of one (group, LMQ)."""

    __slots__ = ("id", "group", "lmq", "lmq_id", "prefix", "receipt_prefix", "batches",
                 "where")

    def __init__(self, tid: int, group: str, lmq: str, lmq_id: int) -> None:
        self.id = tid
        self.group = group
        self.lmq = lmq
        self.lmq_id = lmq_id
        self.prefix = fresh_prefix(lmq, group)
        self.receipt_prefix = memory_prefix(tid)
        self.batches: dict[int, FreshBatch] = {}
        self.where: dict[int, FreshBatch] = {}  # offset -> its batch, while unsettled


#: A settled memory receipt: its table, its offset and the batch it belongs to.
Hit = tuple[FreshTable, int, FreshBatch]
#: Per batch touched by a settle: its new bits and its table (see MemoryInflight.settle).
Settled = dict[FreshBatch, tuple[int, FreshTable]]
#: Per table of a grouped settle: the offsets settled and the batches' new bits.
Plan = list[tuple[FreshTable, list[int], dict[FreshBatch, int]]]


class MemoryInflight:
    """The fresh tables of the memory groups. ``lmq_id_of(name)`` is the LMQ's current
    id or None: a table whose LMQ was removed (or removed and created again) is dropped,
    since its fresh records went with the LMQ and must not be written again."""

    __slots__ = ("state", "lmq_id_of", "tables", "_table_of", "_table_ids", "_due")

    def __init__(self, state: ConsumerState, lmq_id_of: Callable[[str], int | None]) -> None:
        self.state = state
        self.lmq_id_of = lmq_id_of
        self.tables: dict[int, FreshTable] = {}
        self._table_of: dict[tuple[str, str], FreshTable] = {}
        # Random start: a receipt of a previous run never names a table of this one.
        self._table_ids = itertools.count(int.from_bytes(os.urandom(4), "big") << 16)
        #: Never later than the earliest visible_at of a fresh batch (may be earlier:
        #: then a revive scans the tables for nothing and sets it right).
        self._due: int | None = None

    def table(self, group: str, lmq: str, lmq_id: int) -> FreshTable:
        table = self._table_of.get((group, lmq))
        if table is not None and table.lmq_id == lmq_id:
            return table
        if table is not None:  # the LMQ was removed and created again
            self.drop(table)
        table = FreshTable(next(self._table_ids), group, lmq, lmq_id)
        self.tables[table.id] = table
        self._table_of[(group, lmq)] = table
        return table

    def drop(self, table: FreshTable) -> None:
        self.tables.pop(table.id, None)
        if self._table_of.get((table.group, table.lmq)) is table:
            del self._table_of[(table.group, table.lmq)]

    def drop_group(self, group: str) -> None:
        for table in [t for t in self.tables.values() if t.group == group]:
            self.drop(table)

    def live(self, table: FreshTable) -> bool:
        """False (and the table dropped) if its LMQ was removed since."""
        if self.lmq_id_of(table.lmq) == table.lmq_id:
            return True
        self.drop(table)
        return False

    def lookup(self, receipt: str) -> Hit | None:
        parsed = parse_memory(receipt)
        if parsed is None:
            return None
        table = self.tables.get(parsed[0])
        if table is None:
            return None
        fb = table.where.get(parsed[1])
        return None if fb is None else (table, parsed[1], fb)

    def forget(self) -> None:
        """Drop every table: the records changed behind them (the replicated state of a
        slave); :meth:`load` tracks them again."""
        self.tables.clear()
        self._table_of.clear()
        self._due = None

    def load(self) -> None:
        """The fresh records a previous run left (their receipts died with it): tracked
        again so that their invisible time runs out as before."""
        for lmq, group, first, count, popped, visible_at, bits in self.state.all_fresh():
            lmq_id = self.lmq_id_of(lmq)
            if lmq_id is None or not bits:
                continue
            table = self.table(group, lmq, lmq_id)
            fb = FreshBatch(first, count, bits, visible_at, popped)
            table.batches[first] = fb
            rest = bits
            while rest:
                low = rest & -rest
                table.where[first + low.bit_length() - 1] = fb
                rest ^= low
            self._due_no_later(visible_at)

    def _due_no_later(self, visible_at: int) -> None:
        if self._due is None or visible_at < self._due:
            self._due = visible_at

    def track(self, table: FreshTable, offsets: list[int], first: int, count: int, bits: int,
              visible_at: int, now: int) -> FreshBatch:
        """The fresh record of a pop call was written: track its deliveries."""
        fb = FreshBatch(first, count, bits, visible_at, now)
        table.batches[first] = fb
        where = table.where
        for o in offsets:
            where[o] = fb
        self._due_no_later(visible_at)
        return fb

    def group_receipts(
        self, receipts: Iterable[str]
    ) -> tuple[list[InflightKey], dict[FreshTable, list[int]]]:
        """(durable in-flight keys, {fresh table: offsets}) of ``receipts``; malformed
        receipts and those of unknown tables are dropped. The bulk-ack hot path: the
        receipts of one table share the prefix ``~<table id>.``, so once it is known a
        receipt costs a prefix test and an ``int`` (what follows the first dot is the
        offset, as in :func:`broker_core.receipts.parse_memory`)."""
        keys: list[InflightKey] = []
        by_table: dict[FreshTable, list[int]] = {}
        prefix = "\0"  # no receipt starts with it
        plen = 1
        offsets: list[int] = []
        tables = self.tables
        for receipt in receipts:
            if receipt.startswith(prefix):
                try:
                    offsets.append(int(receipt[plen:]))
                except ValueError:
                    pass
                continue
            if receipt[:1] != "~":
                try:
                    keys.append(decode_receipt(receipt))
                except UnknownReceipt:
                    pass
                continue
            parsed = parse_memory(receipt)
            if parsed is None:
                continue
            table = tables.get(parsed[0])
            if table is None:
                continue
            known = by_table.get(table)
            if known is None:
                known = by_table[table] = []
            offsets = known
            offsets.append(parsed[1])
            prefix = table.receipt_prefix
            plen = len(prefix)
        return keys, by_table

    def settle_grouped(self, by_table: dict[FreshTable, list[int]], batch: StateBatch) -> Plan:
        """:meth:`settle` for :meth:`group_receipts`' result: clears the bits in
        ``batch``; returns per table the offsets settled and the batches' new bits, to
        apply once the write succeeded (:meth:`apply_plan`). Offsets no longer in
        flight are left out, and so are tables of removed LMQs."""
        plan: Plan = []
        for table, offsets in by_table.items():
            if not self.live(table):
                continue
            where = table.where.get
            new_bits: dict[FreshBatch, int] = {}
            hits: list[int] = []
            last = None  # consecutive offsets are mostly of one batch: bits kept in hand
            bits = 0
            for offset in offsets:
                fb = where(offset)
                if fb is None:
                    continue
                if fb is not last:
                    if last is not None:
                        new_bits[last] = bits
                    last = fb
                    bits = new_bits.get(fb, fb.bits)
                bits &= ~(1 << (offset - fb.first))
                hits.append(offset)
            if last is None:
                continue
            new_bits[last] = bits
            prefix = table.prefix
            for fb, bits in new_bits.items():
                if bits:
                    batch.put_fresh(prefix, fb.first, fb.count, fb.popped_ms, fb.visible_at,
                                    bits)
                else:
                    batch.delete_fresh(prefix, fb.first)
            plan.append((table, hits, new_bits))
        return plan

    @staticmethod
    def apply_plan(plan: Plan) -> None:
        for table, offsets, new_bits in plan:
            drop = table.where.pop
            for offset in offsets:
                drop(offset, None)
            for fb, bits in new_bits.items():
                fb.bits = bits
                if not bits:
                    table.batches.pop(fb.first, None)

    def settle(self, found: list[Hit], batch: StateBatch) -> Settled:
        """Clear the bits of ``found`` in ``batch``; returns {batch: (new bits, table)}
        to apply once the write succeeded (:meth:`apply`). Entries of removed LMQs are
        left out."""
        new_bits: dict[FreshBatch, int] = {}
        owner: dict[FreshBatch, FreshTable] = {}
        live: dict[FreshTable, bool] = {}
        for table, offset, fb in found:
            ok = live.get(table)
            if ok is None:
                ok = live[table] = self.live(table)
            if not ok:
                continue
            bits = new_bits.get(fb, fb.bits)
            new_bits[fb] = bits & ~(1 << (offset - fb.first))
            owner[fb] = table
        for fb, bits in new_bits.items():
            prefix = owner[fb].prefix
            if bits:
                batch.put_fresh(prefix, fb.first, fb.count, fb.popped_ms, fb.visible_at, bits)
            else:
                batch.delete_fresh(prefix, fb.first)
        return {fb: (bits, owner[fb]) for fb, bits in new_bits.items()}

    @staticmethod
    def apply(found: list[Hit], settled: Settled) -> None:
        for table, offset, fb in found:
            if fb in settled:
                table.where.pop(offset, None)
        for fb, (bits, table) in settled.items():
            fb.bits = bits
            if not bits:
                table.batches.pop(fb.first, None)

    def may_be_due(self, now: int) -> bool:
        return self._due is not None and self._due <= now

    def next_due(self) -> int | None:
        if self._due is None:
            return None
        fresh = None  # exact: few batches are in flight at once
        for table in list(self.tables.values()):
            if not self.live(table):
                continue
            for fb in table.batches.values():
                if fresh is None or fb.visible_at < fresh:
                    fresh = fb.visible_at
        self._due = fresh
        return fresh

    def take_due(self, now: int, batch: StateBatch, limit: int = 0) -> list[Inflight]:
        """Every due delivery (``limit`` is not applied: the fresh records of a due
        batch go whole). Each comes back as one delivery, visible at its batch's time."""
        out: list[Inflight] = []
        next_due: int | None = None
        for table in list(self.tables.values()):
            if not self.live(table):
                continue
            for fb in list(table.batches.values()):
                if fb.visible_at > now:
                    if next_due is None or fb.visible_at < next_due:
                        next_due = fb.visible_at
                    continue
                batch.delete_fresh(table.prefix, fb.first)
                del table.batches[fb.first]
                bits = fb.bits
                while bits:
                    low = bits & -bits
                    offset = fb.first + low.bit_length() - 1
                    bits ^= low
                    table.where.pop(offset, None)
                    out.append(Inflight(InflightKey(fb.visible_at, table.group, table.lmq,
                                                    offset), 1, fb.popped_ms))
        self._due = next_due
        return out
