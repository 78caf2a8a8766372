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

Checks, with the proxy's codes: the topic (ILLEGAL_TOPIC, TOPIC_NOT_FOUND, FORBIDDEN for
a topic not writable or the ACL), each message (:func:`protocol.grpc.messages.decode_message`:
body size, properties, tag, keys, id, group), and the message type against the topic's
(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).

TRANSACTION messages (one per request) are stored as the store's half messages
(``MessageStore.append_half``), delivered only when EndTransaction (or a check-back's
answer) commits them; the entry's ``transaction_id`` is ``lmq-tx:<log position>``
(:mod:`gateway.grpc.transactions`).

DELAY messages (a delivery timestamp, on a topic of type DELAY) are stored once, now,
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

import asyncio
import itertools
import logging
import zlib
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import DelayTooLong, MessageTooLarge, StorageFull, StoreError
from gateway.grpc.records import RESERVED, parse_peer, to_store, writable_topic
from lmq.rocketmq import MQTT_SECOND_TOPIC, MessageType, queue_lmq
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
_round_robin = itertools.count()


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


def choose_queue(write_queues: int, group: str) -> int:
    """A message group's queue (stable: CRC32 of the group), else round robin."""
    if group:
        return zlib.crc32(group.encode()) % write_queues
    return next(_round_robin) % write_queues


def _failure(exc: BaseException) -> StatusError:
    if isinstance(exc, StatusError):
        return exc
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
    front = call.front
    config = writable_topic(call, topic)
    # the producer's address: the relayed connection's on the unified port
    born = call.connection.peer if call.connection is not None else parse_peer(call.peer)
    peer_host = call.peer_host or born.rpartition(":")[0].strip("[]")
    incoming = [
        decode_message(msg, reserved=RESERVED, max_body=front.max_body,
                       peer_host=peer_host)
        for msg in messages
    ]
    for index, one in enumerate(incoming):
        kind = effective_type(one)
        if kind != config.message_type:
            raise StatusError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"message {index}: the message type {kind.value} does not match the type"
                f" {config.message_type.value} of topic {topic}")
        if kind == MessageType.TRANSACTION and len(incoming) > 1:
            raise StatusError(
                Code.UNSUPPORTED, "a transactional message is sent alone, not in a batch")
    # Ungrouped messages share one round-robin queue; each grouped one goes to its
    # group's queue (the same for every message of the group: its order is kept).
    shared = queue_lmq(topic, choose_queue(config.write_queues, ""))

    def lmq_of(one: Incoming) -> str:
        if not one.message_group:
            return shared
        return queue_lmq(topic, choose_queue(config.write_queues, one.message_group))

    # Each message also reaches the MQTT subscribers and AMQP queues of its MQTT name:
    # the topic joined with its mqttSecondTopic property, if any.
    route = front.ctx.topic_space.route_rocketmq
    items: list[tuple[Message, list[str]]] = [
        (to_store(one, born_host=born),
         [lmq_of(one), *route(topic, one.properties.get(MQTT_SECOND_TOPIC, ""))])
        for one in incoming]
    if config.message_type == MessageType.DELAY:
        return await _send_delayed(call, incoming, items)
    if config.message_type == MessageType.TRANSACTION:
        return await _send_half(call, incoming[0], *items[0])
    try:
        if len(items) == 1:
            results = [await front.publisher.submit(*items[0])]
        else:
            # One append for the whole request: all of it is stored, or none.
            store = front.store
            results = store.append_batch(items, wait=False)
            if store.waits_for_ack:
                await asyncio.wrap_future(store.acknowledged(results[-1].end))
    except Exception as exc:
        log.info("gRPC send refused: %s", exc, extra=call.log_fields())
        raise _failure(exc) from None
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
    store = call.front.store
    try:
        result = store.append_half(message, lmqs, one.topic, wait=False)
        if store.waits_for_ack:
            await asyncio.wrap_future(store.acknowledged(result.end))
    except Exception as exc:
        log.info("gRPC transactional send refused: %s", exc, extra=call.log_fields())
        raise _failure(exc) from None
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
    front = call.front
    store = front.store
    delayed = [(msg, lmqs, one.delivery_ms or 0)
               for (msg, lmqs), one in zip(items, incoming, strict=True)]
    try:
        results = store.append_delayed_batch(delayed, wait=False)
        if store.waits_for_ack:
            await asyncio.wrap_future(store.acknowledged(results[-1].end))
    except Exception as exc:
        log.info("gRPC delayed send refused: %s", exc, extra=call.log_fields())
        raise _failure(exc) from None
    front.ctx.rocketmq.timers.arm(min(due for _, _, due in delayed))
    return service_pb2.SendMessageResponse(
        status=ok(),
        entries=[
            service_pb2.SendResultEntry(
                status=ok(), message_id=one.message_id, transaction_id="", offset=0,
                recall_handle=f"{RECALL_PREFIX}{result.position}")
            for one, result in zip(incoming, results, strict=True)
        ],
    )
