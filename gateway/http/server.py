"""The HTTP/1.1 server: one :class:`HttpConnection` per socket, on
:mod:`protocol.http1` (sans-IO, parsing with httptools/llhttp).

This module is the thin asyncio side. Per connection one task reads requests in order and
answers each before the next one is looked at, so pipelined requests are answered in
the order sent. Keep-alive as HTTP/1.1 says (HTTP/1.0 and ``Connection: close`` close
after the response); request bodies may be chunked; a :class:`Response` whose body is an
async iterator is sent chunked (close-delimited to an HTTP/1.0 client).

Bounds (every one answered with its status, then the connection is closed, since the
rest of the request is not read):

* the request head (request line and headers) larger than ``http_max_head_bytes``: 431;
* a body larger than ``http_max_body_bytes`` (by its Content-Length at once, or as the
  chunks arrive): 413;
* a head not complete ``http_head_timeout`` seconds after its first byte (slow loris),
  or a body not complete ``http_body_timeout`` seconds after its head: 408;
* no new request ``http_keepalive_timeout`` seconds after the last response: closed
  without an answer (as every server does with an idle keep-alive connection);
* anything the parser refuses (bad request line, header syntax, framing, HTTP/1.1
  without Host): 400; a transfer coding other than chunked: 501.

While a request is being answered, at most :data:`PIPELINE_BUFFER` bytes of the next
ones are buffered; then reading pauses until the handler is done (back-pressure).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from gateway.connection import ERROR_LINGER
from gateway.frontend import ConnectionHandler
from gateway.http.messages import Request, Response
from gateway.http.routes import Router
from protocol.http1 import (
    CLOSED,
    END_OF_MESSAGE,
    NEED_DATA,
    Body,
    LocalProtocolError,
    ProtocolError,
    RequestHead,
    ServerConnection,
)

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.metrics import Counter

log = logging.getLogger(__name__)

__all__ = ["HttpConnection", "HttpLimits", "PIPELINE_BUFFER", "problem"]

#: Bytes of pipelined requests buffered while one is being answered.
PIPELINE_BUFFER = 256 * 1024

_REASONS = {
    100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    207: "Multi-Status", 301: "Moved Permanently", 304: "Not Modified",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
    411: "Length Required", 412: "Precondition Failed", 413: "Content Too Large",
    415: "Unsupported Media Type", 422: "Unprocessable Content", 429: "Too Many Requests",
    431: "Request Header Fields Too Large", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable", 504: "Gateway Timeout",
}

PROBLEM_JSON = "application/problem+json"

#: A response body sent with a Content-Length (a tuple: isinstance is faster with one
#: than with ``bytes | bytearray``, and this runs per response).
_SIZED = (bytes, bytearray)


def reason(status: int) -> str:
    return _REASONS.get(status, "")


def problem(status: int, detail: str, *, title: str | None = None,
            headers: list[tuple[str, str]] | None = None, **extra: object) -> Response:
    """An RFC 9457 problem document (``application/problem+json``)."""
    doc: dict[str, object] = {
        "type": "about:blank", "title": title or reason(status) or "Error",
        "status": status, "detail": detail, **extra,
    }
    return Response.of(status, (json.dumps(doc) + "\n").encode(), PROBLEM_JSON, headers)


class HttpLimits:
    """The bounds of one listener's connections (from the gateway's config)."""

    __slots__ = ("max_head", "max_body", "head_timeout", "body_timeout", "keepalive_timeout")

    def __init__(self, max_head: int = 16384, max_body: int = 16 * 1024 * 1024,
                 head_timeout: float = 10.0, body_timeout: float = 60.0,
                 keepalive_timeout: float = 60.0) -> None:
        self.max_head = max_head
        self.max_body = max_body
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.keepalive_timeout = keepalive_timeout


class _Abort(Exception):
    """Answer ``status`` (unless nothing of a request was read) and close."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class HttpConnection(ConnectionHandler):
    """One HTTP connection: feeds the parser, runs the handlers in order, writes
    responses."""

    def __init__(self, conn: Connection, router: Router, limits: HttpLimits,
                 requests: Counter | None = None, context: dict[str, object] | None = None,
                 stopping: Callable[[], bool] | None = None) -> None:
        super().__init__(conn)
        self.router = router
        self.limits = limits
        self._requests = requests
        self._context = context or {}
        #: Whether the gateway is shutting down (responses then close the connection).
        self._stopping = stopping or (lambda: False)
        self._http = ServerConnection(limits.max_head)
        #: The head of the request being answered.
        self._head: RequestHead | None = None
        self._loop = asyncio.get_running_loop()
        #: What the serving task awaits while it needs bytes (None when it does not).
        self._waiter: asyncio.Future[None] | None = None
        #: The deadline (monotonic) of the wait in progress, and the one timer that
        #: enforces it: armed for the first wait, it stays armed while later waits have
        #: later deadlines (it re-arms itself when it fires early), so a request costs
        #: no timer of its own.
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        #: Bytes received since the serving task last needed data (pipelining bound).
        self._buffered = 0
        #: When the first byte of the request being read arrived (0 = none yet).
        self._first_byte_at = 0.0
        self._paused = False
        self._timed_out = False
        #: A request is being answered (between its head and the end of its response).
        self.busy = False
        #: The response being sent is a stream (server-sent events, chunked answers).
        self.streaming = False
        #: The head of the current response is written (an error can only close now).
        self._response_started = False
        self._task = conn.spawn(self._serve(), f"http-{conn.id}")

    # -- from the connection --------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self._first_byte_at:
            self._first_byte_at = time.monotonic()
        self._http.receive_data(data)
        self._buffered += len(data)
        self._timed_out = False
        if self._buffered > PIPELINE_BUFFER + self.limits.max_head and not self._paused:
            self._paused = True
            self.conn.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._http.receive_data(b"")
        self._wake()
        return True  # the response being prepared may still be written

    # -- the serving loop -----------------------------------------------------------

    async def _serve(self) -> None:
        linger = 0.0
        try:
            while True:
                request = await self._read_request()
                if request is None:
                    break
                self.busy = True
                response = await self._dispatch(request)
                await self._send(request, response)
                self.busy = self.streaming = False
                # back-pressure: a client that sends (pipelines) and does not read
                # stops being answered, rather than filling the outbox past
                # write_buffer_max (one write per response, as without pipelining)
                self.conn.flush()
                if not self.conn.writable:
                    await self.conn.drain()
                if self.conn.transport.is_closing() or self._closing():
                    break
                if not self._http.keep_alive:
                    # closed by the server after a whole response (HTTP/1.0, Connection:
                    # close): the client may still be sending (pipelined), and a socket
                    # closed with unread input resets, which drops the response's unsent
                    # end; shut the write side and read and discard a while instead
                    linger = ERROR_LINGER
                    break
                # a pipelined next request has begun already: its head timeout runs
                self._first_byte_at = time.monotonic() if self._http.pending else 0.0
                self._response_started = False
        except _Abort as exc:
            self._send_error(exc.status, exc.detail)
            # a client still sending (a slow-loris head, a body past the bound) reads
            # the answer rather than a reset: its bytes are read and dropped a while
            linger = ERROR_LINGER
        except (ConnectionError, LocalProtocolError) as exc:
            log.debug("http connection ends", extra={**self.conn.log_fields(), "error": str(exc)})
        except Exception:
            log.exception("http connection failed", extra=self.conn.log_fields())
            self._send_error(500, "internal error")
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.conn.flush()
            self.conn.close("http done", linger=linger)

    async def _wait_data(self, deadline: float) -> bool:
        """Wait for more bytes until ``deadline`` (monotonic); False when it passed."""
        self._buffered = 0
        if self._paused:
            self._paused = False
            self.conn.resume_reading()
        now = time.monotonic()
        if deadline <= now:
            return False
        self._timed_out = False
        self._deadline = deadline
        if self._timer is None or self._timer_at > deadline:
            self._arm(deadline, now)
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        return not self._timed_out

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self, at: float, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_later(at - now, self._time_out)

    def _time_out(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting, or bytes came first: the next wait arms its deadline
        now = time.monotonic()
        if now < self._deadline:
            self._arm(self._deadline, now)  # a later wait's deadline: not yet
            return
        self._timed_out = True
        self._wake()

    async def _read_request(self) -> Request | None:
        limits = self.limits
        http = self._http
        idle_deadline = 0.0  # (taken when the first wait begins)
        while True:
            try:
                event = http.next_event()
            except ProtocolError as exc:
                raise _Abort(exc.status, exc.detail) from None
            if event is NEED_DATA:
                if not idle_deadline:
                    idle_deadline = time.monotonic() + limits.keepalive_timeout
                started = self._first_byte_at
                deadline = started + limits.head_timeout if started else idle_deadline
                if not await self._wait_data(deadline):
                    if self._first_byte_at:
                        raise _Abort(408, f"request head not complete within"
                                          f" {limits.head_timeout:g} s")
                    return None  # idle keep-alive connection
                continue
            if isinstance(event, RequestHead):
                break
            if event is CLOSED:
                return None
            raise _Abort(400, f"unexpected {event!r}")
        # (the parser bounds the head's size and checks the version and Host)
        self._head = head = event
        self.conn.established()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
        request = Request(
            head.method.decode("ascii"), head.target.decode("latin-1"), headers, b"",
            self.conn.peer, {}, {**self._context, "http_version": head.http_version}, self.conn,
        )
        length = request.header("content-length")
        if length is not None and length.isdigit() and int(length) > limits.max_body:
            raise _Abort(413, f"request body larger than {limits.max_body} bytes")
        if head.expect_continue and not http.pending_body:
            self._write(ServerConnection.continue_100())
        body: list[bytes] = []
        size = 0
        body_deadline = 0.0  # (taken when the first wait for the body begins)
        while True:
            try:
                event = http.next_event()
            except ProtocolError as exc:
                raise _Abort(exc.status, exc.detail) from None
            if event is NEED_DATA:
                if not body_deadline:
                    body_deadline = time.monotonic() + limits.body_timeout
                if not await self._wait_data(body_deadline):
                    raise _Abort(408, f"request body not complete within"
                                      f" {limits.body_timeout:g} s")
                continue
            if isinstance(event, Body):
                size += len(event.data)
                if size > limits.max_body:
                    raise _Abort(413, f"request body larger than {limits.max_body} bytes")
                body.append(event.data)
                continue
            if event is END_OF_MESSAGE:
                break
            if event is CLOSED:
                return None
            raise _Abort(400, f"unexpected {event!r}")
        request.body = body[0] if len(body) == 1 else b"".join(body)
        return request

    async def _dispatch(self, request: Request) -> Response:
        match = self.router.match(request.method, request.path)
        label = "-"
        try:
            early = self.router.before(request) if self.router.before is not None else None
            if early is not None:
                response = early
            elif match is None:
                response = problem(404, f"no resource at {request.path}")
            elif match.handler is None:
                allowed = list(match.allowed)
                if "GET" in allowed and "HEAD" not in allowed:
                    allowed.insert(allowed.index("GET") + 1, "HEAD")
                response = problem(405, f"{request.method} is not allowed here",
                                   headers=[("Allow", ", ".join(allowed))])
                label = match.pattern or "-"
            else:
                label = match.pattern or "-"
                request.params = dict(match.params)  # (the router's is shared)
                response = await match.handler(request)
        except Exception:
            log.exception("http handler failed",
                          extra={**self.conn.log_fields(), "path": request.path})
            response = problem(500, "internal error")
        if self._requests is not None:
            self._requests.inc_values(label, str(response.status))  # (path, status)
        return response

    async def _send(self, request: Request, response: Response) -> None:
        body = response.body
        sized = isinstance(body, _SIZED)
        headers = []
        length = server = False
        for name, value in response.headers:
            low = name.lower()
            if low == "content-length":
                length = True
            elif low == "server":
                server = True
            headers.append((_title(name), value))
        if sized and not length:
            headers.append(("Content-Length", str(len(body))))  # type: ignore[arg-type]
        if not server:
            headers.append(("Server", "lmq-gateway"))
        if self.conn.is_closed or self._closing():
            headers = [(k, v) for k, v in headers if k.lower() != "connection"]
            headers.append(("Connection", "close"))
        # (a client's Connection: close and HTTP/1.0 are the protocol's: response_head)
        http = self._http
        head = self._head
        assert head is not None
        self._response_started = True
        data = http.response_head(head, response.status, reason(response.status), headers,
                                  length_known=sized)
        if isinstance(body, _SIZED):
            # head and body in one write, now (after anything queued, a 100 Continue):
            # the serving loop flushes right after, so no flush of the outbox is
            # scheduled for the end of the loop turn
            self.conn.flush()
            self.conn.write(data + http.body(bytes(body)) + http.end())
            return
        self._write(data)
        iterator: AsyncIterator[bytes] = body
        self.streaming = True
        try:
            if request.method != "HEAD":
                async for chunk in iterator:
                    if chunk:
                        self._write(http.body(chunk))
                        self.conn.flush()
                        await self.conn.drain()
                    if self.conn.transport.is_closing():
                        return
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        self._write(http.end())

    def _closing(self) -> bool:
        return self._stopping()

    def _write(self, data: bytes | None) -> None:
        if data:
            self.conn.queue(data)

    def _send_error(self, status: int, detail: str) -> None:
        """Answer a request that could not be read (or a failure), then close."""
        if self._requests is not None:
            self._requests.inc(path="-", status=str(status))
        response = problem(status, detail)
        assert isinstance(response.body, bytes)
        headers = [(_title(k), v) for k, v in response.headers] + [
            ("Content-Length", str(len(response.body))), ("Connection", "close"),
            ("Server", "lmq-gateway")]
        if self._response_started:
            return  # a response is half sent: closing is all that is left
        head = f"HTTP/1.1 {status} {reason(status)}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers)
        self._write(head.encode("latin-1") + b"\r\n" + response.body)

    def connection_lost(self, exc: Exception | None) -> None:
        self._wake()


@functools.lru_cache(maxsize=512)
def _title(name: str) -> str:
    """``content-type`` -> ``Content-Type`` (names are case-insensitive; clients that
    index a dict of headers by the usual spelling find them). Extension headers
    (``x-...``) are sent as the handler spelled them: the Aliyun Python SDK looks up
    ``x-mq-request-id`` in a case-sensitive dict, as Aliyun sends it."""
    if name[:2].lower() == "x-":
        return name
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))
