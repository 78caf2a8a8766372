"""Authentication for the HTTP APIs (the JSON API, the Aliyun MQ HTTP API, RIP-17): one
place for their logins.

- **Passwords** (the JSON API's HTTP Basic, RIP-17's ``Username``/``Passwd``):
  :meth:`HttpLogin.password` runs the authenticator's scrypt (about 70 ms of CPU,
  :mod:`gateway.auth.authenticator`) in a worker thread, never on the event loop, and
  keeps a verified login for :data:`CACHE_SECONDS` (at most :data:`CACHE_SIZE`
  logins): HTTP clients send their credentials with every request, and without the
  cache every request would cost one scrypt. The cache is keyed by the user name and
  an HMAC of the password under a key drawn when the gateway starts (no password is
  kept); a failed login is never cached (the authenticator's rate limits see it); a
  password changed or a user removed is refused once the entry expires.
- **Signatures** (Aliyun's ``Authorization: MQ ak:signature``, also accepted by the
  JSON API): :meth:`HttpLogin.signed`, an HMAC, cheap, not cached
  (:mod:`gateway.http.mq_signature`).

- **Console sessions** (the web console, issue 31): :class:`Sessions`. A login by
  password gives a session: a random id in a cookie (``HttpOnly``, ``SameSite=Strict``,
  ``Secure`` over TLS, path ``/``; never in a URL) and a CSRF token the page keeps in
  memory and sends as ``X-CSRF-Token`` with every state-changing call
  (:func:`csrf_refusal`). Only a hash of the id is kept; a session ends after
  :data:`SESSION_IDLE_SECONDS` without use, :data:`SESSION_MAX_SECONDS` after login, at
  logout, or when more than :data:`MAX_SESSIONS` exist (the oldest goes). Whether the
  user may still do what it asks (still there, still an administrator) is checked by
  the caller against the users file at each request, not here.

Event-loop thread only (the cache, the sessions); the scrypt runs in
``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.auth.authenticator import Principal, Refusal
from gateway.http.mq_signature import authenticate_signed

if TYPE_CHECKING:
    from gateway.auth.authenticator import Authenticator, LoginResult
    from gateway.http.messages import Request
    from gateway.security import Security

__all__ = [
    "CACHE_SECONDS", "CACHE_SIZE", "CSRF_HEADER", "HttpLogin", "HttpLogins", "MAX_SESSIONS",
    "SESSION_COOKIE", "SESSION_IDLE_SECONDS", "SESSION_MAX_SECONDS", "Session", "Sessions",
    "csrf_refusal", "peer_host",
]

#: How long a verified password login is reused without a new scrypt.
CACHE_SECONDS = 30.0
#: Verified logins kept at most (the oldest go first).
CACHE_SIZE = 1024


#: The console's session cookie.
SESSION_COOKIE = "lmq_session"
#: The header carrying a session's CSRF token on state-changing calls.
CSRF_HEADER = "x-csrf-token"
#: A session unused this long ends.
SESSION_IDLE_SECONDS = 30 * 60.0
#: A session ends this long after its login, used or not.
SESSION_MAX_SECONDS = 12 * 3600.0
#: Sessions kept at most (the oldest login goes first).
MAX_SESSIONS = 1024

#: Methods that change nothing (no CSRF token asked).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def peer_host(request: Request) -> str | None:
    """The client's host (no port, no brackets), for rate limits and logs."""
    return request.peer.rpartition(":")[0].strip("[]") or None


class HttpLogin:
    """The logins of the HTTP APIs over one authenticator (module doc)."""

    def __init__(self, authenticator: Authenticator, ttl: float = CACHE_SECONDS) -> None:
        self.authenticator = authenticator
        #: Seconds a verified password login is reused (0: never).
        self.ttl = ttl
        self._key = secrets.token_bytes(32)
        #: (user, HMAC of the password, client id) -> (principal, monotonic expiry)
        self._verified: OrderedDict[tuple[str, bytes, str], tuple[Principal, float]] = (
            OrderedDict())

    async def password(
        self, username: str | None, password: str | None, *, client_id: str = "",
        peer: str | None = None,
    ) -> LoginResult:
        """A principal for ``username`` / ``password`` (scrypt in a thread, a verified
        login reused for :data:`CACHE_SECONDS`), or the authenticator's refusal."""
        key = None
        if username and password is not None:
            digest = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
            key = (username, digest, client_id)
            found = self._verified.get(key)
            if found is not None:
                principal, expiry = found
                if time.monotonic() < expiry:
                    return principal
                del self._verified[key]
        result = await asyncio.to_thread(
            self.authenticator.authenticate, username, password, client_id=client_id,
            peer_host=peer)
        if key is not None and self.ttl > 0 and not isinstance(result, Refusal):
            self._verified[key] = (result, time.monotonic() + self.ttl)
            while len(self._verified) > CACHE_SIZE:
                self._verified.popitem(last=False)
        return result

    def signed(self, request: Request) -> LoginResult:
        """The principal of a request signed with an access key (Aliyun's MQ
        signature); raises :class:`~gateway.http.mq_signature.SignatureRefused`."""
        return authenticate_signed(self.authenticator, request)


