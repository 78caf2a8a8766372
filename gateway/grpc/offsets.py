"""PullMessage, UpdateOffset, GetOffset, QueryOffset (owned by h-gmsg; see
gateway/grpc/service.py for the contract)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def pull_message(
    call: Call, request: service_pb2.PullMessageRequest
) -> AsyncIterator[service_pb2.PullMessageResponse]:
    yield service_pb2.PullMessageResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def update_offset(
    call: Call, request: service_pb2.UpdateOffsetRequest
) -> service_pb2.UpdateOffsetResponse:
    return service_pb2.UpdateOffsetResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def get_offset(
    call: Call, request: service_pb2.GetOffsetRequest
) -> service_pb2.GetOffsetResponse:
    return service_pb2.GetOffsetResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))


async def query_offset(
    call: Call, request: service_pb2.QueryOffsetRequest
) -> service_pb2.QueryOffsetResponse:
    return service_pb2.QueryOffsetResponse(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
