"""The interface between the gateway and its protocol front ends (MQTT, AMQP, HTTP, ...).

How a front end plugs in
------------------------
1. A package or module (``gateway/mqtt/``, ``gateway/amqp/``) defines a function
   ``create_frontend(ctx: GatewayContext) -> FrontEnd`` and a :class:`FrontEnd`
   subclass. :mod:`gateway.frontends` lists the module with its sniffer; the gateway
   imports it at start, and a module that does not exist yet is reported as
   unavailable.
2. The gateway builds the :class:`~gateway.context.GatewayContext` (config, the open
   store, publisher, topic space, metrics, loop, authenticator, server state) before
   any front end, constructs each front end with it, then calls ``await
   front_end.start()`` before any listener accepts.
3. For every connection of its protocol — accepted on its own port, or sniffed on the
   unified port — the gateway calls ``front_end.connection_made(conn)`` and feeds the
   returned :class:`ConnectionHandler` the connection's bytes, starting with the bytes
   already read while sniffing. ``conn`` is a :class:`gateway.connection.Connection`:
   ``queue``/``flush`` (the outbox: one write per loop turn), ``write``, ``drain``,
   ``pause_reading``/``resume_reading``, ``established``, ``spawn``, ``close``,
   ``abort``.
4. Graceful shutdown: after the listeners stop accepting, the gateway calls
   ``front_end.goodbye(conn)`` for each of its connections (MQTT 5 sends DISCONNECT
   0x8B, AMQP sends connection.close 320, then each closes), waits a bounded time for
   them to close, aborts the rest, then calls ``await front_end.stop()`` while the store
   is still open, and finally closes the store.

5. Authentication turning on: when a users file appears while the gateway runs in
   open mode, ``ctx.authenticator`` becomes an authenticator and the gateway calls
   ``front_end.authentication_on(conns)`` once with the front end's open connections,
   all admitted without a login: it closes them the protocol's way (docs/security.md,
   "Adding the first user to a running gateway").

Metrics: ``self.ctx.metrics.counter(...)`` / ``.gauge(...)`` (see
:mod:`gateway.metrics`). Shared state (sessions, retained messages) lives on the front
end object; per-connection state on its handler. Back-pressure from the store:
``ctx.publisher.lagging`` and ``await ctx.publisher.caught_up.wait()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext


class ConnectionHandler:
    """A front end's per-connection object. The gateway calls these methods on the
    event loop, in order: ``data_received`` any number of times, then possibly
    ``eof_received``, then ``connection_lost`` exactly once."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def data_received(self, data: bytes) -> None:
        raise NotImplementedError

    def eof_received(self) -> bool:
        """The peer closed its writing side. Return True to keep the connection open
        for writing; the default closes it."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone (closed, aborted or reset). The connection's tasks
        (``conn.spawn``) are cancelled right after this returns."""


class FrontEnd:
    """One protocol's front end; one instance per gateway (shared server state)."""

    #: The protocol name: ``mqtt``, ``amqp``, ``http``; labels metrics and logs.
    name: ClassVar[str] = ""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx

    async def start(self) -> None:
        """The store is open; no listener accepts yet. Load state, register metrics."""

    def bound_listeners(self) -> list[tuple[str, str, int]]:
        """``(listener name, host, port)`` of the ports this front end bound itself in
        :meth:`start` (a server library with its own sockets, such as grpcio's); the
        gateway lists them with its own listeners. Most front ends bind none."""
        return []

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        raise NotImplementedError

    def goodbye(self, conn: Connection) -> None:
        """Shutdown: tell this connection goodbye the protocol's way and close it (or let
        the peer close). The gateway aborts it if it is still open after
        ``shutdown_timeout``. The default just closes the socket."""
        conn.close("shutdown")

    def authentication_on(self, conns: list[Connection]) -> None:
        """A users file appeared: ``conns`` (this front end's open connections) were
        admitted without a login. Close each the protocol's way, so that its client
        reconnects and logs in; from now on ``ctx.authenticator`` checks every login.
        The default closes the sockets."""
        for conn in conns:
            conn.close("authentication on")

    def promoted(self) -> None:
        """This gateway, a slave of its broker group, became the master: the store's
        metadata is the old master's (replicated, docs/replication.md); reload what was
        loaded from it at start. A slave had no clients. The default does nothing."""

    async def stop(self) -> None:
        """Shutdown: every connection is closed; the store is still open. Persist what
        must survive a restart and stop background work."""
