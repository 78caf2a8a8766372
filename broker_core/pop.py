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

Thread safety: every method takes the pop lock; the dead-letter append takes the
store's append lock inside it (the lock order is always pop lock, then append lock).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from broker_core.consumer_state import Inflight, InflightKey
from broker_core.errors import UnknownLmq, UnknownReceipt
from broker_core.record import Message

if TYPE_CHECKING:
    from broker_core.store import MessageStore, StoredMessage

_REVIVE_BATCH = 1024


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    message: StoredMessage
    receipt: str
    #: 1 on the first delivery, then one more each time it comes back unacked.
    deliveries: int


def encode_receipt(key: InflightKey) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_receipt(receipt: str) -> InflightKey:
    try:
        raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        return InflightKey.decode(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise UnknownReceipt(f"malformed receipt handle {receipt!r}") from None


class PopConsumer:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.dead_lettered = 0
        self._max_deliveries: dict[str, int] = {}
        # The in-flight records' (visible_at, key) in memory, loaded on first use: whether
        # anything is due is then a lookup, not a RocksDB scan (which also has to step
        # over the tombstones every ack leaves in the pop table).
        self._times: SortedList | None = None

    def _schedule(self) -> SortedList:
        if self._times is None:
            self._times = SortedList(
                (item.key.visible_at, item.key.encode()) for item in self.store.state.all_inflight()
            )
        return self._times

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

    def release_group(self, group: str) -> int:
        """Every in-flight message of ``group`` becomes visible again at once."""
        store = self.store
        with store._pop_lock:
            store._check_open()
            batch = store.state.new_batch()
            released = 0
            times = self._schedule()
            for item in store.state.all_inflight():
                if item.key.group != group:
                    continue
                batch.delete_inflight(item.key)
                times.discard((item.key.visible_at, item.key.encode()))
                if store.lmq(item.key.lmq) is not None:
                    batch.put_retry(item.key.lmq, group, item.key.offset, item.deliveries)
                    released += 1
            if not batch.empty:
                store.state.write(batch)
        return released

    def pop(
        self, group: str, lmq: str, max_messages: int, invisible_ms: int
    ) -> list[PoppedMessage]:
        """Pop up to ``max_messages`` of ``lmq`` for ``group``: first the ones that came
        back unacked, then new ones from the group's offset (the LMQ's minimum for a
        group that never popped it)."""
        from broker_core.store import now_ms

        if invisible_ms <= 0:
            raise ValueError("invisible_ms must be positive")
        store = self.store
        with store._pop_lock:
            store._check_open()
            now = now_ms()
            self._revive_locked(now)
            if store.lmq(lmq) is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
            visible_at = now + invisible_ms
            state = store.state
            batch = state.new_batch()
            added: list[InflightKey] = []
            times = self._schedule()  # loaded before this batch is written
            out: list[PoppedMessage] = []
            for offset, deliveries in state.retries(lmq, group, max_messages):
                batch.delete_retry(lmq, group, offset)
                msg = store.read_at(lmq, offset)
                if msg is None:  # removed by retention while it waited
                    continue
                key = InflightKey(visible_at, group, lmq, offset)
                batch.put_inflight(key, deliveries + 1, now)
                added.append(key)
                out.append(PoppedMessage(msg, encode_receipt(key), deliveries + 1))
            remaining = max_messages - len(out)
            if remaining > 0:
                start = state.get_offset(lmq, group) or 0
                result = store.pull(lmq, start, remaining)
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

    def ack(self, receipt: str) -> None:
        key = decode_receipt(receipt)
        store = self.store
        with store._pop_lock:
            store._check_open()
            if store.state.get_inflight(key) is None:
                raise UnknownReceipt(
                    "receipt is not in flight (already acked, or its invisible time ran out)"
                )
            batch = store.state.new_batch()
            batch.delete_inflight(key)
            store.state.write(batch)
            self._schedule().discard((key.visible_at, key.encode()))

    def ack_many(self, receipts: list[str]) -> None:
        """Ack several receipts in one write. Unlike :meth:`ack`, receipts that are no
        longer in flight are ignored (for consumers that settle in bulk and do not care
        which were already revived)."""
        keys = []
        for receipt in receipts:
            try:
                keys.append(decode_receipt(receipt))
            except UnknownReceipt:
                continue
        store = self.store
        with store._pop_lock:
            store._check_open()
            batch = store.state.new_batch()
            for key in keys:
                batch.delete_inflight(key)
            if not batch.empty:
                store.state.write(batch)
            times = self._times
            if times is not None:
                for key in keys:
                    times.discard((key.visible_at, key.encode()))

    def change_invisible_time(self, receipt: str, invisible_ms: int) -> str:
        from broker_core.store import now_ms

        if invisible_ms < 0:
            raise ValueError("invisible_ms cannot be negative")
        key = decode_receipt(receipt)
        store = self.store
        with store._pop_lock:
            store._check_open()
            current = store.state.get_inflight(key)
            if current is None:
                raise UnknownReceipt(
                    "receipt is not in flight (already acked, or its invisible time ran out)"
                )
            times = self._schedule()  # loaded before the write below
            new_key = InflightKey(now_ms() + invisible_ms, key.group, key.lmq, key.offset)
            batch = store.state.new_batch()
            batch.delete_inflight(key)
            batch.put_inflight(new_key, current.deliveries, current.popped_ms)
            store.state.write(batch)
            times.discard((key.visible_at, key.encode()))
            times.add((new_key.visible_at, new_key.encode()))
        return encode_receipt(new_key)

    def revive(self, now: int | None = None) -> int:
        """Make every message whose invisible time ran out visible again (or dead-letter
        it). Returns how many were revived or dead-lettered."""
        from broker_core.store import now_ms

        with self.store._pop_lock:
            self.store._check_open()
            return self._revive_locked(now_ms() if now is None else now)

    def next_revive_at(self) -> int | None:
        """When the next in-flight message becomes due (ms), or None."""
        with self.store._pop_lock:
            times = self._schedule()
            return times[0][0] if times else None

    def _revive_locked(self, now: int) -> int:
        store = self.store
        times = self._schedule()
        if not times or times[0][0] > now:
            return 0  # nothing due: no RocksDB scan
        total = 0
        woken: set[str] = set()
        while True:
            due = store.state.due_inflight(now, _REVIVE_BATCH)
            if not due:
                break
            batch = store.state.new_batch()
            for item in due:
                batch.delete_inflight(item.key)
                times.discard((item.key.visible_at, item.key.encode()))
                if store.lmq(item.key.lmq) is None:
                    continue  # the LMQ was removed
                limit = self._max_deliveries.get(item.key.group, store.config.max_deliveries)
                if limit and item.deliveries >= limit:
                    self._dead_letter(item)
                else:
                    batch.put_retry(item.key.lmq, item.key.group, item.key.offset, item.deliveries)
                    woken.add(item.key.lmq)
                total += 1
            store.state.write(batch)
            if len(due) < _REVIVE_BATCH:
                break
        while times and times[0][0] <= now:  # stale: deleted without our knowing
            del times[0]
        for lmq in woken:
            store.notify(lmq)
        return total

    def _dead_letter(self, item: Inflight) -> None:
        store = self.store
        msg = store.read_at(item.key.lmq, item.key.offset)
        if msg is None:
            return
        rec = msg.record
        props = dict(rec.properties)
        props["DLQ_ORIGIN_LMQ"] = item.key.lmq.encode()
        props["DLQ_ORIGIN_OFFSET"] = str(item.key.offset).encode()
        props["DLQ_DELIVERIES"] = str(item.deliveries).encode()
        dlq = store.config.dead_letter_prefix + item.key.group
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
        store.append(copy, [dlq])
        self.dead_lettered += 1
