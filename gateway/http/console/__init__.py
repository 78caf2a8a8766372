"""The web console (issue 31; docs/console.md): a management UI at ``/console`` on the
gateway's HTTP listeners, over the admin API (``/v1/admin/``), with nothing to install.

The front end is our own ES modules, one stylesheet and SVG charts drawn by hand, in
``static/`` beside this module (package data): no framework, no bundler, no build step,
no CDN. A browser loads the files as they are in the repository, so ``make run`` on a
fresh machine serves the console, works without internet access, and there is no
toolchain to keep alive for a console this size (a dozen pages of tables, forms and
three charts).

What this module serves:

- ``GET /console`` redirects to ``/console/``, which is ``index.html``; every other
  ``GET /console/<file>`` is that file of ``static/`` (no directory listing; anything
  else is 404). The files are read once at start and kept in memory.
- Content types by extension; an ``ETag`` (a hash of the content) with
  ``Cache-Control: no-cache``, so a browser revalidates and gets ``304 Not Modified``
  while the file is unchanged, and never runs stale code after an upgrade.
- A strict ``Content-Security-Policy`` (scripts, styles, images and calls from the
  gateway itself only; no inline script; no framing), ``X-Content-Type-Options:
  nosniff``, ``Referrer-Policy: no-referrer``.

The console's login (``/console/session``), for users tagged ``administrator``:

- ``POST`` with ``{"username", "password"}`` checks the password (the HTTP doors' one
  login, :mod:`gateway.http.auth`), refuses a user without the tag (403), and answers
  the CSRF token with a session cookie (:class:`gateway.http.auth.Sessions`:
  ``HttpOnly``, ``SameSite=Strict``, nothing secret in a URL);
- ``GET`` answers who is logged in and the CSRF token again (a reloaded page), 401
  without a live session; in open mode (no users file) a loopback caller is
  ``anonymous`` and needs no login;
- ``DELETE`` logs out.

Every admin API call with the cookie is the session's user (the session is one of the
admin API's credential kinds, :mod:`gateway.admin.auth`), checked at each call against
the users file as it is then (removed, untagged or a changed password ends the
session), with the CSRF token required on every change.
"""

from __future__ import annotations

import hashlib
import json
import math
from importlib import resources
from typing import TYPE_CHECKING, Any

from gateway.admin.auth import Unauthorized
from gateway.admin.core import AdminError, Caller
from gateway.auth.authenticator import Principal, Refusal, RefusalReason, is_loopback
from gateway.http.admin import admin_of
from gateway.http.auth import (
    SESSION_COOKIE,
    HttpLogins,
    Session,
    Sessions,
    cookie,
    csrf_refusal,
    peer_host,
)
from gateway.http.messages import Request, Response
from gateway.http.server import problem
from gateway.http.v1.documents import json_response

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.http.routes import Router

__all__ = ["Assets", "ConsoleLogin", "SECURITY_HEADERS", "register_routes"]

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

SECURITY_HEADERS = [
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
]


