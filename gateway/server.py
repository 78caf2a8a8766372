"""The gateway: owns the store, the front ends, the listeners and every connection.

Shared server state (the connection table, its counters, the tasks) lives in
:class:`gateway.state.ServerState`; what front ends are given, in the
:class:`gateway.context.GatewayContext` built by :meth:`Gateway.start`; per-connection
state in :class:`gateway.connection.Connection`; per-session state in the front ends.
Ownership points down: gateway -> context, state, front ends -> connections.

Lifecycle::

    gateway = Gateway(config)
    await gateway.start()        # open the store, build the context, start front ends,
                                 # bind listeners
    await gateway.wait_stopped() # until gateway.request_stop() (e.g. on SIGTERM)
    await gateway.stop()         # ordered, idempotent

Shutdown order (after hypercorn): stop accepting; tell every connection goodbye through
its front end (MQTT 5 DISCONNECT 0x8B, AMQP connection.close 320); wait up to
``shutdown_timeout`` for them to close; abort the rest; cancel the tasks left; stop the
front ends (the store is still open for them); close the store, which flushes it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core import MessageStore, StoreError
from gateway.admin.address import admin_url, remove_address, write_address
from gateway.config import BindError, GatewayConfig
from gateway.connection import Connection, GatewayProtocol, ListenerSpec, format_address
from gateway.context import GatewayContext
from gateway.frontend import FrontEnd
from gateway.frontends import FRONT_ENDS, FrontEndSpec, load_front_end
from gateway.history import INTERVAL_S, SPAN_S, History
from gateway.housekeeping import housekeeping_loop
from gateway.metrics import Registry
from gateway.publisher import Publisher
from gateway.replication.service import ReplicationService
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.services import RocketMQServices
from gateway.rocketmq.topics import TopicRegistry
from gateway.security import Security, make_authenticator, make_tls_context
from gateway.sniff import Sniffer
from gateway.state import ServerState
from gateway.tasks import TaskOwner
from gateway.topic_space import TopicSpace
from lmq.rocketmq import MessageType

log = logging.getLogger(__name__)

__all__ = ["BoundListener", "Gateway", "LISTENERS", "ListenerSpec"]


LISTENERS: tuple[ListenerSpec, ...] = (
    ListenerSpec("mqtt", "mqtt"),
    ListenerSpec("amqp", "amqp"),
    ListenerSpec("unified", None),
    ListenerSpec("remoting", "remoting"),
    ListenerSpec("http", "http"),
    # the admin API's own port (issue 31): HTTP, answering the admin paths only
    ListenerSpec("admin", "http"),
    ListenerSpec("mqtts", "mqtt", tls=True),
    ListenerSpec("amqps", "amqp", tls=True),
    ListenerSpec("unified_tls", None, tls=True),
    ListenerSpec("remoting_tls", "remoting", tls=True),
    # RocketMQ 5 gRPC's own ports (the unified ports serve it too)
    ListenerSpec("grpc", "grpc"),
    ListenerSpec("grpc_tls", "grpc", tls=True),
)


@dataclass(frozen=True, slots=True)
class BoundListener:
    name: str
    protocols: tuple[str, ...]
    host: str
    port: int

    @property
    def address(self) -> str:
        return format_address((self.host, self.port))


class Gateway:
    def __init__(
        self, config: GatewayConfig, *, front_ends: Sequence[FrontEndSpec] = FRONT_ENDS
    ) -> None:
        self.config = config
        self.specs = tuple(front_ends)
        self.front_ends: dict[str, FrontEnd] = {}
        #: (protocol, sniffer) of every front end the unified port serves, in order.
        self.sniffers: list[tuple[str, Sniffer]] = [
            (s.name, s.sniff) for s in self.specs if s.unified
        ]
        #: What a connection of a protocol whose front end is unavailable is told.
        self.refusals: dict[str, bytes] = {s.name: s.refusal for s in self.specs if s.refusal}
        self.listeners: list[BoundListener] = []
        self.metrics = Registry()
        self._connector: Any = None
        self._connector_task: asyncio.Task[None] | None = None
        self.state = ServerState(config, self.metrics)
        #: MQTT filters and AMQP amq.topic bindings: one topic space (DESIGN.md).
        self.topic_space = TopicSpace()
        self.started_at = time.monotonic()
        #: What front ends are given; built by :meth:`start` once the store is open.
        self._ctx: GatewayContext | None = None
        #: The broker group membership (docs/replication.md); None: one node.
        self.replication: ReplicationService | None = None
        self._tls_context: ssl.SSLContext | None = None
        #: The overview's last hour of samples (gateway/history.py); set by start.
        self.history: History | None = None
        #: The last store statistics read (monotonic time, stats) and the read under
        #: way, shared by its callers (:meth:`store_stats`).
        self._stats: tuple[float, dict[str, Any]] | None = None
        self._stats_read: asyncio.Task[dict[str, Any]] | None = None
        self._servers: list[asyncio.Server] = []
        self._stop_requested = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self._register_metrics()

    @property
    def ctx(self) -> GatewayContext:
        """The context of the started gateway (RuntimeError before :meth:`start`)."""
        if self._ctx is None:
            raise RuntimeError("the gateway is not started")
        return self._ctx

    @property
    def store(self) -> MessageStore | None:
        """The open store (None before :meth:`start`)."""
        return self._ctx.store if self._ctx is not None else None

    @property
    def connections(self) -> dict[int, Connection]:
        return self.state.connections

    @property
    def tasks(self) -> TaskOwner:
        return self.state.tasks

    @property
    def stopping(self) -> bool:
        return self.state.stopping

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, build the context, start the front ends, bind the
        listeners. On failure everything opened so far is closed again and the error
        propagates."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        security = Security(cfg, make_authenticator(cfg))
        self._tls_context = make_tls_context(cfg) if cfg.tls_cert else None
        log.info("opening store", extra={"data_dir": str(cfg.data_dir)})
        store = await asyncio.to_thread(MessageStore.open, cfg.data_dir, cfg.store)
        try:
            rmq_topics, rmq_groups = await asyncio.to_thread(_rocketmq_registries, store, cfg)
        except BaseException:
            store.close()
            raise
        self.topic_space.set_rocketmq_topics(rmq_topics.get)
        rmq_topics.add_listener(self.topic_space.rocketmq_topics_changed)
        publisher = Publisher(store, loop)
        self._ctx = ctx = GatewayContext(
            config=cfg, store=store, publisher=publisher,
            topic_space=self.topic_space, rocketmq_topics=rmq_topics,
            rocketmq_groups=rmq_groups,
            rocketmq=RocketMQServices(store, loop, publisher, rmq_topics, rmq_groups,
                                      self.topic_space, security),
            metrics=self.metrics, loop=loop,
            security=security, state=self.state, introspection=self)
        recovery = store.recovery
        log.info("store open", extra={"recovery": recovery.summary() if recovery else "-"})
        # MQTT $delayed and AMQP x-delayed-message appends arm the one timer firing.
        publisher.on_delayed = ctx.rocketmq.timers.arm
        try:
            if cfg.replication_role != "none":  # before any front end can write
                self.replication = ReplicationService(cfg, store, self.tasks,
                                                      self.client_addresses)
                self.replication.on_master.append(functools.partial(_promoted, ctx))
                self.replication.on_master.append(self._front_ends_promoted)
                await self.replication.start()
                bound_at = self.replication.address
                if bound_at is not None:
                    self._listed(BoundListener("replication", ("replication",), *bound_at))
            ctx.rocketmq.start()
            for spec in self.specs:
                front_end = load_front_end(spec, ctx)
                if front_end is not None:
                    await front_end.start()
                    self.front_ends[spec.name] = front_end
                    for name, host, bound in front_end.bound_listeners():
                        self._listed(BoundListener(name, (spec.name,), host, bound))
            served = {spec.name for spec in self.specs}
            for listener in LISTENERS:
                if listener.protocol is not None and listener.protocol not in served:
                    continue  # a gateway built without the protocol has no port for it
                port = cfg.port(listener.name)
                if port is not None:
                    await self._listen(loop, listener, port)
        except BaseException:
            await self.stop()
            raise
        url = admin_url([(bl.name, bl.host, bl.port) for bl in self.listeners
                         if "http" in bl.protocols])
        if url is not None:  # for the lmq CLI (gateway.admin.address)
            await asyncio.to_thread(write_address, Path(cfg.data_dir), url)
        self.spawn(housekeeping_loop(store, self.topic_space), "housekeeping")
        self.history = History(
            self.metrics, appended=lambda: publisher.appended,
            pending=lambda: publisher.pending, log_bytes=lambda: store.log_bytes)
        self.spawn(self.history.run(), "overview-history")
        self._read_stats()  # the admin overview's first answer need not wait for one
        self.spawn(security.watch(self._authentication_on), "users-file-watch")
        if cfg.connector is not None:  # the message connector's rules (docs/connector.md)
            from gateway.connector.runner import EmbeddedConnector

            self._connector = EmbeddedConnector(cfg.connector, self.metrics)
            rep = self.replication
            if rep is not None:  # a broker group: the rules run on its master only
                rep.on_master.append(functools.partial(self._connector_role, True))
                rep.on_slave.append(functools.partial(self._connector_role, False))
            await self._connector.start(rules=rep is None or rep.is_master)
            connector = self._connector.connector
            ctx.views.provide("connector.rules", connector.snapshot)
            ctx.views.provide("connector.rule.disable", connector.disable)
            ctx.views.provide("connector.rule.enable", connector.enable)
            if rep is not None and not rep.is_master:
                log.info("connector rules wait: this member is a slave of its group")
        log.info("gateway ready", extra={"front_ends": ",".join(self.front_ends) or "-"})

    async def _listen(
        self, loop: asyncio.AbstractEventLoop, listener: ListenerSpec, port: int
    ) -> None:
        try:
            server = await loop.create_server(
                functools.partial(
                    GatewayProtocol, self.state, listener, self.front_ends, self.sniffers,
                    self.refusals),
                self.config.bind,
                port,
                reuse_address=True,
                backlog=1024,
                ssl=self._tls_context if listener.tls else None,
            )
        except OSError as exc:
            raise BindError(listener.name, self.config.bind, port, exc) from None
        self._servers.append(server)
        if listener.protocol is not None:
            protocols: tuple[str, ...] = (listener.protocol,)
        else:
            protocols = tuple(name for name, _ in self.sniffers)
        for sock in server.sockets:
            host, bound = sock.getsockname()[:2]
            self._listed(BoundListener(listener.name, protocols, host, bound))

    def _listed(self, bl: BoundListener) -> None:
        self.listeners.append(bl)
        log.info(
            "listener started",
            extra={"listener": bl.name, "address": bl.address, "protocols": ",".join(bl.protocols)},
        )

    def _authentication_on(self) -> None:
        """A users file appeared in open mode: every connection open now was admitted
        without a login, so each front end closes its own the protocol's way (their
        clients reconnect and log in); connections not yet assigned a protocol close."""
        by_protocol: dict[str, list[Connection]] = {}
        log.warning(
            "authentication on: closing the connections admitted without a login",
            extra={"connections": len(self.connections)},
        )
        for conn in list(self.connections.values()):
            if conn.handler is None or conn.protocol not in self.front_ends:
                conn.close("authentication on")
            else:
                by_protocol.setdefault(conn.protocol, []).append(conn)
        for name, front_end in self.front_ends.items():
            try:
                front_end.authentication_on(by_protocol.get(name, []))
            except Exception:
                log.exception("authentication on: front end failed", extra={"protocol": name})
                for conn in by_protocol.get(name, []):
                    conn.abort("authentication on")

    def request_stop(self) -> None:
        """Ask :meth:`wait_stopped` to return (signal handlers call this)."""
        self._stop_requested.set()

    async def wait_stopped(self) -> None:
        await self._stop_requested.wait()

    async def stop(self) -> None:
        """Graceful shutdown; safe to call more than once and concurrently."""
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._stop_task)

    async def _shutdown(self) -> None:
        self.state.stopping = True
        self._stop_requested.set()
        bound = self.config.shutdown_timeout
        if self._connector is not None:  # first: it may be a client of this gateway
            await self._connector.stop(bound)
        if self.replication is not None:  # appends waiting for replicas fail now
            await self.replication.stop()
        log.info("shutdown: stop accepting", extra={"connections": len(self.connections)})
        for server in self._servers:
            server.close()
        log.info("shutdown: saying goodbye", extra={"connections": len(self.connections)})
        for conn in list(self.connections.values()):
            front_end = self.front_ends.get(conn.protocol or "")
            if conn.handler is None or front_end is None:
                conn.close("shutdown")
                continue
            try:
                front_end.goodbye(conn)
            except Exception:
                log.exception("goodbye failed", extra=conn.log_fields())
                conn.abort("shutdown")
        if not await _wait_event(self.state.idle, bound):
            log.warning("shutdown: aborting connections", extra={"left": len(self.connections)})
            for conn in list(self.connections.values()):
                conn.abort("shutdown timeout")
            await _wait_event(self.state.idle, 1.0)
        for server in self._servers:
            await server.wait_closed()
        self.tasks.cancel()
        left = await self.tasks.join(bound)
        if left:
            log.warning("shutdown: tasks did not finish", extra={"left": left})
        for name, front_end in self.front_ends.items():
            try:
                async with asyncio.timeout(bound):
                    await front_end.stop()
            except Exception:
                log.exception("shutdown: front end stop failed", extra={"protocol": name})
        if self._ctx is not None:
            self._ctx.rocketmq.stop()
            if self._stats_read is not None:  # a statistics read in its thread ends first
                await asyncio.wait([self._stats_read])
            log.info("shutdown: closing store")
            await asyncio.to_thread(self._ctx.store.close)
            remove_address(Path(self.config.data_dir))
        log.info("shutdown: done")
        self._stopped.set()

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- tasks and lookup --------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a gateway-owned task (cancelled at shutdown)."""
        return self.tasks.spawn(coro, name)

    def listener(self, name: str) -> BoundListener | None:
        return next((bl for bl in self.listeners if bl.name == name), None)

    def listener_address(self, name: str) -> tuple[str, int] | None:
        bl = self.listener(name)
        return None if bl is None else (bl.host, bl.port)

    def _connector_role(self, master: bool) -> None:
        """The embedded connector's rules start when this member becomes its group's
        master and stop when it stops being it (one task at a time, in order)."""
        connector = self._connector
        if connector is None:
            return

        async def follow(previous: asyncio.Task[None] | None) -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            if master:
                await connector.start_rules()
                log.info("connector rules started: this member is its group's master")
            else:
                await connector.stop_rules(self.config.shutdown_timeout)
                log.info("connector rules stopped: this member is a slave of its group")

        self._connector_task = self.spawn(follow(self._connector_task), "connector-role")

    def _front_ends_promoted(self) -> None:
        for name, front_end in self.front_ends.items():
            try:
                front_end.promoted()
            except Exception:
                log.exception("reloading after a promotion failed", extra={"protocol": name})

    def client_addresses(self) -> str:
        """``name=host:port,...`` of the client listeners (the advertised host when
        set): what a slave of this group tells the clients it refuses."""
        host = self.config.advertised_address.rpartition(":")[0]
        seen: dict[str, str] = {}
        for bl in self.listeners:
            if bl.name != "replication" and bl.name not in seen:
                seen[bl.name] = format_address((host or bl.host, bl.port))
        return ",".join(f"{k}={v}" for k, v in seen.items())

    def replication_role(self) -> str:
        """``master``, ``slave`` or ``single`` (no broker group)."""
        return self.replication.role if self.replication is not None else "single"

    def replication_master(self, listener: str) -> str:
        """``host:port`` of the master for clients of ``listener`` ("" if unknown)."""
        return self.replication.master_address(listener) if self.replication else ""

    def replication_slaves(self, listener: str) -> list[str]:
        rep = self.replication
        return rep.slave_addresses(listener) if rep is not None and rep.is_master else []

    def replication_following(self) -> bool:
        return self.replication is not None and self.replication.following

    def uptime(self) -> float:
        return time.monotonic() - self.started_at

    def overview_history(self, since: int = 0) -> dict[str, Any]:
        if self.history is None:
            return {"interval_s": INTERVAL_S, "span_s": SPAN_S, "samples": []}
        return self.history.document(since)

    def count_rejected(self, reason: str) -> None:
        self.state.count_rejected(reason)

    async def health(self, max_age: float = 0.0) -> tuple[int, dict[str, Any]]:
        """``/health``: 200 and ``status: ok`` while serving, 503 when stopping or the
        store fails. ``max_age``: as :meth:`store_stats`."""
        status = "stopping" if self.stopping else "ok"
        try:
            stats: dict[str, Any] = await self.store_stats(max_age)
        except StoreError as exc:
            status, stats = "error", {"error": str(exc)}
        recovery = self.store.recovery if self.store is not None else None
        body = {
            "status": status,
            "uptime_seconds": round(self.uptime(), 3),
            "listeners": [
                {"name": bl.name, "host": bl.host, "port": bl.port, "protocols": list(bl.protocols)}
                for bl in self.listeners
            ],
            "front_ends": {
                spec.name: "available" if spec.name in self.front_ends else "unavailable"
                for spec in self.specs
            },
            "connections": {"total": len(self.connections), **self.state.by_protocol},
            "store": stats,
            "recovery": recovery.summary() if recovery is not None else None,
            "replication": (
                self.replication.status() if self.replication is not None else None
            ),
        }
        return (200 if status == "ok" else 503), body

    # -- metrics -----------------------------------------------------------------------

    def _register_metrics(self) -> None:
        m = self.metrics
        uptime = m.gauge("lmq_uptime_seconds", "Seconds since the gateway started")
        m.on_collect(lambda: uptime.set(round(self.uptime(), 3)))
        tasks = m.gauge("lmq_asyncio_tasks", "Tasks alive on the gateway's event loop")
        m.on_collect(
            lambda: tasks.set(len(asyncio.all_tasks(self._ctx.loop)) if self._ctx else 0))
        self._store_gauges = {
            key: m.gauge(f"lmq_store_{key}", text)
            for key, text in (
                ("log_bytes", "Bytes in commit-log segments"),
                ("segments", "Commit-log segments"),
                ("lmqs", "LMQs in the index"),
                ("log_end_position", "Commit-log end position"),
                ("index_disk_bytes", "Bytes of the consume-queue index on disk"),
                ("timers_pending", "Delayed messages waiting for their due time"),
                ("transactions_pending", "Half messages neither committed nor rolled back"),
                ("transactions_dead_lettered",
                 "Half messages dead-lettered after their last unanswered check-back, "
                 "since the gateway started"),
                # FIFO pop (broker_core.fifo): `lmq groups show GROUP` names them
                ("fifo_blocked_groups", "FIFO message groups whose head was delivered"
                 " more than once or waits for its retry"),
                ("fifo_blocked_waiting", "Messages waiting behind blocked FIFO message groups"),
                ("fifo_oldest_blocked_ms", "Age in ms of the oldest FIFO message group block"),
            )
        }

    async def store_stats(self, max_age: float = 0.0) -> dict[str, Any]:
        """The store's statistics (read in a thread: they touch the disk); also updates
        the ``lmq_store_*`` gauges. Callers during a read share it. With ``max_age``,
        the last statistics read, when less than ``STATS_STALE_S`` old, without waiting
        (a read starts when they are older than ``max_age``): what the admin overview
        answers, since a read walks the index directory and, once a minute, counts every
        LMQ (0.3-0.7 s with a million, and the read holds the interpreter meanwhile)."""
        if self.store is None:
            return {}
        last = self._stats
        if max_age and last is not None and time.monotonic() - last[0] < STATS_STALE_S:
            if time.monotonic() - last[0] > max_age:
                self._read_stats()
            return last[1]
        return await asyncio.shield(self._read_stats())

    def _read_stats(self) -> asyncio.Task[dict[str, Any]]:
        task = self._stats_read
        if task is None or task.done():
            task = self._stats_read = asyncio.ensure_future(self._stats_now())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved
        return task

    async def _stats_now(self) -> dict[str, Any]:
        store = self.store
        assert store is not None
        stats = await asyncio.to_thread(store.stats)
        self._stats = (time.monotonic(), stats)
        for key, gauge in self._store_gauges.items():
            value = stats.get(key)
            if isinstance(value, int | float):
                gauge.set(value)
        return stats


