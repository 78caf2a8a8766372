"""SendMessage: one or more messages of one topic, stored as a remoting send stores them.

A request's messages (``1..MAX_MESSAGES``, all of one topic, as the proxy requires) are
ONE append (all stored or none). A FIFO message goes to its message group's queue (the
same group always lands in the same queue, so its order is kept), each message of a
batch to its own group's: a batch may mix groups and keeps each group's order. RocketMQ
5 puts a whole batch in the first message's queue instead, breaking the order of the
other groups. Messages without a group go to one queue per request, round robin; the
``queue_id`` a client names in ``system_properties`` is ignored, as the proxy ignores
it. Each message is one record dispatched to the queue's LMQ and whatever
else the one topic space routes its MQTT name to (MQTT subscribers, AMQP bindings): the
topic joined with the message's ``mqttSecondTopic`` user property, like a remoting send
(:mod:`gateway.rocketmq.records`).

This module converts: the topic, type, queue, routing and append are the producer
service's (:mod:`gateway.rocketmq.producer`, ``call.services.producer``), whose refusals
:func:`failure` answers with the proxy's codes.

Checks, with the proxy's codes: the topic (ILLEGAL_TOPIC, TOPIC_NOT_FOUND, FORBIDDEN for
a topic not writable or the ACL), each message (:func:`protocol.grpc.messages.decode_message`:
body size, properties, tag, keys, id, group), and the message type against the topic's
(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; a MIXED topic accepts every type).

TRANSACTION messages (one per request) are stored as the store's half messages
(``MessageStore.append_half``), delivered only when EndTransaction (or a check-back's
answer) commits them; the entry's ``transaction_id`` is ``lmq-tx:<log position>``
(:mod:`gateway.grpc.transactions`).

DELAY messages (a delivery timestamp, on a topic of type DELAY or MIXED) are stored once, now,
as the store's durable timers (``MessageStore.append_delayed_batch``) and dispatched to
the queue's LMQ (and the MQTT/AMQP routes) at the delivery time, to the millisecond; a
time past ``StoreConfig.max_timer_delay_ms`` is ILLEGAL_DELIVERY_TIME. Their entries
carry offset 0 (the queue offset is assigned when they fire) and a ``recall_handle``
(``lmq:<log position>``) for RecallMessage (:mod:`gateway.grpc.transactions`).

Durability: the response is built only when the store acknowledges the append under the
configured durability (after the covering fsync in sync mode). Its entries are
``{status OK, message_id (the client's id), transaction_id "", offset (in the queue)}``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import DelayTooLong, MessageTooLarge, StorageFull, StoreError
from broker_core.clock import now_ms
from gateway.grpc.records import RESERVED, parse_peer, to_store
from gateway.rocketmq import producer as p
from gateway.rocketmq.producer import ROUND_ROBIN, ShardingKey
from lmq.rocketmq import MQTT_SECOND_TOPIC, MessageType
from protocol.grpc import Code, StatusError, ok
from protocol.grpc.messages import Incoming, decode_message

if TYPE_CHECKING:
    from broker_core import Message
    from gateway.grpc.call import Call

log = logging.getLogger(__name__)

#: Messages in one SendMessage (the clients send one; a batch is all or nothing).
MAX_MESSAGES = 1024

_TYPES = {
    pb.NORMAL: MessageType.NORMAL,
    pb.FIFO: MessageType.FIFO,
    pb.DELAY: MessageType.DELAY,
    pb.TRANSACTION: MessageType.TRANSACTION,
}


def effective_type(incoming: Incoming) -> MessageType:
    """The message's type as the broker sees it (RocketMQ 5's
    ``TopicMessageType.parseFromMessageProperty``): TRANSACTION, DELAY (a delivery
    time), FIFO (a message group), else NORMAL. A declared type the properties
    contradict (FIFO without a group, DELAY without a time) is
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; so is a TRANSACTION with a delivery time: the
    store's half messages carry no due time (docs/storage.md, "How the message types
    compose"), and RocketMQ 5 gives a message one type."""
    declared = incoming.message_type
    if declared == pb.TRANSACTION:
        kind = MessageType.TRANSACTION
        if incoming.delivery_ms is not None:
            raise StatusError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a transactional message cannot be delayed (it has a delivery timestamp)")
    elif incoming.delivery_ms is not None:
        kind = MessageType.DELAY
    elif incoming.message_group:
        kind = MessageType.FIFO
    else:
        kind = MessageType.NORMAL
    if declared in _TYPES and _TYPES[declared] != kind:
        raise StatusError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"the message is declared {_TYPES[declared].value} but its properties make it"
            f" {kind.value}")
    if declared not in _TYPES and declared != pb.MESSAGE_TYPE_UNSPECIFIED:
        raise StatusError(
            Code.UNSUPPORTED, f"message type {pb.MessageType.Name(declared)} is not supported")
    return kind


