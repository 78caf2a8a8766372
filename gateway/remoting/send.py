"""Sends: SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

A send to topic ``T``, queue ``q`` is ONE append, dispatched to the queue's LMQ
``rmq:T:q`` and to whatever else the one topic space routes its MQTT name
``T`` + ``mqttSecondTopic`` to (MQTT subscribers, AMQP queues bound to ``amq.topic``:
:meth:`gateway.topic_space.TopicSpace.route_rocketmq`). The response goes out only
when the store acknowledges the append under the configured durability (after the
covering fsync in sync mode), with ``msgId`` = the offsetMsgId of the record's log
position, ``queueId`` and ``queueOffset`` = the message's offset in the queue's LMQ.

This module converts: the topic, type, queue, routing and append are the producer
service's (:mod:`gateway.rocketmq.producer`, ``ctx.services.producer``), whose refusals
:func:`gateway.remoting.replies.failure` answers with RocketMQ's codes.

Checks, in RocketMQ's order and with its codes:

- the topic: a valid name (SYSTEM_ERROR), not a system topic (NO_PERMISSION), existing
  or auto-created (TOPIC_NOT_EXIST), writable (NO_PERMISSION);
- the queue: the client's ``queueId``; negative picks one round robin; at or above the
  topic's write queue count is SYSTEM_ERROR;
- the message type, as RocketMQ 5 checks it (``TopicMessageType.parseFromMessageProperty``):
  ``TRAN_MSG`` or a prepared sysFlag = TRANSACTION, ``DELAY``/``TIMER_*`` (or Aliyun's
  ``__STARTDELIVERTIME``) = DELAY, ``__SHARDINGKEY`` = FIFO, else NORMAL; a type other
  than the topic's is MESSAGE_ILLEGAL (a MIXED topic accepts every type);
- the body size (``store.max_message_bytes``): MESSAGE_ILLEGAL.

DELAY sends (:mod:`gateway.remoting.delayed` reads when they are due: ``DELAY`` level,
``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` / ``TIMER_DELIVER_MS``, ``__STARTDELIVERTIME``)
are stored once, now, as the store's durable timers (``append_delayed_batch``) meant
for the same LMQs a plain send goes to, and dispatched there when due (the gateway's
timer firing, :mod:`gateway.rocketmq.timer_service`, armed here). The answer's
``queueOffset`` is 0: the offset is assigned when the message fires. A consumer reads
the message as sent, in its own topic and queue (the broker moves it through
``SCHEDULE_TOPIC_XXXX`` / ``rmq_sys_wheel_timer`` and restores ``REAL_TOPIC``; no such
detour here, so no ``REAL_TOPIC``/``REAL_QID``/``TIMER_OUT_MS`` properties are added).

TRANSACTION sends are stored as half messages, delivered when END_TRANSACTION (or a
check-back's answer) commits them: :mod:`gateway.remoting.transactions`. A delayed
transactional message is refused (MESSAGE_ILLEGAL): the store's half messages carry no
due time (the broker applies the delay when the commit re-puts the message).

A batch (SEND_BATCH_MESSAGE) is all or nothing: every message is decoded and checked
first, then all are appended with ONE ``store.append_batch`` (one log write; a failed
append stores none of them), and the response names them all (``msgId`` the
offsetMsgIds joined with ``,``, ``queueOffset`` the first one's offset). All go to the
header's one queue in the batch's order, so messages of one ``__SHARDINGKEY`` keep their
order whatever other keys the batch mixes in. A batch may hold delayed messages (the
broker refuses them): then the whole batch is ONE ``append_delayed_batch``, its
messages not delayed due now (they fire at once, in the batch's order). A batch of
transactional messages is refused, as the broker refuses it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from broker_core import AppendResult
from broker_core.clock import now_ms
from gateway.remoting import dedup
from gateway.remoting.delayed import DelayError, due_time
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.messages import (
    SYSFLAG,
    decode_properties,
    encode_properties,
    to_store_message,
)
from gateway.remoting.origins import COPY_PROPERTIES, copy_of, with_origin
from gateway.remoting.replies import error, failure, response
from gateway.remoting.transactions import committed_sys_flag, send_half
from gateway.rocketmq.producer import ProducerError, ProducerService, client_queue
from lmq.rocketmq import MQTT_SECOND_TOPIC, MessageType, TopicConfig, message_type_of
from protocol.remoting.codes import RequestCode, ResponseCode, SysFlag
from protocol.remoting.errors import MessageError
from protocol.remoting.messages import decode_batch

if TYPE_CHECKING:
    from collections.abc import Awaitable

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
# Plain ints: an IntFlag operator is a slow Python call, and these run per send.
_TX_MASK = int(SysFlag.TRANSACTION_MASK)
_TX_PREPARED = int(SysFlag.TRANSACTION_PREPARED)
_INNER_BATCH = int(SysFlag.INNER_BATCH)
_TYPE_PROPERTIES = frozenset(("TRAN_MSG", "__SHARDINGKEY", "DELAY", "TIMER_DELIVER_MS",
                              "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME"))
_SEND_V1 = int(RequestCode.SEND_MESSAGE)
_NORMAL = MessageType.NORMAL
_MIXED = MessageType.MIXED
_FIFO = MessageType.FIFO
_TRANSACTION = MessageType.TRANSACTION


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
    """The message's type (:func:`lmq.rocketmq.message_type_of`; the prepared sysFlag
    makes it TRANSACTION too)."""
    return message_type_of(props, sys_flag & _TX_MASK == _TX_PREPARED)


def check_type(config: TopicConfig, kind: MessageType) -> None:
    try:
        ProducerService.check_type(config, kind)
    except ProducerError as exc:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None


def writable_topic(ctx: RequestContext, topic: str) -> TopicConfig:
    """The topic's configuration if the request's principal may send to it (creating
    it when allowed): the producer service's :meth:`resolve`."""
    return ctx.services.producer.resolve(topic, ctx.principal, ctx.client_id)


