"""The remoting front end: shared RocketMQ state and background work.

Shared state: the services object request code is given
(:class:`~gateway.remoting.services.RemotingServices`: the RocketMQ services, the
:class:`~gateway.remoting.consumers.ConsumerManager` of clients and consumer groups
from heartbeats, the :class:`~gateway.remoting.locks.LockManager` of ordered consumers'
queue locks, the suspended pulls' waiters, the security checks, the counters); here, the
request table (:mod:`gateway.remoting.dispatch`), the connection handlers and the
metrics. Per-connection state is in :class:`~gateway.remoting.handler.RemotingHandler`.

Background work: one task that every 10 s forgets clients silent for two minutes and
expired locks. Nothing else runs on a timer: suspended pulls wait on store listeners
(:mod:`gateway.remoting.pull`).

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gateway.frontend import FrontEnd
from gateway.remoting.clients import notify_consumer_ids_changed
from gateway.remoting.consumers import ConsumerManager
from gateway.remoting.dispatch import build_table
from gateway.remoting.handler import RemotingHandler
from gateway.remoting.security import authorize
from gateway.remoting.services import RemotingServices
from protocol.remoting import RemotingCommand

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10.0


class RemotingFrontEnd(FrontEnd):
    name = "remoting"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        #: What request code is given (``ctx.services`` of every request): the
        #: RocketMQ services, the consumer and lock managers, the pull waiters, the
        #: security checks and the counters copied into the metrics below.
        self.services = RemotingServices(ctx, ConsumerManager(self._group_changed))
        self.handlers: dict[int, RemotingHandler] = {}
        self.table = build_table()
        self.max_frame = ctx.config.remoting_max_frame
        self._register_metrics()

    def _register_metrics(self) -> None:
        m = self.ctx.metrics
        services = self.services
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
            duplicates.inc(services.copies_duplicate - duplicates.value())
            loops.inc(services.copies_looped - loops.value())
            connections.set(len(self.handlers))
            clients.set(len(services.consumers.clients))
            suspended.set(services.suspended)
            locks.set(services.locks.count())

        def counters() -> None:
            self.messages_sent.inc(services.sent - self.messages_sent.value())
            self.messages_pulled.inc(services.pulled - self.messages_pulled.value())

        m.on_sample(counters)
        m.on_collect(collect)

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        self.ctx.spawn(self._sweep_loop(), "remoting-sweep")
        for hook in self.table.on_start:
            hook(self.services)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            services = self.services
            for client_id in services.consumers.expire():
                services.locks.release_client(client_id)
                log.info("remoting client expired", extra={"client_id": client_id})
            services.locks.sweep()

    def connection_made(self, conn: Connection) -> RemotingHandler:
        handler = RemotingHandler(self, conn)
        self.handlers[conn.id] = handler
        return handler

    def connection_closed(self, handler: RemotingHandler) -> None:
        self.handlers.pop(handler.conn.id, None)
        for client_id in self.services.consumers.channel_closed(handler):
            self.services.locks.release_client(client_id)
            log.info("remoting client gone", extra={
                **handler.conn.log_fields(), "client_id": client_id,
                "reason": handler.conn.close_reason or "closed"})

    def goodbye(self, conn: Connection) -> None:
        # Remoting has no goodbye message: RocketMQ's clients reconnect (or fail over to
        # another broker) when the connection closes. Suspended pulls are answered
        # PULL_NOT_FOUND first so the client does not wait for its timeout.
        self.services.stopping = True
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
            hook(self.services)

    # -- consumer groups ---------------------------------------------------------------

    def _group_changed(self, group: str, channels: list[Any]) -> None:
        """A group gained or lost a client: tell its clients to rebalance now."""
        for channel in channels:
            if not channel.closed:
                notify_consumer_ids_changed(channel, group)

    # -- security ----------------------------------------------------------------------

    def authorize(self, handler: RemotingHandler, cmd: RemotingCommand) -> RemotingCommand | None:
        """``None`` when ``cmd`` may be served (open mode: always; ``handler.principal``
        set from its signature otherwise), else the error response (see
        :mod:`gateway.remoting.security`)."""
        auth = self.ctx.authenticator
        if auth is None:
            return None
        found = authorize(auth, cmd, handler.client_id, handler.conn.peer_host)
        if isinstance(found, RemotingCommand):
            return found
        handler.principal = found
        return None
