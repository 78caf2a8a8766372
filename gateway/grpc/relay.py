"""The unified port's hand-off: an HTTP/2 connection relayed to the gRPC server.

A connection sniffed as HTTP/2 on the unified port (or, after its TLS handshake, on the
unified TLS port) is not parsed here: its bytes, starting with the ones read while
sniffing, are copied unchanged to a plain TCP connection to the gRPC server's internal
listener (loopback), and that connection's bytes back to the client. RocketMQ 5's proxy
hands its gRPC connections over the same way.

Invariants:

- Order: bytes reach the other side in the order they were read; what the client sends
  before the internal connection is up waits in ``pending`` (reading paused once that
  holds more than :data:`PENDING_MAX`).
- Back-pressure both ways: when the internal socket's buffer is full the client's
  reading is paused, and when the client's is full (``conn.writable`` false) the
  internal socket's reading is paused until ``conn.drain()`` returns. Neither side's
  buffer grows without bound.
- Closed together: when either side closes (or fails), the other is closed, after
  what it was already given is written. An EOF from the client is passed on as an EOF.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from gateway.frontend import ConnectionHandler

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.grpc.frontend import GrpcFrontEnd

log = logging.getLogger(__name__)

#: Bytes from the client buffered while the internal connection is being opened.
PENDING_MAX = 256 * 1024


class RelayHandler(ConnectionHandler):
    """The client's side: the gateway's connection on the unified port."""

    def __init__(self, front: GrpcFrontEnd, conn: Connection) -> None:
        super().__init__(conn)
        self.front = front
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.upstream: asyncio.Transport | None = None
        #: The client sent EOF before the internal connection was up.
        self.eof = False
        self.closed = False
        conn.established()  # the HTTP/2 handshake is the gRPC server's to time
        conn.spawn(self._connect(), f"grpc-relay-{conn.id}")

    async def _connect(self) -> None:
        front = self.front
        try:
            transport, _ = await front.loop.create_connection(
                lambda: Upstream(self), "127.0.0.1", front.internal_port)
        except OSError as exc:
            log.warning("gRPC hand-off failed", extra={**self.conn.log_fields(), "error": str(exc)})
            self.conn.close("gRPC server unavailable")
            return
        assert isinstance(transport, asyncio.Transport)
        if self.closed:
            transport.close()
            return
        self.upstream = transport
        local = transport.get_extra_info("sockname")
        if isinstance(local, tuple):
            front.relayed[int(local[1])] = self.conn
        if self.pending:
            transport.write(b"".join(self.pending))
            self.pending.clear()
            self.pending_size = 0
            self.conn.resume_reading()
        if self.eof and transport.can_write_eof():
            transport.write_eof()

    def data_received(self, data: bytes) -> None:
        upstream = self.upstream
        if upstream is None:
            self.pending.append(data)
            self.pending_size += len(data)
            if self.pending_size > PENDING_MAX:
                self.conn.pause_reading()
            return
        upstream.write(data)

    def eof_received(self) -> bool:
        upstream = self.upstream
        if upstream is None:
            self.eof = True
        elif upstream.can_write_eof():
            upstream.write_eof()
        return True  # keep writing the server's answers until it closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        upstream = self.upstream
        if upstream is not None:
            local = upstream.get_extra_info("sockname")
            if isinstance(local, tuple):
                self.front.relayed.pop(int(local[1]), None)
            upstream.close()


class Upstream(asyncio.Protocol):
    """The gRPC server's side: the internal connection."""

    def __init__(self, relay: RelayHandler) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.waiting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        conn = self.relay.conn
        conn.write(data)
        if not conn.writable and not self.waiting and self.transport is not None:
            self.waiting = True
            self.transport.pause_reading()
            conn.spawn(self._drained(), f"grpc-relay-drain-{conn.id}")

    async def _drained(self) -> None:
        await self.relay.conn.drain()
        self.waiting = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.relay.conn.pause_reading()

    def resume_writing(self) -> None:
        self.relay.conn.resume_reading()

    def eof_received(self) -> bool:
        return False  # the server is done: close, and the client with it

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.relay.conn.close("gRPC server closed the connection")
