"""The gRPC door on the gateway's own event loop: one :class:`GrpcConnection` per HTTP/2
connection (the dedicated ``grpc_port`` / ``grpc_tls_port`` and the unified ports,
whose sniffer tells the HTTP/2 preface), a task per call that waits.

The connection's bytes go through the sans-IO :class:`protocol.grpc.server.
ServerConnection` (HTTP/2 and gRPC framing); its events become calls of the servicer
(:class:`~gateway.grpc.service.MessagingService`) and of the operator's admin service,
looked up by ``:path`` in :func:`methods`. A call's per-call object is a
:class:`ServerCall` (the servicer's ``context``: stream id, metadata, deadline,
cancellation); the servicer builds its :class:`~gateway.grpc.call.Call` from it.

- Unary and server-streaming calls start when the request is complete (one message and
  the client's half-close; no message or two: INTERNAL); Telemetry (bidirectional)
  starts at its headers and reads its commands from a queue as they arrive.
- A unary call runs at once, inside the read that completed it, up to its first wait;
  only a call that waits (a send until the store acknowledges it) goes on as a task
  (:func:`_resume`). Most unary calls never wait (a heartbeat, a route, an ack): they
  cost no task and no extra turn of the loop. So a unary handler must not need
  ``asyncio.current_task()`` before its first wait (``asyncio.timeout`` does: wait on
  a future first, or make the call streaming); the streaming calls start as tasks.
- Deadlines (``grpc-timeout``): a timer cancels the call's task and answers
  DEADLINE_EXCEEDED.
- Cancellation: a client's RST_STREAM (or a closed connection) cancels the call's task
  (a receive gives back what it popped, see :mod:`gateway.grpc.receive`).
- Unknown methods: UNIMPLEMENTED. A request above ``max_request``: RESOURCE_EXHAUSTED
  (the sans-IO layer refuses it from its length prefix). A failure outside the
  servicer's own handling: INTERNAL.
- Output: everything the calls produce in one turn of the event loop is written with one
  write at its end. Back-pressure: a streaming call waits while more than
  :data:`STREAM_HIGH` of its output waits for the client's flow-control windows, or
  while the socket's buffer is full; the socket is fed no more from the HTTP/2 layer
  until it drains.
- Shutdown (:meth:`GrpcConnection.goodbye`): GOAWAY in two stages (a notice, then the
  last stream accepted), running calls finish (long polls and Telemetry end on
  ``services.stopping``) for ``front.grace`` seconds, the rest end UNAVAILABLE; then the
  connection closes.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import service_pb2

from gateway.frontend import ConnectionHandler
from gateway.grpc import admin
from gateway.grpc.requests import lenient
from protocol.grpc import server as wire

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.grpc.frontend import GrpcFrontEnd

log = logging.getLogger(__name__)

#: Bytes of a streaming call's output that may wait in the HTTP/2 layer before it waits.
STREAM_HIGH = 1024 * 1024
#: Most bytes taken from the HTTP/2 layer per socket write.
WRITE_CHUNK = 1024 * 1024
#: Between the shutdown notice and the final GOAWAY (a round trip for calls in flight).
GOAWAY_DELAY_S = 0.1

UNARY, SERVER_STREAM, BIDI = "unary", "server_stream", "bidi"


@dataclass(frozen=True, slots=True)
class Method:
    """How a ``:path`` is served."""

    kind: str
    #: Request bytes -> request (lenient: a :class:`~gateway.grpc.requests.Malformed`).
    parse: Callable[[bytes], Any]
    #: ``handler(request, context)``: a coroutine (unary) or an async iterator.
    handler: Callable[[Any, ServerCall], Any]


def _serialize(response: Any) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def methods(front: GrpcFrontEnd) -> dict[str, Method]:
    """The servicer's RPCs (from the generated service descriptor) and the admin
    service's, by ``:path``."""
    table: dict[str, Method] = {}
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    for rpc in service.methods:
        handler = getattr(front.service, rpc.name, None)
        if handler is None:
            continue  # not served: UNIMPLEMENTED
        kind = BIDI if rpc.client_streaming else SERVER_STREAM if rpc.server_streaming else UNARY
        parse = lenient(getattr(service_pb2, rpc.input_type.name).FromString)
        table[f"/{service.full_name}/{rpc.name}"] = Method(kind, parse, handler)
    table[admin.RELEASE] = Method(UNARY, bytes, admin.handler(front))
    return table


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """Drive ``coro``, which was stepped outside a task until it yielded ``waiting``
    (the future it waits for, or None for a bare yield): hand what it yields to the
    task running this, and what the task sends or throws in (a result, a
    cancellation) back to it."""
    while True:
        try:
            value = yield waiting
        except BaseException as exc:  # a cancellation: passed on to coro
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(value)
            except StopIteration:
                return


async def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """The rest of a unary call that waited, as a task (see :meth:`GrpcConnection._start`)."""
    await _resumed(coro, waiting)


