"""Startup security: who may log in, and the TLS context of the TLS listeners.

- :func:`make_authenticator`: the users file (``<data_dir>/users.json`` unless
  ``users_file`` says otherwise). With no users file the gateway is open, which it
  allows only on a loopback bind unless ``allow_anonymous`` (docs/security.md); it then
  returns ``None`` and the front ends skip authentication altogether (no thread hop per
  CONNECT). With a users file every login is checked.
- :func:`make_tls_context`: Python's ``ssl`` module, TLS 1.2 at least; client
  certificates per ``tls_client_cert``.

Both raise :class:`~gateway.config.ConfigError` with a one-line message.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from gateway.auth import Authenticator
from gateway.auth.authenticator import ExposureError, resolve_allow_anonymous
from gateway.auth.users import UsersFileError
from gateway.config import ConfigError, GatewayConfig


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
