"""One AMQP channel's broker state: consumers, unacknowledged deliveries, prefetch,
publisher confirms and transactions.

Delivery tags are per channel and start at 1. An unacknowledged delivery holds its pop
receipt; ack acks the receipt, nack/reject with requeue (and channel close, and
basic.recover) make it visible again at once, so it comes back with ``redelivered``.

Publishing (:meth:`AmqpChannel.publish`): route through the exchange, then ONE
``publisher.submit`` with the LMQ of every queue reached (plus, through
``amq.topic`` of vhost ``/``, every matching MQTT subscriber's LMQ). A mandatory
message that reaches nothing gets ``basic.return`` 312 NO_ROUTE first; in confirm mode
the publish's sequence number is acknowledged when the store acknowledges the append
(in order; consecutive acks are sent as one ``multiple`` ack), nacked if it fails or
a queue with ``x-overflow=reject-publish`` is full. In tx mode publishes and acks wait
for ``tx.commit``.

A channel is owned by its connection handler and holds the broker it routes through;
it calls the handler only through :class:`~gateway.amqp.model.ChannelHost`, and
queues call it through :class:`~gateway.amqp.model.Deliverer`.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pamqp import commands

from broker_core import DelayTooLong, Message, Record
from gateway.amqp.delayed import delay_ms
from gateway.amqp.messages import (
    DUE_AT,
    EXCHANGE,
    EXPIRES_AT,
    HEADER,
    ROUTING_KEY,
    delivery_fields,
    to_store_message,
)
from gateway.amqp.model import ChannelHost, Stats
from gateway.amqp.queues import Consumer, Queue, new_consumer_tag
from protocol.amqp.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    ChannelError,
    ConnectionLevelError,
)

if TYPE_CHECKING:
    from broker_core import PoppedMessage
    from gateway.amqp.broker import Broker
    from protocol.amqp.events import ContentReceived

log = logging.getLogger(__name__)

B, Q, X, Tx = commands.Basic, commands.Queue, commands.Exchange, commands.Tx


class Unacked(NamedTuple):
    """One unacknowledged delivery (a tuple: one is built per delivery, and
    ``_new_unacked`` builds it at a third of a slotted class's ``__init__`` cost)."""

    queue: Queue
    receipt: str
    consumer: Consumer | None
    record: Record


_new_unacked = tuple.__new__  # (Unacked, (queue, receipt, consumer, record))


class AmqpChannel:
    def __init__(self, handler: ChannelHost, channel_id: int, broker: Broker,
                 stats: Stats) -> None:
        self.handler = handler
        self.broker = broker
        self.stats = stats
        self.id = channel_id
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Unacked] = {}
        self.next_tag = 1
        self.prefetch = 0  # for consumers created from now on
        self.global_prefetch = 0
        self.last_queue = ""
        self.confirm = False
        self.publish_seq = 0
        self._confirms: deque[_Confirm] = deque()
        self._confirms_scheduled = False
        self.tx = False
        self._tx_publishes: list[ContentReceived] = []
        #: Deliveries settled inside the transaction: applied at commit.
        self._tx_pending: list[tuple[Unacked, str]] = []
        self.closed = False

    @property
    def unacked_count(self) -> int:
        return len(self.unacked)

    # -- delivery ----------------------------------------------------------------------

    def flush(self) -> None:
        self.handler.flush()

    def can_deliver(self) -> bool:
        if self.closed:
            return False
        h = self.handler
        if not h.proto.channel_flow_active(self.id):
            return False
        if not h.conn.writable:
            h.want_drain()
            return False
        return True

    def deliver_many(self, consumer: Consumer, queue: Queue, popped: list[PoppedMessage],
                     now: int) -> None:
        """Deliver popped messages to one consumer, in order, written as one chunk; a
        message that is dead (expired, or over the delivery limit) is settled and
        dead-lettered by the queue instead (``Queue.drop_if_dead``)."""
        h = self.handler
        send = h.proto.deliver_encoder(self.id, consumer.tag)
        frame_max = h.proto.frame_max
        no_ack = consumer.no_ack
        args = queue.args
        check_all = args.message_ttl is not None or args.delivery_limit is not None
        unacked = self.unacked
        new = _new_unacked
        first = tag = self.next_tag
        out: list[bytes] = []
        settled: list[str] = []
        try:
            for p in popped:
                record = p.message.record
                rp = record.properties
                if (check_all or EXPIRES_AT in rp) and queue.drop_if_dead(p, now):
                    continue
                raw = rp.get(HEADER)
                exchange: str | bytes
                if raw is not None:
                    exchange = rp.get(EXCHANGE, b"")
                    # the topic (a str the encoder compares with the last one's), unless
                    # the record names its routing key
                    routing_key = rp.get(ROUTING_KEY) or record.topic
                else:
                    exchange, routing_key, raw = delivery_fields(record)
                out.append(send(tag, p.deliveries > 1, exchange, routing_key, raw,
                                record.body, frame_max))
                if no_ack:
                    settled.append(p.receipt)
                else:
                    unacked[tag] = new(Unacked, (queue, p.receipt, consumer, record))
                tag += 1
        finally:
            n = tag - first
            if n:
                self.next_tag = tag
                self.stats.delivered += n
                h.conn.messages_out += n
                if no_ack:
                    queue.ack_all(settled)
                else:
                    consumer.unacked += n
                    queue.unacked += n
                h.write(out[0] if n == 1 else b"".join(out))

    # -- settlement --------------------------------------------------------------------

    def _tags(self, delivery_tag: int, multiple: bool, method: Any) -> list[int]:
        if multiple:
            if delivery_tag == 0:
                return list(self.unacked)
            # tags are in delivery order: stop at the first one past delivery_tag
            tags = list(itertools.takewhile(delivery_tag.__ge__, self.unacked))
            if tags:
                return tags
        elif delivery_tag in self.unacked:
            return [delivery_tag]
        raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}",
                           method=method)

    def settle(self, delivery_tag: int, multiple: bool, action: str, method: Any) -> None:
        """``action``: ``ack``, ``requeue`` or ``discard`` (reject/nack without requeue:
        dead-lettered when the queue has a DLX)."""
        tags = self._tags(delivery_tag, multiple, method)
        pop = self.unacked.pop
        if self.tx:  # the tags are taken now, the store is told at commit
            self._apply([(t, pop(t)) for t in tags], action, detached=True)
        elif action == "ack":
            self._ack([pop(t) for t in tags])
        else:
            self._apply([(t, pop(t)) for t in tags], action)

    def _ack(self, entries: list[Unacked]) -> None:
        """:meth:`_apply` of ``ack`` (the common case, in bulk): counts and receipts are
        gathered per run of one queue / one consumer (a consumer's acks are mostly one
        run), then applied once each."""
        receipts_of: dict[Queue, list[str]] = {}
        counts: dict[Consumer | None, int] = {}
        last_q: Queue | None = None
        receipts: list[str] = []
        last_c: Consumer | None = None
        run = 0
        for q, receipt, consumer, _record in entries:
            if q is not last_q:
                last_q = q
                receipts = receipts_of.get(q)  # type: ignore[assignment]
                if receipts is None:
                    receipts = receipts_of[q] = []
            receipts.append(receipt)
            if consumer is not last_c:
                if run:
                    counts[last_c] = counts.get(last_c, 0) + run
                last_c = consumer
                run = 0
            run += 1
        if run:
            counts[last_c] = counts.get(last_c, 0) + run
        for consumer, n in counts.items():
            if consumer is not None:
                consumer.unacked -= n
        for q, receipts in receipts_of.items():
            q.unacked -= len(receipts)
            if not q.deleted:
                q.ack_all(receipts)
        for q in receipts_of:
            q.schedule()

    def _apply(self, entries: list[tuple[int, Unacked]], action: str,
               detached: bool = False) -> None:
        if action == "ack" and not detached:
            self._ack([u for _tag, u in entries])
            return
        touched: set[Queue] = set()
        requeue: dict[Queue, list[str]] = {}
        for _tag, u in entries:
            if u.consumer is not None:
                u.consumer.unacked -= 1
            u.queue.unacked -= 1
            touched.add(u.queue)
            if detached:
                self._tx_pending.append((u, action))
                continue
            self._settle_one(u, action, requeue)
        for q, receipts in requeue.items():
            q.requeue(receipts)
        for q in touched:
            q.schedule()

    @staticmethod
    def _settle_one(u: Unacked, action: str, requeue: dict[Queue, list[str]]) -> None:
        if u.queue.deleted:
            return
        if action == "ack":
            u.queue.ack(u.receipt)
        elif action == "requeue":
            requeue.setdefault(u.queue, []).append(u.receipt)
        else:
            u.queue.discard(u.receipt, u.record, "rejected")

    def requeue_all(self) -> None:
        self._apply(list(self.unacked.items()), "requeue")
        self.unacked.clear()

    # -- consumers ---------------------------------------------------------------------

    def consume(self, m: Any) -> str:
        h = self.handler
        queue = h.queue(m.queue or self.last_queue, m)
        h.check("read", queue.name, m)
        tag = m.consumer_tag or new_consumer_tag()
        if tag in self.consumers:
            raise ConnectionLevelError(
                NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", method=m)
        if queue.consumers and (m.exclusive or any(c.exclusive for c in queue.consumers)):
            raise ChannelError(
                ACCESS_REFUSED,
                f"queue '{queue.name}' in vhost '{queue.vhost}' in exclusive use", method=m)
        args = m.arguments or {}
        priority = args.get("x-priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            priority = 0
        consumer = Consumer(tag, self, queue, m.no_ack, m.exclusive, priority,
                            self.prefetch, args)
        if not m.nowait:
            h.write(h.proto.send_method(self.id, B.ConsumeOk(tag)))
        self.consumers[tag] = consumer
        queue.add_consumer(consumer)
        return tag

    def cancel(self, tag: str) -> None:
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def server_cancel(self, consumer: Consumer) -> None:
        """The queue was deleted: consumer-cancel-notify (if the client supports it)."""
        self.consumers.pop(consumer.tag, None)
        h = self.handler
        if (not self.closed and h.proto.channel_is_open(self.id)
                and h.proto.client_capabilities.get("consumer_cancel_notify")):
            h.write(h.proto.send_method(self.id, B.Cancel(consumer.tag, nowait=True)))

    def get(self, m: Any) -> None:
        h = self.handler
        queue = h.queue(m.queue or self.last_queue, m)
        h.check("read", queue.name, m)
        got = queue.get()
        if got is None:
            h.write(h.proto.send_method(self.id, B.GetEmpty()))
            return
        p, remaining = got
        record = p.message.record
        tag = self.next_tag
        self.next_tag += 1
        exchange, routing_key, raw = delivery_fields(record)
        h.write(h.proto.send_get_ok(self.id, tag, p.deliveries > 1, exchange, routing_key,
                                    remaining, raw, record.body))
        self.stats.delivered += 1
        h.conn.messages_out += 1
        if m.no_ack:
            queue.ack(p.receipt)
        else:
            self.unacked[tag] = Unacked(queue, p.receipt, None, record)
            queue.unacked += 1

    def qos(self, m: Any) -> None:
        if m.prefetch_size:
            raise ConnectionLevelError(
                NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})", method=m)
        if m.global_:
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch = m.prefetch_count
        for consumer in self.consumers.values():
            consumer.queue.schedule()

    # -- publishing --------------------------------------------------------------------

    def publish(self, ev: ContentReceived) -> None:
        m = ev.method
        if m.immediate:
            raise ConnectionLevelError(NOT_IMPLEMENTED, "immediate=true", method=m)
        h = self.handler
        if m.exchange:
            x = self.broker.exchange(h.vhost, m.exchange)
            if x.internal:
                raise ChannelError(
                    ACCESS_REFUSED,
                    f"cannot publish to internal exchange '{m.exchange}' in vhost '{h.vhost}'",
                    method=m)
        h.check("write", m.exchange, m, exchange=True)
        self.stats.published += 1
        h.conn.messages_in += 1
        if self.tx:
            self._tx_publishes.append(ev)
            return
        if self.confirm:
            self.publish_seq += 1
            entry = _Confirm(self, self.publish_seq)
            self._confirms.append(entry)
            try:
                entry.nack = self._route_and_submit(ev, entry.done)[1]
            except BaseException:
                self._confirms.pop()  # not published (e.g. 404): no sequence number
                self.publish_seq -= 1
                raise
        else:
            self._route_and_submit(ev, _log_failure_cb)
        h.published = True  # check_blocked() once the received bytes are processed

    def _route_and_submit(self, ev: ContentReceived, done: Any = None,
                          ) -> tuple[asyncio.Future[Any] | None, bool]:
        """Route and append; returns the append's future and whether to nack anyway.
        With ``done``, it is called ``done(result, exc)`` when the append is settled
        (no future: None is returned in its place)."""
        h, m = self.handler, ev.method
        broker = self.broker
        header = ev.header
        headers = header.headers if header._headers_span is not None else None
        queues, mqtt = broker.route(h.vhost, m.exchange, m.routing_key, headers)
        if mqtt:  # into the one topic space: the MQTT topic ACL applies
            h.check_topic(m.routing_key, m, bind=False)
        full: list[Queue] = _NONE_FULL
        for q in queues:
            if q.rejects_when_full and q.is_full():
                if full is _NONE_FULL:
                    full = []
                full.append(q)
        if full:  # x-overflow reject-publish(-dlx): not stored there, and nacked
            queues = [q for q in queues if q not in full]
            dlx = [q for q in full
                   if q.args.overflow == "reject-publish-dlx" and q.args.dlx is not None]
            if dlx:  # ... and with -dlx, dead-lettered as "maxlen" (RabbitMQ 3.8+)
                now = broker.now_ms()
                refused = Record.of_message(
                    to_store_message(m.exchange, m.routing_key, ev.header, ev.body,
                                     h.origin, now),
                    store_ms=now,
                )
                for q in dlx:
                    broker.dead_letter(q, refused, "maxlen")
        priority = header.priority
        if len(queues) == 1 and not priority and not mqtt:  # the common case
            lmqs = queues[0].lmq_only  # (read-only, shared)
        else:
            lmqs = [q.lmq_for(priority) for q in queues]
            if mqtt:
                lmqs += broker.topic_space.route_amq_topic(m.routing_key)
        if not lmqs:
            if m.mandatory and not full:
                h.write(h.proto.send_return(
                    self.id, 312, "NO_ROUTE", m.exchange, m.routing_key,
                    header.properties_raw, ev.body))
            if done is not None:
                done(None, None)
                return None, bool(full)
            fut: asyncio.Future[Any] = broker.loop.create_future()
            fut.set_result(None)
            return fut, bool(full)
        message = to_store_message(m.exchange, m.routing_key, header, ev.body,
                                   h.origin, h.now_ms if h.now_ms else broker.now_ms())
        if headers is not None and m.exchange:
            delay = delay_ms(headers)
            if delay and broker.exchange(h.vhost, m.exchange).delayed:
                return self._submit_delayed(message, lmqs, delay, done), bool(full)
        if done is not None:
            broker.publisher.submit_callback(message, lmqs, done)
            return None, bool(full)
        return broker.publisher.submit(message, lmqs), bool(full)

    def _submit_delayed(self, message: Message, lmqs: Sequence[str], delay: int,
                        done: Any) -> asyncio.Future[Any] | None:
        """A message with ``x-delay`` on an ``x-delayed-message`` exchange: the store's
        durable timer, dispatched to ``lmqs`` (routed now) ``delay`` ms from now;
        ``done`` / the future settle once it is durable (the publisher confirm). A delay
        past the store's maximum fails it (a nack under confirms)."""
        broker = self.broker
        publisher = broker.publisher
        fut: asyncio.Future[Any] | None = None
        if done is None:
            fut = broker.loop.create_future()

            def done(result: Any, exc: BaseException | None, f: Any = fut) -> None:
                if not f.done():
                    f.set_result(result) if exc is None else f.set_exception(exc)

        limit = publisher.store.config.max_timer_delay_ms
        if delay > limit:
            log.info("x-delay of %d ms refused: the maximum is %d ms", delay, limit)
            done(None, DelayTooLong(f"x-delay {delay} ms exceeds the maximum of {limit} ms"))
            return fut
        due = broker.now_ms() + delay
        props = message.properties
        if isinstance(props, dict):  # (built for this publish by to_store_message)
            # TTLs count from when it enters its queues, as in RabbitMQ: the due time
            props[DUE_AT] = str(due).encode()
            expires = props.get(EXPIRES_AT)
            if expires is not None:
                props[EXPIRES_AT] = str(int(expires) + delay).encode()
        publisher.submit_delayed(message, lmqs, due, done)
        return fut

    def confirm_soon(self) -> None:
        """An append was settled: the confirms go out once, after every settle of this
        loop turn (so consecutive ones coalesce into one ``multiple`` ack)."""
        if not self._confirms_scheduled:
            self._confirms_scheduled = True
            self.broker.loop.call_soon(self._confirmed)

    def _confirmed(self) -> None:
        self._confirms_scheduled = False
        h = self.handler
        out: list[bytes] = []
        last_ok = 0
        confirms = self._confirms
        while confirms and confirms[0].ok is not None:
            entry = confirms.popleft()
            seq = entry.seq
            failed = entry.nack or not entry.ok
            if not failed:
                last_ok = seq
                continue
            if last_ok:
                out.append(h.proto.send_ack(self.id, last_ok, True))
                last_ok = 0
            out.append(h.proto.send_nack(self.id, seq))
        if last_ok:
            out.append(h.proto.send_ack(self.id, last_ok, True))
        if out and not self.closed and h.proto.channel_is_open(self.id):
            h.write(b"".join(out))
            # Sent now, not at the handler's flush a loop turn later: a publisher with a
            # window of unconfirmed messages waits for these.
            h.flush()

    def confirm_select(self, m: Any) -> None:
        if self.tx:
            raise ChannelError(
                PRECONDITION_FAILED, "cannot switch from tx to confirm mode", method=m)
        self.confirm = True
        if not m.nowait:
            h = self.handler
            h.write(h.proto.send_method(self.id, commands.Confirm.SelectOk()))

    # -- transactions ------------------------------------------------------------------

    def tx_select(self, m: Any) -> None:
        if self.confirm:
            raise ChannelError(
                PRECONDITION_FAILED, "cannot switch from confirm to tx mode", method=m)
        self.tx = True
        self.handler.write(self.handler.proto.send_method(self.id, Tx.SelectOk()))

    def tx_commit(self, m: Any) -> None:
        if not self.tx:
            raise ChannelError(PRECONDITION_FAILED, "channel is not transactional", method=m)
        publishes, self._tx_publishes = self._tx_publishes, []
        settles, self._tx_pending = self._tx_pending, []
        futures = [fut for ev in publishes
                   if (fut := self._route_and_submit(ev)[0]) is not None]
        requeue: dict[Queue, list[str]] = {}
        for u, action in settles:
            self._settle_one(u, action, requeue)
        for q, receipts in requeue.items():
            q.requeue(receipts)
        h = self.handler

        async def commit() -> None:
            if futures:
                await asyncio.gather(*futures, return_exceptions=True)
            if not self.closed and h.proto.channel_is_open(self.id):
                h.write(h.proto.send_method(self.id, Tx.CommitOk()))

        h.spawn(commit(), f"amqp-tx-{self.id}")

    def tx_rollback(self, m: Any) -> None:
        if not self.tx:
            raise ChannelError(PRECONDITION_FAILED, "channel is not transactional", method=m)
        self._tx_publishes = []
        # Acks taken in the transaction are not undone by RabbitMQ either: the messages
        # go back to their queues.
        settles, self._tx_pending = self._tx_pending, []
        requeue: dict[Queue, list[str]] = {}
        for u, _action in settles:
            self._settle_one(u, "requeue", requeue)
        for q, receipts in requeue.items():
            q.requeue(receipts)
        self.handler.write(self.handler.proto.send_method(self.id, Tx.RollbackOk()))

    # -- end ---------------------------------------------------------------------------

    def close(self) -> None:
        """The channel is closing (either side) or the connection is gone: cancel the
        consumers and requeue every unacknowledged message."""
        if self.closed:
            return
        self.closed = True
        for consumer in list(self.consumers.values()):
            consumer.queue.remove_consumer(consumer)
        self.consumers.clear()
        self.requeue_all()
        if self._tx_pending:
            requeue: dict[Queue, list[str]] = {}
            for u, _action in self._tx_pending:
                self._settle_one(u, "requeue", requeue)
            for q, receipts in requeue.items():
                q.requeue(receipts)
            self._tx_pending = []


#: _route_and_submit's "no queue is full" (never appended to).
_NONE_FULL: list[Queue] = []


class _Confirm:
    """One publish awaiting its confirm."""

    __slots__ = ("channel", "seq", "nack", "ok")

    def __init__(self, channel: AmqpChannel, seq: int) -> None:
        self.channel = channel
        self.seq = seq
        self.nack = False  # refused by a full reject-publish queue: nacked anyway
        self.ok: bool | None = None  # None while the append is pending

    def done(self, _result: Any, exc: BaseException | None) -> None:
        self.ok = exc is None
        ch = self.channel
        if not ch._confirms_scheduled:  # (confirm_soon's test, saving a call a message)
            ch.confirm_soon()


def _log_failure_cb(_result: Any, exc: BaseException | None) -> None:
    if exc is not None:
        log.warning("amqp publish failed: %s", exc)

