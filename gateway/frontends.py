"""The one place that lists the gateway's front ends and how to recognise them.

To add a protocol: one package under ``gateway/``
with ``create_frontend(ctx)`` (see :mod:`gateway.frontend`), one sniffing rule in
:mod:`gateway.sniff`, and one :class:`FrontEndSpec` in :data:`FRONT_ENDS`. A dedicated
port, if the protocol has one, is a config option plus an entry in
:data:`gateway.server.LISTENERS`. The recipe, with the connection life cycle, is in
docs/architecture.md.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.sniff import (
    Sniffer,
    sniff_amqp,
    sniff_h2,
    sniff_http,
    sniff_mqtt,
    sniff_remoting,
)

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.frontend import FrontEnd

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FrontEndSpec:
    #: Protocol name (``mqtt``); the unified port and the plain listeners refer to it.
    name: str
    #: Module imported at start; it must define ``create_frontend(ctx) -> FrontEnd``.
    module: str
    #: Recognises the protocol from a connection's first bytes (see gateway.sniff).
    sniff: Sniffer
    #: Whether the unified port serves this protocol.
    unified: bool = True
    #: Builds the front end directly instead of importing ``module`` (tests, plug-ins
    #: that live outside ``gateway/``).
    factory: Callable[[GatewayContext], FrontEnd] | None = None
    #: Written to a connection of this protocol, before it is closed, while the front
    #: end is not available: the protocol's own "not served here", if it has one.
    refusal: bytes = b""


#: HTTP/2 error code REFUSED_STREAM (RFC 9113 section 7).
H2_REFUSED_STREAM = 0x7


def h2_goaway(debug: bytes) -> bytes:
    """The server's side of an HTTP/2 connection that serves nothing (RFC 9113): its
    preface (an empty SETTINGS frame), then GOAWAY with last stream 0, REFUSED_STREAM
    (no request was processed; a gRPC client reports UNAVAILABLE) and ``debug``."""
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    payload = (0).to_bytes(4, "big") + H2_REFUSED_STREAM.to_bytes(4, "big") + debug
    return settings + len(payload).to_bytes(3, "big") + b"\x07\x00" + bytes(4) + payload


FRONT_ENDS: tuple[FrontEndSpec, ...] = (
    FrontEndSpec("mqtt", "gateway.mqtt", sniff_mqtt),
    FrontEndSpec("amqp", "gateway.amqp", sniff_amqp),
    FrontEndSpec("http", "gateway.http", sniff_http),
    # RocketMQ remoting (RIP-55): the unified ports and its own remoting_port.
    FrontEndSpec("remoting", "gateway.remoting", sniff_remoting),
    # RocketMQ 5 gRPC (issue 16): recognised by the HTTP/2 preface and served by the
    # gRPC door (gateway.grpc.server) like the dedicated gRPC ports; should it not be
    # available, such a connection gets GOAWAY and is closed.
    FrontEndSpec(
        "grpc", "gateway.grpc", sniff_h2, refusal=h2_goaway(b"gRPC is not served here")
    ),
)


def load_front_end(spec: FrontEndSpec, ctx: GatewayContext) -> FrontEnd | None:
    """The front end of ``spec``, or ``None`` (logged) when its module does not exist
    yet or has no ``create_frontend``. Any other import error propagates: a front end
    that exists but is broken must stop the start, not be skipped silently."""
    if spec.factory is not None:
        return _checked(spec, spec.factory(ctx))
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec.module + ".").startswith(exc.name + "."):
            log.warning(
                "front end not available",
                extra={"protocol": spec.name, "import": spec.module, "reason": "not installed"},
            )
            return None
        raise
    factory = getattr(module, "create_frontend", None)
    if factory is None:
        log.warning(
            "front end not available",
            extra={"protocol": spec.name, "import": spec.module, "reason": "no create_frontend"},
        )
        return None
    return _checked(spec, factory(ctx))


def _checked(spec: FrontEndSpec, front_end: FrontEnd) -> FrontEnd:
    if front_end.name != spec.name:
        raise RuntimeError(f"{spec.module} created front end {front_end.name!r}, not {spec.name!r}")
    return front_end
