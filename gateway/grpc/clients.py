"""Heartbeat and NotifyClientTermination."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def heartbeat(
    call: Call, request: service_pb2.HeartbeatRequest
) -> service_pb2.HeartbeatResponse:
    return service_pb2.HeartbeatResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def notify_client_termination(
    call: Call, request: service_pb2.NotifyClientTerminationRequest
) -> service_pb2.NotifyClientTerminationResponse:
    return service_pb2.NotifyClientTerminationResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
