"""One remoting connection: frames in, requests dispatched, responses out.

``data_received`` feeds the sans-IO :class:`protocol.remoting.FrameDecoder` and
dispatches every whole command (:mod:`gateway.remoting.dispatch`): plain handlers run
inline, in arrival order; ``async`` handlers run in a task owned by the connection, so a
suspended pull or a send waiting for the store holds up nothing else. Responses go out
through the connection's outbox (``conn.queue``: all written in one write per loop
turn), paired with their request by its opaque.

Bad input (see docs/rocketmq.md, "Bad input"):

- a frame whose header cannot be decoded (a bad field type, a missing code, a bad
  binary header) but whose opaque could be read: answered with SYSTEM_ERROR and a
  remark; the connection goes on (a missing required ``extFields`` entry is the
  request handler's INVALID_PARAMETER);
- framing lost (a length that lies, a frame over ``remoting_max_frame``), or a frame
  whose opaque cannot be read (its JSON does not parse): nobody can be answered, this
  connection is closed; everything already stored stays stored and every other
  connection goes on;
- an unknown request code: ``REQUEST_CODE_NOT_SUPPORTED`` with a remark.

Responses from the client (to our oneway NOTIFY_CONSUMER_IDS_CHANGED there are none;
clients answer GET_CONSUMER_RUNNING_INFO-style requests we do not send) are ignored.

Per-connection state only. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from gateway.auth import ANONYMOUS_PRINCIPAL, Principal
from gateway.frontend import ConnectionHandler
from gateway.remoting.dispatch import RequestError
from gateway.remoting.replies import encode_send_ok, error, failure
from gateway.rocketmq.producer import ProducerError
from protocol.remoting import FrameDecoder, RemotingCommand
from protocol.remoting.codes import ResponseCode
from protocol.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG
from protocol.remoting.errors import FrameError, HeaderError, RemotingError
from protocol.remoting.messages import offset_msg_id

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.remoting.frontend import RemotingFrontEnd

log = logging.getLogger(__name__)

#: How long a graceful shutdown lets in-flight requests (suspended pulls are answered
#: at once) finish before the connection closes.
GOODBYE_WAIT_S = 2.0


class RemotingHandler(ConnectionHandler):
    def __init__(self, front: RemotingFrontEnd, conn: Connection) -> None:
        super().__init__(conn)
        self.front = front
        #: What request code is given (:class:`gateway.remoting.services.RemotingServices`).
        self.services = front.services
        self._security = front.ctx.security
        self.decoder = FrameDecoder(front.max_frame)
        self.principal: Principal = ANONYMOUS_PRINCIPAL
        self.client_id = ""
        self._closed = False
        self._opaques = itertools.count(1)
        #: Tasks of async handlers still running (a graceful shutdown waits for them).
        self._inflight: set[asyncio.Task[Any]] = set()
        self._id_prefix: str | None = None
        #: Called (once) to end a suspended pull early: at shutdown or close.
        self.wakers: set[Callable[[], None]] = set()

    # -- what handlers see (gateway.remoting.dispatch.RequestContext) ------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def local_address(self) -> tuple[str, int]:
        # The socket's address, or the load balancer's a PROXY header named: read when
        # asked (a PROXY header is parsed before the handler exists, but keep no copy).
        return self.conn.local_address or ("127.0.0.1", 0)

    @property
    def store_address(self) -> tuple[str, int]:
        advertised = self.services.advertised_address
        if advertised:
            host, _, port = advertised.rpartition(":")
            if host and port.isdigit():
                return host.strip("[]"), int(port)
        return self.local_address

    def msg_id(self, position: int) -> str:
        """The offsetMsgId of the record at log ``position``, with :attr:`store_address`
        as the store address (the address part encoded once)."""
        prefix = self._id_prefix
        if prefix is None:
            host, port = self.store_address
            prefix = self._id_prefix = offset_msg_id((host, port), 0)[:-16]
        return f"{prefix}{position:016X}"

    def reply(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if self._closed or request.flag & ONEWAY_FLAG:
            return
        code = response.code
        if code:
            counts = self.front.error_counts
            counts[code] = counts.get(code, 0) + 1
        # A new command rather than dataclasses.replace (several times slower), one per
        # response.
        self.conn.queue(RemotingCommand(
            code, request.opaque, response.flag | RESPONSE_FLAG, response.language,
            response.version, response.remark, response.ext_fields, response.body,
        ).encode())

    def reply_send_ok(
        self, request: RemotingCommand, msg_id: str, queue_id: int, queue_offset: int
    ) -> None:
        """:meth:`reply` SUCCESS to a send (the hot path: the frame from a template)."""
        if self._closed or request.flag & ONEWAY_FLAG:
            return
        self.conn.queue(encode_send_ok(request.opaque, msg_id, queue_id, queue_offset))

    def send_request(self, request: RemotingCommand) -> None:
        if self._closed:
            return
        self.conn.queue(dataclasses.replace(
            request, opaque=next(self._opaques), flag=request.flag | ONEWAY_FLAG).encode())

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run a request's remaining work (a suspended pull, an async handler) as a task
        of this connection that a graceful shutdown waits for."""
        task = self.conn.spawn(coro, name)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    # -- bytes in ----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        decoder = self.decoder
        decoder.feed(data)
        while not self._closed:
            try:
                cmd = decoder.next_command()
            except FrameError as exc:
                self._bad_frame(exc)
                continue
            if cmd is None:
                return
            if not self.conn.is_established:
                self.conn.established()
            if cmd.flag & RESPONSE_FLAG:
                continue  # a client's answer to a request of ours: nothing waits for it
            self._dispatch(cmd)

    def _bad_frame(self, exc: FrameError) -> None:
        front = self.front
        front.protocol_errors.inc()
        fields = {**self.conn.log_fields(), "client_id": self.client_id or "-"}
        if exc.fatal or exc.opaque is None:
            # Framing lost, or a frame nobody can be told about: close this connection.
            log.info("remoting protocol error: %s", exc, extra=fields)
            self.close(f"protocol error: {exc}")
            return
        log.info("remoting bad frame: %s", exc, extra={**fields, "opaque": exc.opaque})
        if not (exc.flag or 0) & (ONEWAY_FLAG | RESPONSE_FLAG):
            response = error(ResponseCode.SYSTEM_ERROR, f"bad frame: {exc}")
            self.conn.queue(dataclasses.replace(
                response, opaque=exc.opaque, flag=RESPONSE_FLAG).encode())

    def _dispatch(self, cmd: RemotingCommand) -> None:
        front = self.front
        code = cmd.code
        counts = front.request_counts
        counts[code] = counts.get(code, 0) + 1
        entry = front.table.get(code)
        if entry is None:
            self.reply(cmd, error(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {cmd.code} is not supported by LMQ Gateway"))
            return
        if self._security.authenticator is not None:  # (open mode: no call per request)
            denied = front.authorize(self, cmd)
            if denied is not None:
                self.reply(cmd, denied)
                return
        fn, is_async = entry
        if is_async:
            coro_fn = cast(Callable[..., Awaitable[RemotingCommand | None]], fn)
            self.spawn(self._run(coro_fn, cmd), f"remoting-{cmd.code}")
            return
        try:
            result = fn(self, cmd)
        except Exception as exc:
            result = self._failed(cmd, exc)
        if result is not None:
            self.reply(cmd, result)  # type: ignore[arg-type]

    async def _run(self, fn: Callable[..., Awaitable[RemotingCommand | None]],
                   cmd: RemotingCommand) -> None:
        try:
            result = await fn(self, cmd)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = self._failed(cmd, exc)
        if result is not None:
            self.reply(cmd, result)

    def _failed(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, RequestError):
            return error(exc.code, exc.remark)
        if isinstance(exc, ProducerError):
            return failure(exc)
        if isinstance(exc, (HeaderError, RemotingError)):
            return error(ResponseCode.INVALID_PARAMETER, str(exc))
        log.exception(
            "remoting request failed",
            extra={**self.conn.log_fields(), "code": cmd.code, "client_id": self.client_id})
        return error(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    # -- the end -----------------------------------------------------------------------

    def eof_received(self) -> bool:
        return False

    def close(self, reason: str) -> None:
        if not self._closed:
            self._closed = True
            self._wake_all()
            self.conn.close(reason)

    def goodbye(self, reason: str = "shutdown") -> None:
        """Graceful shutdown (or authentication turning on, ``reason``): answer
        suspended pulls now, let running requests (sends waiting for the store) finish
        for a bounded time, then close."""
        self._wake_all()
        if not self._inflight:
            self.close(reason)
            return

        async def wait_then_close() -> None:
            await asyncio.wait(set(self._inflight), timeout=GOODBYE_WAIT_S)
            self.close(reason)

        self.front.ctx.spawn(wait_then_close(), f"remoting-goodbye-{self.conn.id}")

    def _wake_all(self) -> None:
        wakers, self.wakers = self.wakers, set()
        for wake in wakers:
            wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._wake_all()
        self.front.connection_closed(self)
