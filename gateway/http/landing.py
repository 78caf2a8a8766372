"""The page a browser gets at ``GET /`` (``Accept: text/html``, no RIP-17 request code):
what this is, and links to ``/health``, ``/metrics``, the JSON API's OpenAPI document
and where the documentation is. RIP-17 owns ``/`` (:mod:`gateway.http.rip17`) and asks
:func:`wants_page` first, so RIP-17 clients, which always send a request code, keep
their endpoint."""

from __future__ import annotations

from gateway.http.messages import Request, Response

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>LMQ Gateway</title></head>
<body>
<h1>LMQ Gateway</h1>
<p>An MQTT, AMQP 0-9-1, RocketMQ (remoting and gRPC) and HTTP gateway over a
light-message-queue store. This port speaks every one of them; this page is for
browsers.</p>
<ul>
<li><a href="/console/">/console</a> &mdash; the web console (administrators)</li>
<li><a href="/health">/health</a> &mdash; the gateway's health document (JSON)</li>
<li><a href="/metrics">/metrics</a> &mdash; Prometheus metrics</li>
<li><a href="/v1/openapi.json">/v1/openapi.json</a> &mdash; the JSON API (OpenAPI 3.1)</li>
<li>Documentation: README.md and docs/ in the gateway's source tree (docs/http.md for
the HTTP APIs, docs/configuration.md for every option)</li>
</ul>
</body></html>
"""


def wants_page(request: Request) -> bool:
    """A browser's GET: it accepts HTML and names no RIP-17 request code."""
    if request.method not in ("GET", "HEAD"):
        return False
    if request.header("code") is not None or request.arg("code") is not None:
        return False
    return "text/html" in (request.header("accept") or "")


def page() -> Response:
    return Response.of(200, PAGE.encode(), "text/html; charset=utf-8")
