"""TLS to a cluster: the client-side SSL context from a rules file's ``tls`` table, and
what a TLS failure at connect time means (shared by the gateway, MQTT and AMQP kinds);
and the rest of how to reach an MQTT or AMQP broker (:func:`peer_settings`).

``tls = true`` verifies the server against the system's CAs and the address it was
dialled at (a certificate for ``127.0.0.1`` needs that IP in its subjectAltName);
``ca_file`` replaces the system's CAs; ``cert_file`` + ``key_file`` are the client's
certificate (for a server that asks for one); ``verify = false`` checks nothing (tests
only: it lets a man in the middle read and change every message).

A certificate that does not verify, or a CA, certificate or key file that cannot be
loaded, is a configuration error, not an outage: :class:`TlsFailure`, and the rule stops
with it in ``status`` (retrying would fail the same way until someone fixes a file).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

from .endpoints import TlsFailure
from .rules import Cluster, Tls


def ssl_context(tls: Tls | None, cluster: str = "") -> ssl.SSLContext | None:
    """The client context for ``tls`` (None: plain TCP); :class:`TlsFailure` if one of
    its files cannot be loaded."""
    if tls is None:
        return None
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file and tls.key_file:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFailure(f"cluster {cluster}: TLS settings unusable: {exc}") from exc
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def cluster_context(cluster: Cluster) -> ssl.SSLContext | None:
    return ssl_context(cluster.tls, cluster.name)


def peer_settings(
    cluster: Cluster, *, user: str, password: str, options: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """How to reach an MQTT or AMQP broker ``cluster``: its first endpoint's ``host`` and
    ``port``, its ``ssl_context``, its user and password under the client's names
    (``user``, ``password``), and each of ``options`` (rules-file key, client's name)
    that the cluster sets."""
    host, _, port = cluster.endpoints[0].rpartition(":")
    settings: dict[str, Any] = {
        "host": host, "port": int(port), "ssl_context": cluster_context(cluster)}
    if cluster.user is not None:
        settings[user] = cluster.user
    if cluster.password is not None:
        settings[password] = cluster.password
    for key, name in options:
        if key in cluster.options:
            settings[name] = cluster.options[key]
    return settings


def verify_failure(exc: BaseException | None, what: str) -> TlsFailure | None:
    """The :class:`TlsFailure` for a connect error to ``what`` (``"cluster b at
    host:port"``) caused, anywhere down its chain of causes, by a certificate that does
    not verify; None for any other error."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLCertVerificationError):
            why = exc.verify_message or str(exc)
            return TlsFailure(f"{what}: the TLS certificate does not verify: {why}")
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
