"""Message groups on an AMQP queue: the ``JMSXGroupID`` header, as ActiveMQ and Artemis.

Messages of one group (the same ``JMSXGroupID``) on a queue go to ONE of its competing
consumers, in queue order: the group is assigned to a consumer at its first message
(the consumer of the queue's top priority with the fewest groups, so groups spread) and
stays with it while it consumes. Other groups, and ungrouped messages, keep flowing to
the other consumers. A message whose group's consumer has no credit (prefetch full,
socket blocked) is *held* for it, in pop order, and delivered before anything else
once it has credit; at most :data:`MAX_HELD` per queue are held (then the queue stops
popping until some drain: Artemis documents the same head-of-line effect).

When the consumer goes away (basic.cancel, channel or connection closed) its groups
move on only once nothing it was given is unsettled: while its channel still holds
unacknowledged messages of the queue (a basic.cancel leaves them with the channel,
which may still ack or requeue them) the consumer is *departed* and its groups' new
messages are held; once those are settled (acked, or requeued by the channel's close)
its groups are released and the messages held for it requeued. Requeued messages are
the store's retries, popped again before newer messages in log order, so the group's
next consumer gets them in order. A
message with ``JMSXGroupSeq`` = -1 closes its group once delivered (the next message of
that id starts a new assignment), unless more of the group is still held for the
consumer (then the group stays until those are delivered, or order would break).

Held messages are popped (in flight) in the store: a crash releases them with every
other in-flight message. Assignments are memory only (one entry per open group, as
Artemis's default group map); after a restart groups are assigned afresh.

Event-loop thread only.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from gateway.amqp.messages import GROUP_CLOSE, GROUP_ID

if TYPE_CHECKING:
    from broker_core import PoppedMessage
    from gateway.amqp.queues import Consumer

#: Messages held for group owners without credit, per queue, before popping stops.
MAX_HELD = 4096


def group_of(p: PoppedMessage) -> bytes | None:
    return p.message.record.properties.get(GROUP_ID)


def any_grouped(popped: list[PoppedMessage]) -> bool:
    return any(GROUP_ID in p.message.record.properties for p in popped)


class MessageGroups:
    __slots__ = ("owners", "held", "held_count", "departed", "_rr")

    def __init__(self) -> None:
        #: group id -> the consumer that has it
        self.owners: dict[bytes, Consumer] = {}
        #: consumer -> messages of its groups waiting for its credit, in pop order
        self.held: dict[Consumer, deque[PoppedMessage]] = {}
        self.held_count = 0
        #: consumers gone while their channel held unsettled messages of the queue
        self.departed: set[Consumer] = set()
        self._rr = 0

    def owner(self, group: bytes, pool: list[Consumer]) -> Consumer:
        """The consumer of ``group``, assigning one from ``pool`` (the queue's active
        consumers, highest priority first, never empty) if it has none."""
        found = self.owners.get(group)
        if found is not None:
            return found
        top = pool[0].priority
        same = [c for c in pool if c.priority == top]
        self._rr += 1
        start = self._rr % len(same)
        rotated = same[start:] + same[:start]  # equal loads: round robin
        chosen = min(rotated, key=lambda c: len(c.groups))
        self.owners[group] = chosen
        chosen.groups.add(group)
        return chosen

    def hold(self, consumer: Consumer, p: PoppedMessage) -> None:
        self.held.setdefault(consumer, deque()).append(p)
        self.held_count += 1

    def take(self, consumer: Consumer, n: int) -> list[PoppedMessage]:
        """Up to ``n`` of the messages held for ``consumer``, oldest first."""
        waiting = self.held.get(consumer)
        if not waiting:
            return []
        out = [waiting.popleft() for _ in range(min(n, len(waiting)))]
        if not waiting:
            del self.held[consumer]
        self.held_count -= len(out)
        return out

    def delivered(self, consumer: Consumer, popped: list[PoppedMessage]) -> None:
        """Messages went to ``consumer``: a group's closing message (``JMSXGroupSeq``
        -1) releases the group, unless more of it waits for the consumer."""
        for p in popped:
            props = p.message.record.properties
            if GROUP_CLOSE not in props:
                continue
            group = props[GROUP_ID]
            if self.owners.get(group) is not consumer:
                continue
            if any(group_of(h) == group for h in self.held.get(consumer, ())):
                continue
            del self.owners[group]
            consumer.groups.discard(group)

    def depart(self, consumer: Consumer) -> list[str]:
        """``consumer`` is gone: :meth:`release` now if nothing it was given is
        unsettled, else it is departed until :meth:`settled` finds so."""
        if consumer.unacked > 0 and consumer.groups:
            self.departed.add(consumer)
            return []
        return self.release(consumer)

    def settled(self) -> list[str]:
        """Release the departed consumers with nothing unsettled any more; the receipts
        to requeue."""
        out: list[str] = []
        for consumer in [c for c in self.departed if c.unacked <= 0]:
            out += self.release(consumer)
        return out

    def release(self, consumer: Consumer) -> list[str]:
        """``consumer``'s groups are free; returns the receipts of the messages held for
        it (the caller requeues them)."""
        self.departed.discard(consumer)
        for group in consumer.groups:
            if self.owners.get(group) is consumer:
                del self.owners[group]
        consumer.groups.clear()
        waiting = self.held.pop(consumer, None)
        if not waiting:
            return []
        self.held_count -= len(waiting)
        return [p.receipt for p in waiting]

    def clear(self) -> None:
        self.owners.clear()
        self.held.clear()
        self.held_count = 0
        self.departed.clear()


__all__ = ["MAX_HELD", "MessageGroups", "any_grouped", "group_of"]
