"""The AMQP front end: shared AMQP state and background work.

Shared state (this object): the :class:`~gateway.amqp.broker.Broker` (topology), the
connection handlers, the metrics, the ``amq.topic`` router of the shared topic space.
Background work: the TTL sweep of queues with ``x-message-ttl``, the pop revive, and
one task that unblocks blocked publishers when the store's publisher is caught up.
Ownership points down: front end -> broker -> queues; handlers -> channels.

At start, messages that were delivered and unacknowledged when the previous gateway
stopped (or died) are made visible again at once, so they are redelivered (with the
``redelivered`` flag, as the pop table counts their deliveries).

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker_core import StoreError
from gateway.amqp import admin
from gateway.amqp.broker import Broker
from gateway.amqp.handler import AmqpHandler
from gateway.amqp.messages import forget_cached_properties
from gateway.amqp.model import Stats
from gateway.amqp.queues import GROUP
from gateway.amqp.remote import RemoteConsumers
from gateway.frontend import FrontEnd

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

TTL_SWEEP_S = 0.1


class AmqpFrontEnd(FrontEnd):
    name = "amqp"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        self.loop = ctx.loop
        self.store = ctx.store
        self.broker = Broker(
            ctx.store, ctx.publisher, ctx.topic_space, ctx.loop,
            max_queues_per_connection=ctx.config.max_queues_per_connection)
        self.handlers: dict[int, AmqpHandler] = {}
        self._blocked: set[AmqpHandler] = set()
        self._unblocker: asyncio.Task[None] | None = None
        self.stats = Stats()
        #: The queues' consumers over other front ends (the JSON API's AMQP receive).
        self.remote = RemoteConsumers(self.broker, self.stats)
        self._register_metrics()

    async def start(self) -> None:
        ctx = self.ctx
        forget_cached_properties()  # (positions of another store opened before)
        self.broker.load()
        # RabbitMQ requeues without limit; x-delivery-limit is enforced per queue here.
        self.store.pop.set_max_deliveries(GROUP, 0)
        # Deliveries in flight are tracked in memory, with one compact durable record per
        # pop (broker_core.pop): a crash still redelivers every unacked one.
        self.store.pop.set_memory_inflight(GROUP)
        if ctx.introspection.replication_role() != "slave":  # a slave's are its master's
            self._requeue_interrupted()
        ctx.topic_space.set_amq_topic_router(self.broker.amq_topic_lmqs)
        ctx.topic_space.set_exchange_router(self.broker.exchange_route)
        admin.register(self)
        ctx.topic_space.set_queue_consumers(self.remote)
        ctx.spawn(self._ttl_loop(), "amqp-ttl")
        ctx.spawn(self._revive_loop(), "amqp-revive")

    def promoted(self) -> None:
        """The broker group's master now (docs/replication.md): the topology is the old
        master's, replicated; the queues loaded at start are closed (a slave has no
        consumers), the replicated topology loaded, and the deliveries the old master
        had in flight go back to their queues, as after a crash."""
        broker = self.broker
        for queue in list(broker.all_queues()):
            queue.close()
        broker.vhosts = {}
        broker.exclusive = {}
        broker.load()
        self._requeue_interrupted()

    def _requeue_interrupted(self) -> None:
        """Deliveries unacked when the gateway stopped go back to their queues."""
        released = self.store.pop.release_group(GROUP)
        if released:
            self.store.pop.revive()
            log.info("amqp unacked messages requeued", extra={"messages": released})

    def _register_metrics(self) -> None:
        m = self.ctx.metrics
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

        def counters() -> None:
            stats = self.stats
            if stats.published:
                self.published.inc(stats.published)
                stats.published = 0
            if stats.delivered:
                self.delivered.inc(stats.delivered)
                stats.delivered = 0

        def collect() -> None:
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

        m.on_sample(counters)
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

    def authentication_on(self, conns: list[Connection]) -> None:
        for conn in conns:
            handler = self.handlers.get(conn.id)
            if handler is None:
                conn.close("authentication on")
            else:
                handler.goodbye("authentication on")

    async def stop(self) -> None:
        self.broker.flush_acks()
        self.ctx.topic_space.set_amq_topic_router(None)
        self.ctx.topic_space.set_exchange_router(None)
        self.ctx.topic_space.set_queue_consumers(None)
        self.remote.stop()
        for q in list(self.broker.all_queues()):
            q.close()

    # -- publisher flow control --------------------------------------------------------

    def watch_blocked(self, handler: AmqpHandler) -> None:
        """``handler`` paused for a lagging store: unblock it once the publisher's
        ``caught_up`` event is set (one waiting task for every blocked handler)."""
        self._blocked.add(handler)
        if self._unblocker is None:
            self._unblocker = self.ctx.spawn(self._unblock_when_caught_up(), "amqp-unblock")

    async def _unblock_when_caught_up(self) -> None:
        publisher = self.ctx.publisher
        try:
            while self._blocked:
                await publisher.caught_up.wait()
                if publisher.lagging:  # (it may have lagged again before this ran)
                    continue
                blocked, self._blocked = self._blocked, set()
                for handler in blocked:
                    handler.unblock()
        finally:
            self._unblocker = None

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
            due = self.store.pop.next_revive_at()
            now = self.broker.now_ms()
            wait = 1.0 if due is None else min(1.0, max(0.0, (due - now) / 1000))
            await asyncio.sleep(wait)
            if due is not None and due <= self.broker.now_ms():
                self.store.pop.revive()
