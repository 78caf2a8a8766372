"""Remote consumers of AMQP queues: the AMQP side of :mod:`gateway.queue_consumers`
(the JSON API's ``/v1/amqp/{vhost}/queues/{queue}/receive``).

A receive attaches a :class:`~gateway.amqp.queues.Consumer` to the queue for the long
poll, its "channel" a :class:`_Waiter`: the queue treats it like any consumer (its
prefetch the request's ``max_messages``; priority 0; round robin with the others;
message groups, single-active-consumer, TTL and ``x-delivery-limit`` applied as the
queue delivers), and the first delivery ends the wait. The consumer then leaves the
queue (it does not count for auto-delete), and what it was given is *held*: one
:class:`_Held` per message, under a receipt handle, for the visibility timeout.

Settling a handle is what a channel does with a delivery tag: ack through the queue's
batched acks, requeue (``store.requeue_many``: it comes back with ``redelivered``),
reject (dead-lettered when the queue has a DLX). A delivery not settled within its
visibility timeout is requeued, as a channel's close requeues its unacked ones; so
is everything held when the front end stops. A held delivery counts in the queue's
unacked messages and its consumer's, so a message group assigned to the departed
consumer moves on once its deliveries are settled (gateway.amqp.groups).

The store keeps a delivery invisible for :data:`~gateway.amqp.queues.INVISIBLE_MS`
(30 min) from its pop; a delivery held longer gets a longer store invisible time
(``change_invisible_time``), so the store never redelivers what is still held here.
Held deliveries are this run's memory: a crash or restart releases them with every
other in-flight delivery of the AMQP group (AmqpFrontEnd.start), and their handles,
which name the run, are refused as :class:`~gateway.queue_consumers.ForeignHandle`.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Any

from broker_core import StoreError
from gateway.amqp.messages import decode_properties, delivery_fields
from gateway.amqp.model import Stats, plain
from gateway.amqp.queues import INVISIBLE_MS, Consumer, Queue, new_consumer_tag
from gateway.queue_consumers import (
    ForeignHandle,
    Handle,
    HandleGone,
    NoSuchQueue,
    QueueConsumeError,
    QueueDelivery,
    QueueGone,
    QueueLocked,
)

if TYPE_CHECKING:
    from broker_core import PoppedMessage, Record
    from gateway.amqp.broker import Broker

log = logging.getLogger(__name__)

#: The longest a delivery is held (the JSON API's limit for RocketMQ receives too).
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: A held delivery's store invisible time outlasts its hold by this much (the hold's
#: timer requeues it first).
STORE_SLACK_MS = 60_000

_PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "message_type",
    "user_id", "app_id",
)


class _Held:
    __slots__ = ("queue", "consumer", "receipt", "record", "token", "store_until", "timer")

    def __init__(self, queue: Queue, consumer: Consumer, receipt: str, record: Record,
                 token: str, store_until: int) -> None:
        self.queue = queue
        self.consumer = consumer
        self.receipt = receipt
        self.record = record
        self.token = token
        #: When the store makes it visible again on its own (epoch ms).
        self.store_until = store_until
        self.timer: asyncio.TimerHandle | None = None


class _Waiter:
    """The Deliverer of one long poll's consumer: takes one delivery, then no more."""

    global_prefetch = 0
    unacked_count = 0

    def __init__(self, remote: RemoteConsumers, invisible_ms: int) -> None:
        self.remote = remote
        self.invisible_ms = invisible_ms
        self.future: asyncio.Future[list[QueueDelivery]] = remote.loop.create_future()

    def can_deliver(self) -> bool:
        return not self.future.done()

    def deliver_many(self, consumer: Consumer, queue: Queue, popped: list[PoppedMessage],
                     now: int) -> None:
        out: list[QueueDelivery] = []
        for p in popped:
            if queue.drop_if_dead(p, now):
                continue
            out.append(self.remote.hold(queue, consumer, p, self.invisible_ms, now))
        if out:
            consumer.unacked += len(out)
            queue.unacked += len(out)
            self.remote.stats.delivered += len(out)
            self.future.set_result(out)

    def flush(self) -> None:
        pass

    def server_cancel(self, consumer: Consumer) -> None:
        if not self.future.done():
            self.future.set_exception(QueueGone(
                f"queue {consumer.queue.name!r} in vhost {consumer.queue.vhost!r} was"
                " deleted"))


