"""The gRPC front end: shared state, the ``grpc.aio`` server and its listeners.

One ``grpc.aio`` server on the gateway's event loop serves every gRPC client. It
listens on

- ``grpc_port`` (plain) and ``grpc_tls_port`` (TLS with ``grpc.ssl_server_credentials``
  from the gateway's certificate), bound by grpcio itself;
- an internal loopback port (ephemeral) that the unified ports hand their HTTP/2
  connections to (:mod:`gateway.grpc.relay`); :attr:`relayed` maps the relay's local
  port to the client's connection, so a call knows the client's real address.

Shared state here: the client registry (:mod:`gateway.grpc.clients`: clients known from
heartbeats and telemetry, with their Telemetry streams), the topic and group registries
(shared with the other RocketMQ front end), metrics. Per-call state is a
:class:`~gateway.grpc.call.Call`.

Shutdown: the first ``goodbye`` (or ``stop``) stops the server with a grace period
(``shutdown_timeout / 2``): it stops accepting calls, sends HTTP/2 GOAWAY, lets running
calls finish (long polls and Telemetry streams end early on :attr:`stopping`), then
cancels the rest; relayed connections close with their internal ones.

Authentication turning on (a users file appears in open mode): every new call is
authenticated; long polls and Telemetry streams served without a login end early
(:attr:`logins_required`), relayed connections are closed.

Event-loop thread only (grpc.aio runs the servicer on the gateway's loop).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from gateway.config import BindError
from gateway.frontend import FrontEnd
from gateway.grpc import admin
from gateway.grpc.call import CLIENT_ID, Call
from gateway.grpc.clients import ClientRegistry
from gateway.grpc.relay import RelayHandler
from gateway.grpc.requests import register
from gateway.grpc.service import MessagingService
from gateway.grpc.transactions import check_sender

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

#: Room for a message's properties, topic and the protobuf framing on top of its body:
#: the largest request accepted is the store's largest message plus this.
REQUEST_HEADROOM = 1024 * 1024
SWEEP_INTERVAL_S = 10.0


def peer_port(peer: str) -> int | None:
    """The port of a gRPC peer string (``ipv4:127.0.0.1:5123``, ``ipv6:[::1]:5123``)."""
    _, sep, port = peer.rpartition(":")
    return int(port) if sep and port.isdigit() else None


def peer_host(peer: str) -> str | None:
    """The host of a gRPC peer string, without brackets (None for a unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = rest.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


class GrpcFrontEnd(FrontEnd):
    name = "grpc"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        cfg = ctx.config
        self.loop = ctx.loop
        self.store = ctx.store
        self.publisher = ctx.publisher
        #: The gateway's RocketMQ topics and groups (shared with remoting).
        self.topics = ctx.rocketmq_topics
        #: Every send, end of transaction and recall (gateway.rocketmq.producer).
        self.producer = ctx.rocketmq.producer
        self.groups = ctx.rocketmq_groups
        #: Largest message body a producer may send (the store's limit).
        self.max_body = ctx.store.config.max_message_bytes
        self.max_request = self.max_body + REQUEST_HEADROOM
        self.advertised_address = cfg.advertised_address
        self.clients = ClientRegistry()
        #: ReceiveMessage calls open by client id (Call.receive_slot), and the limit.
        self.receives: dict[str, int] = {}
        self.max_receives = cfg.grpc_max_receives_per_client
        self.service = MessagingService(self)
        self.server: grpc.aio.Server | None = None
        #: The internal listener's port (loopback), for the unified ports' hand-off.
        self.internal_port = 0
        #: ``(name, host, port)`` of the dedicated listeners bound.
        self.bound: list[tuple[str, str, int]] = []
        #: Relayed connections by the local port of their internal connection.
        self.relayed: dict[int, Connection] = {}
        #: Set by the first goodbye or stop: long polls and Telemetry streams end.
        self.stopping = asyncio.Event()
        #: Set when authentication turns on: those of calls served without a login end.
        self.logins_required = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self.grace = cfg.shutdown_timeout / 2
        #: Calls by (RPC, status code), copied into the labelled counter at scrape time.
        self.call_counts: dict[tuple[str, int], int] = {}
        #: Streams (ReceiveMessage, PullMessage, Telemetry) open now.
        self.open_streams = 0
        self._register_metrics()

    def _register_metrics(self) -> None:
        m = self.ctx.metrics
        calls = m.counter(
            "lmq_grpc_calls_total", "gRPC calls answered, by RPC and RocketMQ status code",
            ("rpc", "code"))
        relayed = m.gauge(
            "lmq_grpc_relayed_connections",
            "HTTP/2 connections the unified ports hand to the gRPC server now")
        streams = m.gauge("lmq_grpc_open_streams", "gRPC streaming calls open now")
        clients = m.gauge("lmq_grpc_clients", "gRPC clients known from heartbeats and telemetry")

        def collect() -> None:
            for (rpc, code), n in self.call_counts.items():
                labels = {"rpc": rpc, "code": str(code)}
                calls.inc(n - calls.value(**labels), **labels)
            relayed.set(len(self.relayed))
            streams.set(self.open_streams)
            clients.set(len(self.clients))

        m.on_collect(collect)

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.ctx.config
        options = [
            ("grpc.max_receive_message_length", self.max_request),
            ("grpc.max_send_message_length", -1),
            # RocketMQ's clients keep channels open for hours; allow their keepalives
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.aio.server(options=options)
        register(self.service, server)
        server.add_generic_rpc_handlers((admin.handler(self),))  # lmq groups release
        self.internal_port = _bind(server, "internal", "127.0.0.1", 0, None)
        port = cfg.port("grpc")
        if port is not None:
            self._bound("grpc", _bind(server, "grpc", cfg.bind, port, None))
        port = cfg.port("grpc_tls")
        if port is not None:
            credentials = _server_credentials(
                cfg.tls_cert, cfg.tls_key, cfg.tls_ca, cfg.tls_client_cert)
            self._bound("grpc_tls", _bind(server, "grpc_tls", cfg.bind, port, credentials))
        await server.start()
        self.server = server
        self.ctx.spawn(self._sweep_loop(), "grpc-sweep")
        # transaction check-backs reach producers' Telemetry streams this way
        self.ctx.rocketmq.transactions.register(self.name, check_sender(self))

    def _bound(self, name: str, bound: int) -> None:
        self.bound.append((name, self.ctx.config.bind, bound))

    def bound_listeners(self) -> list[tuple[str, str, int]]:
        return list(self.bound)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            for client_id in self.clients.expire(self.loop.time()):
                log.info("gRPC client expired", extra={"protocol": "grpc", "client_id": client_id})

    def connection_made(self, conn: Connection) -> RelayHandler:
        return RelayHandler(self, conn)

    def goodbye(self, conn: Connection) -> None:
        # The gRPC server says goodbye (GOAWAY) on every connection at once; a relayed
        # connection closes when its internal connection does.
        self._begin_stop()

    def authentication_on(self, conns: list[Connection]) -> None:
        # Calls are authenticated one by one: from now on every new call is. Long polls
        # and Telemetry streams served in open mode end (Call.must_end), on the
        # dedicated ports too; relayed connections (the unified ports) close.
        self.logins_required.set()
        for conn in conns:
            conn.close("authentication on")

    def _begin_stop(self) -> asyncio.Task[None]:
        if self._stop_task is None:
            self.stopping.set()
            self._stop_task = self.loop.create_task(self._stop_server())
        return self._stop_task

    async def _stop_server(self) -> None:
        if self.server is not None:
            await self.server.stop(self.grace)

    async def stop(self) -> None:
        self.ctx.rocketmq.transactions.unregister(self.name)
        await self._begin_stop()

    # -- calls -------------------------------------------------------------------------

    def new_call(self, rpc: str, context: grpc.aio.ServicerContext[Any, Any]) -> Call:
        """The context of a call (authenticated: raises StatusError when refused)."""
        metadata: dict[str, str] = {}
        for key, value in context.invocation_metadata() or ():
            metadata[key.lower()] = value if isinstance(value, str) else value.decode("latin-1")
        remaining = context.time_remaining()
        peer = context.peer() or ""
        call = Call(self, rpc, context, metadata, metadata.get(CLIENT_ID, ""), peer)
        call.deadline = None if remaining is None else self.loop.time() + remaining
        conn = self._relayed_conn(peer)
        if conn is not None:
            call.peer_host = conn.peer_host
            call.connection = conn
        else:
            call.peer_host = peer_host(peer)
        if self.ctx.authenticator is not None:
            from gateway.grpc.auth import authenticate

            authenticate(self, call)
        else:
            call.unauthenticated = True
        return call

    def _relayed_conn(self, peer: str) -> Connection | None:
        if not self.relayed or not peer.startswith(("ipv4:127.0.0.1:", "ipv6:[::1]:")):
            return None
        port = peer_port(peer)
        return self.relayed.get(port) if port is not None else None

    def count(self, rpc: str, code: int) -> None:
        key = (rpc, code)
        self.call_counts[key] = self.call_counts.get(key, 0) + 1


def _address(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def _bind(
    server: grpc.aio.Server, name: str, host: str, port: int,
    credentials: grpc.ServerCredentials | None,
) -> int:
    """Bind ``host:port`` (0 = any free port); the port bound. A port in use is a
    BindError like the gateway's other listeners' (grpcio raises RuntimeError, after a
    log line of its C core: a port seen in use first is refused without asking it)."""
    address = _address(host, port)
    if port:
        try:
            with socket.create_server((host.strip("[]"), port), reuse_port=False) as probe:
                probe.close()
        except OSError as exc:
            raise BindError(name, host, port, exc) from None
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0
    if not bound:
        raise BindError(name, host, port, "address in use or not available")
    return bound


def _server_credentials(
    cert: str, key: str, ca: str, client_cert: str
) -> grpc.ServerCredentials:
    chain = Path(cert).read_bytes()
    private_key = Path(key).read_bytes() if key else chain
    roots = Path(ca).read_bytes() if ca and client_cert != "none" else None
    return grpc.ssl_server_credentials(
        [(private_key, chain)], root_certificates=roots,
        require_client_auth=client_cert == "required")
