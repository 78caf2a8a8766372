"""EndTransaction and RecallMessage: not served until the message-types issue (17).

SendMessage refuses TRANSACTION messages (and DELAY ones) with UNSUPPORTED, so no
transaction is ever half-done and no delayed message waits to be recalled: these two
RPCs answer UNSUPPORTED with a message saying so, the status RocketMQ's proxy uses for
what it does not serve (docs/rocketmq.md, "Differences from RocketMQ").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call

__all__ = ["end_transaction", "recall_message"]


async def end_transaction(
    call: Call, request: service_pb2.EndTransactionRequest
) -> service_pb2.EndTransactionResponse:
    return service_pb2.EndTransactionResponse(status=status(
        Code.UNSUPPORTED,
        "transactional messages are not supported by LMQ Gateway yet; no transaction"
        f" {request.transaction_id!r} was started (TRANSACTION sends are refused)"))


async def recall_message(
    call: Call, request: service_pb2.RecallMessageRequest
) -> service_pb2.RecallMessageResponse:
    return service_pb2.RecallMessageResponse(status=status(
        Code.UNSUPPORTED,
        "recalling delayed messages is not supported by LMQ Gateway yet (DELAY sends are"
        " refused, so there is nothing to recall)"))