def send_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    header = SendHeader(cmd)
    services = ctx.services
    topic = header.topic
    producer = ctx.services.producer
    config = producer.resolve(topic, ctx.principal, ctx.client_id)
    queue_id = client_queue(config, header.queue_id)
    props = decode_properties(header.properties)
    if dedup.DEDUP_ID in props:  # a connector's copy from an MQTT or AMQP peer
        found = dedup.stored(ctx, topic, dedup.apply(topic, props))
        if found is not None:
            position, stored_queue, stored_offset = found
            if not props.keys().isdisjoint(COPY_PROPERTIES):
                ctx.services.copies_duplicate += 1
                ctx.reply(cmd, _copies_reply(ctx, [], queue_id, duplicates=1, loops=0))
                return None
            ctx.reply_send_ok(cmd, ctx.msg_id(position), stored_queue, stored_offset)
            return None
        header.properties = encode_properties(props)
    if not props.keys().isdisjoint(COPY_PROPERTIES):
        return _send_copy(ctx, cmd, header, queue_id, props)
    kind = _NORMAL
    if header.sys_flag & _TX_MASK or not props.keys().isdisjoint(_TYPE_PROPERTIES):
        kind = message_type(props, header.sys_flag)
        check_type(config, kind)
    elif config.message_type is not _NORMAL and config.message_type is not _MIXED:
        # no type property, no transaction flag: a NORMAL message (message_type_of),
        # which a NORMAL or MIXED topic (auto-created ones) accepts without a check
        check_type(config, _NORMAL)
    body = cmd.body
    if len(body) > services.max_body:
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message body size {len(body)} exceeds the maximum {services.max_body}")
    message = to_store_message(
        topic, body, header.properties, props,
        origin=header.producer_group, born_ms=header.born_ms, sys_flag=header.sys_flag,
        flag=header.flag, reconsume_times=header.reconsume_times, born_host=ctx.conn.peer)
    lmqs = producer.lmqs(topic, queue_id, props.get(MQTT_SECOND_TOPIC, ""))
    if kind is not _NORMAL and kind is not _FIFO:
        return _special(ctx, cmd, header, kind, message, props, lmqs, queue_id)

    def done(result: AppendResult | None, exc: BaseException | None) -> None:
        if result is None:
            ctx.reply(cmd, failure(exc or RuntimeError("append failed")))
            return
        services.sent += 1
        ctx.conn.messages_in += 1
        ctx.reply_send_ok(cmd, ctx.msg_id(result.position), queue_id, result.offsets[0])

    producer.send_callback(message, lmqs, done)
    if producer.lagging:
        services.throttle(ctx)
    return None