class HttpLogins:
    """An HTTP API's logins as the gateway's security is now (:mod:`gateway.security`):
    ``None`` in open mode, and from the moment a users file appears on a running gateway
    an :class:`HttpLogin` over its authenticator, so that the HTTP doors check logins at
    once, as the other doors do."""

    def __init__(self, security: Security) -> None:
        self._security = security
        self._login: HttpLogin | None = None

    def current(self) -> HttpLogin | None:
        auth = self._security.authenticator
        if auth is None:
            return None
        if self._login is None or self._login.authenticator is not auth:
            self._login = HttpLogin(auth)
        return self._login


class Session:
    """One console login: who, its CSRF token, and when it ends."""

    __slots__ = ("principal", "csrf", "created", "used", "peer", "stamp")

    def __init__(self, principal: Principal, peer: str | None, now: float,
                 stamp: str | None = None) -> None:
        self.principal = principal
        #: The user's password hash at login: a session ends when the password changes.
        self.stamp = stamp
        self.csrf = secrets.token_urlsafe(32)
        self.created = now
        self.used = now
        self.peer = peer


class Sessions:
    """The console's sessions (module doc). ``clock`` is monotonic seconds."""

    def __init__(self, idle: float = SESSION_IDLE_SECONDS, lifetime: float = SESSION_MAX_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self._clock = clock
        #: SHA-256 of the cookie value -> session, oldest login first
        self._by_hash: OrderedDict[bytes, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_hash)

    def create(self, principal: Principal, peer: str | None = None,
               stamp: str | None = None) -> tuple[str, Session]:
        """A new session for ``principal``: (the cookie value, the session)."""
        token = secrets.token_urlsafe(32)
        session = Session(principal, peer, self._clock(), stamp)
        self._by_hash[_digest(token)] = session
        while len(self._by_hash) > MAX_SESSIONS:
            self._by_hash.popitem(last=False)
        return token, session

    def get(self, request: Request) -> Session | None:
        """The live session named by the request's cookie (its idle time restarts)."""
        token = cookie(request, SESSION_COOKIE)
        if not token:
            return None
        key = _digest(token)
        session = self._by_hash.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.used > self.idle or now - session.created > self.lifetime:
            del self._by_hash[key]
            return None
        session.used = now
        return session

    def end(self, request: Request) -> bool:
        """Log the request's session out; False when it had none."""
        token = cookie(request, SESSION_COOKIE)
        if not token:
            return False
        return self._by_hash.pop(_digest(token), None) is not None

    def end_user(self, username: str) -> int:
        """End every session of ``username`` (removed, or its password changed)."""
        keys = [k for k, s in self._by_hash.items() if s.principal.username == username]
        for key in keys:
            del self._by_hash[key]
        return len(keys)

    @staticmethod
    def set_cookie(token: str, *, tls: bool) -> tuple[str, str]:
        """The ``Set-Cookie`` header of a new session (a session cookie: no
        ``Max-Age``, the browser drops it when it closes)."""
        secure = "; Secure" if tls else ""
        return ("set-cookie",
                f"{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}")

    @staticmethod
    def clear_cookie(*, tls: bool) -> tuple[str, str]:
        secure = "; Secure" if tls else ""
        return ("set-cookie",
                f"{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{secure}")


def csrf_refusal(request: Request, session: Session | None) -> str | None:
    """Why a request must be refused as a possible cross-site request forgery, or None.

    - Every request that comes from another site is refused when it would change
      something: a browser says so in ``Sec-Fetch-Site`` (trusted as it is, so a proxy
      rewriting ``Host`` does not matter) or, for older ones without it, in an
      ``Origin`` that is not the ``Host`` it sent. This also covers open mode and HTTP Basic
      credentials a browser remembered, which a cookie-less attacker page could
      otherwise ride. Clients that are not browsers (the CLI, curl) send neither.
    - A state-changing call with the session cookie must carry the session's token in
      ``X-CSRF-Token`` (a page of another site can neither read it nor set the header
      without a CORS preflight, which the gateway never grants).
    """
    if request.method in SAFE_METHODS:
        return None
    site = request.header("sec-fetch-site")
    if site is not None:  # the browser's own word (behind a proxy that rewrites Host too)
        if site not in ("same-origin", "none"):
            return f"a {site} request from a browser page (cross-site request forgery?)"
    else:  # an older browser: its Origin against the Host it sent
        origin = request.header("origin")
        if origin is not None and origin.partition("://")[2] != (request.header("host") or ""):
            return f"a request from another origin ({origin})"
    if session is not None:
        sent = request.header(CSRF_HEADER) or ""
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            return f"missing or wrong {CSRF_HEADER} header for this session"
    return None


def cookie(request: Request, name: str) -> str | None:
    """The value of cookie ``name`` in the request's ``Cookie`` headers."""
    for key, value in request.headers:
        if key != "cookie":
            continue
        for part in value.split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v
    return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
