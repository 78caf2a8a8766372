"""HTTP/1.1 on the unified port: ``GET /health`` (JSON) and ``GET /metrics``
(Prometheus text format 0.0.4), for probes and scrapers.

Deliberately tiny: one request per connection, answered with a Content-Length body and
``Connection: close``; request bodies are not read. The request head must arrive within
the connect timeout and fit in :data:`MAX_HEAD` bytes. 404 for other paths, 405 for
methods other than GET and HEAD, 400 for anything that is not an HTTP/1.x request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from broker_core import StoreError
from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

MAX_HEAD = 8192
_REQUEST_LINE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP/1\.[01]$")
_HEADER = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[ \t]*[^\r\n]*$")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class HttpFrontEnd(FrontEnd):
    name = "http"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        self._requests = ctx.metrics.counter(
            "lmq_http_requests_total", "HTTP requests by path and status", ("path", "status")
        )

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        return HttpHandler(conn, self)

    async def health(self) -> tuple[int, dict[str, Any]]:
        return await self.ctx.introspection.health()

    async def metrics_text(self) -> str:
        try:
            await self.ctx.introspection.store_stats()  # refreshes the lmq_store_* gauges
        except StoreError:
            log.warning("store statistics unavailable for /metrics")
        return self.ctx.metrics.render()


class HttpHandler(ConnectionHandler):
    def __init__(self, conn: Connection, front_end: HttpFrontEnd) -> None:
        super().__init__(conn)
        self.front_end = front_end
        self._buffer = b""
        self._answered = False

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._respond(431, "head too large\n", path="-")
            return
        if end > MAX_HEAD:
            self._respond(431, "head too large\n", path="-")
            return
        self.conn.established()
        lines = self._buffer[:end].split(b"\r\n")
        match = _REQUEST_LINE.match(lines[0])
        if match is None or not all(_HEADER.match(h) for h in lines[1:]):
            self._respond(400, "bad request\n", path="-")
            return
        method, target = match.group(1).decode(), match.group(2).decode("latin-1")
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            self._respond(405, "method not allowed\n", path="-", extra=[("Allow", "GET, HEAD")])
        elif path == "/health":
            self._answered = True
            self.conn.spawn(self._guarded(self._health(head_only)), "http-health")
        elif path == "/metrics":
            self._answered = True
            self.conn.spawn(self._guarded(self._metrics(head_only)), "http-metrics")
        else:
            self._respond(404, "not found\n", path="-", head_only=head_only)

    async def _guarded(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except Exception:
            log.exception("http handler failed", extra=self.conn.log_fields())
            self._respond(500, "internal error\n", path="-")

    async def _health(self, head_only: bool) -> None:
        status, body = await self.front_end.health()
        text = json.dumps(body, default=str) + "\n"
        self._respond(status, text, path="/health", ctype="application/json",
                      head_only=head_only)

    async def _metrics(self, head_only: bool) -> None:
        text = await self.front_end.metrics_text()
        self._respond(200, text, path="/metrics", ctype=METRICS_CONTENT_TYPE,
                      head_only=head_only)

    def _respond(
        self,
        status: int,
        text: str,
        *,
        path: str,
        ctype: str = "text/plain; charset=utf-8",
        extra: list[tuple[str, str]] | None = None,
        head_only: bool = False,
    ) -> None:
        self._answered = True
        body = text.encode()
        headers = [
            ("Content-Type", ctype),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            ("Server", "lmq-gateway"),
            *(extra or []),
        ]
        head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers
        )
        self.conn.write(head.encode("latin-1") + b"\r\n" + (b"" if head_only else body))
        self.front_end._requests.inc(path=path, status=str(status))
        self.conn.close(f"http {status}")


def create_frontend(ctx: GatewayContext) -> HttpFrontEnd:
    return HttpFrontEnd(ctx)