class Assets:
    """The files of ``static/``: name -> (body, content type, ETag)."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, str, str]] = {}
        root = resources.files(__name__).joinpath("static")
        for entry in root.iterdir():
            suffix = "." + entry.name.rpartition(".")[2]
            if not entry.is_file() or suffix not in CONTENT_TYPES:
                continue
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            self.files[entry.name] = (body, CONTENT_TYPES[suffix], etag)

    def response(self, request: Request, name: str) -> Response:
        found = self.files.get(name)
        if found is None:
            return Response.of(404, b"not found\n", "text/plain; charset=utf-8", SECURITY_HEADERS)
        body, content_type, etag = found
        headers = [("etag", etag), ("cache-control", "no-cache"), *SECURITY_HEADERS]
        if etag in (request.header("if-none-match") or ""):
            return Response(304, headers)
        return Response.of(200, body, content_type, headers)


class ConsoleLogin:
    """``/console/session`` (module doc) over the gateway's security."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.sessions = Sessions()
        self._logins = HttpLogins(ctx.security)

    def _tls(self, request: Request) -> bool:
        return bool(request.context.get("tls"))

    def current(self, request: Request) -> Session | None:
        """The request's session, if it is live and its user still an administrator
        with the password it logged in with (else the session ends)."""
        session = self.sessions.get(request)
        auth = self.ctx.authenticator
        if session is None or auth is None:
            return None
        db = auth.database
        user = db.users.get(session.principal.username or "") if db is not None else None
        if user is None or not user.is_administrator or user.password_hash != session.stamp:
            self.sessions.end(request)
            return None
        return session

    async def show(self, request: Request) -> Response:
        if self.ctx.authenticator is None:
            return self._open(request)
        session = self.current(request)
        if session is None:
            return problem(401, "log in with a gateway user tagged administrator")
        return _session_doc(session.principal.username, session.csrf)

    def _open(self, request: Request) -> Response:
        if not is_loopback(peer_host(request) or ""):
            return problem(
                403,
                "the console in open mode answers loopback callers only;"
                " add a users file with an administrator (lmq users add"
                " NAME --tag administrator)",
            )
        return json_response(200, {"mode": "open", "user": "anonymous", "csrf_token": ""})

    async def login(self, request: Request) -> Response:
        refused = csrf_refusal(request, None)
        if refused:
            return problem(403, refused)
        if self.ctx.authenticator is None:
            return self._open(request)
        body = _json_body(request)
        if isinstance(body, Response):
            return body
        for name in ("username", "password"):
            if not isinstance(body.get(name), str) or not body[name]:
                return problem(400, f"{name} is required", field=name)
        login = self._logins.current()
        assert login is not None
        peer = peer_host(request)
        result = await login.password(
            body["username"], body["password"], client_id="console", peer=peer
        )
        if isinstance(result, Refusal):
            if result.reason is RefusalReason.RATE_LIMITED:
                wait = max(1, math.ceil(result.retry_after))
                return problem(
                    429,
                    f"too many failed logins; retry in {wait} s",
                    headers=[("Retry-After", str(wait))],
                )
            return problem(401, "wrong user name or password")
        assert isinstance(result, Principal)
        if not result.is_administrator:
            return problem(403, f"user {result.username!r} is not tagged administrator")
        db = self.ctx.authenticator.database if self.ctx.authenticator else None
        user = db.users.get(result.username or "") if db is not None else None
        token, session = self.sessions.create(
            result, peer, user.password_hash if user is not None else None
        )
        response = _session_doc(result.username, session.csrf)
        response.headers.append(Sessions.set_cookie(token, tls=self._tls(request)))
        return response

    async def credential(self, request: Request) -> Caller | None:
        """The admin API's credential kind for the session cookie: None without the
        cookie (Basic is asked next), the session's user, or refused: 401 when the
        session ended, 403 without its CSRF token on a change."""
        if not cookie(request, SESSION_COOKIE):
            return None
        session = self.current(request)
        if session is None:
            raise Unauthorized("the console session ended: log in again")
        refused = csrf_refusal(request, session)
        if refused:
            raise AdminError(403, refused)
        return Caller(session.principal.username or "", "session", peer_host(request) or "")

    async def logout(self, request: Request) -> Response:
        session = self.current(request)
        refused = csrf_refusal(request, session)
        if refused:
            return problem(403, refused)
        self.sessions.end(request)
        return Response(204, [Sessions.clear_cookie(tls=self._tls(request))])


def _session_doc(user: str | None, csrf: str) -> Response:
    response = json_response(200, {"mode": "users", "user": user, "csrf_token": csrf})
    response.headers.append(("cache-control", "no-store"))
    return response


def _json_body(request: Request) -> dict[str, Any] | Response:
    try:
        doc = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return problem(400, "the body is not JSON")
    if not isinstance(doc, dict):
        return problem(400, "the body must be a JSON object")
    return doc


def register_routes(router: Router, ctx: GatewayContext) -> None:
    """Called by the HTTP front end at start (:mod:`gateway.http`)."""
    assets = Assets()
    console = ConsoleLogin(ctx)
    admin_of(router).auth.add(console.credential)

    async def redirect(request: Request) -> Response:
        return Response(301, [("location", "/console/"), *SECURITY_HEADERS])

    async def index(request: Request) -> Response:
        return assets.response(request, "index.html")

    async def asset(request: Request) -> Response:
        return assets.response(request, request.params["name"])

    router.add("GET", "/console/session", console.show)
    router.add("POST", "/console/session", console.login)
    router.add("DELETE", "/console/session", console.logout)
    router.add("GET", "/console", redirect)
    router.add("GET", "/console/", index)
    router.add("GET", "/console/{name}", asset)
