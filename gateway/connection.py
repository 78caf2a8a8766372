r"""One accepted socket: the :class:`Connection` a front end works with, and the
asyncio protocol that feeds it.

Life of a connection (see also docs/architecture.md):

1. **accepted**: the listener's :class:`GatewayProtocol` asks the
   :class:`~gateway.state.ServerState` to :meth:`~gateway.state.ServerState.admit` it
   (limits; a refused socket is closed at once). A connect timer starts.
2. **protocol known**: on a plain port at once; on the unified port the protocol
   buffers the first bytes until the sniffers decide (:mod:`gateway.sniff`), within
   ``sniff_timeout``. Before that, a connection from a configured load balancer must
   send its PROXY protocol header (:mod:`gateway.proxy_header`), which is consumed and
   makes ``conn.peer`` the client's address (:meth:`~gateway.state.ServerState.readdress`).
   The state :meth:`~gateway.state.ServerState.assign`\ s it, and the front end's
   ``connection_made(conn)`` returns the :class:`~gateway.frontend.ConnectionHandler`
   that from then on receives every byte, the already-read prefix first.
3. **established**: the front end calls :meth:`Connection.established` when its
   handshake is done (MQTT CONNECT, AMQP connection.open); if the connect timer fires
   first the connection is aborted.
4. **closing / lost**: :meth:`Connection.close` (after the queued output) or
   :meth:`Connection.abort`; after an error answer (an MQTT DISCONNECT or refusing
   CONNACK) :meth:`Connection.close` with ``linger``: see "Closing after an error"
   below. When the socket is gone the handler's
   ``connection_lost`` runs, then the state
   :meth:`~gateway.state.ServerState.release`\ s it, which cancels its tasks.

Output: front ends :meth:`Connection.queue` their bytes; everything queued in one
turn of the event loop is written with one ``transport.write`` at its end (the
outbox), or at once past :data:`FLUSH_AT`, in the order queued (a message queued as
one chunk is never interleaved with another).

Closing after an error: a client that is still writing when the server answers with
an error and closes (say an MQTT client sending PUBRELs while the server's DISCONNECT
0x93, Receive Maximum exceeded, is on its way) would have its next write answered by a
TCP reset, which fails that write (a broken pipe) and may discard the error answer
unread from its receive buffer. So such a close *lingers*, as careful servers close
(RFC 7230 section 6.6 for HTTP; MQTT 5 section 4.13): the output is flushed, the
write side shut (a FIN after the answer), and what the peer still sends is read and
discarded until it closes its side or ``linger`` seconds pass; no request is handled
any more. Over TLS, which cannot half-close, the socket stays open for the same
bounded time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from gateway.flow_control import FlowControl
from gateway.proxy_header import expected_versions
from gateway.sniff import Sniffer, classify
from gateway.tasks import TaskOwner
from protocol.proxy import ProxyProtocolError
from protocol.proxy import parse as parse_proxy_header

if TYPE_CHECKING:
    from gateway.frontend import ConnectionHandler, FrontEnd
    from gateway.state import ServerState

log = logging.getLogger(__name__)

_ids = itertools.count(1)

#: Output queued beyond this is written at once rather than at the end of the loop
#: turn, so the socket's flow control (and so a consumer's credit) sees it.
FLUSH_AT = 256 * 1024

#: Seconds a connection closed after an error answer (or, over HTTP, after the last
#: response of a connection the server closes) goes on reading (and discarding) what the
#: peer still sends, so that it reads the answer (see the module docstring).
ERROR_LINGER = 2.0


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    #: Listener name, also the config option prefix (``mqtt`` -> ``mqtt_port``).
    name: str
    #: The protocol every connection speaks; ``None`` = sniff it (the unified port).
    protocol: str | None
    #: TLS (the config's ``tls_cert``); sniffing then sees the decrypted bytes.
    tls: bool = False


def format_address(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


class Connection:
    """Per-connection state. Front ends use the public methods; the
    :class:`~gateway.state.ServerState` owns it. Event-loop thread only."""

    def __init__(self, state: ServerState, listener: str, transport: asyncio.Transport) -> None:
        self.id = next(_ids)
        self._state = state
        self.listener = listener
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = format_address(peer)
        self.peer_host: str = peer[0] if isinstance(peer, tuple) else str(peer)
        local = transport.get_extra_info("sockname")
        #: (host, port) the client connected to: this socket's, or the load balancer's
        #: when a PROXY header names it (a RocketMQ route reply advertises it).
        self.local_address: tuple[str, int] | None = (
            (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        )
        #: The protocol once known (``mqtt``, ``amqp``, ``http``); None while sniffing.
        self.protocol: str | None = None
        self.handler: ConnectionHandler | None = None
        self.flow = FlowControl(transport)
        self.tasks = TaskOwner(parent=state.tasks)
        self.opened_at = time.monotonic()
        #: When output was last written (monotonic): heartbeats are sent only when the
        #: connection has been silent.
        self.last_sent = self.opened_at
        self.bytes_in = 0
        self.bytes_out = 0
        #: Messages the client published and was sent, counted by its front end where it
        #: counts its own (an int increment); 0 for a protocol that does not count them.
        self.messages_in = 0
        self.messages_out = 0
        self.close_reason = ""
        self.is_established = False
        #: Who the client says it is once established (MQTT client id, AMQP
        #: connection name) and the user it logged in as ("" when unknown or open mode).
        self.client_id = ""
        self.user = ""
        #: Closed after an error answer: input is discarded until EOF or the linger ends.
        self.draining = False
        self._linger_timer: asyncio.TimerHandle | None = None
        self._closed = asyncio.Event()
        self._connect_timer: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_scheduled = False
        cfg = state.config
        self._write_buffer_max = cfg.write_buffer_max
        transport.set_write_buffer_limits(
            high=cfg.write_buffer_high, low=cfg.write_buffer_high // 4
        )

    # -- for front ends ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write ``data`` now, ahead of anything still in the outbox (use :meth:`queue`
        unless that order is wanted, or :meth:`flush` first). A connection whose unsent
        output passes ``write_buffer_max`` is aborted (slow consumer): check
        :attr:`writable` or await :meth:`drain` before writing more than a reply."""
        if self.draining or self.transport.is_closing():
            return
        self.transport.write(data)
        self.bytes_out += len(data)
        self.last_sent = time.monotonic()
        if self.transport.get_write_buffer_size() > self._write_buffer_max:
            self.abort("write buffer overflow")

    def queue(self, data: bytes) -> None:
        """The outbox: ``data`` is written after everything queued before it, with one
        ``transport.write`` for all that is queued in this turn of the event loop (at
        its end), or at once when more than :data:`FLUSH_AT` bytes wait. Empty data
        is ignored."""
        if not data:
            return
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= FLUSH_AT:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def defer_flush(self) -> None:
        """The caller will :meth:`flush` itself before this loop turn ends (it must,
        even on an exception): :meth:`queue` schedules no flush until then. Used to
        write a round of work for many connections back to back."""
        self._flush_scheduled = True

    def flush(self) -> None:
        """Write what the outbox holds now, as one chunk."""
        self._flush_scheduled = False
        out = self._out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._out_size = 0
            self.write(data)

    @property
    def writable(self) -> bool:
        return not self.flow.write_paused and not self.transport.is_closing()

    async def drain(self) -> None:
        await self.flow.drain()

    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        self.flow.resume_reading()

    def established(self, client_id: str = "", user: str | None = None) -> None:
        """The protocol handshake is complete: stop the connect timer. ``client_id``
        and ``user`` are shown by the admin API's connection list."""
        self.is_established = True
        self.client_id = client_id
        self.user = user or ""
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by this connection: cancelled when it closes."""
        return self.tasks.spawn(coro, name or f"conn-{self.id}")

    def close(self, reason: str = "", linger: float = 0.0) -> None:
        """Close after the queued output is sent. With ``linger`` (after an error
        answer, see the module docstring) the outbox is flushed, the write side shut,
        and input read and discarded for up to ``linger`` seconds before the close; the
        connection's tasks are cancelled at once."""
        if not self.close_reason:
            self.close_reason = reason
        transport = self.transport
        if linger <= 0 or transport.is_closing():
            transport.close()
            return
        if self.draining:
            return
        self.flush()
        self.draining = True
        self.tasks.cancel()
        if transport.can_write_eof():
            transport.write_eof()
        self.flow.resume_reading()
        self._linger_timer = asyncio.get_running_loop().call_later(linger, transport.close)

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

    # -- for the server state ----------------------------------------------------------

    def start_connect_timer(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._connect_timer = loop.call_later(timeout, self._connect_timed_out)

    def _connect_timed_out(self) -> None:
        self._connect_timer = None
        if not self.transport.is_closing():
            self._state.count_rejected("connect_timeout")
            self.abort("connect timeout")

    def lost(self) -> None:
        """The socket is gone (called once, by :meth:`ServerState.release`)."""
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self.flow.connection_lost()
        self._out.clear()
        self._out_size = 0
        self.tasks.cancel()
        self._closed.set()


class GatewayProtocol(asyncio.Protocol):
    """The asyncio protocol of every accepted socket, for its whole life. It sees the
    server state, the front ends by protocol name and the unified port's sniffers,
    nothing else of the gateway."""

    def __init__(
        self,
        state: ServerState,
        listener: ListenerSpec,
        front_ends: Mapping[str, FrontEnd],
        sniffers: Sequence[tuple[str, Sniffer]],
        refusals: Mapping[str, bytes] | None = None,
    ) -> None:
        self.state = state
        self.listener = listener
        self.front_ends = front_ends
        self.sniffers = sniffers
        #: Bytes for a protocol whose front end is unavailable (FrontEndSpec.refusal).
        self.refusals = refusals or {}
        self.conn: Connection | None = None
        self._prefix = b""
        #: PROXY header versions still expected first; empty once read or when none is.
        self._proxy_versions: frozenset[int] = frozenset()
        self._sniff_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass, hence the cast)
        self.conn = conn = self.state.admit(self.listener.name, cast(asyncio.Transport, transport))
        if conn is None:
            return
        config = self.state.config
        self._proxy_versions = expected_versions(config, self.listener.name, conn.peer_host)
        if self._proxy_versions or self.listener.protocol is None:
            self._sniff_timer = asyncio.get_running_loop().call_later(
                config.sniff_timeout, self._sniff_timed_out
            )
        else:
            self._attach(self.listener.protocol, b"")

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None or conn.transport.is_closing():
            return
        conn.bytes_in += len(data)
        if conn.draining:  # closed after an error answer: read and discard
            return
        if conn.handler is not None:
            self._call(conn.handler.data_received, data)
            return
        self._prefix += data
        if self._proxy_versions and not self._read_proxy_header(conn):
            return
        if self.listener.protocol is not None:  # a plain listener, after the PROXY header
            prefix, self._prefix = self._prefix, b""
            self._attach(self.listener.protocol, prefix)
            return
        if not self._prefix:
            return
        decision = classify(self._prefix, self.sniffers)
        if decision is None:
            return
        prefix, self._prefix = self._prefix, b""
        if decision is False:
            self.state.count_rejected("unknown_protocol")
            log.info(
                "unknown protocol",
                extra={**conn.log_fields(), "first_bytes": prefix[:16].hex()},
            )
            conn.close("unknown protocol")
            return
        assert isinstance(decision, str)
        self._attach(decision, prefix)

    def _read_proxy_header(self, conn: Connection) -> bool:
        """Consume the PROXY header from the prefix; False while it is incomplete or
        when it was refused (the connection is then closing)."""
        try:
            header = parse_proxy_header(self._prefix, self._proxy_versions)
        except ProxyProtocolError as exc:
            self.state.count_rejected("bad_proxy_header")
            log.info(
                "bad PROXY header",
                extra={**conn.log_fields(), "error": str(exc),
                       "first_bytes": self._prefix[:16].hex()},
            )
            self._prefix = b""
            conn.close("bad PROXY header")
            return False
        if header is None:
            return False
        self._prefix = self._prefix[header.length :]
        self._proxy_versions = frozenset()
        # LOCAL (the balancer's own check) and UNKNOWN keep the balancer's address.
        return header.source is None or self.state.readdress(
            conn, header.source, header.destination
        )

    def _sniff_timed_out(self) -> None:
        self._sniff_timer = None
        conn = self.conn
        if conn is None or conn.handler is not None or conn.transport.is_closing():
            return
        self.state.count_rejected("sniff_timeout")
        log.info(
            "no protocol identified in time, closing",
            extra={**conn.log_fields(), "first_bytes": self._prefix[:16].hex()},
        )
        conn.abort("sniff timeout")

    def _stop_sniff_timer(self) -> None:
        if self._sniff_timer is not None:
            self._sniff_timer.cancel()
            self._sniff_timer = None

    def _attach(self, protocol: str, prefix: bytes) -> None:
        conn = self.conn
        assert conn is not None
        self._stop_sniff_timer()
        front_end = self.front_ends.get(protocol)
        if front_end is None:
            self.state.count_rejected("front_end_unavailable")
            log.warning(
                "front end not available, closing",
                extra={**conn.log_fields(), "wanted": protocol},
            )
            refusal = self.refusals.get(protocol)
            if refusal:
                conn.write(refusal)
            conn.close(f"{protocol} front end not available")
            return
        self.state.assign(conn, protocol)
        try:
            conn.handler = front_end.connection_made(conn)
        except Exception:
            log.exception("front end failed to take a connection", extra=conn.log_fields())
            conn.abort("front end error")
            return
        if prefix:
            self._call(conn.handler.data_received, prefix)

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
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
        if conn is not None and conn.draining:
            return False  # the peer closed its side too: close now
        if conn is None or conn.handler is None:
            if conn is not None and not conn.close_reason:
                conn.close_reason = "eof"
            return False
        return bool(self._call(conn.handler.eof_received))

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_sniff_timer()
        conn = self.conn
        if conn is None:
            return
        if conn.handler is not None:
            self._call(conn.handler.connection_lost, exc)
        self.state.release(conn, exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.flow.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.flow.resume_writing()
