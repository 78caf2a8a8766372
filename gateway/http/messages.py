"""The requests and responses HTTP handlers see: the contract between the HTTP server
(the connection handling, on :mod:`protocol.http1`) and the APIs served on it (``/health`` and
``/metrics``, the JSON API under ``/v1/``, the Aliyun MQ HTTP API, RIP-17's codes).

A handler is ``async def handler(request: Request) -> Response``. It never sees the
wire: the server parses and bounds the request (head and body limits, timeouts,
chunked bodies) before the handler runs, and writes the response (Content-Length, or
chunked when the body is a stream; keep-alive as HTTP/1.1 says).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from gateway.connection import Connection

__all__ = ["Request", "Response"]


@dataclass(slots=True)
class Request:
    """One parsed request. Header names are lower case, values decoded as latin-1 (what
    HTTP allows on the wire), in the order sent; ``path`` is percent-decoded per
    segment by the router (``params``), the raw target is kept in ``target``."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    #: The peer's address, ``host:port`` (after a PROXY protocol header, if any).
    peer: str = ""
    #: Path parameters set by the router (``{topic}`` -> its decoded value).
    params: dict[str, str] = field(default_factory=dict)
    #: What the server knows of the connection (listener name, TLS, the authenticated
    #: user once an API has checked credentials); free for the APIs to extend.
    context: dict[str, object] = field(default_factory=dict)
    #: The connection it came on (its message counts: :mod:`gateway.http.counts`).
    connection: Connection | None = None

    @property
    def path(self) -> str:
        """The raw path (still percent-encoded), without the query."""
        return urlsplit(self.target).path or "/"

    @property
    def query(self) -> dict[str, list[str]]:
        """The query's parameters, percent-decoded, blank values kept."""
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    def arg(self, name: str, default: str | None = None) -> str | None:
        """The first value of query parameter ``name``."""
        values = self.query.get(name)
        return values[0] if values else default

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (any case)."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return default


@dataclass(slots=True)
class Response:
    """A response. ``body`` bytes are sent with a Content-Length; an async iterator of
    bytes is sent chunked as it yields (server-sent events, long answers), and the
    server closes the iterator if the client goes away."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""

    @classmethod
    def of(cls, status: int, body: bytes, content_type: str,
           headers: list[tuple[str, str]] | None = None) -> Response:
        return cls(status, [("content-type", content_type), *(headers or [])], body)
