"""QueryRoute and QueryAssignment: the gateway is the access point and the one broker.

QueryRoute answers one ``MessageQueue`` per queue of the topic (ids 0..n-1, the same
queues, hence the same LMQs ``rmq:<topic>:<id>``, as remoting's routes): queue ``i`` is
readable when ``i < read_queues`` and writable when ``i < write_queues``, within the
topic's ``perm``, so queue 0 is always both (the Node client uses only queue 0). Every
queue names one broker, :data:`BROKER_NAME` id 0, whose endpoints are
``advertised_address`` when configured, else the endpoints the client says it used
(``QueryRouteRequest.endpoints``: the access point it was given), else the address its
connection reached. ``accept_message_types`` lists the types the topic accepts: its
type, or all four for a MIXED topic (the clients refuse to send a type not listed).

Unknown topics are created when ``rocketmq_auto_create_topics`` is on (as remoting's
route queries do), else TOPIC_NOT_FOUND.

QueryAssignment answers as the Java proxy does in pop mode: one assignment with queue
id -1 (any queue: a receive pops across all of them) on the topic's broker; for a group
that consumes in order (``consume_message_orderly``), one assignment per readable
queue. A topic with no readable queue is FORBIDDEN "no readable queue", and so is a
principal that may not consume the topic (the ``subscribe`` ACL, as for a receive).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gateway.grpc.clients import group_name
from gateway.grpc.telemetry import route_queried
from lmq.rocketmq import InvalidName, MessageType, Perm
from protocol.grpc import Code, StatusError, ok

if TYPE_CHECKING:
    from gateway.grpc.call import Call
    from lmq.rocketmq import TopicConfig

#: The one broker's name in routes: the same as remoting's routes give.
BROKER_NAME = "lmq-gateway"

MESSAGE_TYPES = {
    MessageType.NORMAL: definition_pb2.NORMAL,
    MessageType.FIFO: definition_pb2.FIFO,
    MessageType.DELAY: definition_pb2.DELAY,
    MessageType.TRANSACTION: definition_pb2.TRANSACTION,
}


def topic_config(call: Call, resource: definition_pb2.Resource) -> TopicConfig:
    """The topic a request names, created if allowed; StatusError otherwise."""
    name = resource.name
    if not name:
        raise StatusError(Code.ILLEGAL_TOPIC, "the topic name is empty")
    try:
        config = call.services.topics.ensure(name)
    except InvalidName as exc:
        raise StatusError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if config is None:
        raise StatusError(Code.TOPIC_NOT_FOUND, f"topic {name} does not exist")
    return config


def _address(host: str, port: int) -> tuple[int, definition_pb2.Address]:
    try:
        scheme = (definition_pb2.IPv6 if ipaddress.ip_address(host).version == 6
                  else definition_pb2.IPv4)
    except ValueError:
        scheme = definition_pb2.DOMAIN_NAME
    return scheme, definition_pb2.Address(host=host, port=port)


def broker_endpoints(
    call: Call, requested: definition_pb2.Endpoints | None
) -> definition_pb2.Endpoints:
    """Where clients reach the broker (see the module docstring); on a slave of a broker
    group, the master (docs/replication.md)."""
    intro = call.services.introspection
    advertised = call.services.advertised_address
    if intro.replication_role() == "slave":
        advertised = intro.replication_master("grpc") or intro.replication_master("unified")
    if advertised:
        host, _, port = advertised.rpartition(":")
        scheme, address = _address(host.strip("[]"), int(port))
        return definition_pb2.Endpoints(scheme=scheme, addresses=[address])
    if requested is not None and requested.addresses:
        return requested
    local = call.connection.local_address if call.connection is not None else None
    if local is None:  # a call made without a connection (none since the door is the gateway's)
        local = ("127.0.0.1", 0)
    scheme, address = _address(*local)
    return definition_pb2.Endpoints(scheme=scheme, addresses=[address])


def _permission(perm: int, readable: bool, writable: bool) -> int:
    readable = readable and bool(perm & Perm.READ)
    writable = writable and bool(perm & Perm.WRITE)
    if readable and writable:
        return definition_pb2.READ_WRITE
    if readable:
        return definition_pb2.READ
    return definition_pb2.WRITE if writable else definition_pb2.NONE


def message_queues(
    config: TopicConfig, topic: definition_pb2.Resource, broker: definition_pb2.Broker
) -> list[definition_pb2.MessageQueue]:
    accepted = [MESSAGE_TYPES[kind] for kind in config.accepted_types]
    return [
        definition_pb2.MessageQueue(
            topic=topic, id=i, broker=broker, accept_message_types=accepted,
            permission=_permission(config.perm, i < config.read_queues, i < config.write_queues))
        for i in range(config.queue_count)
    ]


async def query_route(
    call: Call, request: service_pb2.QueryRouteRequest
) -> service_pb2.QueryRouteResponse:
    config = topic_config(call, request.topic)
    broker = definition_pb2.Broker(
        name=BROKER_NAME, id=0, endpoints=broker_endpoints(call, request.endpoints))
    queues = message_queues(config, request.topic, broker)
    route_queried(call)
    return service_pb2.QueryRouteResponse(status=ok(), message_queues=queues)


async def query_assignment(
    call: Call, request: service_pb2.QueryAssignmentRequest
) -> service_pb2.QueryAssignmentResponse:
    config = topic_config(call, request.topic)
    name = group_name(call, request.group)
    call.check_subscribe(config.name, name)
    group = call.services.groups.get(name)
    broker = definition_pb2.Broker(
        name=BROKER_NAME, id=0, endpoints=broker_endpoints(call, request.endpoints))
    readable = [q for q in message_queues(config, request.topic, broker)
                if q.permission in (definition_pb2.READ, definition_pb2.READ_WRITE)]
    if not readable:
        raise StatusError(Code.FORBIDDEN, "no readable queue")
    if group is not None and group.consume_message_orderly:
        assignments = [definition_pb2.Assignment(message_queue=q) for q in readable]
    else:
        any_queue = definition_pb2.MessageQueue(
            topic=request.topic, id=-1, broker=broker, permission=readable[0].permission,
            accept_message_types=readable[0].accept_message_types)
        assignments = [definition_pb2.Assignment(message_queue=any_queue)]
    return service_pb2.QueryAssignmentResponse(status=ok(), assignments=assignments)
