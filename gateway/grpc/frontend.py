"""The gRPC front end: shared state, and the door every gRPC connection goes through.

gRPC is served on the gateway's own event loop (:mod:`gateway.grpc.server` over the
sans-IO :mod:`protocol.grpc.server`), on

- ``grpc_port`` (plain) and ``grpc_tls_port`` (TLS, ALPN ``h2``: the gateway's TLS
  context), listeners of the gateway like every other port;
- the unified ports, whose sniffer tells the HTTP/2 client preface.

Every connection is a :class:`~gateway.grpc.server.GrpcConnection`; :attr:`methods`
maps a call's ``:path`` to the servicer's RPC (or the admin service's).

Shared state: the services object request code is given
(:class:`~gateway.grpc.services.GrpcServices`: the RocketMQ services, the client
registry of clients known from heartbeats and telemetry with their Telemetry streams,
the receive state, the events below); here, the RPC table, the connections, metrics.
Per-call state is a :class:`~gateway.grpc.call.Call`.

Shutdown: the first ``goodbye`` sets ``services.stopping`` (long polls and Telemetry
streams end early); each connection sends GOAWAY, lets its running calls finish for
``shutdown_timeout / 2`` (:attr:`grace`), ends the rest UNAVAILABLE and closes.

Authentication turning on (a users file appears in open mode): every new call is
authenticated; long polls and Telemetry streams served without a login end early
(``services.logins_required``), and the door's connections close.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from gateway.frontend import FrontEnd
from gateway.grpc.auth import authenticate
from gateway.grpc.call import CLIENT_ID, Call
from gateway.grpc.server import GrpcConnection, Method, ServerCall, methods
from gateway.grpc.service import MessagingService
from gateway.grpc.services import GrpcServices
from gateway.grpc.transactions import check_sender

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

#: Room for a message's properties, topic and the protobuf framing on top of its body:
#: the largest request accepted is the store's largest message plus this.
REQUEST_HEADROOM = 1024 * 1024
SWEEP_INTERVAL_S = 10.0


class GrpcFrontEnd(FrontEnd):
    name = "grpc"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        cfg = ctx.config
        self.loop = ctx.loop
        #: What request code is given (``call.services``): the RocketMQ services, the
        #: client registry, the receive state, the events that end long polls and the
        #: counters copied into the metrics below.
        self.services = services = GrpcServices(ctx)
        self.max_request = services.max_body + REQUEST_HEADROOM
        self.service = MessagingService(self)
        #: How each ``:path`` is served.
        self.methods: dict[str, Method] = methods(self)
        #: The HTTP/2 connections open now.
        self.connections: set[GrpcConnection] = set()
        self.grace = cfg.shutdown_timeout / 2
        #: Calls by (RPC, status code), copied into the labelled counter at scrape time.
        self.call_counts: dict[tuple[str, int], int] = {}
        #: Streams (ReceiveMessage, PullMessage, Telemetry) open now.
        self.open_streams = 0
        self._register_metrics()

    def _register_metrics(self) -> None:
        m = self.ctx.metrics
        services = self.services
        calls = m.counter(
            "lmq_grpc_calls_total", "gRPC calls answered, by RPC and RocketMQ status code",
            ("rpc", "code"))
        connections = m.gauge(
            "lmq_grpc_connections", "HTTP/2 connections of gRPC clients open now")
        streams = m.gauge("lmq_grpc_open_streams", "gRPC streaming calls open now")
        clients = m.gauge("lmq_grpc_clients", "gRPC clients known from heartbeats and telemetry")
        received = m.counter("lmq_grpc_messages_received_total", "Messages stored by SendMessage")
        sent = m.counter("lmq_grpc_messages_sent_total", "Messages given by ReceiveMessage")

        def counters() -> None:
            received.inc(services.received - received.value())
            sent.inc(services.sent - sent.value())

        def collect() -> None:
            for (rpc, code), n in self.call_counts.items():
                labels = {"rpc": rpc, "code": str(code)}
                calls.inc(n - calls.value(**labels), **labels)
            connections.set(len(self.connections))
            streams.set(self.open_streams)
            clients.set(len(services.clients))

        m.on_sample(counters)
        m.on_collect(collect)

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        self.ctx.spawn(self._sweep_loop(), "grpc-sweep")
        # transaction check-backs reach producers' Telemetry streams this way
        self.ctx.rocketmq.transactions.register(self.name, check_sender(self.services))

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            for client_id in self.services.clients.expire(self.loop.time()):
                log.info("gRPC client expired", extra={"protocol": "grpc", "client_id": client_id})

    def connection_made(self, conn: Connection) -> GrpcConnection:
        return GrpcConnection(self, conn)

    def goodbye(self, conn: Connection) -> None:
        self.services.stopping.set()  # long polls and Telemetry streams end
        if isinstance(conn.handler, GrpcConnection):
            conn.handler.goodbye()
        else:
            conn.close("shutdown")

    def authentication_on(self, conns: list[Connection]) -> None:
        # Calls are authenticated one by one: from now on every new call is. Long polls
        # and Telemetry streams served in open mode end (Call.must_end), and the
        # connections close (clients reconnect and log in).
        self.services.logins_required.set()
        for conn in conns:
            conn.close("authentication on")

    async def stop(self) -> None:
        self.services.stopping.set()
        self.ctx.rocketmq.transactions.unregister(self.name)

    # -- calls -------------------------------------------------------------------------

    def new_call(self, rpc: str, context: ServerCall) -> Call:
        """The context of a call (authenticated: raises StatusError when refused)."""
        metadata: dict[str, str] = {}
        for key, value in context.metadata:
            metadata[key] = value if isinstance(value, str) else value.decode("latin-1")
        conn = context.connection
        call = Call(self.services, rpc, context, metadata, metadata.get(CLIENT_ID, ""),
                    context.peer, conn.peer_host, deadline=context.deadline, connection=conn)
        auth = self.ctx.authenticator
        if auth is not None:
            authenticate(auth, call)
        else:
            call.unauthenticated = True
        return call

    def count(self, rpc: str, code: int) -> None:
        key = (rpc, code)
        self.call_counts[key] = self.call_counts.get(key, 0) + 1