def _send_copy(
    ctx: RequestContext, cmd: RemotingCommand, header: SendHeader, queue_id: int,
    props: dict[str, str],
) -> RemotingCommand | None:
    """A copy (gateway.remoting.origins): stored as a plain message whatever its type
    properties say (its source already applied them), through the idempotent append."""
    services = ctx.services
    copy = copy_of(props, services.cluster_id)
    assert copy is not None
    if copy.loop:
        services.copies_looped += 1
        return _copies_reply(ctx, [], queue_id, duplicates=0, loops=1)
    if len(cmd.body) > services.max_body:
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message body size {len(cmd.body)} exceeds the maximum {services.max_body}")
    message = to_store_message(
        header.topic, cmd.body, header.properties, props,
        origin=header.producer_group, born_ms=header.born_ms, sys_flag=header.sys_flag,
        flag=header.flag, reconsume_times=header.reconsume_times, born_host=ctx.conn.peer)
    message = replace(message, properties=with_origin(message.properties, copy))
    lmqs = ctx.services.producer.lmqs(header.topic, queue_id, props.get(MQTT_SECOND_TOPIC, ""))
    ctx.spawn(_reply_later(ctx, cmd, _store_copies(ctx, [(message, lmqs)], queue_id)),
              "remoting-send-copy")
    return None


async def _store_copies(
    ctx: RequestContext, items: list[tuple[Message, list[str]]], queue_id: int, loops: int = 0,
    deduplicated: int = 0,
) -> RemotingCommand:
    """Store copies (and plain messages beside them) in one idempotent append, answered
    once durable: ``msgId`` and ``queueOffset`` name the copies stored, ``lmqDuplicates``
    and ``lmqLoops`` count those dropped (module doc of gateway.remoting.origins; the
    ``deduplicated`` ones were dropped before, by gateway.remoting.dedup)."""
    services = ctx.services
    try:
        results = await ctx.services.producer.send_copies(items)
        stored = [r for r in results if r is not None]
    except Exception as exc:
        log.info("remoting copy refused: %s", exc, extra=ctx.conn.log_fields())
        return failure(exc)
    services.sent += len(stored)
    ctx.conn.messages_in += len(stored)
    duplicates = len(results) - len(stored) + deduplicated
    services.copies_duplicate += duplicates
    return _copies_reply(ctx, stored, queue_id, duplicates, loops)


def _copies_reply(
    ctx: RequestContext, stored: list[AppendResult], queue_id: int, duplicates: int,
    loops: int,
) -> RemotingCommand:
    return response(fields={
        "msgId": ",".join(ctx.msg_id(r.position) for r in stored),
        "queueId": queue_id,
        "queueOffset": stored[0].offsets[0] if stored else -1,
        "lmqDuplicates": duplicates,
        "lmqLoops": loops,
    })


def _due(ctx: RequestContext, props: dict[str, str], now: int) -> int | None:
    store = ctx.services.store
    try:
        return due_time(props, now, store.delay_level_due, store.config.max_timer_delay_ms)
    except DelayError as exc:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None


