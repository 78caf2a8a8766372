"""HAProxy's PROXY protocol, versions 1 and 2, sans-IO: see :mod:`protocol.proxy.header`."""

from protocol.proxy.header import (
    MAX_V1_LENGTH,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyProtocolError,
    detect,
    parse,
)

__all__ = [
    "MAX_V1_LENGTH",
    "V2_SIGNATURE",
    "ProxyHeader",
    "ProxyProtocolError",
    "detect",
    "parse",
]
