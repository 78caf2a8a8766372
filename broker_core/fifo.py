"""FIFO pop: per message group order for a pop group, without blocking the queue.

A FIFO pop (:meth:`broker_core.pop.PopConsumer.pop_fifo`) of a (pop group, LMQ) gives a
message only when no earlier message of the same *message group* is still unacked. The
message group of a stored message is the value of a property the caller names (the
RocketMQ front ends: ``__SHARDINGKEY``). A message without that property is its own
group: it is popped as a plain pop pops it (no order with anything). One group per LMQ
for them was the other choice; it would put every ungrouped message of a queue behind
any one of them that is never acked, which is the queue-wide block this module exists
to avoid.

State, per (pop group, LMQ) (a :class:`Lane`), durable in the state RocksDB
(:mod:`broker_core.consumer_state`, keys ``head`` and ``parked``) and mirrored here:

- a **head** per message group with a message out: the group's oldest message not yet
  acked. It is *in flight* (popped, its in-flight record in the pop table as for any
  pop, so receipts, acks and invisible-time changes are the plain pop's), or *waiting*
  until ``ready_at`` (its invisible time ran out: it comes back FIRST for its group,
  after a backoff of ``fifo_retry_backoff_ms * 2 ** (deliveries - 1)``, at most
  ``fifo_retry_max_backoff_ms``), or *ready* (``ready_at`` passed, or it was just
  promoted from parked);
- **parked** messages: those of a group with a head that the pop passed. The pop's
  committed offset moves on at pop time as a plain pop's does, so the backlog is read
  once; a parked message costs one RocksDB key until its turn.

Transitions (each one state write batch, with the pop table and the offset):

- pop: ready heads first (``ready_at`` order), then new messages from the offset: a
  message of a group without a head becomes its head and is delivered; one of a group
  with a head is parked. A pop reads at most ``fifo_scan_limit`` new messages.
- ack of a head: the head record goes; the group's oldest parked message (one seek) is
  its new head, ready now (the LMQ's listeners are told).
- invisible time ran out (revive): the head waits its backoff, then is ready; after the
  pop group's ``max_deliveries`` deliveries it goes to the dead-letter LMQ instead and
  the group moves on, as an ack would move it.
- operator release (:meth:`broker_core.pop.PopConsumer.release_message_group`): the
  head goes to the dead-letter LMQ, in flight or not, and the group moves on.

Cost: memory per lane is one entry per head and a count per message group with
parked messages, loaded from the durable records at first use; a pop reads what it
delivers or parks, never the backlog of a blocked group again; an ack, a revive and a
release cost one seek for the next parked message. Nothing scans per pop.

Thread safety: the caller holds the pop lock. The memory state is changed as the
batch is built; if the write fails the caller calls :meth:`FifoTable.invalidate` and
it is loaded again from the durable records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from broker_core.config import StoreConfig
from broker_core.consumer_state import ConsumerState, HeadRecord, StateBatch

__all__ = ["BlockedGroup", "FifoTable", "Head", "Lane"]


class Head:
    """A message group's oldest unacked message (see the module docstring)."""

    __slots__ = ("offset", "message_group", "deliveries", "since_ms", "ready_at", "inflight")

    def __init__(self, offset: int, message_group: str, deliveries: int, since_ms: int,
                 ready_at: int, inflight: bool) -> None:
        self.offset = offset
        self.message_group = message_group
        #: Times delivered so far (0: promoted, not yet delivered).
        self.deliveries = deliveries
        #: When it was first delivered (0: not yet).
        self.since_ms = since_ms
        #: When it may be delivered again, while not in flight.
        self.ready_at = ready_at
        self.inflight = inflight

    @property
    def blocked(self) -> bool:
        """Delivered more than once, or delivered and waiting for its retry."""
        return self.deliveries > 1 or (self.deliveries >= 1 and not self.inflight)


@dataclass(frozen=True, slots=True)
class BlockedGroup:
    """A message group whose head was delivered more than once or waits for a retry."""

    group: str
    lmq: str
    message_group: str
    offset: int
    deliveries: int
    since_ms: int
    #: When the head may be delivered again (0 while it is in flight).
    ready_at: int
    #: Messages of the group parked behind the head.
    waiting: int


