"""gRPC clients: Heartbeat and NotifyClientTermination, on the client registry
(:mod:`gateway.grpc.registry`, ``call.services.clients``).

A heartbeat makes its client known; NotifyClientTermination forgets it.
Heartbeats auto-create the consumer group they name (``rocketmq_auto_create_groups``),
as remoting's do; otherwise an unknown group is CONSUMER_GROUP_NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from lmq.rocketmq import InvalidName
from protocol.grpc import Code, StatusError, ok

if TYPE_CHECKING:
    from gateway.grpc.call import Call

CONSUMER_TYPES = frozenset((
    definition_pb2.PUSH_CONSUMER, definition_pb2.SIMPLE_CONSUMER, definition_pb2.PULL_CONSUMER,
))


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
    registry = call.services.clients
    known = registry.get(call.client_id) if call.client_id else None
    client_type = request.client_type or (known.client_type if known is not None else 0)
    group = None
    if request.HasField("group") and request.group.name:
        if client_type in CONSUMER_TYPES or not client_type:
            group = group_name(call, request.group)
    elif client_type in CONSUMER_TYPES:
        raise StatusError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's heartbeat needs its group")
    # only a valid heartbeat makes a client known
    client = registry.seen(call.client_id, call.metadata)
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
    call.services.clients.forget(call.client_id)
    return service_pb2.NotifyClientTerminationResponse(status=ok())
