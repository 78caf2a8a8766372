"""The AMQP front end: shared AMQP state and background work.

Shared state (this object): the :class:`~gateway.amqp.broker.Broker` (topology), the
connection handlers, the metrics, the ``amq.topic`` router of the shared topic space.
Background work: the TTL sweep of queues with ``x-message-ttl``, the pop revive, the
watch of blocked publishers.

At start, messages that were delivered and unacknowledged when the previous gateway
stopped (or died) are made visible again at once, so they are redelivered (with the
``redelivered`` flag, as the pop table counts their deliveries).

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from broker_core import Record, StoreError
from gateway.amqp.broker import Broker
from gateway.amqp.handler import AmqpHandler
from gateway.amqp.messages import dead_letter_message
from gateway.amqp.queues import GROUP, Queue
from gateway.frontend import FrontEnd
from protocol.amqp.errors import AMQPError

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.server import Gateway

log = logging.getLogger(__name__)

TTL_SWEEP_S = 0.1
BLOCKED_CHECK_S = 0.05


class AmqpFrontEnd(FrontEnd):
    name = "amqp"

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(gateway)
        self.handlers: dict[int, AmqpHandler] = {}
        self._blocked: set[AmqpHandler] = set()
        self._blocked_timer: asyncio.TimerHandle | None = None
        self.loop_thread = 0
        self._acks: list[str] = []
        self._acks_scheduled = False
        #: Counted here per message, added to the counters when metrics are collected
        #: (a Counter.inc per message was a measurable share of the CPU).
        self.n_published = 0
        self.n_delivered = 0

    async def start(self) -> None:
        gw = self.gateway
        assert gw.loop is not None and gw.store is not None
        self.loop = gw.loop
        self.loop_thread = threading.get_ident()
        self.store = gw.store
        self._register_metrics()
        self.broker = Broker(self)
        self.broker.load()
        # RabbitMQ requeues without limit; x-delivery-limit is enforced per queue here.
        self.store.set_max_deliveries(GROUP, 0)
        # Deliveries in flight are tracked in memory, with one compact durable record per
        # pop (broker_core.pop): a crash still redelivers every unacked one.
        self.store.set_memory_inflight(GROUP)
        self._requeue_interrupted()
        gw.topic_space.set_amq_topic_router(self.broker.amq_topic_lmqs)
        gw.spawn(self._ttl_loop(), "amqp-ttl")
        gw.spawn(self._revive_loop(), "amqp-revive")

    def ack_soon(self, receipt: str) -> None:
        """Queue an ack for the batch written at the end of this loop turn. A crash
        before it is written redelivers the message (at least once, as for any unacked
        delivery)."""
        self._acks.append(receipt)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            self.loop.call_soon(self.flush_acks)

    def ack_soon_many(self, receipts: list[str]) -> None:
        self._acks.extend(receipts)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            self.loop.call_soon(self.flush_acks)

    def flush_acks(self) -> None:
        self._acks_scheduled = False
        acks, self._acks = self._acks, []
        if acks:
            try:
                self.store.ack_many(acks)
            except StoreError as exc:
                log.warning("acks not recorded: %s", exc, extra={"acks": len(acks)})

    def _requeue_interrupted(self) -> None:
        """Deliveries unacked when the gateway stopped go back to their queues."""
        released = self.store.release_group(GROUP)
        if released:
            self.store.revive()
            log.info("amqp unacked messages requeued", extra={"messages": released})

    def _register_metrics(self) -> None:
        m = self.gateway.metrics
        self.published = m.counter(
            "lmq_amqp_messages_published_total", "basic.publish received from clients")
        self.delivered = m.counter(
            "lmq_amqp_messages_delivered_total", "Messages sent by basic.deliver / get-ok")
        self.protocol_errors = m.counter(
            "lmq_amqp_protocol_errors_total", "Connections closed for a protocol error")
        connections = m.gauge("lmq_amqp_connections", "Open AMQP connections")
        queues = m.gauge("lmq_amqp_queues", "AMQP queues, all vhosts")
        exchanges = m.gauge("lmq_amqp_exchanges", "AMQP exchanges, all vhosts")
        consumers = m.gauge("lmq_amqp_consumers", "AMQP consumers")
        labels = ("vhost", "queue")
        q_ready = m.gauge("lmq_amqp_queue_messages_ready", "Ready messages per queue", labels)
        q_unacked = m.gauge(
            "lmq_amqp_queue_messages_unacked", "Unacknowledged deliveries per queue", labels)
        q_consumers = m.gauge("lmq_amqp_queue_consumers", "Consumers per queue", labels)

        def collect() -> None:
            if self.n_published:
                self.published.inc(self.n_published)
                self.n_published = 0
            if self.n_delivered:
                self.delivered.inc(self.n_delivered)
                self.n_delivered = 0
            all_queues = list(self.broker.all_queues())
            connections.set(len(self.handlers))
            queues.set(len(all_queues))
            exchanges.set(sum(len(vh.exchanges) for vh in self.broker.vhosts.values()))
            consumers.set(sum(len(q.consumers) for q in all_queues))
            for gauge in (q_ready, q_unacked, q_consumers):
                gauge.clear()  # deleted queues leave the series
            for q in all_queues:
                q_ready.set(q.ready(), vhost=q.vhost, queue=q.name)
                q_unacked.set(q.unacked, vhost=q.vhost, queue=q.name)
                q_consumers.set(len(q.consumers), vhost=q.vhost, queue=q.name)

        m.on_collect(collect)

    # -- connections -------------------------------------------------------------------

    def connection_made(self, conn: Connection) -> AmqpHandler:
        handler = AmqpHandler(self, conn)
        self.handlers[conn.id] = handler
        return handler

    def disconnected(self, handler: AmqpHandler) -> None:
        self.handlers.pop(handler.conn.id, None)
        self._blocked.discard(handler)

    def goodbye(self, conn: Connection) -> None:
        handler = self.handlers.get(conn.id)
        if handler is None:
            conn.close("shutdown")
        else:
            handler.goodbye()

    async def stop(self) -> None:
        self.flush_acks()
        self.gateway.topic_space.set_amq_topic_router(None)
        if self._blocked_timer is not None:
            self._blocked_timer.cancel()
        for q in list(self.broker.all_queues()):
            q.close()

    # -- publisher flow control --------------------------------------------------------

    def watch_blocked(self, handler: AmqpHandler) -> None:
        self._blocked.add(handler)
        if self._blocked_timer is None:
            self._blocked_timer = self.loop.call_later(BLOCKED_CHECK_S, self._check_blocked)

    def _check_blocked(self) -> None:
        self._blocked_timer = None
        if self.gateway.publisher.lagging:
            if self._blocked:
                self._blocked_timer = self.loop.call_later(BLOCKED_CHECK_S, self._check_blocked)
            return
        blocked, self._blocked = self._blocked, set()
        for handler in blocked:
            handler.unblock()

    # -- dead-lettering ----------------------------------------------------------------

    def dead_letter(self, queue: Queue, record: Record, reason: str) -> None:
        """Publish the x-death copy of ``record`` to ``queue``'s dead-letter exchange
        (one append, to every queue it routes to). Dropped if it routes nowhere."""
        a = queue.args
        assert a.dlx is not None
        message, key, headers = dead_letter_message(
            record, queue.name, reason, a.dlx, a.dlrk, self.now_ms())
        try:
            targets, mqtt = self.broker.route(queue.vhost, a.dlx, key, headers)
        except AMQPError:
            return  # the DLX does not exist: RabbitMQ drops the message too
        lmqs = [q.lmq for q in targets]
        if mqtt:
            lmqs += self.gateway.topic_space.route_amq_topic(key)
        if not lmqs:
            return
        fut = self.gateway.publisher.submit(message, lmqs)
        fut.add_done_callback(_ignore_result)

    # -- background work ---------------------------------------------------------------

    async def _ttl_loop(self) -> None:
        while True:
            await asyncio.sleep(TTL_SWEEP_S)
            for q in list(self.broker.all_queues()):
                if q.args.message_ttl is not None and not q.deleted:
                    try:
                        q.sweep_expired()
                    except StoreError as exc:
                        log.warning("ttl sweep failed: %s", exc, extra={"queue": q.name})

    async def _revive_loop(self) -> None:
        """Deliveries unacknowledged past INVISIBLE_MS go back to their queue."""
        while True:
            due = self.store.pop_consumer.next_revive_at()
            now = self.now_ms()
            wait = 1.0 if due is None else min(1.0, max(0.0, (due - now) / 1000))
            await asyncio.sleep(wait)
            if due is not None and due <= self.now_ms():
                self.store.revive()

    # -- clocks --------------------------------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000


def _ignore_result(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("dead-letter publish failed: %s", fut.exception())
