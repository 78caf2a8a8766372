"""The remoting front end: shared RocketMQ state and background work.

Shared state (this object): the topic and group registries (``gateway.rocketmq``), the
:class:`~gateway.remoting.consumers.ConsumerManager` (clients and consumer groups from
heartbeats), the :class:`~gateway.remoting.locks.LockManager` (ordered consumers'
queue locks), the request table (:mod:`gateway.remoting.dispatch`), the connection
handlers and the metrics. Per-connection state is in
:class:`~gateway.remoting.handler.RemotingHandler`.

Background work: one task that every 10 s forgets clients silent for two minutes and
expired locks. Nothing else runs on a timer: suspended pulls wait on store listeners
(:mod:`gateway.remoting.pull`).

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gateway.cluster_id import cluster_id
from gateway.frontend import FrontEnd
from gateway.remoting.clients import notify_consumer_ids_changed
from gateway.remoting.consumers import ConsumerManager
from gateway.remoting.dispatch import build_table
from gateway.remoting.handler import RemotingHandler
from gateway.remoting.locks import LockManager
from gateway.remoting.pull import PullWaiters
from gateway.remoting.security import authorize, check_subscribe

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext
    from gateway.remoting.dispatch import RequestContext
    from protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10.0


class RemotingFrontEnd(FrontEnd):
    name = "remoting"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        cfg = ctx.config
        self.loop = ctx.loop
        self.store = ctx.store
        self.publisher = ctx.publisher
        self.topic_space = ctx.topic_space
        #: Messages stored from sends and returned by pulls (plain ints on the hot
        #: paths, copied into the counters at scrape time).
        self.sent = 0
        self.pulled = 0
        #: Pulls suspended now (maintained by gateway.remoting.pull).
        self.suspended = 0
        self.handlers: dict[int, RemotingHandler] = {}
        self.table = build_table()
        self.consumers = ConsumerManager(self._group_changed)
        self.locks = LockManager(cfg.rocketmq_lock_expiry)
        self.max_frame = cfg.remoting_max_frame
        #: ``host:port`` brokers are advertised at in routes ("" = the address each
        #: client connected to).
        self.advertised_address = cfg.advertised_address
        #: The gateway's RocketMQ topics and groups (shared with the topic space and
        #: the other RocketMQ front ends).
        self.topics = ctx.rocketmq_topics
        self.groups = ctx.rocketmq_groups
        self.max_body = ctx.store.config.max_message_bytes
        #: Suspended pulls by LMQ (one store listener per LMQ waited on).
        self.waiters = PullWaiters(self)
        #: Set by the first goodbye: suspended pulls are answered, none suspends again.
        self.stopping = False
        #: This gateway's id for the connector (gateway.cluster_id), and the copies
        #: dropped: duplicates (at or below their origin's high-water mark) and loops
        #: (their ``__LMQ_PATH`` names this gateway).
        self._cluster_id = cluster_id(ctx.store, cfg.cluster_id)
        self.copies_duplicate = 0
        self.copies_looped = 0
        self._register_metrics()

    def _register_metrics(self) -> None:
        m = self.ctx.metrics
        self.requests = m.counter(
            "lmq_remoting_requests_total", "Remoting requests received", ("code",))
        self.errors = m.counter(
            "lmq_remoting_errors_total", "Remoting requests answered with an error code",
            ("code",))
        self.protocol_errors = m.counter(
            "lmq_remoting_protocol_errors_total",
            "Remoting connections closed for a malformed frame")
        self.messages_sent = m.counter(
            "lmq_remoting_messages_received_total", "Messages stored from remoting sends")
        self.messages_pulled = m.counter(
            "lmq_remoting_messages_pulled_total", "Messages returned by remoting pulls")
        duplicates = m.counter(
            "lmq_connector_duplicates_dropped_total",
            "Copies not stored: at or below their origin's high-water mark")
        loops = m.counter(
            "lmq_connector_loops_dropped_total",
            "Copies not stored: their __LMQ_PATH names this gateway")
        connections = m.gauge("lmq_remoting_connections", "Open remoting connections")
        clients = m.gauge("lmq_remoting_clients", "RocketMQ clients known from heartbeats")
        suspended = m.gauge("lmq_remoting_suspended_pulls", "Long-polling pulls waiting")
        locks = m.gauge("lmq_remoting_queue_locks", "Queue locks held by ordered consumers")

        #: Requests and error responses by code (plain dicts on the hot path, copied
        #: into the labelled counters at scrape time).
        self.request_counts: dict[int, int] = {}
        self.error_counts: dict[int, int] = {}

        def collect() -> None:
            for counts, counter in ((self.request_counts, self.requests),
                                    (self.error_counts, self.errors)):
                for code, n in counts.items():
                    label = str(code)
                    counter.inc(n - counter.value(code=label), code=label)
            duplicates.inc(self.copies_duplicate - duplicates.value())
            loops.inc(self.copies_looped - loops.value())
            connections.set(len(self.handlers))
            clients.set(len(self.consumers.clients))
            suspended.set(self.suspended)
            locks.set(self.locks.count())

        def counters() -> None:
            self.messages_sent.inc(self.sent - self.messages_sent.value())
            self.messages_pulled.inc(self.pulled - self.messages_pulled.value())

        m.on_sample(counters)
        m.on_collect(collect)

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        self.ctx.spawn(self._sweep_loop(), "remoting-sweep")
        for hook in self.table.on_start:
            hook(self)

    @property
    def cluster_id(self) -> str:
        """This gateway's id for the connector. In a broker group, the group's: the one
        its first master kept in the store's metadata, replicated (a copy's origin and
        the connector's high-water marks name it, so it must not change at a failover).
        A slave reads it from the replicated metadata at each use (a connector asking a
        slave about to be promoted gets the group's id, not the one the slave generated
        at its own first start); a master keeps it, read again when promoted."""
        if self.ctx.store.log.fence is not None:
            return cluster_id(self.ctx.store, self.ctx.config.cluster_id)
        return self._cluster_id

    def promoted(self) -> None:
        self._cluster_id = cluster_id(self.ctx.store, self.ctx.config.cluster_id)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            for client_id in self.consumers.expire():
                self.locks.release_client(client_id)
                log.info("remoting client expired", extra={"client_id": client_id})
            self.locks.sweep()

    def connection_made(self, conn: Connection) -> RemotingHandler:
        handler = RemotingHandler(self, conn)
        self.handlers[conn.id] = handler
        return handler

    def connection_closed(self, handler: RemotingHandler) -> None:
        self.handlers.pop(handler.conn.id, None)
        for client_id in self.consumers.channel_closed(handler):
            self.locks.release_client(client_id)
            log.info("remoting client gone", extra={
                **handler.conn.log_fields(), "client_id": client_id,
                "reason": handler.conn.close_reason or "closed"})

    def goodbye(self, conn: Connection) -> None:
        # Remoting has no goodbye message: RocketMQ's clients reconnect (or fail over to
        # another broker) when the connection closes. Suspended pulls are answered
        # PULL_NOT_FOUND first so the client does not wait for its timeout.
        self.stopping = True
        handler = self.handlers.get(conn.id)
        if handler is not None:
            handler.goodbye()
        else:
            conn.close("shutdown")

    def authentication_on(self, conns: list[Connection]) -> None:
        # As goodbye, for these connections only: the clients reconnect and sign.
        for conn in conns:
            handler = self.handlers.get(conn.id)
            if handler is not None:
                handler.goodbye("authentication on")
            else:
                conn.close("authentication on")

    async def stop(self) -> None:
        for hook in self.table.on_stop:
            hook(self)

    # -- consumer groups ---------------------------------------------------------------

    def _group_changed(self, group: str, channels: list[Any]) -> None:
        """A group gained or lost a client: tell its clients to rebalance now."""
        for channel in channels:
            if not channel.closed:
                notify_consumer_ids_changed(channel, group)

    # -- back-pressure -----------------------------------------------------------------

    def throttle(self, handler: RequestContext) -> None:
        """After a send: while the store lags, stop reading this connection's requests
        until it has caught up (the client's own send timeout then bounds the wait)."""
        publisher = self.publisher
        if not publisher.lagging or handler.closed:
            return
        conn = handler.conn
        if conn.flow.read_paused:
            return  # already waiting for the store
        conn.pause_reading()

        async def resume() -> None:
            await publisher.caught_up.wait()
            conn.resume_reading()

        conn.spawn(resume(), "remoting-resume")

    # -- security ----------------------------------------------------------------------

    def authorize(self, handler: RemotingHandler, cmd: RemotingCommand) -> RemotingCommand | None:
        """``None`` when ``cmd`` may be served (open mode: always), else the error
        response (see :mod:`gateway.remoting.security`)."""
        if self.ctx.authenticator is None:
            return None
        return authorize(self, handler, cmd)

    def check_subscribe(self, handler: RequestContext, topic: str, group: str) -> None:
        """Raise NO_PERMISSION unless the principal may consume ``topic`` as ``group``."""
        if self.ctx.authenticator is None:
            return
        check_subscribe(self, handler, topic, group)
