"""What the messaging RPCs share: the topic and group checks (with the proxy's status
codes), and stored records <-> v2 messages (:mod:`protocol.grpc.messages` over the
record format of :mod:`gateway.rocketmq.records`, the one every RocketMQ front end
writes and reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import Message, Record
from gateway.rocketmq.records import (
    decode_properties,
    encode_properties,
    record_flags,
    rocketmq_properties,
    to_store_message,
)
from lmq.rocketmq import (
    RESERVED_PROPERTIES,
    GroupConfig,
    InvalidName,
    Perm,
    TopicConfig,
    is_system_topic,
    validate_group,
)
from protocol.grpc import Code, StatusError
from protocol.grpc.messages import Delivery, Incoming, encode_message
from protocol.remoting.messages import offset_msg_id

if TYPE_CHECKING:
    from gateway.grpc.call import Call
    from gateway.grpc.services import GrpcServices

__all__ = [
    "COMPRESSED",
    "RESERVED",
    "delivered",
    "encode_record",
    "gateway_store_host",
    "group_config",
    "parse_peer",
    "readable_topic",
    "store_host",
    "to_store",
]

#: RocketMQ's sysFlag bit of a compressed body.
COMPRESSED = 0x1

#: The property names a gRPC message may not carry as user properties, and that are
#: not shown to consumers as such (:data:`lmq.rocketmq.RESERVED_PROPERTIES`: not
#: ``mqttSecondTopic``, by which producers address an MQTT subtopic).
RESERVED = RESERVED_PROPERTIES


def parse_peer(peer: str) -> str:
    """gRPC's peer name (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``) as ``host:port``
    ("" for anything else, e.g. a unix socket)."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):]
    return ""


def store_host(call: Call) -> tuple[str, int]:
    """The address messages show as their store host, which is also the host part of
    the offsetMsgId a message without a client id (UNIQ_KEY) is known by. The same
    address remoting uses, so such a message has one id on both protocols: the
    advertised address; else the address the client connected to on the unified port
    (a relayed call); else :func:`gateway_store_host`."""
    services = call.services
    if not services.advertised_address:
        conn = call.connection
        if conn is not None and conn.local_address is not None:
            return conn.local_address
    return gateway_store_host(services)


def gateway_store_host(services: GrpcServices) -> tuple[str, int]:
    """The store host without a connection (the dedicated gRPC port, whose local
    address grpcio does not give; server commands): the advertised address, else the
    unified port's address (loopback for a wildcard bind)."""
    text = services.advertised_address or ""
    host, _, port = text.rpartition(":")
    if host and port.isdigit():
        return host.strip("[]"), int(port)
    unified = services.introspection.listener_address("unified")
    if unified is not None:
        bound_host, bound_port = unified
        if bound_host in ("0.0.0.0", "::", ""):
            bound_host = "127.0.0.1"
        return bound_host, bound_port
    return "127.0.0.1", 0


# -- topics and groups ---------------------------------------------------------------


def _topic(call: Call, name: str) -> TopicConfig:
    if not name:
        raise StatusError(Code.ILLEGAL_TOPIC, "The specified topic is blank.")
    if is_system_topic(name):
        raise StatusError(Code.ILLEGAL_TOPIC, "cannot access system topic")
    try:
        config = call.services.topics.ensure(name)
    except InvalidName as exc:
        raise StatusError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if config is None:
        raise StatusError(Code.TOPIC_NOT_FOUND, f"topic {name} not found")
    return config


def readable_topic(call: Call, name: str, group: str) -> TopicConfig:
    """The topic ``group`` may consume (created when allowed), after the ACL."""
    config = _topic(call, name)
    if not config.perm & Perm.READ:
        raise StatusError(Code.FORBIDDEN, f"the topic {name} is not readable")
    call.check_subscribe(name, group)
    return config


def group_config(call: Call, name: str) -> GroupConfig:
    """The consumer group (created when allowed), adopted for pop."""
    if not name:
        raise StatusError(Code.ILLEGAL_CONSUMER_GROUP, "The specified group is blank.")
    try:
        validate_group(name)
        config = call.services.groups.ensure(name)
    except InvalidName as exc:
        raise StatusError(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    if config is None:
        raise StatusError(Code.CONSUMER_GROUP_NOT_FOUND, f"group {name} not found")
    call.services.pop.adopt(name)
    return config


# -- records ---------------------------------------------------------------------------


def to_store(incoming: Incoming, *, born_host: str) -> Message:
    """The record of a sent message: the same layout a remoting send stores (the
    producer group is the topic's name, as the proxy sets it)."""
    props = incoming.properties
    return to_store_message(
        incoming.topic, incoming.body, encode_properties(props), props,
        origin=incoming.topic, born_ms=incoming.born_ms, born_host=born_host,
    )


def delivered(
    call: Call,
    rec: Record,
    *,
    topic: str,
    queue_id: int,
    offset: int,
    receipt: str | None = None,
    attempt: int = 1,
    invisible_ms: int | None = None,
    into: pb.Message | None = None,
) -> pb.Message:
    """The v2 message a consumer gets for ``rec``, at ``offset`` of queue ``queue_id``
    of ``topic`` (written into ``into`` when given: ``encode_message``)."""
    return encode_record(
        call.services, store_host(call), rec, topic=topic, queue_id=queue_id, offset=offset,
        receipt=receipt, attempt=attempt, invisible_ms=invisible_ms, into=into)


def encode_record(
    services: GrpcServices,
    host: tuple[str, int],
    rec: Record,
    *,
    topic: str,
    queue_id: int,
    offset: int,
    receipt: str | None = None,
    attempt: int = 1,
    invisible_ms: int | None = None,
    into: pb.Message | None = None,
) -> pb.Message:
    """:func:`delivered` with the store host given (also for server commands, which
    have no call: a transaction check-back's message)."""
    props = decode_properties(rocketmq_properties(rec))
    sys_flag, _flag, _reconsume, born = record_flags(rec)
    return encode_message(
        Delivery(
            topic=topic, body=rec.body, properties=props,
            fallback_message_id=offset_msg_id(host, rec.position),
            born_ms=rec.born_ms, store_ms=rec.store_ms, queue_id=queue_id,
            queue_offset=offset, compressed=bool(sys_flag & COMPRESSED), born_host=born,
            store_host="{}:{}".format(*host), receipt_handle=receipt,
            delivery_attempt=attempt, invisible_ms=invisible_ms,
        ),
        reserved=RESERVED, max_body=services.max_body, into=into,
    )