def _special(
    ctx: RequestContext, cmd: RemotingCommand, header: SendHeader, kind: MessageType,
    message: Message, props: dict[str, str], lmqs: list[str], queue_id: int,
) -> RemotingCommand | None:
    """A DELAY or TRANSACTION send: checked now, stored and answered from a task."""
    due = _due(ctx, props, now_ms())
    work: Awaitable[RemotingCommand]
    if kind is _TRANSACTION:
        if due is not None:
            raise RequestError(
                ResponseCode.MESSAGE_ILLEGAL,
                "a transactional message cannot be delayed by LMQ Gateway")
        group = props.get("PGROUP") or header.producer_group
        message = _replace_sys_flag(message, committed_sys_flag(header.sys_flag))
        work = send_half(ctx, message, lmqs, group, queue_id, props.get("UNIQ_KEY", ""))
    elif due is None:  # a delay not in the future: delivered now, as the broker does
        work = _send_now(ctx, message, lmqs, queue_id)
    else:
        work = _send_delayed(ctx, [(message, lmqs, due)], queue_id)
    ctx.spawn(_reply_later(ctx, cmd, work), f"remoting-send-{kind.value}")
    return None


def _replace_sys_flag(message: Message, sys_flag: int) -> Message:
    props = dict(message.properties or {})
    props[SYSFLAG] = str(sys_flag).encode()
    return replace(message, properties=props)


async def _reply_later(
    ctx: RequestContext, cmd: RemotingCommand, work: Awaitable[RemotingCommand]
) -> None:
    try:
        result = await work
    except RequestError as exc:
        result = error(exc.code, exc.remark)
    except ProducerError as exc:
        result = failure(exc)
    ctx.reply(cmd, result)


async def _send_now(
    ctx: RequestContext, message: Message, lmqs: list[str], queue_id: int
) -> RemotingCommand:
    try:
        result = await ctx.services.producer.send(message, lmqs)
    except Exception as exc:
        return failure(exc)
    ctx.services.sent += 1
    ctx.conn.messages_in += 1
    return response(fields={"msgId": ctx.msg_id(result.position), "queueId": queue_id,
                            "queueOffset": result.offsets[0]})


async def _send_delayed(
    ctx: RequestContext, items: list[tuple[Message, list[str], int]], queue_id: int
) -> RemotingCommand:
    """Store delayed messages in one append (all or none), answered once durable; the
    timer firing is armed at the earliest due time."""
    services = ctx.services
    try:
        results = await ctx.services.producer.send_delayed(items)
    except Exception as exc:
        log.info("remoting delayed send refused: %s", exc, extra=ctx.conn.log_fields())
        return failure(exc)
    services.sent += len(results)
    ctx.conn.messages_in += len(results)
    return response(fields={
        "msgId": ",".join(ctx.msg_id(r.position) for r in results),
        "queueId": queue_id,
        "queueOffset": 0,
    })


