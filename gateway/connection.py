"""One accepted socket: the :class:`Connection` a front end works with, and the
asyncio protocol that feeds it.

Life of a connection: the listener's :class:`GatewayProtocol` asks the gateway to admit
it (limits; a rejected socket is closed at once). On a plain port the front end is known;
on the unified port the protocol buffers the first bytes until the sniffers decide
(:mod:`gateway.sniff`). The chosen front end's :class:`~gateway.frontend.ConnectionHandler`
then receives every byte, the already-read prefix first. A connect timer runs from
accept until the front end calls :meth:`Connection.established` (its handshake is
done); if it fires first the connection is closed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from gateway.flow_control import FlowControl
from gateway.sniff import classify
from gateway.tasks import TaskOwner

if TYPE_CHECKING:
    from gateway.frontend import ConnectionHandler
    from gateway.server import Gateway, ListenerSpec

log = logging.getLogger(__name__)

_ids = itertools.count(1)


def format_address(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


class Connection:
    """Per-connection state. Front ends use the public methods; the gateway owns it.
    Event-loop thread only."""

    def __init__(self, gateway: Gateway, listener: str, transport: asyncio.Transport) -> None:
        self.id = next(_ids)
        self.gateway = gateway
        self.listener = listener
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = format_address(peer)
        self.peer_host: str = peer[0] if isinstance(peer, tuple) else str(peer)
        #: The protocol once known (``mqtt``, ``amqp``, ``http``); None while sniffing.
        self.protocol: str | None = None
        self.handler: ConnectionHandler | None = None
        self.flow = FlowControl(transport)
        self.tasks = TaskOwner(parent=gateway.tasks)
        self.opened_at = time.monotonic()
        self.bytes_in = 0
        self.bytes_out = 0
        self.close_reason = ""
        self.is_established = False
        self._closed = asyncio.Event()
        self._connect_timer: asyncio.TimerHandle | None = None
        cfg = gateway.config
        transport.set_write_buffer_limits(
            high=cfg.write_buffer_high, low=cfg.write_buffer_high // 4
        )

    # -- for front ends ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue ``data`` for sending. A connection whose unsent output passes
        ``write_buffer_max`` is aborted (slow consumer): check :attr:`writable` or await
        :meth:`drain` before writing more than a reply."""
        if self.transport.is_closing():
            return
        self.transport.write(data)
        self.bytes_out += len(data)
        if self.transport.get_write_buffer_size() > self.gateway.config.write_buffer_max:
            self.abort("write buffer overflow")

    @property
    def writable(self) -> bool:
        return not self.flow.write_paused and not self.transport.is_closing()

    async def drain(self) -> None:
        await self.flow.drain()

    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        self.flow.resume_reading()

    def established(self) -> None:
        """The protocol handshake is complete: stop the connect timer."""
        self.is_established = True
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by this connection: cancelled when it closes."""
        return self.tasks.spawn(coro, name or f"conn-{self.id}")

    def close(self, reason: str = "") -> None:
        """Close after the queued output is sent."""
        if not self.close_reason:
            self.close_reason = reason
        self.transport.close()

    def abort(self, reason: str = "") -> None:
        """Close now, dropping queued output."""
        if not self.close_reason:
            self.close_reason = reason
        self.transport.abort()

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def log_fields(self) -> dict[str, object]:
        return {
            "conn": self.id,
            "peer": self.peer,
            "listener": self.listener,
            "protocol": self.protocol or "-",
        }

    # -- for the gateway ---------------------------------------------------------------

    def _start_connect_timer(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._connect_timer = loop.call_later(timeout, self._connect_timed_out)

    def _connect_timed_out(self) -> None:
        self._connect_timer = None
        if not self.transport.is_closing():
            self.gateway.count_rejected("connect_timeout")
            self.abort("connect timeout")

    def _lost(self) -> None:
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None
        self.flow.connection_lost()
        self.tasks.cancel()
        self._closed.set()


class GatewayProtocol(asyncio.Protocol):
    """The asyncio protocol of every accepted socket, for its whole life."""

    def __init__(self, gateway: Gateway, listener: ListenerSpec) -> None:
        self.gateway = gateway
        self.listener = listener
        self.conn: Connection | None = None
        self._prefix = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass, hence the cast)
        self.conn = self.gateway._admit(self.listener.name, cast(asyncio.Transport, transport))
        if self.conn is not None and self.listener.protocol is not None:
            self._attach(self.listener.protocol, b"")

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None or conn.transport.is_closing():
            return
        conn.bytes_in += len(data)
        if conn.handler is not None:
            self._call(conn.handler.data_received, data)
            return
        self._prefix += data
        decision = classify(self._prefix, self.gateway.sniffers)
        if decision is None:
            return
        prefix, self._prefix = self._prefix, b""
        if decision is False:
            self.gateway.count_rejected("unknown_protocol")
            log.info(
                "unknown protocol",
                extra={**conn.log_fields(), "first_bytes": prefix[:16].hex()},
            )
            conn.close("unknown protocol")
            return
        assert isinstance(decision, str)
        self._attach(decision, prefix)

    def _attach(self, protocol: str, prefix: bytes) -> None:
        conn = self.conn
        assert conn is not None
        front_end = self.gateway.front_ends.get(protocol)
        if front_end is None:
            self.gateway.count_rejected("front_end_unavailable")
            log.warning(
                "front end not available, closing",
                extra={**conn.log_fields(), "wanted": protocol},
            )
            conn.close(f"{protocol} front end not available")
            return
        self.gateway._assign_protocol(conn, protocol)
        try:
            conn.handler = front_end.connection_made(conn)
        except Exception:
            log.exception("front end failed to take a connection", extra=conn.log_fields())
            conn.abort("front end error")
            return
        if prefix:
            self._call(conn.handler.data_received, prefix)

    def _call(self, method: Any, *args: Any) -> Any:
        conn = self.conn
        assert conn is not None
        try:
            return method(*args)
        except Exception:
            log.exception("front end error", extra=conn.log_fields())
            conn.abort("front end error")
            return None

    def eof_received(self) -> bool:
        conn = self.conn
        if conn is None or conn.handler is None:
            if conn is not None and not conn.close_reason:
                conn.close_reason = "eof"
            return False
        return bool(self._call(conn.handler.eof_received))

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn is None:
            return
        if conn.handler is not None:
            self._call(conn.handler.connection_lost, exc)
        self.gateway._release(conn, exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.flow.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.flow.resume_writing()
