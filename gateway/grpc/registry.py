"""The gRPC clients the gateway knows (``call.services.clients``).

A client is known by its ``x-mq-client-id`` from its first heartbeat or Telemetry
stream; it is forgotten on NotifyClientTermination, or two minutes after it was last
heard from while it has no Telemetry stream open (RocketMQ's clients heartbeat every
10 s). Each known client keeps its last settings (from Telemetry) and, while one is
open, its Telemetry stream's outbox: :meth:`ClientRegistry.send_command` writes a
server command (a transaction check-back) to it.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from protocol.grpc import Code, StatusError

__all__ = ["CLIENT_EXPIRY_S", "OUTBOX_MAX", "ClientRegistry", "GrpcClient"]

#: Seconds a client without an open Telemetry stream is remembered after it was last heard.
CLIENT_EXPIRY_S = 120.0
#: Commands waiting in a Telemetry stream's outbox; more are refused (the client is
#: not reading its stream).
OUTBOX_MAX = 1024


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

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clients: dict[str, GrpcClient] = {}
        #: ``loop.time``: when a client is heard from.
        self._clock = clock

    def __len__(self) -> int:
        return len(self.clients)

    def get(self, client_id: str) -> GrpcClient | None:
        return self.clients.get(client_id)

    def seen(self, client_id: str, metadata: Mapping[str, str]) -> GrpcClient:
        """The client of a call (its id and metadata), created on first sight; its
        ``last_seen`` is now."""
        if not client_id:
            raise StatusError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
        client = self.clients.get(client_id)
        if client is None:
            client = self.clients[client_id] = GrpcClient(client_id)
            client.language = metadata.get("x-mq-language", "")
            client.version = metadata.get("x-mq-client-version", "")
        client.last_seen = self._clock()
        return client

    def forget(self, client_id: str) -> GrpcClient | None:
        return self.clients.pop(client_id, None)

    def expire(self, now: float) -> list[str]:
        """Forget clients silent for :data:`CLIENT_EXPIRY_S` with no Telemetry stream."""
        gone = [
            cid
            for cid, c in self.clients.items()
            if c.outbox is None and now - c.last_seen > CLIENT_EXPIRY_S
        ]
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
