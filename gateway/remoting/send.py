"""Sends: SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

A send to topic ``T``, queue ``q`` is ONE append, dispatched to the queue's LMQ
``rmq:T:q`` and to whatever else the one topic space routes its MQTT name
``T`` + ``mqttSecondTopic`` to (MQTT subscribers, AMQP queues bound to ``amq.topic``:
:meth:`gateway.topic_space.TopicSpace.route_rocketmq`). The response goes out only
when the store acknowledges the append under the configured durability (after the
covering fsync in sync mode), with ``msgId`` = the offsetMsgId of the record's log
position, ``queueId`` and ``queueOffset`` = the message's offset in the queue's LMQ.

Checks, in RocketMQ's order and with its codes:

- the topic: a valid name (SYSTEM_ERROR), not a system topic (NO_PERMISSION), existing
  or auto-created (TOPIC_NOT_EXIST), writable (NO_PERMISSION);
- the queue: the client's ``queueId``; negative picks one round robin; at or above the
  topic's write queue count is SYSTEM_ERROR;
- the message type, as RocketMQ 5 checks it (``TopicMessageType.parseFromMessageProperty``):
  ``TRAN_MSG`` or a prepared sysFlag = TRANSACTION, ``DELAY``/``TIMER_*`` (or Aliyun's
  ``__STARTDELIVERTIME``) = DELAY, ``__SHARDINGKEY`` = FIFO, else NORMAL; a type other
  than the topic's is MESSAGE_ILLEGAL. DELAY and TRANSACTION sends are refused
  (MESSAGE_ILLEGAL, with a remark) until the message-types issue;
- the body size (``store.max_message_bytes``): MESSAGE_ILLEGAL.

A batch (SEND_BATCH_MESSAGE) is all or nothing: every message is decoded and checked
first, then all are appended with ONE ``store.append_batch`` (one log write; a failed
append stores none of them), and the response names them all (``msgId`` the
offsetMsgIds joined with ``,``, ``queueOffset`` the first one's offset).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from broker_core import AppendResult, Durability, MessageTooLarge, StorageFull, StoreError
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.messages import decode_properties, encode_properties, to_store_message
from gateway.remoting.replies import error, response
from lmq.rocketmq import (
    MQTT_SECOND_TOPIC,
    InvalidName,
    MessageType,
    Perm,
    TopicConfig,
    is_system_topic,
    queue_lmq,
)
from protocol.remoting.codes import RequestCode, ResponseCode, SysFlag
from protocol.remoting.errors import MessageError
from protocol.remoting.messages import decode_batch

if TYPE_CHECKING:
    from broker_core import Message
    from protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

#: SEND_MESSAGE_V2's one-letter field names -> SEND_MESSAGE's.
V2_NAMES = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
    "queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i",
    "reconsumeTimes": "j", "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m",
    "brokerName": "n",
}
_DELAY_PROPERTIES = (
    "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")
# Plain ints: an IntFlag operator is a slow Python call, and these run per send.
_TX_MASK = int(SysFlag.TRANSACTION_MASK)
_TX_PREPARED = int(SysFlag.TRANSACTION_PREPARED)
_INNER_BATCH = int(SysFlag.INNER_BATCH)
_WRITE = int(Perm.WRITE)
_TYPE_PROPERTIES = frozenset(("TRAN_MSG", "__SHARDINGKEY", *_DELAY_PROPERTIES))
_round_robin = itertools.count()
_SEND_V1 = int(RequestCode.SEND_MESSAGE)
_NORMAL = MessageType.NORMAL


def register(table: DispatchTable) -> None:
    table.register(RequestCode.SEND_MESSAGE, send_message)
    table.register(RequestCode.SEND_MESSAGE_V2, send_message)
    table.register(RequestCode.SEND_BATCH_MESSAGE, send_batch_message)


#: Field name lists, V1 then V2 (the order SendHeader reads them in).
_V1: tuple[str, ...] = ("producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp",
                        "flag", "properties", "reconsumeTimes")
_V2: tuple[str, ...] = tuple(V2_NAMES[name] for name in _V1)


class SendHeader:
    """The fields of a send header a send uses (V1 or V2 names)."""

    __slots__ = ("producer_group", "topic", "queue_id", "sys_flag", "born_ms", "flag",
                 "properties", "reconsume_times")

    def __init__(self, cmd: RemotingCommand) -> None:
        get = cmd.ext_fields.get
        names = _V1 if cmd.code == _SEND_V1 else _V2
        n_group, n_topic, n_queue, n_sys, n_born, n_flag, n_props, n_reconsume = names
        group, topic, queue_id, sys_flag, born, flag = (
            get(n_group), get(n_topic), get(n_queue), get(n_sys), get(n_born), get(n_flag))
        if group is None or topic is None or queue_id is None or sys_flag is None or (
            born is None or flag is None
        ):
            missing = next(n for n, v in zip(_V1, (group, topic, queue_id, sys_flag, born,
                                                   flag), strict=False) if v is None)
            raise RequestError(
                ResponseCode.INVALID_PARAMETER, f"the send header has no {missing!r} field")
        reconsume = get(n_reconsume)
        try:
            self.queue_id = int(queue_id)
            self.sys_flag = int(sys_flag)
            self.born_ms = int(born)
            self.flag = int(flag)
            self.reconsume_times = int(reconsume) if reconsume else 0
        except ValueError as exc:
            raise RequestError(
                ResponseCode.INVALID_PARAMETER, f"bad send header: {exc}") from None
        self.producer_group = group
        self.topic = topic
        self.properties = get(n_props) or ""


def message_type(props: dict[str, str], sys_flag: int) -> MessageType:
    if not sys_flag & _TX_MASK and props.keys().isdisjoint(_TYPE_PROPERTIES):
        return MessageType.NORMAL  # the common case, one set operation
    if props.get("TRAN_MSG", "").lower() == "true" or (
        sys_flag & _TX_MASK == _TX_PREPARED
    ):
        return MessageType.TRANSACTION
    for name in _DELAY_PROPERTIES:
        value = props.get(name)
        if value and value != "0":
            return MessageType.DELAY
    if props.get("__SHARDINGKEY"):
        return MessageType.FIFO
    return MessageType.NORMAL


def check_type(config: TopicConfig, kind: MessageType) -> None:
    if kind != config.message_type:
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message type {kind.value} does not match the type"
            f" {config.message_type.value} of topic {config.name}")
    if kind in (MessageType.DELAY, MessageType.TRANSACTION):
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"{kind.value} messages are not supported by LMQ Gateway yet")


def writable_topic(ctx: RequestContext, topic: str) -> TopicConfig:
    """The topic's configuration if it may be sent to (creating it when allowed)."""
    front = ctx.front
    config = front.writable.get(topic)
    if config is not None:  # checked before, unchanged since (the registry says so)
        if front.ctx.authenticator is not None:
            front.check_publish(ctx, topic)
        return config
    if is_system_topic(topic):
        raise RequestError(
            ResponseCode.NO_PERMISSION,
            f"the topic {topic} is a system topic; sending is forbidden")
    try:
        config = front.topics.ensure(topic)
    except InvalidName as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    if config is None:
        raise RequestError(
            ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not config.perm & _WRITE:
        raise RequestError(
            ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
    front.check_publish(ctx, topic)
    front.writable[topic] = config
    return config


def choose_queue(config: TopicConfig, queue_id: int) -> int:
    if queue_id < 0:
        return next(_round_robin) % config.write_queues
    if queue_id >= config.write_queues:
        raise RequestError(
            ResponseCode.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, topic {config.name} has"
            f" {config.write_queues} write queues")
    return queue_id


def _failure(exc: BaseException) -> RemotingCommand:
    if isinstance(exc, MessageTooLarge):
        return error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if isinstance(exc, StorageFull):
        return error(ResponseCode.SERVICE_NOT_AVAILABLE, f"the store is full: {exc}")
    if isinstance(exc, StoreError):
        return error(ResponseCode.SYSTEM_ERROR, f"the store refused the message: {exc}")
    return error(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def send_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    header = SendHeader(cmd)
    front = ctx.front
    topic = header.topic
    config = writable_topic(ctx, topic)
    queue_id = choose_queue(config, header.queue_id)
    props = decode_properties(header.properties)
    if header.sys_flag & _TX_MASK or not props.keys().isdisjoint(_TYPE_PROPERTIES) or (
        config.message_type is not _NORMAL
    ):
        check_type(config, message_type(props, header.sys_flag))
    body = cmd.body
    if len(body) > front.max_body:
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message body size {len(body)} exceeds the maximum {front.max_body}")
    message = to_store_message(
        topic, body, header.properties, props,
        origin=header.producer_group, born_ms=header.born_ms, sys_flag=header.sys_flag,
        flag=header.flag, reconsume_times=header.reconsume_times, born_host=ctx.conn.peer)
    lmq = front.queue_lmq(topic, queue_id)
    routes = front.topic_space.route_rocketmq(topic, props.get(MQTT_SECOND_TOPIC, ""))
    lmqs = [lmq, *routes] if routes else (lmq,)

    def done(result: AppendResult | None, exc: BaseException | None) -> None:
        if result is None:
            ctx.reply(cmd, _failure(exc or RuntimeError("append failed")))
            return
        front.sent += 1
        ctx.reply_send_ok(cmd, ctx.msg_id(result.position), queue_id, result.offsets[0])

    front.publisher.submit_callback(message, lmqs, done)
    if front.publisher.lagging:
        front.throttle(ctx)
    return None


async def send_batch_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    header = SendHeader(cmd)
    front = ctx.front
    config = writable_topic(ctx, header.topic)
    queue_id = choose_queue(config, header.queue_id)
    try:
        entries = decode_batch(cmd.body)
    except MessageError as exc:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
    if not entries:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
    store = front.store
    max_body = store.config.max_message_bytes
    lmq = queue_lmq(header.topic, queue_id)
    items: list[tuple[Message, list[str]]] = []
    for index, entry in enumerate(entries):
        body, props, flag = entry.body, entry.properties, entry.flag
        props_text = encode_properties(props)
        kind = message_type(props, header.sys_flag)
        if kind != MessageType.NORMAL or config.message_type != MessageType.NORMAL:
            try:
                check_type(config, kind)
            except RequestError as exc:
                raise RequestError(
                    exc.code, f"message {index} of the batch: {exc.remark}") from None
        if len(body) > max_body:
            raise RequestError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message {index} of the batch: body size {len(body)} exceeds the maximum"
                f" {max_body}")
        message = to_store_message(
            header.topic, body, props_text, props, origin=header.producer_group,
            born_ms=header.born_ms, sys_flag=header.sys_flag & ~_INNER_BATCH,
            flag=flag, reconsume_times=header.reconsume_times, born_host=ctx.conn.peer)
        routes = front.topic_space.route_rocketmq(header.topic, props.get(MQTT_SECOND_TOPIC, ""))
        items.append((message, [lmq, *routes]))
    try:
        # One append for the whole batch: all of it is stored, or (an exception) none.
        results = store.append_batch(items, wait=False)
        if store.config.durability == Durability.SYNC:
            await asyncio.wrap_future(store.acknowledged(results[-1].end))
    except Exception as exc:
        log.info("remoting batch refused: %s", exc, extra=ctx.conn.log_fields())
        return _failure(exc)
    front.sent += len(results)
    return response(fields={
        "msgId": ",".join(ctx.msg_id(r.position) for r in results),
        "queueId": queue_id,
        "queueOffset": results[0].offsets[0],
    })
