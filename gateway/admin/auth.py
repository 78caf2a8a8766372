"""Who may call the admin API: one module for its credentials.

- **Open mode** (no users file, the gateway on a loopback bind: docs/security.md): a
  caller connecting from a loopback address is let in as ``anonymous``; from any other
  address it is refused (403), even with ``allow_anonymous``: opening the admin API to
  the network takes a users file.
- **HTTP Basic** of a gateway user (``lmq users add NAME --tag administrator``), checked
  by the HTTP doors' shared logins (:mod:`gateway.http.auth`: scrypt in a thread, a
  verified login reused a short while), and taking effect as the users file changes
  (:class:`gateway.security.Security` reloads it): no or wrong credentials are 401 with
  a Basic challenge; a user without the ``administrator`` tag is 403.
- **Other kinds** plug in with :meth:`AdminAuth.add`: a :data:`Credential` looks at the
  request and answers ``None`` (not mine: the next kind is asked), a :class:`Caller`
  (authenticated administrator) or raises :class:`~gateway.admin.core.AdminError`
  (mine, refused). Kinds are asked in the order added, Basic last. The console's
  session cookie (with its CSRF token on changes) is one (:mod:`gateway.http.console`).
- **Cross-site requests**: a change (POST, PUT, PATCH, DELETE) that a browser marks as
  sent by another site's page (``Sec-Fetch-Site``, ``Origin``) is refused (403) before
  any credential is looked at, so that neither open mode nor Basic credentials a
  browser remembered can be ridden by another page
  (:func:`gateway.http.auth.csrf_refusal`). The CLI sends neither header.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.admin.core import AdminError, Caller
from gateway.auth.authenticator import Principal, Refusal, RefusalReason, is_loopback
from gateway.http.auth import HttpLogins, csrf_refusal, peer_host

if TYPE_CHECKING:
    from gateway.http.messages import Request
    from gateway.security import Security

__all__ = ["AdminAuth", "CHALLENGE", "Credential", "Unauthorized"]

#: The challenge of a 401 (a browser asks for a login; the CLI sends Basic).
CHALLENGE = [("WWW-Authenticate", 'Basic realm="lmq-admin", charset="UTF-8"')]

#: A credential kind: ``None`` (not present), the caller, or AdminError (refused).
Credential = Callable[["Request"], Awaitable[Caller | None]]


class Unauthorized(AdminError):
    """401: no or wrong credentials (the door adds :data:`CHALLENGE`)."""

    def __init__(self, message: str) -> None:
        super().__init__(401, message)


class AdminAuth:
    def __init__(self, security: Security) -> None:
        self._security = security
        self._logins = HttpLogins(security)
        self._kinds: list[Credential] = []

    def add(self, credential: Credential) -> None:
        """Ask ``credential`` (before Basic) on every call from now on."""
        self._kinds.append(credential)

    def open_mode(self) -> bool:
        return self._security.authenticator is None

    async def authenticate(self, request: Request) -> Caller:
        """The caller of ``request``, an administrator; raises :class:`Unauthorized`
        (401) or AdminError 403."""
        peer = peer_host(request) or ""
        refused = csrf_refusal(request, None)
        if refused:  # before any credential: open mode and remembered Basic included
            raise AdminError(403, refused)
        login = self._logins.current()
        if login is None:  # open mode
            if is_loopback(peer):
                return Caller("anonymous", "open", peer)
            raise AdminError(
                403,
                "the admin API in open mode answers loopback callers only;"
                " add a users file with an administrator (lmq users add"
                " NAME --tag administrator)",
            )
        for kind in self._kinds:
            caller = await kind(request)
            if caller is not None:
                return caller
        header = request.header("authorization") or ""
        if header[:6].lower() != "basic ":
            raise Unauthorized(
                "authentication required: Basic credentials of a gateway user tagged administrator"
            )
        try:
            username, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise Unauthorized("malformed Basic credentials") from None
        result = await login.password(username, password, client_id="admin", peer=peer)
        if isinstance(result, Refusal):
            if result.reason is RefusalReason.RATE_LIMITED:
                raise AdminError(429, "too many failed logins from this address or for this user")
            raise Unauthorized("authentication failed")
        return self.administrator(result, "basic", peer)

    @staticmethod
    def administrator(principal: Principal, kind: str, peer: str) -> Caller:
        """``principal`` as an admin caller; 403 unless tagged ``administrator``."""
        if not principal.is_administrator:
            raise AdminError(403, f"user {principal.username!r} is not tagged administrator")
        return Caller(principal.username or "anonymous", kind, peer)
