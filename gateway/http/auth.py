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

Event-loop thread only (the cache); the scrypt runs in ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from gateway.auth.authenticator import Principal, Refusal
from gateway.http.mq_signature import authenticate_signed

if TYPE_CHECKING:
    from gateway.auth.authenticator import Authenticator, LoginResult
    from gateway.http.messages import Request
    from gateway.security import Security

__all__ = ["CACHE_SECONDS", "CACHE_SIZE", "HttpLogin", "HttpLogins", "peer_host"]

#: How long a verified password login is reused without a new scrypt.
CACHE_SECONDS = 30.0
#: Verified logins kept at most (the oldest go first).
CACHE_SIZE = 1024


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