async def send_batch_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    header = SendHeader(cmd)
    services = ctx.services
    producer = ctx.services.producer
    config = producer.resolve(header.topic, ctx.principal, ctx.client_id)
    queue_id = client_queue(config, header.queue_id)
    try:
        entries = decode_batch(cmd.body)
    except MessageError as exc:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
    if not entries:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
    max_body = services.max_body
    items: list[tuple[Message, list[str]]] = []
    dues: list[int | None] = []
    #: batch index -> the msgId of a copy already stored (gateway.remoting.dedup)
    already: dict[int, str] = {}
    seen: dict[str, int] = {}
    first_offset = 0
    copies_dropped = 0
    now = now_ms()
    copies = loops = 0
    for index, entry in enumerate(entries):
        body, props, flag = entry.body, entry.properties, entry.flag
        if dedup.DEDUP_ID in props:
            message_id = dedup.apply(header.topic, props)
            found = dedup.stored(ctx, header.topic, message_id)
            if found is not None or message_id in seen:
                if found is not None:
                    already[index] = ctx.msg_id(found[0])
                    if not index:
                        first_offset = found[2]
                else:  # named once the first is stored
                    already[index] = f"@{seen[message_id]}"
                if not props.keys().isdisjoint(COPY_PROPERTIES):
                    copies_dropped += 1
                continue
            seen[message_id] = index
        props_text = encode_properties(props)
        copy = None
        if not props.keys().isdisjoint(COPY_PROPERTIES):
            try:
                copy = copy_of(props, services.cluster_id)
            except RequestError as exc:
                raise RequestError(
                    exc.code, f"message {index} of the batch: {exc.remark}") from None
            assert copy is not None
            if copy.loop:
                loops += 1
                continue
            copies += 1
        kind = message_type(props, header.sys_flag) if copy is None else _NORMAL
        try:
            if copy is None and (
                kind != MessageType.NORMAL or config.message_type != MessageType.NORMAL
            ):  # a copy is stored as a plain message: its source applied its type
                check_type(config, kind)
            if kind is _TRANSACTION:
                raise RequestError(
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a batch cannot hold transactional messages; send them one by one")
            dues.append(_due(ctx, props, now) if kind is MessageType.DELAY else None)
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
        if copy is not None:
            message = replace(message, properties=with_origin(message.properties, copy))
        items.append(
            (message, producer.lmqs(header.topic, queue_id, props.get(MQTT_SECOND_TOPIC, ""))))
    if copies or loops or copies_dropped:
        services.copies_looped += loops
        if not items:
            services.copies_duplicate += len(already)
            return _copies_reply(ctx, [], queue_id, duplicates=len(already), loops=loops)
        if any(due is not None for due in dues):
            raise RequestError(
                ResponseCode.MESSAGE_ILLEGAL,
                "a batch of copies cannot hold delayed messages that are not copies")
        return await _store_copies(ctx, items, queue_id, loops, deduplicated=len(already))
    if already:
        return await _send_deduplicated(ctx, items, dues, already, len(entries), queue_id,
                                        first_offset)
    if any(due is not None for due in dues):
        return await _send_delayed(
            ctx, [(m, lmqs, now if due is None else due)
                  for (m, lmqs), due in zip(items, dues, strict=True)], queue_id)
    try:
        # One append for the whole batch: all of it is stored, or (an exception) none.
        results = await producer.send_batch(items)
    except Exception as exc:
        log.info("remoting batch refused: %s", exc, extra=ctx.conn.log_fields())
        return failure(exc)
    if producer.lagging:
        services.throttle(ctx)
    services.sent += len(results)
    ctx.conn.messages_in += len(results)
    return response(fields={
        "msgId": ",".join(ctx.msg_id(r.position) for r in results),
        "queueId": queue_id,
        "queueOffset": results[0].offsets[0],
    })


async def _send_deduplicated(
    ctx: RequestContext, items: list[tuple[Message, list[str]]], dues: list[int | None],
    already: dict[int, str], count: int, queue_id: int, first_offset: int,
) -> RemotingCommand:
    """A batch some of whose copies are stored already (gateway.remoting.dedup): the
    others in one append; the answer names all ``count`` in the batch's order."""
    producer = ctx.services.producer
    ids: list[str] = []
    offset = first_offset  # the first message's: stored before (index 0) or now
    if items:
        try:
            if any(due is not None for due in dues):
                now = now_ms()
                results = await producer.send_delayed(
                    [(m, lmqs, now if due is None else due)
                     for (m, lmqs), due in zip(items, dues, strict=True)])
            else:
                results = await producer.send_batch(items)
        except Exception as exc:
            log.info("remoting batch refused: %s", exc, extra=ctx.conn.log_fields())
            return failure(exc)
        ctx.services.sent += len(results)
        ctx.conn.messages_in += len(results)
        ids = [ctx.msg_id(r.position) for r in results]
        if 0 not in already:
            offset = results[0].offsets[0] if results[0].offsets else 0
    fresh = iter(ids)
    named: list[str] = []
    for index in range(count):
        name = already.get(index)
        if name is None:
            name = next(fresh)
        elif name.startswith("@"):
            name = named[int(name[1:])]
        named.append(name)
    return response(fields={"msgId": ",".join(named), "queueId": queue_id,
                            "queueOffset": offset})
