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

FIFO pops (:meth:`PopConsumer.pop_fifo`) keep each message group's order for a pop
group: a group's next message is given only after the previous one was acked (state and
transitions in :mod:`broker_core.fifo`). Their deliveries are in the durable in-flight
table like any pop's; ack, change of invisible time, requeue and revive find a group's
head by offset and move the group on (or make its head wait a backoff) instead of
writing a retry record.

The receipt codecs live in :mod:`broker_core.receipts`, the two in-flight tables in
:mod:`broker_core.inflight`; this module is the orchestration: pop, ack, change the
invisible time, requeue, revive and dead-letter.

Thread safety: every method takes the pop lock; the dead-letter append takes the
store's append lock inside it (the lock order is always pop lock, then append lock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from broker_core.clock import now_ms
from broker_core.config import StoreConfig
from broker_core.consumer_state import (
    ConsumerState,
    Inflight,
    InflightKey,
    StateBatch,
    fresh_prefix,
)
from broker_core.errors import StoreError, UnknownLmq, UnknownReceipt
from broker_core.fifo import BlockedGroup, FifoTable, Head, Lane, blocked_in
from broker_core.fifo_pop import FifoPop
from broker_core.inflight import DurableInflight, FreshTable, Hit, MemoryInflight, Settled
from broker_core.locks import StoreLocks
from broker_core.receipts import decode_receipt, encode_receipt, is_memory, split_receipts
from broker_core.record import Message
from broker_core.results import AppendResult, LmqInfo, PoppedMessage, PullResult, StoredMessage

