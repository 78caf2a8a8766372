"""What gRPC request code is given: :class:`GrpcServices`, one per front end.

A delegate of the servicer (``send``, ``receive``, ``ack``, ...) gets ``call.services``
and nothing else of the front end: the gateway's RocketMQ services it uses (the store
facade, the producer, pop, send-back, the topic and group registries), the gRPC state
shared by the calls (the client registry, the receives open per client, the renewals
and remembered attempts of receives), the events that end long polls, the counters the
front end copies into its metrics, and the few settings request code reads. The front
end (:mod:`gateway.grpc.frontend`) builds it; request code never imports the front end
(an import contract in pyproject.toml says so).

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway.grpc.receipts import Attempts, ConsumeState, Renewer
from gateway.grpc.registry import ClientRegistry

if TYPE_CHECKING:
    from gateway.auth import Authenticator
    from gateway.context import GatewayContext

__all__ = ["GrpcServices"]


class GrpcServices:
    """The narrow services object of the gRPC request code (``call.services``)."""

    def __init__(self, ctx: GatewayContext) -> None:
        rocketmq = ctx.rocketmq
        cfg = ctx.config
        #: The store's facade (reads, offsets, lookups).
        self.store = rocketmq.store
        #: Every send, end of transaction and recall (:mod:`gateway.rocketmq.producer`).
        self.producer = rocketmq.producer
        self.pop = rocketmq.pop
        self.sendback = rocketmq.sendback
        self.topics = rocketmq.topics
        self.groups = rocketmq.groups
        self.loop = ctx.loop
        self.introspection = ctx.introspection
        self._security = ctx.security
        #: Largest message body a producer may send (the store's limit).
        self.max_body = self.store.config.max_message_bytes
        self.advertised_address = cfg.advertised_address
        #: Clients known from heartbeats and Telemetry, with their Telemetry streams.
        self.clients = ClientRegistry(ctx.loop.time)
        #: ReceiveMessage calls open by client id (Call.receive_slot), and the limit.
        self.receives: dict[str, int] = {}
        self.max_receives = cfg.grpc_max_receives_per_client
        #: Auto-renewed receipts and the receive attempts remembered for a retry.
        self.consume = ConsumeState(Renewer(self.pop, ctx.spawn), Attempts())
        #: Set by the first goodbye or stop: long polls and Telemetry streams end.
        self.stopping = asyncio.Event()
        #: Set when authentication turns on: those of calls served without a login end.
        self.logins_required = asyncio.Event()
        #: Messages stored by SendMessage and given by ReceiveMessage (plain ints,
        #: copied into the front end's counters at each sample).
        self.received = 0
        self.sent = 0

    @property
    def authenticator(self) -> Authenticator | None:
        """Logins and permissions now (None in open mode); read at each check, as it
        turns on when a users file appears."""
        return self._security.authenticator