#: The producer service's refusals as the proxy answers them.
_PRODUCER_CODES: dict[type[p.ProducerError], Code] = {
    p.InvalidTopic: Code.ILLEGAL_TOPIC,
    p.SystemTopic: Code.ILLEGAL_TOPIC,
    p.TopicNotFound: Code.TOPIC_NOT_FOUND,
    p.NotWritable: Code.FORBIDDEN,
    p.Forbidden: Code.FORBIDDEN,
    p.TypeMismatch: Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    p.IllegalMessage: Code.BAD_REQUEST,
    p.BadQueue: Code.BAD_REQUEST,
    p.NotPending: Code.NOT_FOUND,
    p.TransactionNotFound: Code.INVALID_TRANSACTION_ID,
    p.TransactionConflict: Code.PRECONDITION_FAILED,
    p.WrongProducerGroup: Code.INVALID_TRANSACTION_ID,
}


def failure(exc: BaseException) -> StatusError:
    """The status of a send (or an end of transaction, a recall) that failed with
    ``exc``: a refusal of the producer service, or the store's error."""
    if isinstance(exc, StatusError):
        return exc
    if isinstance(exc, p.ProducerError):
        return StatusError(_PRODUCER_CODES.get(type(exc), Code.BAD_REQUEST), str(exc))
    if isinstance(exc, MessageTooLarge):
        return StatusError(Code.MESSAGE_BODY_TOO_LARGE, str(exc))
    if isinstance(exc, DelayTooLong):
        return StatusError(Code.ILLEGAL_DELIVERY_TIME, str(exc))
    if isinstance(exc, StorageFull):
        return StatusError(Code.INTERNAL_SERVER_ERROR, f"the store is full: {exc}")
    if isinstance(exc, StoreError):
        return StatusError(Code.INTERNAL_SERVER_ERROR, f"the store refused the message: {exc}")
    return StatusError(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


async def send_message(
    call: Call, request: service_pb2.SendMessageRequest
) -> service_pb2.SendMessageResponse:
    try:
        response = await _send(call, request)
    except Exception as exc:
        if not isinstance(exc, StatusError):
            log.info("gRPC send refused: %s", exc, extra=call.log_fields())
        raise failure(exc) from None
    call.services.received += len(request.messages)
    if call.connection is not None:
        call.connection.messages_in += len(request.messages)
    return response


async def _send(
    call: Call, request: service_pb2.SendMessageRequest
) -> service_pb2.SendMessageResponse:
    messages = request.messages
    if not messages:
        raise StatusError(Code.MESSAGE_CORRUPTED, "no message to send")
    if len(messages) > MAX_MESSAGES:
        raise StatusError(
            Code.PAYLOAD_TOO_LARGE,
            f"{len(messages)} messages in one request; at most {MAX_MESSAGES}")
    topic = messages[0].topic.name
    for msg in messages:
        if msg.topic.name != topic:
            raise StatusError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
    services = call.services
    producer = call.services.producer
    config = producer.resolve(topic, call.principal, call.client_id)
    # the producer's address: the relayed connection's on the unified port
    born = call.connection.peer if call.connection is not None else parse_peer(call.peer)
    peer_host = call.peer_host or born.rpartition(":")[0].strip("[]")
    incoming = [
        decode_message(msg, reserved=RESERVED, max_body=services.max_body,
                       peer_host=peer_host)
        for msg in messages
    ]
    kinds = [effective_type(one) for one in incoming]
    for index, kind in enumerate(kinds):
        try:
            producer.check_type(config, kind)
        except p.TypeMismatch as exc:
            raise p.TypeMismatch(f"message {index}: {exc}") from None
        if kind == MessageType.TRANSACTION and len(incoming) > 1:
            raise StatusError(
                Code.UNSUPPORTED, "a transactional message is sent alone, not in a batch")
    # Ungrouped messages share one round-robin queue; each grouped one goes to its
    # group's queue (the same for every message of the group: its order is kept).
    shared = ROUND_ROBIN.select(config)
    # Each message also reaches the MQTT subscribers and AMQP queues of its MQTT name:
    # the topic joined with its mqttSecondTopic property, if any.
    items: list[tuple[Message, list[str]]] = [
        (to_store(one, born_host=born),
         producer.lmqs(topic, ShardingKey(one.message_group).select(config)
                       if one.message_group else shared,
                       one.properties.get(MQTT_SECOND_TOPIC, "")))
        for one in incoming]
    if MessageType.TRANSACTION in kinds:
        return await _send_half(call, incoming[0], *items[0])
    if MessageType.DELAY in kinds:
        return await _send_delayed(call, incoming, items)
    # One append for the whole request: all of it is stored, or none.
    results = await producer.send_batch(items)
    return service_pb2.SendMessageResponse(
        status=ok(),
        entries=[
            service_pb2.SendResultEntry(
                status=ok(), message_id=one.message_id, transaction_id="",
                offset=result.offsets[0])
            for one, result in zip(incoming, results, strict=True)
        ],
    )


#: The prefix of the recall handles this gateway gives (the record's log position follows).
RECALL_PREFIX = "lmq:"
#: The prefix of the transaction ids this gateway gives (the half record's position follows).
TRANSACTION_PREFIX = "lmq-tx:"


async def _send_half(
    call: Call, one: Incoming, message: Message, lmqs: list[str]
) -> service_pb2.SendMessageResponse:
    """Store a TRANSACTION message as the store's half message (not delivered until
    EndTransaction commits it, :mod:`gateway.grpc.transactions`), answered once durable.
    Its producer group is the topic (v2 sends name none; the proxy does the same); the
    transaction id names the half record."""
    result = await call.services.producer.send_half(message, lmqs, one.topic)
    return service_pb2.SendMessageResponse(
        status=ok(),
        entries=[service_pb2.SendResultEntry(
            status=ok(), message_id=one.message_id,
            transaction_id=f"{TRANSACTION_PREFIX}{result.position}", offset=0)],
    )


async def _send_delayed(
    call: Call, incoming: list[Incoming], items: list[tuple[Message, list[str]]]
) -> service_pb2.SendMessageResponse:
    """Store DELAY messages as the store's timers (one append for the request: all or
    none), answered once durable; the gateway's timer firing is armed at the earliest."""
    now = now_ms()  # a message of the batch without a delivery time: due now
    delayed = [(msg, lmqs, now if one.delivery_ms is None else one.delivery_ms)
               for (msg, lmqs), one in zip(items, incoming, strict=True)]
    results = await call.services.producer.send_delayed(delayed)
    return service_pb2.SendMessageResponse(
        status=ok(),
        entries=[
            service_pb2.SendResultEntry(
                status=ok(), message_id=one.message_id, transaction_id="", offset=0,
                recall_handle=f"{RECALL_PREFIX}{result.position}")
            for one, result in zip(incoming, results, strict=True)
        ],
    )
