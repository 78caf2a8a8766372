"""AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue (owned by
h-gmsg; see gateway/grpc/service.py for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def ack_message(
    call: Call, request: service_pb2.AckMessageRequest
) -> service_pb2.AckMessageResponse:
    return service_pb2.AckMessageResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def change_invisible_duration(
    call: Call, request: service_pb2.ChangeInvisibleDurationRequest
) -> service_pb2.ChangeInvisibleDurationResponse:
    return service_pb2.ChangeInvisibleDurationResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def forward_message_to_dead_letter_queue(
    call: Call, request: service_pb2.ForwardMessageToDeadLetterQueueRequest
) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
    return service_pb2.ForwardMessageToDeadLetterQueueResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
