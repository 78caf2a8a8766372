"""Requests as the gRPC door (:mod:`gateway.grpc.server`) hands them to the servicer: a
request that is not valid protobuf is answered BAD_REQUEST in its RPC's own response
type (rather than failing the call with a transport status)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from protocol.grpc import Code, StatusError

SERVICE = "apache.rocketmq.v2.MessagingService"


class Malformed:
    """A request that did not parse as its protobuf message: what the lenient
    parser (:func:`lenient`) gives the servicer instead of raising."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse`` returning a :class:`Malformed` where it would raise DecodeError."""

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return Malformed(str(exc) or "wire format was corrupt")

    return deserialize


def check_parsed(request: Any) -> None:
    """Raise BAD_REQUEST for a :class:`Malformed` request."""
    if isinstance(request, Malformed):
        raise StatusError(Code.BAD_REQUEST, f"malformed request: {request.error}")
