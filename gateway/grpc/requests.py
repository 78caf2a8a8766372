"""Requests as grpcio hands them to the servicer: a request that is not valid protobuf
is answered BAD_REQUEST in its RPC's own response type (grpcio itself would end the call
with UNKNOWN and log a traceback per bad request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import service_pb2_grpc

from protocol.grpc import Code, StatusError

SERVICE = "apache.rocketmq.v2.MessagingService"


class Malformed:
    """A request that did not parse as its protobuf message: what the lenient
    deserializer (:func:`register`) gives the servicer instead of raising."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return Malformed(str(exc) or "wire format was corrupt")

    return deserialize


class _LenientHandler(grpc.GenericRpcHandler):
    """The generated service's handler with every request deserializer lenient."""

    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self.inner = inner

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = self.inner.service(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return handler._replace(request_deserializer=_lenient(handler.request_deserializer))


def register(servicer: Any, server: grpc.aio.Server) -> None:
    """Add ``servicer`` to ``server`` with the generated registration, its request
    deserializers made lenient (:class:`Malformed`)."""
    generic: list[grpc.GenericRpcHandler] = []

    class Capture:
        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            generic.extend(handlers)

        def add_registered_method_handlers(self, name: str, handlers: Any) -> None:
            pass  # served through the generic handler below

    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, Capture())
    server.add_generic_rpc_handlers(tuple(_LenientHandler(h) for h in generic))


def check_parsed(request: Any) -> None:
    """Raise BAD_REQUEST for a :class:`Malformed` request."""
    if isinstance(request, Malformed):
        raise StatusError(Code.BAD_REQUEST, f"malformed request: {request.error}")
