"""Protocol sniffing: which protocol a connection speaks, from its first bytes.

Each sniffer looks at the bytes received so far and answers ``True`` (this protocol),
``False`` (not this protocol) or ``None`` (cannot tell yet: need more bytes). The
unified listener asks the sniffers of every registered front end (see
:mod:`gateway.frontends`) until one says ``True`` or all say ``False``. Sniffers must
decide within :data:`MAX_PREFIX` bytes.

The signatures are distinct on the first byte, so the order does not matter today:

- MQTT: the first packet must be CONNECT, fixed-header byte 0x10.
- AMQP 0-9-1: the protocol header starts with ``b"AMQP"``.
- HTTP/1.x: a method token and a space (``b"GET "``, ``b"POST "``, ...).
- RocketMQ remoting (later): a 4-byte big-endian frame length, then a 4-byte header
  length whose high byte is the serialize type (0 = JSON, 1 = ROCKETMQ).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Sniffer = Callable[[bytes], bool | None]

#: Bytes a sniffer may ask for before it must decide.
MAX_PREFIX = 16

MQTT_CONNECT = 0x10
AMQP_SIGNATURE = b"AMQP"
HTTP_METHODS = (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"TRACE")


def sniff_mqtt(prefix: bytes) -> bool | None:
    if not prefix:
        return None
    return prefix[0] == MQTT_CONNECT


def sniff_amqp(prefix: bytes) -> bool | None:
    return _starts_with(prefix, AMQP_SIGNATURE)


def sniff_http(prefix: bytes) -> bool | None:
    undecided = False
    for method in HTTP_METHODS:
        answer = _starts_with(prefix, method + b" ")
        if answer:
            return True
        undecided = undecided or answer is None
    return None if undecided else False


def _starts_with(prefix: bytes, signature: bytes) -> bool | None:
    if len(prefix) >= len(signature):
        return prefix.startswith(signature)
    return None if signature.startswith(prefix) else False


def classify(prefix: bytes, sniffers: Sequence[tuple[str, Sniffer]]) -> str | bool | None:
    """The name of the protocol ``prefix`` belongs to; ``None`` when more bytes are
    needed to tell; ``False`` when no sniffer claims it (or it is already
    :data:`MAX_PREFIX` bytes long and still undecided)."""
    undecided = False
    for name, sniff in sniffers:
        answer = sniff(prefix)
        if answer:
            return name
        undecided = undecided or answer is None
    if undecided and len(prefix) < MAX_PREFIX:
        return None
    return False
