"""HTTP/1.1, server side, sans-IO over httptools: see :mod:`protocol.http1.connection`."""

from protocol.http1.connection import (
    CLOSED,
    END_OF_MESSAGE,
    NEED_DATA,
    Body,
    LocalProtocolError,
    ProtocolError,
    RequestHead,
    ServerConnection,
)

__all__ = [
    "CLOSED",
    "END_OF_MESSAGE",
    "NEED_DATA",
    "Body",
    "LocalProtocolError",
    "ProtocolError",
    "RequestHead",
    "ServerConnection",
]
