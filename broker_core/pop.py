"""Pop consumption: competing consumers of one LMQ, with receipt handles (RIP-73 style).

A pop group reads an LMQ from the group's committed offset and advances that offset at
once; every popped message gets an in-flight record ``(visible_at, group, lmq, offset)``
in the time-ordered pop table (:mod:`broker_core.consumer_state`). Then:

- ``ack(receipt)`` deletes the in-flight record: the message is done;
- ``change_invisible_time(receipt, t)`` deletes it and puts one with a new visible time,
  returning a new receipt (the old one is void);
- ``revive(now)`` range-scans the in-flight records whose time ran out: each becomes a
  *retry* record of its (LMQ, group), popped again before new messages, with its delivery
  count; once a message has been delivered ``max_deliveries`` times it is appended
  instead to the group's dead-letter LMQ (``%DLQ%<group>``) and leaves the pop group.

All of it is in the state RocksDB, so it survives restarts. A receipt is the in-flight
key, base64url encoded: an ack is a point delete with no search.

Memory in-flight groups (:meth:`PopConsumer.set_memory_inflight`, the AMQP queues):
a message popped for the FIRST time is tracked in memory, and durably as part of ONE
``fresh`` record per pop call (first offset, count, a bit per unsettled message); an
ack clears bits (one rewrite or delete per touched pop call, not one RocksDB write per
message). Receipts are ``~<table>.<offset>``. After a crash every set bit becomes a
retry with one delivery (:meth:`PopConsumer.release_group`), so it is popped again
with ``deliveries`` = 2; a cleared bit (acked) never comes back. Retries popped again,
and fresh messages whose invisible time is changed, use the durable in-flight table
above as before. The invisible time of a fresh message still runs out (revive).

Thread safety: every method takes the pop lock; the dead-letter append takes the
store's append lock inside it (the lock order is always pop lock, then append lock).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sortedcontainers import SortedList

from broker_core.clock import now_ms
from broker_core.config import StoreConfig
from broker_core.consumer_state import ConsumerState, Inflight, InflightKey, fresh_prefix
from broker_core.errors import UnknownLmq, UnknownReceipt
from broker_core.locks import StoreLocks
from broker_core.record import Message
from broker_core.results import AppendResult, LmqInfo, PullResult, StoredMessage

_REVIVE_BATCH = 1024


@dataclass(slots=True)  # not frozen: built once per delivery, frozen init is slower
class PoppedMessage:
    message: StoredMessage
    receipt: str
    #: 1 on the first delivery, then one more each time it comes back unacked.
    deliveries: int


class _FreshBatch:
    """The first-time deliveries of one pop call (one ``fresh`` record)."""

    __slots__ = ("first", "count", "bits", "visible_at", "popped_ms")

    def __init__(self, first: int, count: int, bits: int, visible_at: int,
                 popped_ms: int) -> None:
        self.first = first
        self.count = count
        self.bits = bits  # bit i set: offset first + i popped and not settled
        self.visible_at = visible_at
        self.popped_ms = popped_ms


class _FreshTable:
    """Memory in-flight state of one (group, LMQ)."""

    __slots__ = ("id", "group", "lmq", "lmq_id", "prefix", "batches", "where")

    def __init__(self, tid: int, group: str, lmq: str, lmq_id: int) -> None:
        self.id = tid
        self.group = group
        self.lmq = lmq
        self.lmq_id = lmq_id
        self.prefix = fresh_prefix(lmq, group)
        self.batches: dict[int, _FreshBatch] = {}
        self.where: dict[int, _FreshBatch] = {}  # offset -> its batch, while unsettled


def _split_receipts(receipts: Iterable[str]) -> tuple[list[InflightKey], list[str]]:
    """(durable in-flight keys, memory receipts ``~...``); undecodable receipts dropped."""
    keys: list[InflightKey] = []
    fresh: list[str] = []
    for receipt in receipts:
        if receipt[:1] == "~":
            fresh.append(receipt)
            continue
        try:
            keys.append(decode_receipt(receipt))
        except UnknownReceipt:
            continue
    return keys, fresh


def encode_receipt(key: InflightKey) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_receipt(receipt: str) -> InflightKey:
    try:
        raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        return InflightKey.decode(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise UnknownReceipt(f"malformed receipt handle {receipt!r}") from None


class LmqReader(Protocol):
    """What pop reads of the store (its public read methods)."""

    def lmq(self, name: str) -> LmqInfo | None: ...

    def read_at(self, lmq: str, offset: int) -> StoredMessage | None: ...

    def pull(self, lmq: str, offset: int, max_count: int = ...) -> PullResult: ...

    def notify(self, lmq: str) -> None: ...


#: Appends one message to LMQs (the store's ``append``): dead-lettering's way out.
Appender = Callable[[Message, Sequence[str]], AppendResult]


class PopConsumer:
    """Pop, ack, change-invisible-time and revive over the state RocksDB. Handed the
    consumer state, a reader of LMQs, an appender (for dead letters), the store's locks
    and its configuration."""

    def __init__(
        self,
        state: ConsumerState,
        reader: LmqReader,
        append: Appender,
        locks: StoreLocks,
        config: StoreConfig,
    ) -> None:
        self.state = state
        self.reader = reader
        self.append = append
        self.locks = locks
        self.config = config
        self.dead_lettered = 0
        self._max_deliveries: dict[str, int] = {}
        # The in-flight records' (visible_at, key) in memory, loaded on first use: whether
        # anything is due is then a lookup, not a RocksDB scan (which also has to step
        # over the tombstones every ack leaves in the pop table).
        self._times: SortedList | None = None
        self._memory_groups: set[str] = set()
        self._tables: dict[int, _FreshTable] = {}
        self._table_of: dict[tuple[str, str], _FreshTable] = {}
        # Random start: a receipt of a previous run never names a table of this one.
        self._table_ids = itertools.count(int.from_bytes(os.urandom(4), "big") << 16)
        #: Never later than the earliest visible_at of a fresh batch (may be earlier:
        #: then a revive scans the tables for nothing and sets it right).
        self._fresh_due: int | None = None

    def set_memory_inflight(self, group: str, enabled: bool = True) -> None:
        """Track first-time deliveries of ``group`` in memory with one compact durable
        record per pop call (see the module docstring). Same guarantees; cheaper."""
        if enabled:
            self._memory_groups.add(group)
        else:
            self._memory_groups.discard(group)

    def _table(self, group: str, lmq: str, lmq_id: int) -> _FreshTable:
        table = self._table_of.get((group, lmq))
        if table is not None and table.lmq_id == lmq_id:
            return table
        if table is not None:  # the LMQ was removed and created again
            self._drop_table(table)
        table = _FreshTable(next(self._table_ids), group, lmq, lmq_id)
        self._tables[table.id] = table
        self._table_of[(group, lmq)] = table
        return table

    def _drop_table(self, table: _FreshTable) -> None:
        self._tables.pop(table.id, None)
        if self._table_of.get((table.group, table.lmq)) is table:
            del self._table_of[(table.group, table.lmq)]

    def _live(self, table: _FreshTable) -> bool:
        """False (and the table dropped) if its LMQ was removed since: its fresh
        records went with it (``StateBatch.delete_lmq``) and must not be written again."""
        info = self.reader.lmq(table.lmq)
        if info is not None and info.id == table.lmq_id:
            return True
        self._drop_table(table)
        return False

    def _fresh_lookup(self, receipt: str) -> tuple[_FreshTable, int, _FreshBatch] | None:
        tid, _, off = receipt[1:].partition(".")
        try:
            table = self._tables.get(int(tid))
            offset = int(off)
        except ValueError:
            return None
        if table is None:
            return None
        fb = table.where.get(offset)
        return None if fb is None else (table, offset, fb)

    def _schedule(self) -> SortedList:
        if self._times is None:
            self._times = SortedList(
                (item.key.visible_at, item.key.encode()) for item in self.state.all_inflight()
            )
            self._load_fresh()
        return self._times

    def _load_fresh(self) -> None:
        """The fresh records a previous run left (their receipts died with it): tracked
        again so that their invisible time runs out as before."""
        for lmq, group, first, count, popped, visible_at, bits in self.state.all_fresh():
            info = self.reader.lmq(lmq)
            if info is None or not bits:
                continue
            table = self._table(group, lmq, info.id)
            fb = _FreshBatch(first, count, bits, visible_at, popped)
            table.batches[first] = fb
            rest = bits
            while rest:
                low = rest & -rest
                table.where[first + low.bit_length() - 1] = fb
                rest ^= low
            if self._fresh_due is None or visible_at < self._fresh_due:
                self._fresh_due = visible_at

    def forget(self, key: InflightKey) -> None:
        """An in-flight record was deleted outside this class (LMQ removal)."""
        if self._times is not None:
            self._times.discard((key.visible_at, key.encode()))

    def set_max_deliveries(self, group: str, limit: int | None) -> None:
        if limit is None:
            self._max_deliveries.pop(group, None)
        elif limit < 0:
            raise ValueError("max_deliveries cannot be negative")
        else:
            self._max_deliveries[group] = limit

    def inflight_count(self, group: str, lmq: str | None = None) -> int:
        """Messages popped by ``group`` (of ``lmq``, or of every LMQ) not yet acked."""
        return sum(
            1
            for item in self.state.all_inflight()
            if item.key.group == group and (lmq is None or item.key.lmq == lmq)
        ) + sum(
            bin(bits).count("1")
            for name, g, _first, _count, _popped, _visible, bits in self.state.all_fresh()
            if g == group and (lmq is None or name == lmq)
        )

    def release_group(self, group: str) -> int:
        """Every in-flight message of ``group`` becomes visible again at once."""
        with self.locks.pop:
            self.locks.check_open()
            batch = self.state.new_batch()
            released = 0
            times = self._schedule()
            for item in self.state.all_inflight():
                if item.key.group != group:
                    continue
                batch.delete_inflight(item.key)
                times.discard((item.key.visible_at, item.key.encode()))
                if self.reader.lmq(item.key.lmq) is not None:
                    batch.put_retry(item.key.lmq, group, item.key.offset, item.deliveries)
                    released += 1
            # fresh records (on disk; the memory tables mirror them)
            for lmq, g, first, _count, _popped, _visible, bits in self.state.all_fresh():
                if g != group:
                    continue
                batch.delete_fresh(fresh_prefix(lmq, g), first)
                if self.reader.lmq(lmq) is None:
                    continue
                while bits:
                    low = bits & -bits
                    batch.put_retry(lmq, group, first + low.bit_length() - 1, 1)
                    bits ^= low
                    released += 1
            if not batch.empty:
                self.state.write(batch)
            for table in [t for t in self._tables.values() if t.group == group]:
                self._drop_table(table)
        return released

    def pop(
        self, group: str, lmq: str, max_messages: int, invisible_ms: int
    ) -> list[PoppedMessage]:
        """Pop up to ``max_messages`` of ``lmq`` for ``group``: first the ones that came
        back unacked, then new ones from the group's offset (the LMQ's minimum for a
        group that never popped it)."""
        if invisible_ms <= 0:
            raise ValueError("invisible_ms must be positive")
        with self.locks.pop:
            self.locks.check_open()
            now = now_ms()
            self._revive_locked(now)
            info = self.reader.lmq(lmq)
            if info is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
            visible_at = now + invisible_ms
            state = self.state
            batch = state.new_batch()
            added: list[InflightKey] = []
            times = self._schedule()  # loaded before this batch is written
            out: list[PoppedMessage] = []
            for offset, deliveries in state.retries(lmq, group, max_messages):
                batch.delete_retry(lmq, group, offset)
                msg = self.reader.read_at(lmq, offset)
                if msg is None:  # removed by retention while it waited
                    continue
                key = InflightKey(visible_at, group, lmq, offset)
                batch.put_inflight(key, deliveries + 1, now)
                added.append(key)
                out.append(PoppedMessage(msg, encode_receipt(key), deliveries + 1))
            remaining = max_messages - len(out)
            if remaining > 0:
                start = state.get_offset(lmq, group) or 0
                result = self.reader.pull(lmq, start, remaining)
                if result.messages and group in self._memory_groups:
                    return self._pop_fresh(group, lmq, info.id, result, start, visible_at,
                                           now, batch, added, out)
                for msg in result.messages:
                    key = InflightKey(visible_at, group, lmq, msg.offset)
                    batch.put_inflight(key, 1, now)
                    added.append(key)
                    out.append(PoppedMessage(msg, encode_receipt(key), 1))
                if result.next_offset != start:
                    batch.set_offset(lmq, group, result.next_offset)
            if not batch.empty:
                state.write(batch)
                for key in added:
                    times.add((key.visible_at, key.encode()))
            return out

    def _pop_fresh(self, group, lmq, lmq_id, result, start, visible_at, now, batch, added,
                   out):  # type: ignore[no-untyped-def]
        """The end of :meth:`pop` for a memory in-flight group: the new messages go to
        one fresh record (in the same write as the retries taken and the offset)."""
        table = self._table(group, lmq, lmq_id)
        messages = result.messages
        first = messages[0].offset
        count = messages[-1].offset - first + 1
        if count == len(messages):
            bits = (1 << count) - 1
        else:  # holes (never with the current index; cheap to allow)
            bits = 0
            for msg in messages:
                bits |= 1 << (msg.offset - first)
        state = self.state
        batch.put_fresh(table.prefix, first, count, now, visible_at, bits)
        batch.set_offset(lmq, group, result.next_offset)
        state.write(batch)
        if added:
            times = self._schedule()
            for key in added:
                times.add((key.visible_at, key.encode()))
        fb = _FreshBatch(first, count, bits, visible_at, now)
        table.batches[first] = fb
        where = table.where
        prefix = f"~{table.id}."
        for msg in messages:
            o = msg.offset
            where[o] = fb
            out.append(PoppedMessage(msg, prefix + str(o), 1))
        if self._fresh_due is None or visible_at < self._fresh_due:
            self._fresh_due = visible_at
        return out

    def _group_receipts(self, receipts: Iterable[str],
                        ) -> tuple[list[InflightKey], dict[_FreshTable, list[int]]]:
        """(durable in-flight keys, {fresh table: offsets}) of ``receipts``; malformed
        receipts and those of unknown tables are dropped. The bulk-ack hot path: the
        receipts of one table share the prefix ``~<table id>.``, so once it is known a
        receipt costs a prefix test and an ``int`` (what follows the first dot is the
        offset, as in :meth:`_fresh_lookup`)."""
        keys: list[InflightKey] = []
        by_table: dict[_FreshTable, list[int]] = {}
        prefix = "\0"  # no receipt starts with it
        plen = 1
        offsets: list[int] = []
        tables = self._tables
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
            tid, _, off = receipt[1:].partition(".")
            try:
                table = tables.get(int(tid))
                offset = int(off)
            except ValueError:
                continue
            if table is None:
                continue
            offsets = by_table.get(table)  # type: ignore[assignment]
            if offsets is None:
                offsets = by_table[table] = []
            offsets.append(offset)
            prefix = f"~{table.id}."
            plen = len(prefix)
        return keys, by_table

    def _settle_fresh_grouped(self, by_table: dict[_FreshTable, list[int]], batch,  # type: ignore[no-untyped-def]
                              ) -> list[tuple[_FreshTable, list[int], dict[_FreshBatch, int]]]:
        """:meth:`_settle_fresh` for :meth:`_group_receipts`' result: clears the bits in
        ``batch``; returns per table the offsets settled and the batches' new bits, to
        apply once the write succeeded. Offsets no longer in flight are left out, and
        so are tables of removed LMQs."""
        plan = []
        for table, offsets in by_table.items():
            if not self._live(table):
                continue
            where = table.where.get
            new_bits: dict[_FreshBatch, int] = {}
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

    def _settle_fresh(self, found: list[tuple[_FreshTable, int, _FreshBatch]], batch) -> dict:  # type: ignore[no-untyped-def]
        """Clear the bits of ``found`` in ``batch``; returns {batch: new bits} to apply
        once the write succeeded (:meth:`_apply_fresh`). Entries of removed LMQs are
        left out."""
        new_bits: dict[_FreshBatch, int] = {}
        owner: dict[_FreshBatch, _FreshTable] = {}
        live: dict[_FreshTable, bool] = {}
        for table, offset, fb in found:
            ok = live.get(table)
            if ok is None:
                ok = live[table] = self._live(table)
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
    def _apply_fresh(found: list[tuple[_FreshTable, int, _FreshBatch]],
                     settled: dict) -> None:  # type: ignore[type-arg]
        for table, offset, fb in found:
            if fb in settled:
                table.where.pop(offset, None)
        for fb, (bits, table) in settled.items():
            fb.bits = bits
            if not bits:
                table.batches.pop(fb.first, None)

    def ack(self, receipt: str) -> None:
        if receipt[:1] == "~":
            with self.locks.pop:
                self.locks.check_open()
                hit = self._fresh_lookup(receipt)
                found = [hit] if hit is not None else []
                batch = self.state.new_batch()
                settled = self._settle_fresh(found, batch)
                if not settled:
                    raise UnknownReceipt(
                        "receipt is not in flight (already acked, or its invisible time ran out)"
                    )
                self.state.write(batch)
                self._apply_fresh(found, settled)
            return
        key = decode_receipt(receipt)
        with self.locks.pop:
            self.locks.check_open()
            if self.state.get_inflight(key) is None:
                raise UnknownReceipt(
                    "receipt is not in flight (already acked, or its invisible time ran out)"
                )
            batch = self.state.new_batch()
            batch.delete_inflight(key)
            self.state.write(batch)
            self._schedule().discard((key.visible_at, key.encode()))

    def ack_many(self, receipts: list[str]) -> None:
        """Ack several receipts in one write. Unlike :meth:`ack`, receipts that are no
        longer in flight are ignored (for consumers that settle in bulk and do not care
        which were already revived)."""
        with self.locks.pop:
            self.locks.check_open()
            keys, by_table = self._group_receipts(receipts)
            batch = self.state.new_batch()
            plan = self._settle_fresh_grouped(by_table, batch) if by_table else None
            for key in keys:
                batch.delete_inflight(key)
            if not batch.empty:
                self.state.write(batch)
            if plan:
                for table, offsets, new_bits in plan:
                    drop = table.where.pop
                    for offset in offsets:
                        drop(offset, None)
                    for fb, bits in new_bits.items():
                        fb.bits = bits
                        if not bits:
                            table.batches.pop(fb.first, None)
            times = self._times
            if times is not None:
                for key in keys:
                    times.discard((key.visible_at, key.encode()))

    def change_invisible_time(self, receipt: str, invisible_ms: int) -> str:
        if invisible_ms < 0:
            raise ValueError("invisible_ms cannot be negative")
        if receipt[:1] == "~":
            return self._change_fresh(receipt, invisible_ms)
        key = decode_receipt(receipt)
        with self.locks.pop:
            self.locks.check_open()
            current = self.state.get_inflight(key)
            if current is None:
                raise UnknownReceipt(
                    "receipt is not in flight (already acked, or its invisible time ran out)"
                )
            times = self._schedule()  # loaded before the write below
            new_key = InflightKey(now_ms() + invisible_ms, key.group, key.lmq, key.offset)
            batch = self.state.new_batch()
            batch.delete_inflight(key)
            batch.put_inflight(new_key, current.deliveries, current.popped_ms)
            self.state.write(batch)
            times.discard((key.visible_at, key.encode()))
            times.add((new_key.visible_at, new_key.encode()))
        return encode_receipt(new_key)

    def _change_fresh(self, receipt: str, invisible_ms: int) -> str:
        """A fresh delivery gets a new invisible time: it leaves its fresh record and
        becomes a durable in-flight record (one delivery), in one write."""
        with self.locks.pop:
            self.locks.check_open()
            hit = self._fresh_lookup(receipt)
            found = [hit] if hit is not None else []
            batch = self.state.new_batch()
            settled = self._settle_fresh(found, batch)
            if not settled:
                raise UnknownReceipt(
                    "receipt is not in flight (already acked, or its invisible time ran out)"
                )
            table, offset, fb = found[0]
            times = self._schedule()  # loaded before the write below
            new_key = InflightKey(now_ms() + invisible_ms, table.group, table.lmq, offset)
            batch.put_inflight(new_key, 1, fb.popped_ms)
            self.state.write(batch)
            self._apply_fresh(found, settled)
            times.add((new_key.visible_at, new_key.encode()))
        return encode_receipt(new_key)

    def requeue_many(self, receipts: list[str]) -> int:
        """Make each receipt's message visible again now (as ``change_invisible_time(r,
        0)`` then ``revive()`` would), in one write; receipts no longer in flight are
        ignored. Returns how many came back (or were dead-lettered)."""

        keys, fresh = _split_receipts(dict.fromkeys(receipts))
        state = self.state
        with self.locks.pop:
            self.locks.check_open()
            batch = state.new_batch()
            found = []
            settled = None
            back: list[Inflight] = []
            if fresh:
                found = [hit for hit in map(self._fresh_lookup, fresh) if hit is not None]
                settled = self._settle_fresh(found, batch)
                for table, offset, fb in found:
                    if fb in settled:
                        back.append(Inflight(InflightKey(0, table.group, table.lmq, offset),
                                             1, fb.popped_ms))
            times = self._schedule() if keys else None
            gone = []
            for key in keys:
                current = state.get_inflight(key)
                if current is None:
                    continue
                batch.delete_inflight(key)
                gone.append(key)
                back.append(current)
            woken: set[str] = set()
            dead: list[Inflight] = []
            for item in back:
                k = item.key
                if self.reader.lmq(k.lmq) is None:
                    continue
                limit = self._max_deliveries.get(k.group, self.config.max_deliveries)
                if limit and item.deliveries >= limit:
                    dead.append(item)
                else:
                    batch.put_retry(k.lmq, k.group, k.offset, item.deliveries)
                    woken.add(k.lmq)
            if not batch.empty:
                state.write(batch)
            if settled:
                self._apply_fresh(found, settled)
            if times is not None:
                for key in gone:
                    times.discard((key.visible_at, key.encode()))
            for item in dead:
                self._dead_letter(item)
        for lmq in woken:
            self.reader.notify(lmq)
        return len(back)

    def revive(self, now: int | None = None) -> int:
        """Make every message whose invisible time ran out visible again (or dead-letter
        it). Returns how many were revived or dead-lettered."""
        with self.locks.pop:
            self.locks.check_open()
            return self._revive_locked(now_ms() if now is None else now)

    def next_revive_at(self) -> int | None:
        """When the next in-flight message becomes due (ms), or None."""
        with self.locks.pop:
            times = self._schedule()
            due = times[0][0] if times else None
            if self._fresh_due is not None:  # exact: few batches are in flight at once
                fresh = None
                for table in list(self._tables.values()):
                    if not self._live(table):
                        continue
                    for fb in table.batches.values():
                        if fresh is None or fb.visible_at < fresh:
                            fresh = fb.visible_at
                self._fresh_due = fresh
                if fresh is not None and (due is None or fresh < due):
                    return fresh
            return due

    def _revive_locked(self, now: int) -> int:
        self._schedule()  # loads the state left by a previous run on first use
        total = 0
        if self._fresh_due is not None and self._fresh_due <= now:
            total = self._revive_fresh(now)
        times = self._schedule()
        if not times or times[0][0] > now:
            return total  # nothing due: no RocksDB scan
        woken: set[str] = set()
        while True:
            due = self.state.due_inflight(now, _REVIVE_BATCH)
            if not due:
                break
            batch = self.state.new_batch()
            for item in due:
                batch.delete_inflight(item.key)
                times.discard((item.key.visible_at, item.key.encode()))
                if self.reader.lmq(item.key.lmq) is None:
                    continue  # the LMQ was removed
                limit = self._max_deliveries.get(item.key.group, self.config.max_deliveries)
                if limit and item.deliveries >= limit:
                    self._dead_letter(item)
                else:
                    batch.put_retry(item.key.lmq, item.key.group, item.key.offset, item.deliveries)
                    woken.add(item.key.lmq)
                total += 1
            self.state.write(batch)
            if len(due) < _REVIVE_BATCH:
                break
        while times and times[0][0] <= now:  # stale: deleted without our knowing
            del times[0]
        for lmq in woken:
            self.reader.notify(lmq)
        return total

    def _revive_fresh(self, now: int) -> int:
        """Fresh deliveries past their invisible time: retries (or dead letters)."""
        batch = self.state.new_batch()
        total = 0
        woken: set[str] = set()
        dead: list[Inflight] = []
        next_due: int | None = None
        for table in list(self._tables.values()):
            if not self._live(table):
                continue
            limit = self._max_deliveries.get(table.group, self.config.max_deliveries)
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
                    if limit and limit <= 1:
                        dead.append(Inflight(InflightKey(fb.visible_at, table.group,
                                                         table.lmq, offset), 1, fb.popped_ms))
                    else:
                        batch.put_retry(table.lmq, table.group, offset, 1)
                        woken.add(table.lmq)
                    total += 1
        if not batch.empty:
            self.state.write(batch)
        self._fresh_due = next_due
        for item in dead:
            self._dead_letter(item)
        for lmq in woken:
            self.reader.notify(lmq)
        return total

    def _dead_letter(self, item: Inflight) -> None:
        msg = self.reader.read_at(item.key.lmq, item.key.offset)
        if msg is None:
            return
        rec = msg.record
        props = dict(rec.properties)
        props["DLQ_ORIGIN_LMQ"] = item.key.lmq.encode()
        props["DLQ_ORIGIN_OFFSET"] = str(item.key.offset).encode()
        props["DLQ_DELIVERIES"] = str(item.deliveries).encode()
        dlq = self.config.dead_letter_prefix + item.key.group
        copy = Message(
            topic=rec.topic,
            body=rec.body,
            properties=props,
            origin=rec.origin,
            tag=rec.tag,
            qos=rec.qos,
            retain=False,
            protocol=rec.protocol,
            born_ms=rec.born_ms,
        )
        self.append(copy, [dlq])
        self.dead_lettered += 1
