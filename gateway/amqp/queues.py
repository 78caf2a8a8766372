"""A queue at run time: its LMQ, its consumers, and how messages reach them.

Every AMQP queue is one LMQ (``gateway.topic_space.amqp_queue_lmq(vhost, name)``) and
all its consumers compete through ONE pop group, :data:`GROUP`: a delivery is a pop
(the message becomes invisible to the group for :data:`INVISIBLE_MS`), an ack is the
pop receipt's ack, a requeue is ``requeue_many`` (``change_invisible_time(receipt, 0)``
then ``revive()`` in one write; the pop table counts deliveries, so ``redelivered`` =
deliveries > 1). Ready messages = the LMQ's entries past the group's offset plus the
group's retries. The group keeps its in-flight deliveries in memory with one compact
durable record per pop (``set_memory_inflight``, see broker_core.pop).

Wake-ups: one store listener per queue, registered for the queue's whole life (it also
keeps the LMQ out of idle cleanup), schedules :meth:`Queue.run` on the event loop;
``run`` enforces the length limit, then pops for consumers while they have credit
(prefetch windows, writable sockets). Nothing polls, except the TTL sweep of queues
with ``x-message-ttl`` (:meth:`Queue.sweep_expired`, called by the front end).

Message groups (the ``JMSXGroupID`` header): a grouped message goes to its group's
consumer, or is held for it; see :mod:`gateway.amqp.groups`. Without grouped messages
the delivery path is the one above.

Ownership points down: the :class:`~gateway.amqp.broker.Broker` creates queues and
calls :meth:`Queue.open` (which creates the LMQs and registers the listeners: the
constructor does no storage I/O); a queue calls upward only through
:class:`~gateway.amqp.model.QueueOwner` (settlement batching, dead-lettering, its own
deletion), and reaches its consumers' channels through
:class:`~gateway.amqp.model.Deliverer`.

Event-loop thread only (the listener hops onto the loop when called from elsewhere,
with :func:`gateway.context.loop_callback`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core import MessageStore, StoreError
from gateway.amqp.groups import MAX_HELD, MessageGroups, any_grouped
from gateway.amqp.messages import GROUP_ID, expired
from gateway.amqp.model import Deliverer, QueueArgs, QueueDef, QueueOwner
from gateway.context import loop_callback
from gateway.topic_space import amqp_queue_lmq

if TYPE_CHECKING:
    from broker_core import PoppedMessage

log = logging.getLogger(__name__)

#: The pop group of every AMQP queue (one group per queue LMQ).
GROUP = "amqp-q"
#: How long a delivered, unacknowledged message stays invisible: RabbitMQ's default
#: consumer timeout. Channel close requeues at once; a crash leaves them to the start
#: of the next gateway, which makes them visible again (see AmqpFrontEnd.start).
INVISIBLE_MS = 30 * 60 * 1000
#: Messages popped per store call (a pop has fixed costs: a retry scan, an offset and a
#: fresh record written; the store bounds its bytes).
POP_BATCH = 256
#: RabbitMQ's ceiling for x-max-priority.
MAX_PRIORITY = 255

_ctags = itertools.count(1)


class Consumer:
    __slots__ = ("tag", "channel", "queue", "no_ack", "exclusive", "priority", "prefetch",
                 "unacked", "arguments", "groups", "remote")

    def __init__(self, tag: str, channel: Deliverer, queue: Queue, no_ack: bool,
                 exclusive: bool, priority: int, prefetch: int,
                 arguments: dict[str, Any], remote: bool = False) -> None:
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.priority = priority
        #: Per-consumer prefetch (basic.qos global=false at consume time); 0 = none.
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments
        #: The message groups (JMSXGroupID) assigned to it (gateway.amqp.groups).
        self.groups: set[bytes] = set()
        #: Attached for one long poll by another front end (gateway.amqp.remote): it
        #: does not make an auto-delete queue "used" (its leaving would delete it).
        self.remote = remote

    def credit(self) -> int:
        """How many more messages this consumer may get now (0: none)."""
        ch = self.channel
        if not ch.can_deliver():
            return 0
        if self.no_ack:
            return POP_BATCH
        credit = POP_BATCH
        if self.prefetch:
            credit = min(credit, self.prefetch - self.unacked)
        if ch.global_prefetch:
            credit = min(credit, ch.global_prefetch - ch.unacked_count)
        return max(credit, 0)


def new_consumer_tag() -> str:
    return f"amq.ctag-{next(_ctags)}-{threading.get_ident() & 0xFFFF:x}"


class Queue:
    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop, defn: QueueDef,
                 owner: QueueOwner) -> None:
        self.store = store
        self.loop = loop
        self.owner = owner
        self.defn = defn
        self.vhost = defn.vhost
        self.name = defn.name
        self.lmq = amqp_queue_lmq(defn.vhost, defn.name)
        #: x-max-priority: one LMQ per priority level, highest first; level 0 is
        #: ``self.lmq``. A pop takes from the highest level that has messages, so a
        #: priority queue delivers by priority, then FIFO within a priority.
        self.levels = min(defn.args.max_priority or 0, MAX_PRIORITY)
        self.lmqs = [self.lmq_for(p) for p in range(self.levels, -1, -1)]
        #: [self.lmq], the dispatch list of a publish routed here only (read-only: one
        #: list shared by every such publish, not one built per publish)
        self.lmq_only = [self.lmq]
        a = defn.args
        #: x-overflow reject-publish(-dlx) with a length limit: checked at each publish.
        self.rejects_when_full = a.overflow != "drop-head" and (
            a.max_length is not None or a.max_length_bytes is not None)
        self.consumers: list[Consumer] = []
        #: Messages delivered in ack mode and not yet settled.
        self.unacked = 0
        self.deleted = False
        self.ever_consumed = False
        #: The connection that declared it (0: loaded at start), for the per-connection
        #: queue limit.
        self.creator = 0
        self._scheduled = False
        self._rr = 0
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._listeners: list[Callable[[], None]] = []
        #: JMSXGroupID groups: owners and messages held for them (gateway.amqp.groups).
        self.groups = MessageGroups()

    def open(self) -> None:
        """Create the queue's LMQs and listen to them; start the x-expires timer."""
        on_append = loop_callback(self.loop, self._on_append)
        for lmq in self.lmqs:
            self.store.create_lmq(lmq)
            self._listeners.append(self.store.add_listener(lmq, on_append))
        self.touch()

    # -- state -------------------------------------------------------------------------

    @property
    def args(self) -> QueueArgs:
        return self.defn.args

    def lmq_for(self, priority: int | None) -> str:
        """The LMQ a message of ``priority`` goes to (priorities above the queue's
        maximum count as the maximum, as RabbitMQ does)."""
        level = min(priority or 0, self.levels)
        return self.lmq if level == 0 else f"{self.lmq}#p{level}"

    def ready(self) -> int:
        """Messages ready for delivery (not counting unacknowledged ones)."""
        total = 0
        for lmq in self.lmqs:
            info = self.store.lmq(lmq)
            if info is None:
                continue
            offset = self.store.get_offset(GROUP, lmq) or 0
            start = max(offset, info.min_offset)
            total += max(0, info.max_offset - start) + self.store.pop.count_retries(GROUP, lmq)
        return total

    def ready_bytes(self, limit: int) -> int:
        """Bytes of ready message bodies, counted up to ``limit`` (x-max-length-bytes)."""
        total = 0
        for lmq in self.lmqs:
            offset = self.store.get_offset(GROUP, lmq) or 0
            while total <= limit:
                result = self.store.pull(lmq, offset, 256)
                if not result.messages:
                    break
                total += sum(len(m.record.body) for m in result.messages)
                offset = result.next_offset
        return total

    def pop_oldest(self, want: int) -> list[PoppedMessage]:
        """For drop-head: the messages to drop first, lowest priority first."""
        out: list[PoppedMessage] = []
        for lmq in reversed(self.lmqs):
            if len(out) >= want:
                break
            out.extend(self.store.pop.pop(GROUP, lmq, want - len(out), INVISIBLE_MS))
        return out

    def pop(self, want: int) -> list[PoppedMessage]:
        """Pop up to ``want`` messages for delivery: the highest priority first."""
        out: list[PoppedMessage] = []
        for lmq in self.lmqs:
            if len(out) >= want:
                break
            out.extend(self.store.pop.pop(GROUP, lmq, want - len(out), INVISIBLE_MS))
        return out

    def touch(self) -> None:
        """Restart the x-expires timer (declare, consume, get)."""
        expires = self.args.expires
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if expires and not self.consumers and not self.deleted:
            self._expiry_timer = self.loop.call_later(expires / 1000, self._expire_queue)

    def _expire_queue(self) -> None:
        self._expiry_timer = None
        if not self.consumers and not self.deleted:
            log.info("queue expired", extra={"vhost": self.vhost, "queue": self.name})
            self.owner.queue_unused(self)

    # -- consumers ---------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.consumers.sort(key=lambda c: -c.priority)  # stable: FIFO within a priority
        if not consumer.remote:
            self.ever_consumed = True
        self.touch()
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        held = self.groups.depart(consumer)
        if self.deleted:
            return
        # Back to the store's retries, popped again in log order before newer ones
        # (a departed consumer's: once its channel settled what it holds, see run()).
        self.requeue(held)
        if not self.consumers and self.defn.auto_delete and self.ever_consumed:
            self.owner.queue_unused(self)
            return
        self.touch()
        self.schedule()

    # -- wake-ups ----------------------------------------------------------------------

    def _on_append(self, _lmq: str, _next_offset: int) -> None:
        self.schedule()

    def schedule(self) -> None:
        if not self._scheduled and not self.deleted:
            self._scheduled = True
            self.loop.call_soon(self.run)

    def run(self) -> None:
        self._scheduled = False
        if self.deleted:
            return
        try:
            if self.groups.departed:
                self.requeue(self.groups.settled())
            self.enforce_limits()
            if self.consumers:
                self._dispatch()
        except StoreError as exc:
            log.warning("queue dispatch failed: %s", exc, extra={"queue": self.name})

    # -- delivery ----------------------------------------------------------------------

    def _eligible(self) -> list[Consumer]:
        consumers = self.consumers[:1] if self.args.single_active else self.consumers
        return [c for c in consumers if c.credit() > 0]

    def _pick(self, consumers: list[Consumer],
              room: Callable[[Consumer], int] = Consumer.credit) -> Consumer | None:
        """The next consumer with ``room`` (default: credit): highest priority first,
        round robin within."""
        live = [c for c in consumers if room(c) > 0]
        if not live:
            return None
        top = live[0].priority
        same = [c for c in live if c.priority == top]
        self._rr += 1
        return same[self._rr % len(same)]

    def _dispatch(self) -> None:
        requeue: list[str] = []
        try:
            self._deliver(requeue)
        finally:
            # The deliveries go out now, not at each handler's flush a loop turn later
            # (the consumers' acks, and so their credit, come back sooner).
            for c in self.consumers:
                c.channel.flush()
        if requeue:
            self.requeue(requeue)

    def _deliver(self, requeue: list[str]) -> None:
        groups = self.groups
        if groups.held_count:
            self._deliver_held()
        while groups.held_count < MAX_HELD:
            eligible = self._eligible()
            if not eligible:
                break
            if len(eligible) == 1:  # one consumer with credit: all of the pop is its
                consumer = eligible[0]
                popped = self.pop(consumer.credit())
                if not popped:
                    break
                if any_grouped(popped):
                    self._deliver_each(popped, eligible, requeue)
                else:
                    consumer.channel.deliver_many(consumer, self, popped, self.owner.now_ms())
                continue
            want = min(POP_BATCH, sum(c.credit() for c in eligible))
            popped = self.pop(want)
            if not popped:
                break
            self._deliver_each(popped, eligible, requeue)

    def _deliver_each(self, popped: list[PoppedMessage], eligible: list[Consumer],
                      requeue: list[str]) -> None:
        """Share out one pop: a grouped message to its group's consumer (or held for
        it), the others round robin among ``eligible``; each consumer's share goes out
        in pop order as one ``deliver_many``."""
        now = self.owner.now_ms()
        groups = self.groups
        shares: dict[Consumer, list[PoppedMessage]] = {}
        rooms: dict[Consumer, int] = {}  # credit left, asked once per consumer

        def room(c: Consumer) -> int:
            left = rooms.get(c)
            if left is None:
                left = rooms[c] = c.credit()
            return left

        active = self._active()
        held, departed = groups.held, groups.departed
        for p in popped:
            if self.drop_if_dead(p, now):
                continue
            group = p.message.record.properties.get(GROUP_ID)
            if group is not None:
                picked = groups.owner(group, active)
                # it waits behind older held ones, for a departed owner's release, or
                # for credit
                if picked in held or picked in departed or room(picked) <= 0:
                    groups.hold(picked, p)
                    continue
            else:
                anyone = self._pick(eligible, room)
                if anyone is None:
                    requeue.append(p.receipt)
                    continue
                picked = anyone
            rooms[picked] = room(picked) - 1
            share = shares.get(picked)
            if share is None:
                shares[picked] = [p]
            else:
                share.append(p)
        for consumer, share in shares.items():
            # (deliver_many's own dead check repeats this one's: same ``now``)
            consumer.channel.deliver_many(consumer, self, share, now)
            groups.delivered(consumer, share)

    def _active(self) -> list[Consumer]:
        """The consumers that may get messages (one with x-single-active-consumer)."""
        return self.consumers[:1] if self.args.single_active else self.consumers

    def _deliver_held(self) -> None:
        """Messages held for their group's consumer go to it first, as credit allows."""
        groups = self.groups
        now = self.owner.now_ms()
        for consumer in list(groups.held):
            if consumer in groups.departed:
                continue  # cancelled, its channel open: the messages wait for the release
            credit = consumer.credit()
            if credit > 0:
                batch = groups.take(consumer, credit)
                consumer.channel.deliver_many(consumer, self, batch, now)
                groups.delivered(consumer, batch)

    def drop_if_dead(self, p: PoppedMessage, now: int) -> bool:
        """Expired or over the delivery limit: settle and dead-letter it. True if so."""
        record = p.message.record
        if expired(record, self.args.message_ttl, now):
            self.discard(p.receipt, record, "expired")
            return True
        limit = self.args.delivery_limit
        if limit is not None and p.deliveries - 1 > limit:
            self.discard(p.receipt, record, "delivery_limit")
            return True
        return False

    def get(self) -> tuple[PoppedMessage, int] | None:
        """basic.get: one message and the ready count after it, or None."""
        self.touch()
        now = self.owner.now_ms()
        while True:
            popped = self.pop(1)
            if not popped:
                return None
            group = popped[0].message.record.properties.get(GROUP_ID)
            owner = self.groups.owners.get(group) if group is not None else None
            if owner is not None:  # its group's consumer gets it, in order
                if self.groups.held_count >= MAX_HELD:
                    self.requeue([popped[0].receipt])  # (bounded, as _deliver)
                    return None
                self.groups.hold(owner, popped[0])
                self.schedule()
                continue
            if not self.drop_if_dead(popped[0], now):
                return popped[0], self.ready()

    # -- settlement --------------------------------------------------------------------

    def ack(self, receipt: str) -> None:
        """Settle for good. The store is told at the end of this loop turn, with every
        other ack of the turn in one write (see Broker.ack_soon)."""
        self.owner.ack_soon(receipt)

    def ack_all(self, receipts: list[str]) -> None:
        self.owner.ack_soon_many(receipts)

    def requeue(self, receipts: list[str]) -> None:
        if receipts:  # one write; notifies the listener: run() delivers them again
            try:
                self.store.pop.requeue_many(receipts)
            except StoreError as exc:
                log.warning("requeue not recorded: %s", exc, extra={"queue": self.name})

    def discard(self, receipt: str, record: Any, reason: str) -> None:
        """Settle a message for good and dead-letter it if the queue has a DLX."""
        self.ack(receipt)
        if self.args.dlx is not None:
            self.owner.dead_letter(self, record, reason)

    # -- limits and TTL -----------------------------------------------------------------

    def enforce_limits(self) -> None:
        """x-max-length / x-max-length-bytes with drop-head: drop (and dead-letter) the
        oldest ready messages. (reject-publish is refused at publish time.)"""
        a = self.args
        if a.overflow != "drop-head" or (a.max_length is None and a.max_length_bytes is None):
            return
        if a.max_length is not None:
            excess = self.ready() - a.max_length
            while excess > 0:
                popped = self.pop_oldest(min(excess, POP_BATCH))
                if not popped:
                    break
                for p in popped:
                    self.discard(p.receipt, p.message.record, "maxlen")
                excess -= len(popped)
        if a.max_length_bytes is not None:
            while self.ready_bytes(a.max_length_bytes) > a.max_length_bytes:
                popped = self.pop_oldest(1)
                if not popped:
                    break
                self.discard(popped[0].receipt, popped[0].message.record, "maxlen")

    def is_full(self) -> bool:
        a = self.args
        if a.max_length is not None and self.ready() >= a.max_length:
            return True
        return a.max_length_bytes is not None and (
            self.ready_bytes(a.max_length_bytes) >= a.max_length_bytes)

    def sweep_expired(self) -> None:
        """Expire messages at the head of a queue with x-message-ttl (RabbitMQ expires
        from the head, so that a queue without consumers dead-letters on time)."""
        ttl = self.args.message_ttl
        if ttl is None or self.deleted:
            return
        now = self.owner.now_ms()
        for lmq in self.lmqs:
            offset = self.store.get_offset(GROUP, lmq) or 0
            result = self.store.pull(lmq, offset, POP_BATCH)
            count = 0
            for m in result.messages:
                if not expired(m.record, ttl, now):
                    break
                count += 1
            if not count:
                continue
            keep: list[str] = []
            for p in self.store.pop.pop(GROUP, lmq, count, INVISIBLE_MS):
                if expired(p.message.record, ttl, now):
                    self.discard(p.receipt, p.message.record, "expired")
                else:  # a requeued message came first; it stays
                    keep.append(p.receipt)
            self.requeue(keep)

    # -- end ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the queue's run-time machinery (deleted, or the gateway stops)."""
        self.deleted = True
        self.groups.clear()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        for remove in self._listeners:
            remove()