class Lane:
    """The FIFO state of one (pop group, LMQ)."""

    __slots__ = ("group", "lmq", "heads", "by_offset", "parked", "_ready")

    def __init__(self, group: str, lmq: str) -> None:
        self.group = group
        self.lmq = lmq
        self.heads: dict[str, Head] = {}
        self.by_offset: dict[int, Head] = {}
        #: message group -> messages parked behind its head (absent: none).
        self.parked: dict[str, int] = {}
        #: (ready_at, offset) of heads not in flight; entries that no longer match their
        #: head are skipped when met.
        self._ready: list[tuple[int, int]] = []

    def record(self, head: Head) -> HeadRecord:
        return HeadRecord(self.lmq, self.group, head.offset, head.message_group,
                          head.deliveries, head.since_ms, head.ready_at, head.inflight)

    def add(self, head: Head) -> None:
        self.heads[head.message_group] = head
        self.by_offset[head.offset] = head
        if not head.inflight:
            heapq.heappush(self._ready, (head.ready_at, head.offset))

    def remove(self, head: Head) -> None:
        del self.heads[head.message_group]
        del self.by_offset[head.offset]

    def schedule(self, head: Head) -> None:
        heapq.heappush(self._ready, (head.ready_at, head.offset))

    def _valid_top(self) -> Head | None:
        ready = self._ready
        while ready:
            at, offset = ready[0]
            head = self.by_offset.get(offset)
            if head is not None and not head.inflight and head.ready_at == at:
                return head
            heapq.heappop(ready)
        return None

    def next_ready(self, now: int) -> Head | None:
        """The ready head first in line (earliest ``ready_at``), taken off the line."""
        head = self._valid_top()
        if head is None or head.ready_at > now:
            return None
        heapq.heappop(self._ready)
        return head

    def has_ready(self, now: int) -> bool:
        head = self._valid_top()
        return head is not None and head.ready_at <= now


