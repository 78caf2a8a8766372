"""FIFO pop orchestration (the state and its transitions: :mod:`broker_core.fifo`): the
pop itself, the readiness test a long poll asks, the blocked-group view and an
operator's release, over a :class:`~broker_core.pop.PopConsumer`'s tables and locks.
The hooks that end a FIFO head's delivery (ack, requeue, revive) stay in
:mod:`broker_core.pop`, beside the plain pop's.

Thread safety: every method takes the consumer's pop lock (the dead-letter append takes
the store's append lock inside it, as everywhere in pop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core.clock import now_ms
from broker_core.consumer_state import Inflight, InflightKey
from broker_core.errors import UnknownLmq
from broker_core.fifo import BlockedGroup
from broker_core.receipts import encode_receipt
from broker_core.results import PoppedMessage, StoredMessage

if TYPE_CHECKING:
    from broker_core.pop import PopConsumer

__all__ = ["FifoPop"]


class FifoPop:
    """The FIFO side of a :class:`~broker_core.pop.PopConsumer` (it owns one)."""

    __slots__ = ("c",)

    def __init__(self, consumer: PopConsumer) -> None:
        self.c = consumer

    def pop(
        self, group: str, lmq: str, max_messages: int, invisible_ms: int,
        group_property: str, now: int | None = None,
    ) -> list[PoppedMessage]:
        """A FIFO pop (see :mod:`broker_core.fifo`): up to ``max_messages`` of ``lmq`` for
        ``group``, each the oldest unacked message of its message group (the value of
        property ``group_property``; a message without it is its own group). First the
        ungrouped messages that came back, then the groups' heads that are ready again
        (oldest ``ready_at`` first), then new messages from the group's offset: the
        first of a group without a head is delivered, later ones are parked."""
        c = self.c
        if invisible_ms <= 0:
            raise ValueError("invisible_ms must be positive")
        with c.locks.pop:
            c.locks.check_open()
            if now is None:
                now = now_ms()
            c.revive_locked(now)
            if c.reader.lmq(lmq) is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
            c.load_tables()
            visible_at = now + invisible_ms
            state, fifo, read_at = c.state, c.fifo, c.reader.read_at
            batch = state.new_batch()
            added: list[InflightKey] = []
            out: list[PoppedMessage] = []

            def give(msg: StoredMessage, deliveries: int) -> None:
                key = InflightKey(visible_at, group, lmq, msg.offset)
                batch.put_inflight(key, deliveries, now)
                added.append(key)
                out.append(PoppedMessage(msg, encode_receipt(key), deliveries))

            for offset, deliveries in state.retries(lmq, group, max_messages):
                batch.delete_retry(lmq, group, offset)  # ungrouped messages back
                msg = read_at(lmq, offset)
                if msg is not None:
                    give(msg, deliveries + 1)
            lane = fifo.lane(group, lmq)
            while len(out) < max_messages:
                head = lane.next_ready(now)
                if head is None:
                    break
                msg = read_at(lmq, head.offset)
                if msg is None:  # removed by retention while it waited: the group moves on
                    fifo.advance(lane, head, now, batch)
                    lane = fifo.lane(group, lmq)
                    continue
                fifo.deliver(lane, head, now, batch)
                give(msg, head.deliveries)
            start = state.get_offset(lmq, group) or 0
            pos, scanned, limit = start, 0, c.config.fifo_scan_limit
            heads = lane.heads
            while len(out) < max_messages and scanned < limit:
                # Read no more than could be delivered: a pull is consumed whole (the
                # pop stops early only at its last message), so each message of the
                # LMQ is read once, delivered or parked, never read again.
                want = min(max_messages - len(out), limit - scanned)
                result = c.reader.pull(lmq, pos, want)
                if not result.messages:
                    pos = result.next_offset
                    break
                for msg in result.messages:
                    scanned += 1
                    pos = msg.offset + 1
                    raw = msg.record.properties.get(group_property)
                    if not raw:
                        give(msg, 1)
                    else:
                        mgroup = raw.decode(errors="replace")
                        if mgroup in heads:
                            fifo.park(lane, mgroup, msg.offset, batch)
                        else:
                            fifo.start(lane, mgroup, msg.offset, now, batch)
                            give(msg, 1)
                    if len(out) >= max_messages or scanned >= limit:
                        break
                else:
                    pos = result.next_offset
            if pos != start:
                batch.set_offset(lmq, group, pos)
            if not lane.heads and not lane.parked:
                fifo.lanes.pop((group, lmq), None)
            if not batch.empty:
                c.write_batch(batch)
                c.durable.added(added)
            return out

    def ready(self, group: str, lmq: str, now: int | None = None) -> bool:
        """Whether a FIFO pop of ``lmq`` by ``group`` has a head ready to deliver again
        (new messages past the offset are the caller's to see)."""
        c = self.c
        with c.locks.pop:
            c.load_tables()
            return c.fifo.has_ready(group, lmq, now_ms() if now is None else now)

    def blocked(self, group: str | None = None) -> list[BlockedGroup]:
        """The blocked FIFO message groups (of one pop group, or all), oldest first."""
        c = self.c
        with c.locks.pop:
            c.load_tables()
            found = [b for b in c.fifo.blocked() if group is None or b.group == group]
        return sorted(found, key=lambda b: (b.since_ms, b.group, b.lmq, b.message_group))

    def release(self, group: str, lmq: str, message_group: str,
                dead_letter_lmq: str | None = None) -> int | None:
        """An operator releases a FIFO message group of ``group`` on ``lmq``: its head goes
        to the dead-letter LMQ (``dead_letter_lmq``, default the group's) in flight or
        not (a receipt of it is void after), and the group moves on. Returns the head's
        offset, or None if the group has no head."""
        c = self.c
        with c.locks.pop:
            c.locks.check_open()
            c.load_tables()
            lane = c.fifo.lanes.get((group, lmq))
            head = None if lane is None else lane.heads.get(message_group)
            if lane is None or head is None:
                return None
            found = None
            if head.inflight:
                found = next((i for i in c.state.all_inflight()
                              if i.key.group == group and i.key.lmq == lmq
                              and i.key.offset == head.offset), None)
            item = found or Inflight(InflightKey(0, group, lmq, head.offset),
                                     head.deliveries, head.since_ms)
            c.dead_letter(item, dead_letter_lmq)  # first: a crash before the write
            # below copies it twice, never loses it
            batch = c.state.new_batch()
            if found is not None:
                batch.delete_inflight(found.key)
            c.fifo.advance(lane, head, now_ms(), batch)
            c.write_batch(batch)
            if found is not None:
                c.durable.removed((found.key,))
        c.reader.notify(lmq)
        return head.offset

