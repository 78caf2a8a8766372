"""The HTTP front end (issue 18): HTTP/1.1 on httptools (:mod:`gateway.http.server`) on the
unified port, its TLS twin and the dedicated ``http_port``.

Routes
------
One :class:`~gateway.http.routes.Router` per gateway. ``/health`` and ``/metrics`` are
the front end's own. Every other API registers itself: at start the front end imports
each module directly inside the ``gateway.http`` package (``gateway/http/v1/``,
``gateway/http/aliyun.py``...) and calls its ``register_routes(router, ctx)`` if it has
one, in the order of the modules' ``ROUTE_ORDER`` (default 100), then their names. So an
API is added by adding its module; no file here is edited. A module without
``register_routes`` (messages, routes, server) is simply imported.
"""

from __future__ import annotations

import importlib
import json
import logging
import pkgutil
from typing import TYPE_CHECKING

from broker_core import StoreError
from gateway.admin.core import ADMIN_PATHS
from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.http.messages import Request, Response
from gateway.http.routes import Router
from gateway.http.server import HttpConnection, HttpLimits, problem
from gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gateway.token_bucket import TokenBucket

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

__all__ = ["HttpFrontEnd", "create_frontend", "api_modules"]


def api_modules() -> list[str]:
    """The modules of the ``gateway.http`` package, sorted by name."""
    return sorted(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__))


class HttpFrontEnd(FrontEnd):
    name = "http"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        cfg = ctx.config
        self._requests = ctx.metrics.counter(
            "lmq_http_requests_total", "HTTP requests by route and status", ("path", "status")
        )
        self.limits = HttpLimits(
            max_head=cfg.http_max_head_bytes, max_body=cfg.http_max_body_bytes,
            head_timeout=cfg.http_head_timeout, body_timeout=cfg.http_body_timeout,
            keepalive_timeout=cfg.http_keepalive_timeout,
        )
        self.router = Router()
        self.router.add("GET", "/health", self.health)
        self.router.add("GET", "/health/master", self.health_master)
        self.router.add("GET", "/metrics", self.metrics)
        self.router.before = self._follow_master

    async def start(self) -> None:
        registrations = []
        for name in api_modules():
            module = importlib.import_module(name)
            register = getattr(module, "register_routes", None)
            if register is not None:
                registrations.append((getattr(module, "ROUTE_ORDER", 100), name, register))
        for _, name, register in sorted(registrations, key=lambda r: (r[0], r[1])):
            register(self.router, self.ctx)
            log.debug("http routes registered", extra={"module": name})

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        context: dict[str, object] = {
            "listener": conn.listener,
            "tls": conn.transport.get_extra_info("sslcontext") is not None,
        }
        rate = self.ctx.config.max_publish_rate
        if rate:  # one budget per connection, as MQTT's (the context dict is shared)
            context["publish_bucket"] = TokenBucket(rate, self.ctx.loop.time())
        state = self.ctx.state
        return HttpConnection(conn, self.router, self.limits, self._requests, context,
                              stopping=lambda: state.stopping)

    def goodbye(self, conn: Connection) -> None:
        """Shutdown: an idle connection (or one streaming events) is closed now; one
        answering a request finishes that response, sent with ``Connection: close``,
        then closes (the gateway aborts it after ``shutdown_timeout``)."""
        handler = conn.handler
        if isinstance(handler, HttpConnection) and handler.busy and not handler.streaming:
            return
        conn.close("shutdown")

    def authentication_on(self, conns: list[Connection]) -> None:
        """Every request is authenticated when it comes, so only what outlives one is
        closed: idle keep-alive connections and event streams; a request being
        answered finishes, and the next one on its connection is checked."""
        for conn in conns:
            handler = conn.handler
            if isinstance(handler, HttpConnection) and handler.busy and not handler.streaming:
                continue
            conn.close("authentication on")

    async def health(self, request: Request) -> Response:
        status, body = await self.ctx.introspection.health()
        text = json.dumps(body, default=str) + "\n"
        return Response.of(status, text.encode(), "application/json")

    async def health_master(self, request: Request) -> Response:
        """For a load balancer in front of a broker group (docs/replication.md): 200 on
        the master (and on a gateway in no group), 503 on a slave."""
        role = self.ctx.introspection.replication_role()
        body = (json.dumps({"role": role}) + "\n").encode()
        return Response.of(503 if role == "slave" else 200, body, "application/json")

    def _follow_master(self, request: Request) -> Response | None:
        """On the ``admin_port``, paths but the admin API's are 404. On a slave every
        request but /health and /metrics is sent to the master: 307
        (method and body kept) to the same path there, or 503 while it is unknown."""
        if request.context.get("listener") == "admin" and not request.path.startswith(
                ADMIN_PATHS):
            return problem(404, "the admin port serves the admin API only")
        intro = self.ctx.introspection
        if intro.replication_role() != "slave" or request.path.startswith(
            ("/health", "/metrics")
        ):
            return None
        master = intro.replication_master("http") or intro.replication_master("unified")
        if not master:
            return problem(503, "a slave of its broker group; the master is not known yet",
                           headers=[("Retry-After", "1")])
        return problem(307, f"a slave of its broker group; the master is {master}",
                       headers=[("Location", f"http://{master}{request.target}")])

    async def metrics(self, request: Request) -> Response:
        try:
            await self.ctx.introspection.store_stats()  # refreshes the lmq_store_* gauges
        except StoreError:
            log.warning("store statistics unavailable for /metrics")
        return Response.of(200, self.ctx.metrics.render().encode(), METRICS_CONTENT_TYPE)


def create_frontend(ctx: GatewayContext) -> HttpFrontEnd:
    return HttpFrontEnd(ctx)
