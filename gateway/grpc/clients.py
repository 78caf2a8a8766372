"""gRPC clients: the registry, Heartbeat and NotifyClientTermination.

A client is known by its ``x-mq-client-id`` from its first heartbeat or Telemetry
stream; it is forgotten on NotifyClientTermination, or two minutes after it was last
heard from while it has no Telemetry stream open (RocketMQ's clients heartbeat every
10 s). Each known client keeps its last settings (from Telemetry) and, while one is
open, its Telemetry stream's outbox: :meth:`ClientRegistry.send_command` writes a
server command (a transaction check-back, issue 17) to it.

Heartbeats auto-create the consumer group they name (``rocketmq_auto_create_groups``),
as remoting's do; otherwise an unknown group is CONSUMER_GROUP_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from lmq.rocketmq import InvalidName
from protocol.grpc import Code, StatusError, ok

if TYPE_CHECKING:
    from gateway.grpc.call import Call

#: Seconds a client without an open Telemetry stream is remembered after it was last heard.
CLIENT_EXPIRY_S = 120.0
#: Commands waiting in a Telemetry stream's outbox; more are refused (the client is
#: not reading its stream).
OUTBOX_MAX = 1024

CONSUMER_TYPES = frozenset((
    definition_pb2.PUSH_CONSUMER, definition_pb2.SIMPLE_CONSUMER, definition_pb2.PULL_CONSUMER,
))


@dataclass(eq=False)
class GrpcClient:
    client_id: str
    #: ``apache.rocketmq.v2.ClientType`` (0 until it says).
    client_type: int = 0
    #: Consumer groups it heartbeats for.
    groups: set[str] = field(default_factory=set)
    #: ``loop.time()`` it was last heard from.
    last_seen: float = 0.0
    #: The settings it last sent on Telemetry (None before).
    settings: definition_pb2.Settings | None = None
    #: The outbox of its open Telemetry stream (None while none is open).
    outbox: asyncio.Queue[service_pb2.TelemetryCommand] | None = None
    #: ``loop.time()`` its current Telemetry stream opened.
    stream_opened: float = 0.0
    #: A repeat of its settings reply is scheduled (gateway.grpc.telemetry).
    resend_scheduled: bool = False
    #: Language and version from the metadata (``PYTHON`` / ``5.1.2``), for logs.
    language: str = ""
    version: str = ""


class ClientRegistry:
    """Clients by id. Event-loop thread only."""

    def __init__(self) -> None:
        self.clients: dict[str, GrpcClient] = {}

    def __len__(self) -> int:
        return len(self.clients)

    def get(self, client_id: str) -> GrpcClient | None:
        return self.clients.get(client_id)

    def seen(self, call: Call) -> GrpcClient:
        """The call's client, created on first sight; its ``last_seen`` is now."""
        client_id = call.client_id
        if not client_id:
            raise StatusError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
        client = self.clients.get(client_id)
        if client is None:
            client = self.clients[client_id] = GrpcClient(client_id)
            client.language = call.metadata.get("x-mq-language", "")
            client.version = call.metadata.get("x-mq-client-version", "")
        client.last_seen = call.front.loop.time()
        return client

    def forget(self, client_id: str) -> GrpcClient | None:
        return self.clients.pop(client_id, None)

    def expire(self, now: float) -> list[str]:
        """Forget clients silent for :data:`CLIENT_EXPIRY_S` with no Telemetry stream."""
        gone = [cid for cid, c in self.clients.items()
                if c.outbox is None and now - c.last_seen > CLIENT_EXPIRY_S]
        for cid in gone:
            del self.clients[cid]
        return gone

    def in_group(self, group: str) -> list[GrpcClient]:
        return [c for c in self.clients.values() if group in c.groups]

    def send_command(self, client_id: str, command: service_pb2.TelemetryCommand) -> bool:
        """Write ``command`` to the client's open Telemetry stream: False when it has
        none open, or its outbox is full."""
        client = self.clients.get(client_id)
        if client is None or client.outbox is None:
            return False
        try:
            client.outbox.put_nowait(command)
        except asyncio.QueueFull:
            return False
        return True


def group_name(call: Call, resource: definition_pb2.Resource) -> str:
    """The group of a request, created if allowed; StatusError otherwise."""
    name = resource.name
    try:
        config = call.services.groups.ensure(name)
    except InvalidName as exc:
        raise StatusError(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    if config is None:
        raise StatusError(Code.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist")
    return name


async def heartbeat(
    call: Call, request: service_pb2.HeartbeatRequest
) -> service_pb2.HeartbeatResponse:
    registry = call.front.clients
    known = registry.get(call.client_id) if call.client_id else None
    client_type = request.client_type or (known.client_type if known is not None else 0)
    group = None
    if request.HasField("group") and request.group.name:
        if client_type in CONSUMER_TYPES or not client_type:
            group = group_name(call, request.group)
    elif client_type in CONSUMER_TYPES:
        raise StatusError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's heartbeat needs its group")
    client = registry.seen(call)  # only a valid heartbeat makes a client known
    if request.client_type:
        client.client_type = request.client_type
    if group is not None:
        client.groups.add(group)
    return service_pb2.HeartbeatResponse(status=ok())


async def notify_client_termination(
    call: Call, request: service_pb2.NotifyClientTerminationRequest
) -> service_pb2.NotifyClientTerminationResponse:
    if not call.client_id:
        raise StatusError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
    call.front.clients.forget(call.client_id)
    return service_pb2.NotifyClientTerminationResponse(status=ok())
