"""Telemetry: the bidirectional stream of a client's settings and server commands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call


async def telemetry(
    call: Call, requests: AsyncIterator[service_pb2.TelemetryCommand]
) -> AsyncIterator[service_pb2.TelemetryCommand]:
    yield service_pb2.TelemetryCommand(
        status=status(Code.NOT_IMPLEMENTED, "not implemented yet"))
