"""SendMessage (owned by h-gmsg; see gateway/grpc/service.py for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def send_message(
    call: Call, request: service_pb2.SendMessageRequest
) -> service_pb2.SendMessageResponse:
    return service_pb2.SendMessageResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
