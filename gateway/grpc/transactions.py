"""EndTransaction, RecallMessage (owned by h-gmsg; see gateway/grpc/service.py for the
contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def end_transaction(
    call: Call, request: service_pb2.EndTransactionRequest
) -> service_pb2.EndTransactionResponse:
    return service_pb2.EndTransactionResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def recall_message(
    call: Call, request: service_pb2.RecallMessageRequest
) -> service_pb2.RecallMessageResponse:
    return service_pb2.RecallMessageResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