class ServerCall:
    """One call as the transport sees it: the ``context`` the servicer is given."""

    __slots__ = (
        "stream_id",
        "method",
        "metadata",
        "deadline",
        "peer",
        "connection",
        "task",
        "timer",
        "request",
        "requests",
        "_cancelled",
    )

    def __init__(
        self,
        stream_id: int,
        method: Method,
        metadata: list[tuple[str, str | bytes]],
        deadline: float | None,
        connection: Connection,
    ) -> None:
        self.stream_id = stream_id
        self.method = method
        #: Request metadata in order (keys lower case; ``-bin`` values as bytes).
        self.metadata = metadata
        #: ``loop.time()`` of the client's deadline (None: none).
        self.deadline = deadline
        #: The client's address (``host:port``).
        self.peer = connection.peer
        #: The gateway connection the call came on.
        self.connection = connection
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        #: The request message (unary and server-streaming calls).
        self.request: bytes | None = None
        #: Telemetry's incoming messages (payload, window bytes); None: input ended.
        self.requests: asyncio.Queue[tuple[bytes, int] | None] | None = None
        self._cancelled = False

    def cancelled(self) -> bool:
        """The client went away, reset the call, or its deadline passed."""
        return self._cancelled


class GrpcConnection(ConnectionHandler):
    def __init__(self, front: GrpcFrontEnd, conn: Connection) -> None:
        super().__init__(conn)
        self.front = front
        self.loop = front.loop
        self.h2 = wire.ServerConnection(front.max_request)
        self.calls: dict[int, ServerCall] = {}
        self._flush_scheduled = False
        self._draining = False
        #: Resolved after each write: streaming calls waiting for room look again.
        self._room: asyncio.Future[None] | None = None
        #: GOAWAY sent: close once no call is left.
        self.closing = False
        self._grace: asyncio.TimerHandle | None = None
        front.connections.add(self)
        self._flush()  # the server's preface (SETTINGS)

    # -- input -------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        h2 = self.h2
        h2.receive_data(data)
        events = h2.events()
        if events:
            if not self.conn.is_established:
                self.conn.established()  # the client's preface was HTTP/2's
            for event in events:
                self._event(event)
        self._schedule_flush()

    def _event(self, event: wire.Event) -> None:
        kind = type(event)
        if kind is wire.MessageReceived:
            self._message(event)  # type: ignore[arg-type]
        elif kind is wire.InputEnded:
            call = self.calls.get(event.stream_id)  # type: ignore[union-attr]
            if call is None:
                return
            if call.requests is not None:
                call.requests.put_nowait(None)
            elif call.request is None:
                self._finish(call, wire.INTERNAL, "the call carried no request message")
            else:
                self._start(call)
        elif kind is wire.CallStarted:
            self._call_started(event)  # type: ignore[arg-type]
        elif kind is wire.CallClosed:
            call = self.calls.pop(event.stream_id, None)  # type: ignore[union-attr]
            if call is not None:
                self._drop(call)
        elif kind is wire.ConnectionTerminated:
            assert isinstance(event, wire.ConnectionTerminated)
            if event.error_code:
                log.info(
                    "gRPC connection failed",
                    extra={
                        **self.conn.log_fields(),
                        "error": event.reason,
                        "http2_error": event.error_code,
                    },
                )
            self.closing = True

    def _call_started(self, event: wire.CallStarted) -> None:
        method = self.front.methods.get(event.path)
        if method is None:
            self.h2.end_call(event.stream_id, wire.UNIMPLEMENTED, f"Method not found: {event.path}")
            return
        deadline = None
        if event.timeout is not None:
            deadline = self.loop.time() + event.timeout
        call = ServerCall(event.stream_id, method, event.metadata, deadline, self.conn)
        self.calls[event.stream_id] = call
        if deadline is not None:
            call.timer = self.loop.call_at(deadline, self._expire, call)
        if method.kind == BIDI:
            call.requests = asyncio.Queue()
            self._start(call)

    def _message(self, event: wire.MessageReceived) -> None:
        call = self.calls.get(event.stream_id)
        if call is None:
            self.h2.consumed(event.stream_id, event.size)
        elif call.requests is not None:
            call.requests.put_nowait((event.payload, event.size))
        else:
            self.h2.consumed(event.stream_id, event.size)
            if call.request is not None:
                self._finish(call, wire.INTERNAL, "more than one request message")
            else:
                call.request = event.payload

    # -- calls -------------------------------------------------------------------------

    def _start(self, call: ServerCall) -> None:
        if call.method.kind == UNARY:
            # At once, up to the first wait (module doc): a task only if it waits.
            coro = self._unary(call)
            try:
                waiting = coro.send(None)
            except StopIteration:
                return
            call.task = self.loop.create_task(_resume(coro, waiting))
        else:
            call.task = self.loop.create_task(self._stream(call))

    async def _unary(self, call: ServerCall) -> None:
        method = call.method
        try:
            assert call.request is not None
            response = await method.handler(method.parse(call.request), call)
            payload = _serialize(response)
        except Exception:
            self._failed(call)
            return
        self.h2.send_message(call.stream_id, payload)
        self._finish(call, wire.OK)

    async def _stream(self, call: ServerCall) -> None:
        method = call.method
        h2 = self.h2
        stream_id = call.stream_id
        try:
            if call.requests is not None:
                request: Any = self._requests(call)
            else:
                assert call.request is not None
                request = method.parse(call.request)
            async for response in method.handler(request, call):
                h2.send_message(stream_id, _serialize(response))
                self._schedule_flush()
                if h2.queued(stream_id) > STREAM_HIGH or not self.conn.writable:
                    await self._wait_room(call)
        except Exception:
            self._failed(call)
            return
        self._finish(call, wire.OK)

    async def _requests(self, call: ServerCall) -> AsyncIterator[Any]:
        queue = call.requests
        assert queue is not None
        parse = call.method.parse
        while True:
            item = await queue.get()
            if item is None:
                return
            payload, size = item
            self.h2.consumed(call.stream_id, size)
            self._schedule_flush()
            yield parse(payload)

    async def _wait_room(self, call: ServerCall) -> None:
        """Wait while the socket's buffer is full or more than :data:`STREAM_HIGH` of
        the call's output waits for the client's windows."""
        h2 = self.h2
        conn = self.conn
        while self.calls.get(call.stream_id) is call:
            if not conn.writable and not conn.transport.is_closing():
                await conn.drain()
                self._schedule_flush()
            elif conn.writable and h2.queued(call.stream_id) <= STREAM_HIGH:
                return
            else:  # closing (cancelled when lost), or waiting for a WINDOW_UPDATE
                if self._room is None:
                    self._room = self.loop.create_future()
                await self._room

    def _failed(self, call: ServerCall) -> None:
        log.exception(
            "gRPC call failed",
            extra={**self.conn.log_fields(), "call": call.method.kind, "stream": call.stream_id},
        )
        self._finish(call, wire.INTERNAL, "the call failed inside the gateway")

    def _finish(self, call: ServerCall, code: int, message: str = "") -> None:
        """End ``call`` with a status (its task, if any, is the caller or done)."""
        if self.calls.pop(call.stream_id, None) is None:
            return
        if call.timer is not None:
            call.timer.cancel()
        self.h2.end_call(call.stream_id, code, message)
        self._schedule_flush()

    def _drop(self, call: ServerCall) -> None:
        """The call is gone (reset, connection closed): stop serving it."""
        call._cancelled = True
        if call.timer is not None:
            call.timer.cancel()
        if call.task is not None:
            call.task.cancel()
        if self.closing:
            self._schedule_flush()

    def _expire(self, call: ServerCall) -> None:
        call.timer = None
        if self.calls.get(call.stream_id) is call:
            call._cancelled = True
            if call.task is not None:
                call.task.cancel()
            self._finish(call, wire.DEADLINE_EXCEEDED, "Deadline Exceeded")

    # -- output ------------------------------------------------------------------------

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        h2 = self.h2
        conn = self.conn
        while True:
            if not conn.writable:
                if h2.want_write and not self._draining and not conn.transport.is_closing():
                    self._draining = True
                    conn.spawn(self._drained(), f"grpc-drain-{conn.id}")
                break
            data = h2.data_to_send(WRITE_CHUNK)
            if not data:
                break
            conn.write(data)
        for event in h2.events():
            self._event(event)
        room = self._room
        if room is not None:
            self._room = None
            room.set_result(None)
        if (h2.terminated or (self.closing and not self.calls)) and not h2.want_write:
            conn.close("gRPC connection done")

    async def _drained(self) -> None:
        try:
            await self.conn.drain()
        finally:
            self._draining = False
        self._flush()

    # -- life --------------------------------------------------------------------------

    def goodbye(self) -> None:
        """Shutdown: GOAWAY (notice, then the last stream), finish or end the calls,
        close."""
        if self.closing:
            return
        self.h2.shutdown_notice()
        self._schedule_flush()
        self.loop.call_later(GOAWAY_DELAY_S, self._goaway)

    def _goaway(self) -> None:
        if self.conn.transport.is_closing():
            return
        self.closing = True
        self.h2.goaway()
        self._grace = self.loop.call_later(self.front.grace, self._end_calls)
        self._schedule_flush()

    def _end_calls(self) -> None:
        self._grace = None
        for call in list(self.calls.values()):
            self._drop(call)
            self._finish(call, wire.UNAVAILABLE, "the gateway is shutting down")

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.connections.discard(self)
        if self._grace is not None:
            self._grace.cancel()
        calls = list(self.calls.values())
        self.calls.clear()
        for call in calls:
            self._drop(call)
        if self._room is not None:
            self._room.cancel()
            self._room = None