#: Seconds the statistics of the last read are answered for without waiting for a read
#: (:meth:`Gateway.store_stats` with ``max_age``).
STATS_STALE_S = 60.0


async def _wait_event(event: asyncio.Event, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


def _promoted(ctx: GatewayContext) -> None:
    """This member became its group's master: what it loaded at start or did not run as
    a slave comes from the replicated state now (docs/replication.md): the RocketMQ topic
    and group registries, pop groups, the timer firing and the pop revive."""
    ctx.rocketmq_topics.reload()
    ctx.rocketmq_groups.reload()
    for name in ctx.rocketmq_groups.names():
        ctx.rocketmq.pop.adopt(name)
    ctx.rocketmq.timers.arm()
    ctx.rocketmq.pop.arm_revive()


def _rocketmq_registries(
    store: MessageStore, cfg: GatewayConfig
) -> tuple[TopicRegistry, GroupRegistry]:
    """The RocketMQ topic and group registries, loaded from the store (a worker thread:
    loading may create the queue LMQs an index rebuild forgot)."""
    topics = TopicRegistry(
        store, cfg.rocketmq_auto_create_topics, cfg.rocketmq_default_queue_nums,
        auto_type=MessageType.NORMAL if cfg.rocketmq_strict_message_type
        else MessageType.MIXED,
    )
    return topics, GroupRegistry(store, cfg.rocketmq_auto_create_groups)
