"""The server side of one HTTP/1.1 connection, sans-IO, parsing with httptools (llhttp,
the parser of Node.js and uvicorn).

Bytes go in with :meth:`ServerConnection.receive_data` (``b""`` at EOF); they are parsed
at once and the requests come out of :meth:`ServerConnection.next_event` in order, one
event at a time: :class:`RequestHead`, then :class:`Body` pieces, then
:data:`END_OF_MESSAGE`, then the next request's head (pipelining). :data:`NEED_DATA`
when more bytes are needed, :data:`CLOSED` after EOF between requests. A malformed
request raises :class:`ProtocolError` (with the status to answer: 400, 431 for a head
larger than ``max_head``, 501 for a transfer coding other than chunked) once the events
before it are taken. Responses are serialized by :meth:`ServerConnection.response_head`,
:meth:`ServerConnection.body` and :meth:`ServerConnection.end`: Content-Length when the
length is known, else chunked (close-delimited to an HTTP/1.0 client); whether the
connection stays open afterwards is :attr:`ServerConnection.keep_alive`.

llhttp checks the request line, the header syntax and the framing (Content-Length,
chunked); this class adds what h11 also checked: the head size, HTTP/1.1's mandatory
``Host``, and that ``chunked`` is the only transfer coding.
"""

from __future__ import annotations

from collections import deque

import httptools

__all__ = [
    "CLOSED",
    "END_OF_MESSAGE",
    "NEED_DATA",
    "Body",
    "LocalProtocolError",
    "ProtocolError",
    "RequestHead",
    "ServerConnection",
]


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
END_OF_MESSAGE = _Sentinel("END_OF_MESSAGE")
CLOSED = _Sentinel("CLOSED")