_REVIVE_BATCH = 1024
_NOT_IN_FLIGHT = "receipt is not in flight (already acked, or its invisible time ran out)"


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
    and its configuration, and ``replica``: whether the store is a slave of a broker
    group now (its master revives; the pop state arrives replicated).

    The store exposes it as ``store.pop`` (as RocketMQ's message store exposes its timer
    store): front ends call these methods there."""

    def __init__(
        self,
        state: ConsumerState,
        reader: LmqReader,
        append: Appender,
        locks: StoreLocks,
        config: StoreConfig,
        replica: Callable[[], bool] = lambda: False,
    ) -> None:
        self.state = state
        self.replica = replica
        #: Tables were loaded while the store was a slave (see :meth:`load_tables`).
        self._loaded_fenced = False
        self.reader = reader
        self.append = append
        self.locks = locks
        self.config = config
        self.dead_lettered = 0
        self._max_deliveries: dict[str, int] = {}
        self.durable = DurableInflight(state)
        self.memory = MemoryInflight(state, self._lmq_id)
        #: The groups whose first deliveries go to the memory table.
        self._memory_groups: set[str] = set()
        self.fifo = FifoTable(state, config)
        self.fifo_pop = FifoPop(self)

    def _lmq_id(self, name: str) -> int | None:
        info = self.reader.lmq(name)
        return None if info is None else info.id

    def load_tables(self) -> None:
        """Load the tables' state left by a previous run (both in-flight tables and the
        FIFO lanes), on first use. Called before any write that adds durable records
        (they would otherwise be loaded twice). Pop lock held (also by
        :mod:`broker_core.fifo_pop`, as are the next three)."""
        if self.replica():
            # A slave: the master's pop state arrives replicated behind these tables,
            # so what is loaded now is loaded again once the fence is lifted.
            self._loaded_fenced = True
        elif self._loaded_fenced:
            self._loaded_fenced = False
            self.durable.forget()
            self.memory.forget()
            self.fifo.invalidate()
        if not self.durable.loaded:
            self.durable.schedule()
            self.memory.load()
        if not self.fifo.loaded:
            self.fifo.load()

    def write_batch(self, batch: StateBatch) -> None:
        """Write a batch that changed FIFO state (reloaded from disk if it fails)."""
        try:
            self.state.write(batch)
        except BaseException:
            self.fifo.invalidate()
            raise

    def _limit(self, group: str) -> int:
        return self._max_deliveries.get(group, self.config.max_deliveries)

    def set_memory_inflight(self, group: str, enabled: bool = True) -> None:
        """Track first-time deliveries of ``group`` in memory with one compact durable
        record per pop call (see the module docstring). Same guarantees; cheaper."""
        if enabled:
            self._memory_groups.add(group)
        else:
            self._memory_groups.discard(group)

    def forget(self, key: InflightKey) -> None:
        """An in-flight record was deleted outside this class (LMQ removal)."""
        self.durable.removed((key,))

    def forget_lmqs(self, names: Sequence[str]) -> None:
        """LMQs were removed with all their state records (LMQ removal)."""
        for name in names:
            self.fifo.drop_lmq(name)

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

    def inflight_messages(
        self, group: str, lmq: str, after: int = -1, limit: int = 100
    ) -> list[Inflight]:
        """Read-only: the messages of ``lmq`` popped by ``group`` and not yet acked, by
        offset, the first ``limit`` after offset ``after``: each with its deliveries, the
        time it was popped and the time it becomes visible again (a first delivery of a
        memory group: one delivery, the time of its pop call). Reads the state RocksDB as
        :meth:`inflight_count` does (no pop lock; nothing written, nothing loaded)."""
        found = [
            item
            for item in self.state.all_inflight()
            if item.key.group == group and item.key.lmq == lmq and item.key.offset > after
        ]
        for name, g, first, _count, popped, visible_at, bits in self.state.all_fresh():
            if g != group or name != lmq:
                continue
            while bits:
                low = bits & -bits
                offset = first + low.bit_length() - 1
                bits ^= low
                if offset > after:
                    found.append(Inflight(InflightKey(visible_at, g, name, offset), 1, popped))
        found.sort(key=lambda item: item.key.offset)
        return found[:limit]

    def release_group(self, group: str) -> int:
        """Every in-flight message of ``group`` becomes visible again at once."""
        with self.locks.pop:
            self.locks.check_open()
            batch = self.state.new_batch()
            released = 0
            self.load_tables()
            gone: list[InflightKey] = []
            for item in self.state.all_inflight():
                if item.key.group != group:
                    continue
                batch.delete_inflight(item.key)
                gone.append(item.key)
                if self.reader.lmq(item.key.lmq) is not None:
                    hit = self.fifo.find(group, item.key.lmq, item.key.offset)
                    if hit is not None:  # a FIFO head: ready again, first of its group
                        self.fifo.retry_at(hit[0], hit[1], 0, batch)
                    else:
                        batch.put_retry(item.key.lmq, group, item.key.offset, item.deliveries)
                    released += 1
            self.durable.removed(gone)
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
                self.write_batch(batch)
            self.memory.drop_group(group)
        return released

    def pop(
        self, group: str, lmq: str, max_messages: int, invisible_ms: int,
        now: int | None = None,
    ) -> list[PoppedMessage]:
        """Pop up to ``max_messages`` of ``lmq`` for ``group``: first the ones that came
        back unacked, then new ones from the group's offset (the LMQ's minimum for a
        group that never popped it). Each is invisible until ``now + invisible_ms``
        (``now``: wall-clock ms, default the store's clock; a front end that pops several
        LMQs for one request passes one time to all, so their receipts share one visible
        time)."""
        if invisible_ms <= 0:
            raise ValueError("invisible_ms must be positive")
        with self.locks.pop:
            self.locks.check_open()
            if now is None:
                now = now_ms()
            self.revive_locked(now)
            info = self.reader.lmq(lmq)
            if info is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
            visible_at = now + invisible_ms
            state = self.state
            batch = state.new_batch()
            added: list[InflightKey] = []
            self.load_tables()  # before this batch is written
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
                    table = self.memory.table(group, lmq, info.id)
                    return self._pop_fresh(table, result, visible_at, now, batch, added, out)
                for msg in result.messages:
                    key = InflightKey(visible_at, group, lmq, msg.offset)
                    batch.put_inflight(key, 1, now)
                    added.append(key)
                    out.append(PoppedMessage(msg, encode_receipt(key), 1))
                if result.next_offset != start:
                    batch.set_offset(lmq, group, result.next_offset)
            if not batch.empty:
                state.write(batch)
                self.durable.added(added)
            return out

    # -- FIFO (broker_core.fifo_pop) ------------------------------------------------------

    def pop_fifo(
        self, group: str, lmq: str, max_messages: int, invisible_ms: int,
        group_property: str, now: int | None = None,
    ) -> list[PoppedMessage]:
        """See :meth:`broker_core.fifo_pop.FifoPop.pop`."""
        return self.fifo_pop.pop(group, lmq, max_messages, invisible_ms, group_property, now)

    def fifo_ready(self, group: str, lmq: str, now: int | None = None) -> bool:
        return self.fifo_pop.ready(group, lmq, now)

    def blocked_groups(self, group: str | None = None) -> list[BlockedGroup]:
        """FIFO message groups whose head was delivered more than once or waits for its
        retry: since when, how often, how many wait behind it. Works on a read-only
        store too (from the durable records: ``lmq groups show`` beside a gateway)."""
        if self.locks.read_only:
            found = blocked_in(self.state, group)
            return sorted(found, key=lambda b: (b.since_ms, b.group, b.lmq, b.message_group))
        return self.fifo_pop.blocked(group)

    def release_message_group(self, group: str, lmq: str, message_group: str,
                              dead_letter_lmq: str | None = None) -> int | None:
        """Release a blocked FIFO message group: its head goes to ``dead_letter_lmq``
        (default ``group``'s dead-letter LMQ) and the group moves on. Returns the head's
        offset (None: no such group). See :meth:`broker_core.fifo_pop.FifoPop.release`."""
        if self.locks.read_only:
            raise StoreError("the store was opened read-only")
        return self.fifo_pop.release(group, lmq, message_group, dead_letter_lmq)

    def count_retries(self, group: str, lmq: str) -> int:
        """Messages of ``lmq`` popped by ``group`` that came back unacked and wait to be
        popped again."""
        return self.state.count_retries(lmq, group)

    @staticmethod
    def receipt(group: str, lmq: str, offset: int, visible_at: int) -> str:
        """The receipt handle :meth:`pop` gave ``group`` for ``offset`` of ``lmq`` when
        its invisible time ends at ``visible_at`` (epoch ms). A protocol whose own
        receipts carry these fields (RocketMQ's pop ExtraInfo) rebuilds the store's
        handle from them instead of keeping a table."""
        return encode_receipt(InflightKey(visible_at, group, lmq, offset))

    @staticmethod
    def receipt_visible_at(receipt: str) -> int:
        """When the message of ``receipt`` becomes visible again (epoch ms);
        :class:`~broker_core.errors.UnknownReceipt` if it is not a receipt handle."""
        return decode_receipt(receipt).visible_at

    def _fifo_back(self, lane: Lane, head: Head, item: Inflight, now: int, at: int,
                   batch: StateBatch, woken: set[str]) -> None:
        """A FIFO head's delivery ended unacked (its in-flight record is deleted in
        ``batch``): dead-lettered after the group's limit (the group moves on), else
        ready again at ``at``, first of its group."""
        limit = self._limit(lane.group)
        if limit and item.deliveries >= limit:
            self.dead_letter(item)  # before the batch is written (never lost)
            if self.fifo.advance(lane, head, now, batch) is not None:
                woken.add(lane.lmq)
            return
        self.fifo.retry_at(lane, head, at, batch)
        if at <= now:
            woken.add(lane.lmq)

    def _pop_fresh(
        self,
        table: FreshTable,
        result: PullResult,
        visible_at: int,
        now: int,
        batch: StateBatch,
        added: list[InflightKey],
        out: list[PoppedMessage],
    ) -> list[PoppedMessage]:
        """The end of :meth:`pop` for a memory in-flight group: the new messages go to
        one fresh record (in the same write as the retries taken and the offset)."""
        messages = result.messages
        first = messages[0].offset
        count = messages[-1].offset - first + 1
        if count == len(messages):
            bits = (1 << count) - 1
        else:  # holes (never with the current index; cheap to allow)
            bits = 0
            for msg in messages:
                bits |= 1 << (msg.offset - first)
        batch.put_fresh(table.prefix, first, count, now, visible_at, bits)
        batch.set_offset(table.lmq, table.group, result.next_offset)
        self.state.write(batch)
        if added:
            self.durable.added(added)
        offsets = [msg.offset for msg in messages]
        self.memory.track(table, offsets, first, count, bits, visible_at, now)
        prefix = table.receipt_prefix
        for msg in messages:
            out.append(PoppedMessage(msg, prefix + str(msg.offset), 1))
        return out

    def _settle_one(self, receipt: str, batch: StateBatch) -> tuple[list[Hit], Settled]:
        """A memory receipt's bit cleared in ``batch``, or :class:`UnknownReceipt`."""
        hit = self.memory.lookup(receipt)
        found = [hit] if hit is not None else []
        settled = self.memory.settle(found, batch)
        if not settled:
            raise UnknownReceipt(_NOT_IN_FLIGHT)
        return found, settled

    def ack(self, receipt: str) -> None:
        if is_memory(receipt):
            with self.locks.pop:
                self.locks.check_open()
                batch = self.state.new_batch()
                found, settled = self._settle_one(receipt, batch)
                self.state.write(batch)
                self.memory.apply(found, settled)
            return
        key = decode_receipt(receipt)
        with self.locks.pop:
            self.locks.check_open()
            if self.state.get_inflight(key) is None:
                raise UnknownReceipt(_NOT_IN_FLIGHT)
            self.load_tables()
            batch = self.state.new_batch()
            batch.delete_inflight(key)
            hit = self.fifo.find(key.group, key.lmq, key.offset)
            if hit is not None:  # a FIFO head: its group moves on
                self.fifo.advance(hit[0], hit[1], now_ms(), batch)
            self.write_batch(batch)
            self.durable.removed((key,))
        if hit is not None:
            self.reader.notify(key.lmq)

    def ack_many(self, receipts: list[str]) -> None:
        """Ack several receipts in one write. Unlike :meth:`ack`, receipts that are no
        longer in flight are ignored (for consumers that settle in bulk and do not care
        which were already revived)."""
        with self.locks.pop:
            self.locks.check_open()
            keys, by_table = self.memory.group_receipts(receipts)
            batch = self.state.new_batch()
            plan = self.memory.settle_grouped(by_table, batch) if by_table else None
            if keys:
                self.load_tables()
            woken = self._ack_fifo(keys, batch) if keys and self.fifo.lanes else set()
            for key in keys:
                batch.delete_inflight(key)
            if not batch.empty:
                self.write_batch(batch)
            if plan:
                self.memory.apply_plan(plan)
            self.durable.removed(keys)
        for lmq in woken:
            self.reader.notify(lmq)

    def _ack_fifo(self, keys: list[InflightKey], batch: StateBatch) -> set[str]:
        """The FIFO heads among ``keys`` still in flight under those keys: their groups
        move on in ``batch``. Returns the LMQs to notify."""
        woken: set[str] = set()
        now = now_ms()
        for key in keys:
            hit = self.fifo.find(key.group, key.lmq, key.offset)
            if hit is None or not hit[1].inflight or self.state.get_inflight(key) is None:
                continue  # not a head, or a stale receipt of one
            self.fifo.advance(hit[0], hit[1], now, batch)
            woken.add(key.lmq)
        return woken

    def change_invisible_time(self, receipt: str, invisible_ms: int) -> str:
        if invisible_ms < 0:
            raise ValueError("invisible_ms cannot be negative")
        if is_memory(receipt):
            return self._change_fresh(receipt, invisible_ms)
        key = decode_receipt(receipt)
        with self.locks.pop:
            self.locks.check_open()
            current = self.state.get_inflight(key)
            if current is None:
                raise UnknownReceipt(_NOT_IN_FLIGHT)
            self.load_tables()  # before the write below
            new_key = InflightKey(now_ms() + invisible_ms, key.group, key.lmq, key.offset)
            batch = self.state.new_batch()
            batch.delete_inflight(key)
            batch.put_inflight(new_key, current.deliveries, current.popped_ms)
            self.state.write(batch)
            self.durable.removed((key,))
            self.durable.added((new_key,))
        return encode_receipt(new_key)

    def _change_fresh(self, receipt: str, invisible_ms: int) -> str:
        """A fresh delivery gets a new invisible time: it leaves its fresh record and
        becomes a durable in-flight record (one delivery), in one write."""
        with self.locks.pop:
            self.locks.check_open()
            batch = self.state.new_batch()
            found, settled = self._settle_one(receipt, batch)
            table, offset, fb = found[0]
            self.load_tables()  # before the write below
            new_key = InflightKey(now_ms() + invisible_ms, table.group, table.lmq, offset)
            batch.put_inflight(new_key, 1, fb.popped_ms)
            self.state.write(batch)
            self.memory.apply(found, settled)
            self.durable.added((new_key,))
        return encode_receipt(new_key)

    def requeue_many(self, receipts: list[str]) -> int:
        """Make each receipt's message visible again now (as ``change_invisible_time(r,
        0)`` then ``revive()`` would), in one write; receipts no longer in flight are
        ignored. Returns how many came back (or were dead-lettered)."""
        keys, fresh = split_receipts(dict.fromkeys(receipts))
        state = self.state
        with self.locks.pop:
            self.locks.check_open()
            batch = state.new_batch()
            found: list[Hit] = []
            settled: Settled | None = None
            back: list[Inflight] = []
            if fresh:
                found = [hit for hit in map(self.memory.lookup, fresh) if hit is not None]
                settled = self.memory.settle(found, batch)
                for table, offset, fb in found:
                    if fb in settled:
                        back.append(Inflight(InflightKey(0, table.group, table.lmq, offset),
                                             1, fb.popped_ms))
            if keys:
                self.load_tables()
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
            now = now_ms()
            for item in back:
                k = item.key
                if self.reader.lmq(k.lmq) is None:
                    continue
                limit = self._limit(k.group)
                hit = self.fifo.find(k.group, k.lmq, k.offset) if self.fifo.lanes else None
                if hit is not None:
                    self._fifo_back(hit[0], hit[1], item, now, 0, batch, woken)
                elif limit and item.deliveries >= limit:
                    dead.append(item)
                else:
                    batch.put_retry(k.lmq, k.group, k.offset, item.deliveries)
                    woken.add(k.lmq)
            if not batch.empty:
                self.write_batch(batch)
            if settled:
                self.memory.apply(found, settled)
            self.durable.removed(gone)
            for item in dead:
                self.dead_letter(item)
        for lmq in woken:
            self.reader.notify(lmq)
        return len(back)

    def revive(self, now: int | None = None) -> int:
        """Make every message whose invisible time ran out visible again (or dead-letter
        it). Returns how many were revived or dead-lettered (none on a slave of a broker
        group: its master revives)."""
        if self.replica():
            return 0
        with self.locks.pop:
            self.locks.check_open()
            return self.revive_locked(now_ms() if now is None else now)

    def next_revive_at(self) -> int | None:
        """When the next in-flight message becomes due (ms), or None (also on a slave of
        a broker group: its master revives)."""
        if self.replica():
            return None
        with self.locks.pop:
            self.load_tables()
            times = [t for t in (self.durable.next_due(), self.memory.next_due(),
                                 self.fifo.next_wake()) if t is not None]
            return min(times, default=None)

    def revive_locked(self, now: int) -> int:
        """:meth:`revive` with the pop lock held."""
        self.load_tables()
        total = 0
        for lmq in self.fifo.due_wakes(now):  # FIFO heads whose backoff ended
            self.reader.notify(lmq)
        if self.memory.may_be_due(now):
            total = self._revive_fresh(now)
        durable = self.durable
        due_at = durable.next_due()
        if due_at is None or due_at > now:
            return total  # nothing due: no RocksDB scan
        woken: set[str] = set()
        while True:
            batch = self.state.new_batch()
            due = durable.take_due(now, batch, _REVIVE_BATCH)
            if not due:
                break
            for item in due:
                if self.reader.lmq(item.key.lmq) is None:
                    continue  # the LMQ was removed
                limit = self._limit(item.key.group)
                hit = self.fifo.find(item.key.group, item.key.lmq, item.key.offset)
                if hit is not None:
                    # the backoff runs from when the invisible time ran out
                    at = item.key.visible_at + self.fifo.backoff_ms(item.deliveries)
                    self._fifo_back(hit[0], hit[1], item, now, at, batch, woken)
                elif limit and item.deliveries >= limit:
                    self.dead_letter(item)
                else:
                    batch.put_retry(item.key.lmq, item.key.group, item.key.offset, item.deliveries)
                    woken.add(item.key.lmq)
                total += 1
            self.write_batch(batch)
            if len(due) < _REVIVE_BATCH:
                break
        durable.prune(now)  # stale entries: deleted without our knowing
        for lmq in woken:
            self.reader.notify(lmq)
        return total

    def _revive_fresh(self, now: int) -> int:
        """Fresh deliveries past their invisible time: retries (or dead letters)."""
        batch = self.state.new_batch()
        woken: set[str] = set()
        dead: list[Inflight] = []
        due = self.memory.take_due(now, batch)
        for item in due:
            limit = self._limit(item.key.group)
            if limit and item.deliveries >= limit:
                dead.append(item)
            else:
                batch.put_retry(item.key.lmq, item.key.group, item.key.offset, 1)
                woken.add(item.key.lmq)
        if not batch.empty:
            self.state.write(batch)
        for item in dead:
            self.dead_letter(item)
        for lmq in woken:
            self.reader.notify(lmq)
        return len(due)

    def dead_letter(self, item: Inflight, lmq: str | None = None) -> None:
        """Append a copy of ``item``'s message to ``lmq`` (default the group's
        dead-letter LMQ); nothing if retention removed it."""
        msg = self.reader.read_at(item.key.lmq, item.key.offset)
        if msg is None:
            return
        self.append(dead_letter_copy(msg, item),
                    [lmq or self.config.dead_letter_prefix + item.key.group])
        self.dead_lettered += 1


def dead_letter_copy(msg: StoredMessage, item: Inflight) -> Message:
    """The message a dead-letter LMQ gets for ``msg``: the same message (not retained)
    with where it came from and how often it was delivered in its properties."""
    rec = msg.record
    props = dict(rec.properties)
    props["DLQ_ORIGIN_LMQ"] = item.key.lmq.encode()
    props["DLQ_ORIGIN_OFFSET"] = str(item.key.offset).encode()
    props["DLQ_DELIVERIES"] = str(item.deliveries).encode()
    return Message(
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
