"""The per-call context of a gRPC request: who calls, from where, until when.

Built by the servicer (:mod:`gateway.grpc.service`) for every RPC before it delegates,
after the ``authorization`` metadata has been checked (:mod:`gateway.grpc.auth`): a
delegate gets a :class:`Call` whose ``principal`` is set (the anonymous principal in
open mode) and raises :class:`~protocol.grpc.StatusError` to answer with a status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.auth import ANONYMOUS_PRINCIPAL, Principal
from protocol.grpc import Code, StatusError

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.grpc.services import GrpcServices

#: The metadata keys RocketMQ's v2 clients send (lower case, as gRPC delivers them).
CLIENT_ID = "x-mq-client-id"
REQUEST_ID = "x-mq-request-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"
PROTOCOL = "x-mq-protocol"
NAMESPACE = "x-mq-namespace"
DATE_TIME = "x-mq-date-time"
AUTHORIZATION = "authorization"


class CallContext(Protocol):
    """What a call knows of the door's per-call object
    (:class:`gateway.grpc.server.ServerCall`)."""

    def cancelled(self) -> bool:
        """The client went away, reset the call, or its deadline passed."""
        ...


@dataclass(slots=True, eq=False)
class Call:
    """One RPC being served (one per unary call, one per stream)."""

    #: What request code uses (:class:`~gateway.grpc.services.GrpcServices`: the
    #: RocketMQ services, the client registry, the receive state, the events that end
    #: long polls); never the front end.
    services: GrpcServices
    #: The RPC's name as in the service (``SendMessage``); labels metrics and logs.
    rpc: str
    #: The door's per-call object (stream, metadata, cancellation, deadline).
    context: CallContext
    #: The request metadata, keys lower case; a repeated key keeps its last value.
    metadata: dict[str, str] = field(default_factory=dict)
    #: ``x-mq-client-id`` ("" when the client sent none).
    client_id: str = ""
    #: The client's address (``127.0.0.1:53422``).
    peer: str = ""
    #: The client's address (host only), for logs, rate limits and ACLs.
    peer_host: str | None = None
    #: Who the call is served as (set by authentication; anonymous in open mode).
    principal: Principal = ANONYMOUS_PRINCIPAL
    #: Served in open mode (no login): ends early when authentication turns on.
    unauthenticated: bool = False
    #: ``loop.time()`` by which the client gives up (None = no deadline).
    deadline: float | None = None
    #: The gateway connection the call came on (None only for calls made without one):
    #: its local address is the one the client connected to.
    connection: Connection | None = None

    # -- time -------------------------------------------------------------------------

    async def must_end(self) -> None:
        """Return when a long poll or a stream of this call must end early: the gateway
        stops, or authentication turns on and this call was served without a login."""
        services = self.services
        if not self.unauthenticated:
            await services.stopping.wait()
            return
        waits = [asyncio.ensure_future(services.stopping.wait()),
                 asyncio.ensure_future(services.logins_required.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    def time_remaining(self) -> float | None:
        """Seconds left before the client's deadline (None = no deadline), never < 0."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self.services.loop.time())

    # -- ACLs -------------------------------------------------------------------------

    def check_publish(self, topic: str) -> None:
        """Raise FORBIDDEN unless this call's principal may send to ``topic`` (the MQTT
        ``publish`` right on the topic's name, as for remoting; docs/rocketmq.md)."""
        auth = self.services.authenticator
        if auth is not None and not auth.can_publish(self.principal, self.client_id, topic):
            raise StatusError(Code.FORBIDDEN, f"no permission to send to topic {topic}")

    def check_subscribe(self, topic: str, group: str) -> None:
        """Raise FORBIDDEN unless the principal may consume ``topic`` as ``group`` (the
        ``subscribe`` right on ``topic/#``, as for remoting)."""
        auth = self.services.authenticator
        if auth is not None and not auth.can_subscribe(
            self.principal, self.client_id, f"{topic}/#"
        ):
            raise StatusError(
                Code.FORBIDDEN, f"no permission to consume topic {topic} as group {group}")

    # -- limits -----------------------------------------------------------------------

    @contextlib.contextmanager
    def receive_slot(self) -> Iterator[None]:
        """Hold one of the client's ``grpc_max_receives_per_client`` concurrent receives
        for the ``with`` block; TOO_MANY_REQUESTS when all are taken. Clients without an
        id share the slots of the id ""."""
        services = self.services
        held = services.receives.get(self.client_id, 0)
        if held >= services.max_receives:
            raise StatusError(
                Code.TOO_MANY_REQUESTS,
                f"client {self.client_id} already has {held} receives in progress")
        services.receives[self.client_id] = held + 1
        try:
            yield
        finally:
            left = services.receives[self.client_id] - 1
            if left:
                services.receives[self.client_id] = left
            else:
                del services.receives[self.client_id]

    def log_fields(self) -> dict[str, Any]:
        return {"protocol": "grpc", "rpc": self.rpc, "client_id": self.client_id,
                "peer": self.peer_host or self.peer}