class ProtocolError(Exception):
    """The client sent what cannot be served: answer ``status`` and close."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class LocalProtocolError(Exception):
    """A response this side cannot send (a header with a line break in it)."""


class RequestHead:
    """A request line and its headers (names lower case, bytes as sent)."""

    __slots__ = ("method", "target", "http_version", "headers", "size", "expect_continue")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        http_version: str,
        headers: list[tuple[bytes, bytes]],
        size: int,
        expect_continue: bool,
    ) -> None:
        self.method = method
        self.target = target
        #: ``"1.0"`` or ``"1.1"``
        self.http_version = http_version
        self.headers = headers
        #: The head's size in bytes (request line and header lines).
        self.size = size
        #: ``Expect: 100-continue`` from an HTTP/1.1 client.
        self.expect_continue = expect_continue


class Body:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


Event = RequestHead | Body | _Sentinel


class ServerConnection:
    """One connection's parser and response framing (see the module's docstring)."""

    def __init__(self, max_head: int = 16384) -> None:
        self.max_head = max_head
        self._parser = httptools.HttpRequestParser(self)
        self._events: deque[Event | ProtocolError] = deque()
        self._failed = False
        self._eof = False
        #: Inside a request: between its first byte and its end.
        self._in_message = False
        #: Inside a request's head (before its headers are complete).
        self._in_head = False
        #: Requests begun so far (to tell which chunk began the head being read).
        self._begun = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        #: Bytes of chunks that fell wholly inside the head being read.
        self._head_raw = 0
        self._upgraded = False
        self._head_request = False
        self._chunked = False
        #: Whether the connection stays open after the response being sent.
        self.keep_alive = True

    # -- receiving --------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if self._failed or self._upgraded:
            return
        if not data:
            if not self._eof:
                self._eof = True
                if self._in_message:
                    self._fail(400, "the connection closed in the middle of a request")
                else:
                    self._events.append(CLOSED)
            return
        if self._eof:
            return
        begun = self._begun
        in_head = self._in_head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrade or CONNECT: the request is answered (this server switches to no
            # other protocol), then the connection closes; later bytes are not read.
            self._upgraded = True
            return
        except httptools.HttpParserError as exc:
            self._fail(400, str(exc) or "malformed request")
            return
        if self._in_head and in_head and begun == self._begun:
            # this whole chunk belongs to a head still incomplete (a header arriving in
            # pieces, which llhttp buffers): bound it now, not only once it is complete
            self._head_raw += len(data)
            if self._head_raw > self.max_head:
                self._fail(431, f"request head larger than {self.max_head} bytes")

    def next_event(self) -> Event:
        if not self._events:
            return CLOSED if self._upgraded and not self._in_message else NEED_DATA
        event = self._events.popleft()
        if isinstance(event, ProtocolError):
            self._events.appendleft(event)  # every later call raises it again
            raise event
        return event

    @property
    def pending(self) -> bool:
        """Bytes of a next request are here already (its head timeout runs)."""
        return bool(self._events) or self._in_message

    @property
    def pending_body(self) -> bool:
        """Some of the current request's body (or its end) is here already."""
        return bool(self._events)

    def _fail(self, status: int, detail: str) -> None:
        if not self._failed:
            self._failed = True
            self._events.append(ProtocolError(status, detail))

    # -- httptools' callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = self._in_head = True
        self._begun += 1
        self._url = b""
        self._headers = []
        self._head_size = self._head_raw = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:  # (trailers of a chunked body are not kept)
            if value[-1:] in (b" ", b"\t"):  # llhttp strips only the leading blanks
                value = value.rstrip(b" \t")
            self._headers.append((name.lower(), value))
            self._head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        version = parser.get_http_version()
        method = parser.get_method()
        size = len(method) + self._head_size + 12
        if size > self.max_head:
            self._fail(431, f"request head larger than {self.max_head} bytes")
            return
        if version not in ("1.0", "1.1"):
            self._fail(400, f"HTTP/{version} is not served (HTTP/1.0 and 1.1 are)")
            return
        host = expect = False
        for name, value in self._headers:
            if name == b"host":
                host = True
            elif name == b"transfer-encoding":
                if value.strip().lower() != b"chunked":
                    self._fail(501, "only the chunked transfer coding is supported")
                    return
            elif name == b"expect":
                expect = value.strip().lower() == b"100-continue"
        if version == "1.1" and not host:
            self._fail(400, "an HTTP/1.1 request needs a Host header")
            return
        self._events.append(
            RequestHead(
                method, self._url, version, self._headers, size, expect and version == "1.1"
            )
        )

    def on_body(self, body: bytes) -> None:
        if not self._failed:
            self._events.append(Body(body))

    def on_message_complete(self) -> None:
        self._in_message = False
        if not self._failed:
            self._events.append(END_OF_MESSAGE)

    # -- sending ----------------------------------------------------------------------

    @staticmethod
    def continue_100() -> bytes:
        return b"HTTP/1.1 100 Continue\r\n\r\n"

    def response_head(
        self,
        request: RequestHead,
        status: int,
        reason: str,
        headers: list[tuple[str, str]],
        *,
        length_known: bool,
    ) -> bytes:
        """The status line and headers of the answer to ``request``. ``headers`` carry
        the Content-Length when ``length_known``; otherwise the body is sent chunked
        (``Transfer-Encoding`` added here), or close-delimited to an HTTP/1.0 client."""
        self._head_request = request.method == b"HEAD"
        version = request.http_version
        keep_alive = version == "1.1" and not self._upgraded
        self._chunked = False
        said_connection = False
        for name, value in headers:
            if name.lower() == "connection":
                said_connection = True
                if "close" in value.lower():
                    keep_alive = False
        if keep_alive and not self._client_asks_keep_alive(request):
            keep_alive = False
        lines = [f"HTTP/1.1 {status} {reason}\r\n"]
        lines += [f"{name}: {value}\r\n" for name, value in headers]
        if not length_known:
            if version == "1.1":
                self._chunked = True
                lines.append("Transfer-Encoding: chunked\r\n")
            elif not self._head_request:
                keep_alive = False
        if not keep_alive and not said_connection:
            lines.append("Connection: close\r\n")
        self.keep_alive = keep_alive
        head = "".join(lines)
        if head.count("\n") != len(lines) or "\r" in head.replace("\r\n", ""):
            raise LocalProtocolError("a response header holds a line break")
        return head.encode("latin-1") + b"\r\n"

    @staticmethod
    def _client_asks_keep_alive(request: RequestHead) -> bool:
        for name, value in request.headers:
            if name == b"connection" and b"close" in value.lower():
                return False
        return True

    def body(self, data: bytes) -> bytes:
        if self._head_request or not data:
            return b""
        if self._chunked:
            return b"%x\r\n%s\r\n" % (len(data), data)
        return data

    def end(self) -> bytes:
        if self._chunked and not self._head_request:
            return b"0\r\n\r\n"
        return b""
