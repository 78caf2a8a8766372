"""The pop family of request codes: POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
PEEK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION, POLLING_INFO, and
CONSUMER_SEND_MSG_BACK, on :class:`~gateway.rocketmq.pop_service.PopService`,
:class:`~gateway.rocketmq.sendback.SendBackService` and the persistent schedule
(:class:`~gateway.rocketmq.schedule.ScheduleService`).

The three services are the gateway's (:class:`gateway.rocketmq.services.RocketMQServices`,
``ctx.rocketmq``, reached through ``ctx.services``), shared with the gRPC front end: a
remoting pop and a gRPC receive of one group see the same in-flight messages.

Answers, as RocketMQ's broker gives them:

- POP_MESSAGE: SUCCESS with the messages in the stored-message layout, each with its
  receipt in the ``POP_CK`` property, and ``popTime``, ``invisibleTime``,
  ``reviveQid``, ``restNum``, ``startOffsetInfo``, ``msgOffsetInfo``; nothing after
  ``pollTime``: POLLING_TIMEOUT; too many suspended pops: POLLING_FULL; more than 32
  messages asked for: INVALID_PARAMETER. ``order=true`` on a FIFO topic pops with the
  store's FIFO pop (:mod:`broker_core.fifo`): a message group's next message only after
  the previous one was acked, other groups flowing (RocketMQ's broker blocks the whole
  queue instead); on any other topic INVALID_PARAMETER (RocketMQ orders a normal
  topic's queue; here an orderly push consumer does that, LOCK_BATCH_MQ and pull).
- ACK_MESSAGE: SUCCESS, also for a receipt no longer in flight (acked already, or
  its invisible time ran out: the message is delivered again), as RocketMQ answers;
  NO_MESSAGE for an offset outside the queue; TOPIC_NOT_EXIST; MESSAGE_ILLEGAL for a
  queue id the topic lacks; INVALID_PARAMETER for an unreadable ``extraInfo``.
- CHANGE_MESSAGE_INVISIBLETIME: SUCCESS with the new ``popTime``/``invisibleTime``
  (the client's new receipt); NO_MESSAGE when the receipt is no longer in flight.
- CONSUMER_SEND_MSG_BACK: SUCCESS once the copy is stored; SYSTEM_ERROR "look message
  by offset failed" for a log position that holds no message.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core import Record, UnknownLmq, UnknownReceipt
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.fields import get_bool, get_int, get_str
from gateway.remoting.messages import (
    decode_properties,
    encode_properties,
    record_flags,
    rocketmq_properties,
)
from gateway.remoting.replies import error, response
from gateway.remoting.route import BROKER_NAME
from gateway.remoting.services import RemotingServices
from gateway.remoting.stored import encode_stored, pack_host
from gateway.rocketmq.pop_receipts import REVIVE_QID
from gateway.rocketmq.pop_service import OffsetOutOfRange, PollingFull, PopResult
from gateway.rocketmq.sendback import MessageNotFound
from lmq.rocketmq import InvalidName, MessageType, TopicConfig, retry_topic
from protocol.remoting import HeaderError, RemotingCommand, RequestCode, ResponseCode
from protocol.remoting.bodies import BatchAckMessageRequestBody
from protocol.remoting.errors import BodyError
from protocol.remoting.pop import real_topic

__all__ = ["register"]

MAX_POP_NUMS = 32
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"


def register(table: DispatchTable) -> None:
    table.register(RequestCode.POP_MESSAGE, pop_message)
    table.register(RequestCode.ACK_MESSAGE, ack_message)
    table.register(RequestCode.BATCH_ACK_MESSAGE, batch_ack_message)
    table.register(RequestCode.PEEK_MESSAGE, peek_message)
    table.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change_invisible_time)
    table.register(RequestCode.NOTIFICATION, notification)
    table.register(RequestCode.POLLING_INFO, polling_info)
    table.register(RequestCode.CONSUMER_SEND_MSG_BACK, consumer_send_msg_back)


# -- checks shared by the handlers ------------------------------------------------------


def _topic(ctx: RequestContext, topic: str) -> TopicConfig:
    try:
        config = ctx.services.topics.ensure(topic)
    except InvalidName as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    if config is None:
        raise RequestError(
            ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    return config


def _group(ctx: RequestContext, group: str) -> RemotingServices:
    try:
        config = ctx.services.groups.ensure(group)
    except InvalidName as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    if config is None:
        raise RequestError(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{group}] does not exist")
    found = ctx.services
    found.pop.adopt(group)
    return found


def _queue_errors(exc: Exception) -> RequestError:
    if isinstance(exc, UnknownLmq):
        return RequestError(ResponseCode.TOPIC_NOT_EXIST, str(exc))
    if isinstance(exc, OffsetOutOfRange):
        return RequestError(ResponseCode.NO_MESSAGE, str(exc))
    if isinstance(exc, HeaderError):
        return RequestError(ResponseCode.INVALID_PARAMETER, str(exc))
    return RequestError(ResponseCode.MESSAGE_ILLEGAL, str(exc))


def _tag_filter(exp_type: str, exp: str) -> Callable[[Record], bool] | None:
    """A TAG expression (``a || b``, ``*``) as a record filter; None for everything."""
    if exp_type not in ("", "TAG"):
        raise RequestError(
            ResponseCode.INVALID_PARAMETER, f"expression type {exp_type} is not supported")
    tags = {t.strip() for t in exp.split("||") if t.strip()}
    if not tags or "*" in tags:
        return None
    return lambda rec: rec.tag in tags


# -- responses ----------------------------------------------------------------------


def _popped_body(result: PopResult, store_host: str, *, receipts: bool) -> bytes:
    """The messages in the stored-message layout, as a pull returns them, plus the
    receipt (``POP_CK``) and first pop time of each when ``receipts``."""
    out = bytearray()
    store = pack_host(store_host)
    for item in result.items:
        rec = item.message.record
        props = decode_properties(rocketmq_properties(rec))
        if receipts:
            props[PROPERTY_POP_CK] = item.extra_info
            props.setdefault(PROPERTY_FIRST_POP_TIME, str(result.pop_time))
        sys_flag, flag, _reconsume, born = record_flags(rec)
        encode_stored(
            out, queue_id=item.source.queue_id, flag=flag, queue_offset=item.message.offset,
            physical_offset=rec.position, sys_flag=sys_flag, born_ms=rec.born_ms or rec.store_ms,
            born_host=pack_host(born) if born else store, store_ms=rec.store_ms,
            store_host=store, reconsume_times=item.reconsume_times, body=rec.body,
            topic=item.source.topic, properties=encode_properties(props),
        )
    return bytes(out)


def _pop_fields(result: PopResult) -> dict[str, object]:
    return {
        "popTime": result.pop_time,
        "invisibleTime": result.invisible_time,
        "reviveQid": REVIVE_QID,
        "restNum": result.rest_num,
        "startOffsetInfo": result.start_offset_info,
        "msgOffsetInfo": result.msg_offset_info,
    }


# -- handlers ---------------------------------------------------------------------------


async def pop_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    topic = get_str(cmd, "topic")
    queue_id = get_int(cmd, "queueId")
    max_nums = get_int(cmd, "maxMsgNums")
    invisible = get_int(cmd, "invisibleTime")
    poll = get_int(cmd, "pollTime")
    if max_nums > MAX_POP_NUMS or max_nums <= 0:
        return error(ResponseCode.INVALID_PARAMETER,
                     f"the broker[{BROKER_NAME}] pop message's num is greater than 32")
    if invisible <= 0:
        return error(ResponseCode.INVALID_PARAMETER, "invisibleTime must be positive")
    order = get_bool(cmd, "order")
    accept = _tag_filter(get_str(cmd, "expType", ""), get_str(cmd, "exp", "*"))
    config = _topic(ctx, topic)
    if order and not config.accepts(MessageType.FIFO):
        return error(ResponseCode.INVALID_PARAMETER,
                     f"orderly pop (order=true) is served on FIFO topics (order per message"
                     f" group, __SHARDINGKEY); topic {topic} is {config.message_type.value}:"
                     f" use an orderly push consumer (LOCK_BATCH_MQ and pull)")
    ctx.services.check_subscribe(ctx, topic, group)
    found = _group(ctx, group)
    try:
        result = await found.pop.pop(group, topic, queue_id, max_nums, invisible, poll, accept,
                                     fifo=order)
    except PollingFull as exc:
        return error(ResponseCode.POLLING_FULL, str(exc))
    except (UnknownLmq, ValueError) as exc:
        raise _queue_errors(exc) from None
    fields = _pop_fields(result)
    if not result.items:
        return response(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", fields)
    body = _popped_body(result, _local(ctx), receipts=True)
    return response(ResponseCode.SUCCESS, "FOUND", fields, body)


def ack_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    topic = get_str(cmd, "topic")
    queue_id = get_int(cmd, "queueId")
    extra = get_str(cmd, "extraInfo")
    offset = get_int(cmd, "offset")
    ctx.services.check_subscribe(ctx, topic, group)
    found = _group(ctx, group)
    try:
        found.pop.ack(group, topic, queue_id, offset, extra)
    except (UnknownLmq, ValueError, OffsetOutOfRange) as exc:
        raise _queue_errors(exc) from None
    return response()


def batch_ack_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    if not cmd.body:
        return error(ResponseCode.NO_MESSAGE, "the batch ack has no body")
    try:
        body = BatchAckMessageRequestBody.parse(cmd.body)
        acks = [
            (a, real_topic(a.topic, a.consumer_group, a.retry)) for a in body.acks
        ]
    except (BodyError, HeaderError) as exc:
        return error(ResponseCode.INVALID_PARAMETER, f"unreadable batch ack body: {exc}")
    for ack, topic in acks:
        ctx.services.check_subscribe(ctx, topic, ack.consumer_group)
        found = _group(ctx, ack.consumer_group)
        try:
            found.pop.batch_ack(ack.consumer_group, topic, ack.queue_id,
                                ack.pop_time + ack.invisible_time, ack.offsets)
        except (UnknownLmq, ValueError, OffsetOutOfRange) as exc:
            raise _queue_errors(exc) from None
    return response()


def change_invisible_time(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    topic = get_str(cmd, "topic")
    queue_id = get_int(cmd, "queueId")
    extra = get_str(cmd, "extraInfo")
    offset = get_int(cmd, "offset")
    invisible = get_int(cmd, "invisibleTime")
    if invisible < 0:
        return error(ResponseCode.INVALID_PARAMETER, "invisibleTime cannot be negative")
    ctx.services.check_subscribe(ctx, topic, group)
    found = _group(ctx, group)
    try:
        pop_time, invisible = found.pop.change_invisible_time(
            group, topic, queue_id, offset, extra, invisible)
    except UnknownReceipt as exc:
        return error(ResponseCode.NO_MESSAGE,
                     f"{exc}; the message is delivered again when its invisible time ends")
    except (UnknownLmq, ValueError, OffsetOutOfRange) as exc:
        raise _queue_errors(exc) from None
    return response(fields={
        "popTime": pop_time, "invisibleTime": invisible, "reviveQid": REVIVE_QID})


def _reader(ctx: RequestContext, cmd: RemotingCommand) -> tuple[str, str, int, RemotingServices]:
    """The ``(group, topic, queueId, services)`` of a request that reads a queue as a
    group (peek, notification, polling info): the topic exists (or is auto-created),
    the caller may subscribe to it, and the group exists."""
    group = get_str(cmd, "consumerGroup")
    topic = get_str(cmd, "topic")
    queue_id = get_int(cmd, "queueId")
    _topic(ctx, topic)
    ctx.services.check_subscribe(ctx, topic, group)
    return group, topic, queue_id, _group(ctx, group)


def peek_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    max_nums = get_int(cmd, "maxMsgNums")
    group, topic, queue_id, found = _reader(ctx, cmd)
    try:
        result = found.pop.peek(group, topic, queue_id, max(1, min(max_nums, MAX_POP_NUMS)))
    except (UnknownLmq, ValueError) as exc:
        raise _queue_errors(exc) from None
    fields = _pop_fields(result)
    if not result.items:
        return response(ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", fields)
    return response(fields=fields, body=_popped_body(result, _local(ctx), receipts=False))


async def notification(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    poll = get_int(cmd, "pollTime")
    group, topic, queue_id, found = _reader(ctx, cmd)
    try:
        normal, retry = found.pop.sources(group, topic, queue_id)
        has = found.pop.has_messages(group, normal + ([retry] if retry else []))
        if not has and poll > 0:
            has = await found.pop.wait_for_messages(group, topic, queue_id, poll / 1000)
    except PollingFull:
        return response(fields={"hasMsg": False, "pollingFull": True})
    except (UnknownLmq, ValueError) as exc:
        raise _queue_errors(exc) from None
    return response(fields={"hasMsg": has, "pollingFull": False})


def polling_info(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group, topic, queue_id, found = _reader(ctx, cmd)
    return response(fields={"pollingNum": found.pop.polling.get((group, topic, queue_id), 0)})


async def consumer_send_msg_back(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "group")
    position = get_int(cmd, "offset")
    delay_level = get_int(cmd, "delayLevel", 0)
    max_times = (
        get_int(cmd, "maxReconsumeTimes") if cmd.ext_fields.get("maxReconsumeTimes") else None
    )
    origin = cmd.ext_fields.get("originTopic") or retry_topic(group)
    ctx.services.check_subscribe(ctx, origin, group)
    found = _group(ctx, group)
    found.ensure_schedule_topic()
    host, port = ctx.store_address
    try:
        await found.sendback.send_back(
            group, position, delay_level=delay_level,
            max_reconsume_times=max_times,
            store_host=(host, port),
        )
    except MessageNotFound as exc:
        return error(ResponseCode.SYSTEM_ERROR, str(exc))
    return response()



def _local(ctx: RequestContext) -> str:
    """The store host of message ids, as pulls give it (so a message's offsetMsgId is
    the same pulled or popped)."""
    return "{}:{}".format(*ctx.store_address)