class FifoTable:
    """Every lane, loaded from the state RocksDB at first use."""

    __slots__ = ("state", "config", "lanes", "loaded", "_wakes")

    def __init__(self, state: ConsumerState, config: StoreConfig) -> None:
        self.state = state
        self.config = config
        self.lanes: dict[tuple[str, str], Lane] = {}
        self.loaded = False
        #: (ready_at, lmq) of heads waiting for their backoff: when to tell the LMQ's
        #: listeners (stale entries only cause a spurious wake-up).
        self._wakes: list[tuple[int, str]] = []

    def load(self) -> None:
        self.lanes.clear()
        self._wakes.clear()
        for rec in self.state.fifo_heads():
            lane = self.lane(rec.group, rec.lmq)
            lane.add(Head(rec.offset, rec.message_group, rec.deliveries, rec.since_ms,
                          rec.ready_at, rec.inflight))
            if not rec.inflight:
                heapq.heappush(self._wakes, (rec.ready_at, rec.lmq))
        for lmq, group, mgroup, _offset in self.state.fifo_parked():
            lane = self.lane(group, lmq)
            lane.parked[mgroup] = lane.parked.get(mgroup, 0) + 1
        self.loaded = True

    def invalidate(self) -> None:
        """A write failed: forget the memory state; the next use loads it again."""
        self.loaded = False
        self.lanes.clear()
        self._wakes.clear()

    def lane(self, group: str, lmq: str) -> Lane:
        lane = self.lanes.get((group, lmq))
        if lane is None:
            lane = self.lanes[(group, lmq)] = Lane(group, lmq)
        return lane

    def find(self, group: str, lmq: str, offset: int) -> tuple[Lane, Head] | None:
        """The lane and head whose message is ``offset`` of ``lmq``, or None."""
        lane = self.lanes.get((group, lmq))
        if lane is None:
            return None
        head = lane.by_offset.get(offset)
        return None if head is None else (lane, head)

    def drop_lmq(self, lmq: str) -> None:
        """The LMQ was removed (its FIFO records went with it)."""
        for key in [k for k in self.lanes if k[1] == lmq]:
            del self.lanes[key]

    def backoff_ms(self, deliveries: int) -> int:
        cfg = self.config
        shift = min(max(deliveries - 1, 0), 30)
        return min(cfg.fifo_retry_max_backoff_ms, cfg.fifo_retry_backoff_ms << shift)

    # -- transitions (each adds to ``batch``; the caller writes it) --------------------

    def deliver(self, lane: Lane, head: Head, now: int, batch: StateBatch) -> None:
        """``head`` is popped (its in-flight record is the caller's)."""
        head.deliveries += 1
        head.inflight = True
        if not head.since_ms:
            head.since_ms = now
        batch.put_head(lane.record(head))

    def start(self, lane: Lane, message_group: str, offset: int, now: int,
              batch: StateBatch) -> Head:
        """A new message of a group with no head: its head, delivered now."""
        head = Head(offset, message_group, 1, now, 0, True)
        lane.add(head)
        batch.put_head(lane.record(head))
        return head

    @staticmethod
    def park(lane: Lane, message_group: str, offset: int, batch: StateBatch) -> None:
        batch.put_parked(lane.lmq, lane.group, message_group, offset)
        lane.parked[message_group] = lane.parked.get(message_group, 0) + 1

    def advance(self, lane: Lane, head: Head, now: int, batch: StateBatch) -> Head | None:
        """``head`` is done (acked, dead-lettered, released, or its message is gone):
        the group's oldest parked message becomes its head, ready now; returns it (None:
        the group has nothing left and is forgotten). ``now`` is unused: kept for
        symmetry with the other transitions."""
        lane.remove(head)
        batch.delete_head(lane.lmq, lane.group, head.offset)
        mgroup = head.message_group
        nxt = None
        if lane.parked.get(mgroup):
            # Parked offsets of a group are all above its head's: seeking past the head
            # also skips parked records this batch already deleted (not yet written).
            offset = self.state.first_parked(lane.lmq, lane.group, mgroup, head.offset)
            if offset is not None:
                batch.delete_parked(lane.lmq, lane.group, mgroup, offset)
                nxt = Head(offset, mgroup, 0, 0, 0, False)  # ready at any clock
                lane.add(nxt)
                batch.put_head(lane.record(nxt))
            left = lane.parked[mgroup] - 1 if offset is not None else 0
            if left > 0:
                lane.parked[mgroup] = left
            else:
                del lane.parked[mgroup]
        if not lane.heads and not lane.parked:
            self.lanes.pop((lane.group, lane.lmq), None)
        return nxt

    def retry_at(self, lane: Lane, head: Head, at: int, batch: StateBatch) -> None:
        """``head`` is no longer in flight: ready again at ``at``."""
        head.inflight = False
        head.ready_at = at
        lane.schedule(head)
        batch.put_head(lane.record(head))
        heapq.heappush(self._wakes, (at, lane.lmq))

    # -- waking and looking ------------------------------------------------------------

    def due_wakes(self, now: int) -> set[str]:
        """The LMQs with a head whose backoff ended by ``now`` (each told once)."""
        out: set[str] = set()
        wakes = self._wakes
        while wakes and wakes[0][0] <= now:
            out.add(heapq.heappop(wakes)[1])
        return out

    def next_wake(self) -> int | None:
        return self._wakes[0][0] if self._wakes else None

    def has_ready(self, group: str, lmq: str, now: int) -> bool:
        lane = self.lanes.get((group, lmq))
        return lane is not None and lane.has_ready(now)

    def blocked(self) -> Iterator[BlockedGroup]:
        """The blocked message groups of every lane (memory; see :func:`blocked_in`)."""
        for lane in list(self.lanes.values()):
            for head in lane.heads.values():
                if head.blocked:
                    yield BlockedGroup(
                        lane.group, lane.lmq, head.message_group, head.offset,
                        head.deliveries, head.since_ms, 0 if head.inflight else head.ready_at,
                        lane.parked.get(head.message_group, 0))


def blocked_in(state: ConsumerState, group: str | None = None) -> list[BlockedGroup]:
    """The blocked message groups read from the durable records alone (a read-only
    store beside a running gateway), of one pop group or all; the waiting counts are
    one prefix count per blocked group."""
    out = []
    for rec in state.fifo_heads():
        if group is not None and rec.group != group:
            continue
        head = Head(rec.offset, rec.message_group, rec.deliveries, rec.since_ms,
                    rec.ready_at, rec.inflight)
        if head.blocked:
            out.append(BlockedGroup(
                rec.group, rec.lmq, rec.message_group, rec.offset, rec.deliveries,
                rec.since_ms, 0 if rec.inflight else rec.ready_at,
                state.count_parked(rec.lmq, rec.group, rec.message_group)))
    return out
