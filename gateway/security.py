"""Security: who may log in, and the TLS context of the TLS listeners.

- :func:`make_authenticator`: the users file (``<data_dir>/users.json`` unless
  ``users_file`` says otherwise). With no users file the gateway is open, which it
  allows only on a loopback bind unless ``allow_anonymous`` (docs/security.md); it then
  returns ``None`` and the front ends skip authentication altogether (no thread hop per
  CONNECT). With a users file every login is checked.
- :class:`Security`: the authenticator *now* (``GatewayContext.authenticator`` reads
  it) and the watch of the users file (:meth:`Security.watch`, every
  :data:`WATCH_INTERVAL_S`): in open mode, the file appearing turns authentication on
  (every door checks logins from then on, the front ends close the connections let in
  without one); in authenticated mode, a changed file is loaded (and logged) even when
  nobody logs in.
- :func:`make_tls_context`: Python's ``ssl`` module, TLS 1.2 at least; client
  certificates per ``tls_client_cert``.

``make_authenticator`` and ``make_tls_context`` raise
:class:`~gateway.config.ConfigError` with a one-line message.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from gateway.auth import Authenticator
from gateway.auth.authenticator import ExposureError, resolve_allow_anonymous
from gateway.auth.users import UsersFileError
from gateway.config import ConfigError, GatewayConfig

log = logging.getLogger(__name__)

#: How often :meth:`Security.watch` looks at the users file (one ``stat`` when it is
#: unchanged): the bound on how long a new or changed file takes to apply.
WATCH_INTERVAL_S = 1.0


def users_path(cfg: GatewayConfig) -> Path:
    return Path(cfg.users_file) if cfg.users_file else Path(cfg.data_dir) / "users.json"


def make_authenticator(cfg: GatewayConfig) -> Authenticator | None:
    try:
        auth = Authenticator.from_users_file(users_path(cfg), missing_ok=True)
        allow = resolve_allow_anonymous(
            cfg.bind,
            users_configured=auth.authentication_configured,
            allow_anonymous_flag=cfg.allow_anonymous,
        )
    except (ExposureError, UsersFileError) as exc:
        raise ConfigError(str(exc)) from None
    if not auth.authentication_configured and allow:
        return None  # open mode
    auth.allow_anonymous = allow
    return auth


class Security:
    """The gateway's authenticator as it is now: ``None`` in open mode until a users
    file appears, then an :class:`Authenticator` for good (deleting the file never
    opens the gateway again). Event-loop thread only (the file is read in a thread)."""

    def __init__(self, cfg: GatewayConfig, authenticator: Authenticator | None) -> None:
        self.config = cfg
        self.authenticator = authenticator
        #: Open mode: the authenticator that watches for the file (not yet in use; the
        #: watch reads the file, so one that appeared since make_authenticator counts).
        self._pending = (
            None if authenticator is not None else Authenticator(users_file=users_path(cfg))
        )
        #: What the gateway does when authentication turns on (set by :meth:`watch`).
        self._authentication_on: Callable[[], None] = lambda: None

    async def watch(self, authentication_on: Callable[[], None]) -> None:
        """Every :data:`WATCH_INTERVAL_S`: read the users file if it changed. When the
        first valid one appears in open mode, install it (anonymous clients are then
        allowed only with ``allow_anonymous``, as at startup), log it and call
        ``authentication_on`` (the gateway closes the connections admitted without a
        login). A malformed file is logged once and changes nothing."""
        self._authentication_on = authentication_on
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            await self.refresh()

    async def refresh(self) -> None:
        """Read the users file now if it changed (what the watch does every
        :data:`WATCH_INTERVAL_S`): the admin API calls it after each change of the file,
        so that the change holds for the next login without waiting for the watch."""
        auth = self.authenticator or self._pending
        assert auth is not None
        await asyncio.to_thread(auth.refresh)
        if self.authenticator is None and auth.authentication_configured:
            auth.allow_anonymous = self.config.allow_anonymous
            self.authenticator, self._pending = auth, None
            log.warning(
                "authentication on: users file loaded, every login is checked from now on",
                extra={
                    "path": str(auth.users_file),
                    "anonymous": "allowed" if auth.allow_anonymous else "refused",
                },
            )
            self._authentication_on()


def make_tls_context(cfg: GatewayConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key or None)
        if cfg.tls_ca:
            ctx.load_verify_locations(cafile=cfg.tls_ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls: cannot load certificate or key: {exc}") from None
    # gRPC clients over TLS (unified TLS port) require ALPN h2, and the handshake
    # happens before sniffing; http/1.1 first so that HTTPS clients offering both keep
    # HTTP/1.1. A client offering neither (MQTT's "mqtt", none) continues without ALPN.
    ctx.set_alpn_protocols(["http/1.1", "h2"])
    if cfg.tls_client_cert != "none":
        if not cfg.tls_ca:
            raise ConfigError("tls_client_cert needs tls_ca (the CA client certificates chain to)")
        ctx.verify_mode = (
            ssl.CERT_REQUIRED if cfg.tls_client_cert == "required" else ssl.CERT_OPTIONAL
        )
    return ctx