class RemoteConsumers:
    """:class:`gateway.queue_consumers.QueueConsumers` over the broker's queues."""

    max_invisible_ms = MAX_INVISIBLE_MS

    def __init__(self, broker: Broker, stats: Stats) -> None:
        self.broker = broker
        self.store = broker.store
        self.loop = broker.loop
        self.stats = stats
        #: This run's name in the handles it issues.
        self.run = secrets.token_hex(8)
        self._seq = itertools.count(1)
        self.held: dict[int, _Held] = {}

    # -- receive -----------------------------------------------------------------------

    def _queue(self, vhost: str, name: str) -> Queue:
        vh = self.broker.vhosts.get(vhost)
        q = vh.queues.get(name) if vh is not None else None
        if q is None or q.deleted:
            raise NoSuchQueue(f"no queue {name!r} in vhost {vhost!r} (declare it over AMQP"
                              " first)")
        if q.defn.exclusive:
            raise QueueLocked(f"queue {name!r} in vhost {vhost!r} is exclusive to the"
                              " connection that declared it")
        if any(c.exclusive for c in q.consumers):
            raise QueueLocked(f"queue {name!r} in vhost {vhost!r} in exclusive use")
        return q

    async def receive(self, vhost: str, queue: str, max_messages: int, invisible_ms: int,
                      wait_seconds: float) -> list[QueueDelivery]:
        q = self._queue(vhost, queue)
        waiter = _Waiter(self, min(max(invisible_ms, 1), MAX_INVISIBLE_MS))
        consumer = Consumer(new_consumer_tag(), waiter, q, False, False, 0, max_messages,
                            {}, remote=True)
        future = waiter.future
        q.add_consumer(consumer)
        try:
            q.run()  # what is ready now, without waiting for the scheduled run
            if not future.done() and wait_seconds > 0:
                try:
                    async with asyncio.timeout(wait_seconds):
                        await asyncio.shield(future)
                except TimeoutError:
                    pass
        except asyncio.CancelledError:  # the client went away: give back what it got
            if future.done() and not future.cancelled() and future.exception() is None:
                for delivery in future.result():
                    self._drop_quietly(Handle.decode(delivery.handle), "requeue")
            raise
        finally:
            if not future.done():
                future.cancel()  # (no more deliveries to it)
            q.remove_consumer(consumer)
        if future.cancelled():
            return []
        return future.result()  # (QueueGone if the queue was deleted meanwhile)

    def hold(self, queue: Queue, consumer: Consumer, p: PoppedMessage, invisible_ms: int,
             now: int) -> QueueDelivery:
        """Hold a delivery under a new handle for ``invisible_ms``."""
        seq = next(self._seq)
        held = _Held(queue, consumer, p.receipt, p.message.record, secrets.token_hex(8),
                     now + INVISIBLE_MS)
        self.held[seq] = held
        try:
            visible = self._hold_until(seq, held, now, invisible_ms)
        except StoreError as exc:  # (no longer store invisible time: held for less)
            log.warning("held for the store's invisible time only: %s", exc,
                        extra={"queue": queue.name})
            visible = self._hold_until(seq, held, now, INVISIBLE_MS - 2 * STORE_SLACK_MS)
        record = p.message.record
        exchange, routing_key, raw = delivery_fields(record)
        return QueueDelivery(
            handle=Handle(queue.vhost, queue.name, self.run, seq, held.token).encode(),
            body=record.body, exchange=_text(exchange), routing_key=_text(routing_key),
            redelivered=p.deliveries > 1, delivery_count=p.deliveries,
            properties=_properties(raw), next_visible_ms=visible)

    def _hold_until(self, seq: int, held: _Held, now: int, invisible_ms: int) -> int:
        """(Re)arm the requeue timer; lengthen the store's invisible time if needed."""
        if held.timer is not None:
            held.timer.cancel()
        visible = now + invisible_ms
        if visible + STORE_SLACK_MS > held.store_until:
            longer = invisible_ms + 2 * STORE_SLACK_MS
            held.receipt = self.store.pop.change_invisible_time(held.receipt, longer)
            held.store_until = now + longer
        held.timer = self.loop.call_later(invisible_ms / 1000, self._expired, seq)
        return visible

    # -- settlement --------------------------------------------------------------------

    def _take(self, handle: Handle) -> _Held:
        if handle.run != self.run:
            raise ForeignHandle(
                "this receipt handle is from another gateway node or an earlier run of this"
                " one: settle it there; its message returns to the queue on its own (that"
                " node requeues it after its visibility timeout, a restart at once)")
        held = self.held.get(handle.seq)
        if held is None:
            raise HandleGone("no longer held: settled already, or its visibility timeout"
                             " ran out and it went back to the queue")
        if (held.token != handle.token or held.queue.name != handle.queue
                or held.queue.vhost != handle.vhost):
            raise QueueConsumeError("not a receipt handle of this gateway")
        return held

    def settle(self, handle: Handle, action: str) -> None:
        held = self._take(handle)
        del self.held[handle.seq]
        self._settle(held, action)

    def extend(self, handle: Handle, invisible_ms: int) -> int:
        held = self._take(handle)
        if invisible_ms <= 0:
            self.settle(handle, "requeue")
            return self.broker.now_ms()
        try:
            return self._hold_until(handle.seq, held, self.broker.now_ms(),
                                    min(invisible_ms, MAX_INVISIBLE_MS))
        except StoreError as exc:  # (not in flight in the store: it came back already)
            del self.held[handle.seq]
            self._settle(held, "forget")
            raise HandleGone(f"no longer in flight: {exc}") from None

    def _settle(self, held: _Held, action: str) -> None:
        if held.timer is not None:
            held.timer.cancel()
        held.consumer.unacked -= 1
        q = held.queue
        q.unacked -= 1
        if q.deleted:
            return
        if action == "ack":
            q.ack(held.receipt)
        elif action == "requeue":
            q.requeue([held.receipt])
        elif action == "reject":
            q.discard(held.receipt, held.record, "rejected")
        q.schedule()  # (its consumers' credit, a departed consumer's groups)

    def _expired(self, seq: int) -> None:
        held = self.held.pop(seq, None)
        if held is not None:
            held.timer = None
            self._settle(held, "requeue")

    def _drop_quietly(self, handle: Handle, action: str) -> None:
        try:
            self.settle(handle, action)
        except QueueConsumeError:
            pass

    def stop(self) -> None:
        """The front end stops: everything held goes back to its queue now (as the
        channels' close requeues their unacked deliveries)."""
        by_queue: dict[Queue, list[str]] = {}
        for held in self.held.values():
            if held.timer is not None:
                held.timer.cancel()
            if not held.queue.deleted:
                by_queue.setdefault(held.queue, []).append(held.receipt)
        self.held.clear()
        for q, receipts in by_queue.items():
            q.requeue(receipts)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _properties(raw: bytes) -> dict[str, Any]:
    """The AMQP basic properties that are set, as JSON values."""
    try:
        props = decode_properties(raw)
    except Exception:  # (a header another client wrote badly: deliver the body anyway)
        log.debug("undecodable AMQP properties", exc_info=True)
        return {}
    out: dict[str, Any] = {}
    for name in _PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is None or value == "":
            continue
        if isinstance(value, datetime.datetime):
            value = int(value.replace(tzinfo=value.tzinfo or datetime.UTC).timestamp())
        out[name] = plain(value)
    return out
