"""ReceiveMessage (owned by h-gmsg; see gateway/grpc/service.py for the contract)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def receive_message(
    call: Call, request: service_pb2.ReceiveMessageRequest
) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
    yield service_pb2.ReceiveMessageResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
