"""QueryRoute and QueryAssignment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def query_route(
    call: Call, request: service_pb2.QueryRouteRequest
) -> service_pb2.QueryRouteResponse:
    return service_pb2.QueryRouteResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def query_assignment(
    call: Call, request: service_pb2.QueryAssignmentRequest
) -> service_pb2.QueryAssignmentResponse:
    return service_pb2.QueryAssignmentResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
