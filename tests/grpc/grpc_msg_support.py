"""Helpers of the messaging RPC tests (tests/grpc/test_grpc_send*.py, _receive*, _ack*,
_offsets*): a real ``lmq serve`` subprocess and raw ``grpc.aio`` calls with the
generated stub of ``rocketmq-python-client``. Every call has a deadline."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from tests.gateway.gateway_process import GatewayProcess
from tests.grpc.grpc_core_support import BOUND, channel, metadata, resource, stub

__all__ = [
    "BOUND",
    "Grpc",
    "ack",
    "duration",
    "grpc_gateway",
    "message",
    "receive",
    "send",
]


def duration(seconds: float) -> Duration:
    return Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


def message(topic: str, body: bytes, *, tag: str = "", keys: tuple[str, ...] = (),
            group: str = "", kind: int = pb.NORMAL, message_id: str | None = None,
            props: dict[str, str] | None = None, **system: Any) -> pb.Message:
    if message_id is None:
        message_id = uuid.uuid4().hex.upper()
    sysp = pb.SystemProperties(
        message_id=message_id, tag=tag, keys=list(keys), message_type=kind,
        body_encoding=system.pop("body_encoding", pb.IDENTITY), **system)
    if group:
        sysp.message_group = group
    msg = pb.Message(topic=resource(topic), body=body, system_properties=sysp)
    for k, v in (props or {}).items():
        msg.user_properties[k] = v
    return msg


class Grpc:
    """A stub on one channel to the gateway's gRPC port, as client ``client_id``."""

    def __init__(self, port: int, client_id: str = "host@1@0@msg-test") -> None:
        self.port = port
        self.client_id = client_id
        self.channel = channel(port)
        self.stub = stub(self.channel)

    def md(self) -> list[tuple[str, str]]:
        return metadata(client_id=self.client_id)

    async def close(self) -> None:
        await self.channel.close()


async def send(g: Grpc, *messages: pb.Message) -> Any:
    return await g.stub.SendMessage(
        service_pb2.SendMessageRequest(messages=list(messages)), metadata=g.md(),
        timeout=BOUND)


async def receive(g: Grpc, group: str, topic: str, *, batch: int = 32,
                  invisible: float | None = 30, poll: float | None = 0,
                  auto_renew: bool = False, attempt_id: str | None = None,
                  tags: str = "*", queue_id: int = 0, timeout: float = BOUND,
                  call: list[Any] | None = None) -> list[Any]:
    """The whole stream of one ReceiveMessage."""
    req = service_pb2.ReceiveMessageRequest(
        group=resource(group),
        message_queue=pb.MessageQueue(topic=resource(topic), id=queue_id,
                                      broker=pb.Broker(name="lmq-gateway")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tags),
        batch_size=batch, auto_renew=auto_renew)
    if invisible is not None:
        req.invisible_duration.CopyFrom(duration(invisible))
    if poll is not None:
        req.long_polling_timeout.CopyFrom(duration(poll))
    if attempt_id is not None:
        req.attempt_id = attempt_id
    stream = g.stub.ReceiveMessage(req, metadata=g.md(), timeout=timeout)
    if call is not None:
        call.append(stream)
    return [r async for r in stream]


def parts(responses: list[Any]) -> tuple[list[pb.Message], int | None, Any]:
    """``(messages, delivery timestamp, status)`` of a receive's stream; checks there is
    exactly one status and it comes last."""
    statuses = [r for r in responses if r.HasField("status")]
    assert len(statuses) == 1 and responses[-1].HasField("status"), responses
    stamps = [r.delivery_timestamp for r in responses if r.HasField("delivery_timestamp")]
    messages = [r.message for r in responses if r.HasField("message")]
    stamp = stamps[0].seconds * 1000 + stamps[0].nanos // 1_000_000 if stamps else None
    return messages, stamp, statuses[0].status


async def ack(g: Grpc, group: str, topic: str, *msgs: pb.Message,
              handles: list[str] | None = None) -> Any:
    entries = [service_pb2.AckMessageEntry(message_id=m.system_properties.message_id,
                                           receipt_handle=m.system_properties.receipt_handle)
               for m in msgs]
    for h in handles or ():
        entries.append(service_pb2.AckMessageEntry(message_id="x", receipt_handle=h))
    return await g.stub.AckMessage(
        service_pb2.AckMessageRequest(group=resource(group), topic=resource(topic),
                                      entries=entries),
        metadata=g.md(), timeout=BOUND)


@asynccontextmanager
async def grpc_gateway(data_dir: Path, *extra: str) -> AsyncIterator[tuple[GatewayProcess, Grpc]]:
    """A gateway subprocess and a stub on its gRPC port; both closed after."""
    gw = GatewayProcess(data_dir, *extra).start()
    g = Grpc(gw.ports["grpc"])
    try:
        yield gw, g
    finally:
        await g.close()
        gw.stop()


