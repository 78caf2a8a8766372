"""PULL_MESSAGE and LITE_PULL_MESSAGE, with long polling.

Queue ``q`` of topic ``T`` is read from the LMQ ``rmq:T:q`` at the client's offset:

- messages there: SUCCESS with up to ``maxMsgNums`` messages that match the
  subscription (a TAG expression: ``*``, or tags joined with ``||``), in the
  stored-message layout (:mod:`gateway.remoting.stored`); ``nextBeginOffset`` is past
  the last entry looked at, matched or not, so filtered messages are skipped for good;
- an offset below the queue's minimum (retention removed the messages) or above its
  maximum: PULL_OFFSET_MOVED with ``nextBeginOffset`` the minimum (or the maximum);
- nothing (new) there and the suspend flag set: the request is *suspended* up to
  ``suspendTimeoutMillis`` (RocketMQ clients: 15 s of a 30 s timeout). A store listener
  on the LMQ wakes it when an append reaches it (one listener per LMQ however many
  pulls wait, no polling); it is answered with what arrived, or PULL_NOT_FOUND when the
  time is up. A graceful shutdown answers suspended pulls at once.

Every response carries ``nextBeginOffset``, ``minOffset``, ``maxOffset`` and
``suggestWhichBrokerId`` (0), which clients read whatever the code. With the
commit-offset flag, ``commitOffset`` is committed for the group first (as the broker
does), so a push consumer's progress is durable without a separate call.

A pull that finds data answers inline; only a suspended one becomes a task. It reads
with ``store.pull_raw``: records from the log come checked but undecoded, are filtered
on their stored tag bytes and written from their stored bytes (``write_raw``); records
from the hot tail come decoded (``write_record``). Both write the codec's bytes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker_core.record import RawMessage
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.fields import get_int, get_str
from gateway.remoting.messages import write_raw, write_record
from gateway.remoting.offsets import commit
from gateway.remoting.replies import response
from gateway.remoting.stored import pack_host, topic_field
from lmq.rocketmq import InvalidName, Perm, queue_lmq
from protocol.remoting.codes import PullSysFlag, RequestCode, ResponseCode

if TYPE_CHECKING:
    from gateway.remoting.services import RemotingServices
    from protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

#: The longest a pull is held, whatever the client asks.
MAX_SUSPEND_MS = 60_000
#: Read windows looked at per pull when a filter skips everything.
MAX_FILTER_ROUNDS = 8
MAX_PULL_BYTES = 4 * 1024 * 1024
# Plain ints: an IntFlag operator is a slow Python call, and these run per pull.
_READ = int(Perm.READ)
_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_SUSPEND = int(PullSysFlag.SUSPEND)
_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)


def register(table: DispatchTable) -> None:
    table.register(RequestCode.PULL_MESSAGE, pull_message)
    table.register(RequestCode.LITE_PULL_MESSAGE, pull_message)


def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """The tags a TAG expression accepts; None = every message (``*`` or empty)."""
    expression = expression.strip()
    if not expression or expression == "*":
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return tags or None


class PullRequest:
    __slots__ = ("conn", "group", "topic", "queue_id", "lmq", "offset", "max_count", "max_bytes",
                 "tags", "raw_tags", "suspend_ms", "store_host")

    def __init__(self, ctx: RequestContext, cmd: RemotingCommand) -> None:
        services = ctx.services
        self.conn = ctx.conn  # counts the messages sent
        self.group = get_str(cmd, "consumerGroup")
        self.topic = get_str(cmd, "topic")
        self.queue_id = get_int(cmd, "queueId")
        self.offset = get_int(cmd, "queueOffset")
        self.max_count = max(1, min(get_int(cmd, "maxMsgNums", 32), 1024))
        self.max_bytes = max(1, min(get_int(cmd, "maxMsgBytes", MAX_PULL_BYTES), MAX_PULL_BYTES))
        sys_flag = get_int(cmd, "sysFlag", 0)
        try:
            group = ctx.services.groups.ensure(self.group)
        except InvalidName as exc:
            raise RequestError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, str(exc)) from None
        if group is None:
            raise RequestError(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{self.group}] does not exist")
        if not group.consume_enable:
            raise RequestError(
                ResponseCode.NO_PERMISSION, f"subscription group [{self.group}] cannot consume")
        try:
            config = ctx.services.topics.get(self.topic) or (
                ctx.services.topics.ensure(self.topic) if self.topic.startswith("%") else None)
        except InvalidName:
            config = None
        if config is None:
            raise RequestError(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{self.topic}] not exist, apply first please!")
        if not config.perm & _READ:
            raise RequestError(
                ResponseCode.NO_PERMISSION, f"the topic[{self.topic}] pulling message is forbidden")
        if not 0 <= self.queue_id < config.read_queues:
            raise RequestError(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{self.queue_id}] is illegal, topic:[{self.topic}]"
                f" topicConfig.readQueueNums:[{config.read_queues}]")
        services.check_subscribe(ctx, self.topic, self.group)
        self.lmq = queue_lmq(self.topic, self.queue_id)
        if sys_flag & _SUBSCRIPTION:
            expression_type = get_str(cmd, "expressionType", "TAG")
            expression = get_str(cmd, "subscription", "*")
        else:
            sub = services.consumers.subscription(self.group, self.topic)
            expression_type = sub.expression_type if sub else "TAG"
            expression = sub.expression if sub else "*"
        if expression_type.upper() != "TAG":
            raise RequestError(
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92")
        self.tags = parse_tag_expression(expression)
        # the same, as the stored tag bytes a record read undecoded is filtered on
        self.raw_tags = None if self.tags is None else frozenset(t.encode() for t in self.tags)
        self.suspend_ms = (
            min(get_int(cmd, "suspendTimeoutMillis", 0), MAX_SUSPEND_MS)
            if sys_flag & _SUSPEND else 0)
        if sys_flag & _COMMIT_OFFSET and ctx.services.store.log.fence is None:
            # a slave of a broker group serves the pull, not the commit (RocketMQ's
            # slaves do not take the pull's commit either)
            commit(ctx, self.group, self.topic, self.queue_id, get_int(cmd, "commitOffset", -1))
        self.store_host = pack_host("{}:{}".format(*ctx.store_address))


def _result(code: int, next_offset: int, min_offset: int, max_offset: int,
            body: bytes = b"", remark: str | None = None) -> RemotingCommand:
    return response(code, remark, {
        "suggestWhichBrokerId": 0,
        "nextBeginOffset": next_offset,
        "minOffset": min_offset,
        "maxOffset": max_offset,
    }, body)


def read(services: RemotingServices, req: PullRequest) -> RemotingCommand | None:
    """The response to ``req`` now; None when there is nothing to return yet (the
    caller suspends or answers PULL_NOT_FOUND)."""
    store = services.store
    info = store.lmq(req.lmq)
    if info is None:
        return _result(ResponseCode.PULL_NOT_FOUND, 0, 0, 0) if req.offset == 0 else _result(
            ResponseCode.PULL_OFFSET_MOVED, 0, 0, 0)
    lo, hi = info.min_offset, info.max_offset
    if req.offset < lo:
        return _result(ResponseCode.PULL_OFFSET_MOVED, lo, lo, hi)
    if req.offset > hi:
        return _result(ResponseCode.PULL_OFFSET_MOVED, hi, lo, hi)
    if req.offset == hi:
        return None
    offset = req.offset
    tags = req.tags
    raw_tags = req.raw_tags
    topic = topic_field(req.topic)
    queue_id = req.queue_id
    store_host = req.store_host
    out = bytearray()
    count = 0
    pull = services.store.pull_raw
    for _ in range(MAX_FILTER_ROUNDS):
        result = pull(req.lmq, offset, req.max_count - count, req.max_bytes - len(out))
        lo, hi = result.min_offset, result.max_offset
        for message in result.messages:
            try:
                if type(message) is RawMessage:
                    if raw_tags is not None and message.tag not in raw_tags:
                        continue
                    write_raw(out, message, topic, queue_id, store_host)
                else:  # a record from the hot tail, or one read in full
                    record = message.record
                    if tags is not None and record.tag not in tags:
                        continue
                    write_record(out, record, topic, queue_id, message.offset, store_host)
            except ValueError as exc:  # properties too long for the layout: skipped
                log.warning("message not deliverable over remoting: %s", exc,
                            extra={"lmq": req.lmq, "offset": message.offset})
                continue
            count += 1
        offset = result.next_offset
        if count or offset >= hi or not result.messages:
            break
    if count:
        services.pulled += count
        req.conn.messages_out += count
        return _result(ResponseCode.SUCCESS, offset, lo, hi, bytes(out))
    if offset > req.offset:
        # Everything looked at was filtered out: skip past it (RocketMQ answers
        # PULL_RETRY_IMMEDIATELY; at the queue's end there is nothing to retry, so
        # the pull goes on waiting from there instead).
        if offset >= hi:
            req.offset = offset
            return None
        return _result(ResponseCode.PULL_RETRY_IMMEDIATELY, offset, lo, hi)
    return None


def _not_found(services: RemotingServices, req: PullRequest) -> RemotingCommand:
    info = services.store.lmq(req.lmq)
    lo, hi = (info.min_offset, info.max_offset) if info else (0, 0)
    return _result(ResponseCode.PULL_NOT_FOUND, req.offset, lo, hi)


def pull_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    req = PullRequest(ctx, cmd)
    services = ctx.services
    answer = read(services, req)
    if answer is not None:
        return answer
    if req.suspend_ms <= 0 or ctx.closed:
        return _not_found(services, req)
    ctx.spawn(_suspended(ctx, cmd, req), "remoting-pull")
    return None


async def _suspended(ctx: RequestContext, cmd: RemotingCommand, req: PullRequest) -> None:
    services = ctx.services
    loop = services.loop
    deadline = loop.time() + req.suspend_ms / 1000
    services.suspended += 1
    try:
        while True:
            woken = loop.create_future()

            def wake(fut: asyncio.Future[None] = woken) -> None:
                if not fut.done():
                    fut.set_result(None)

            ctx.wakers.add(wake)
            remove = services.waiters.add(req.lmq, wake)
            # Checked after the listener is in place: an append between the first
            # read and now is not missed.
            answer = read(services, req)
            if answer is None and not ctx.closed:
                try:
                    async with asyncio.timeout(max(0.0, deadline - loop.time())):
                        await woken
                except TimeoutError:
                    pass
                answer = read(services, req)
            remove()
            ctx.wakers.discard(wake)
            if answer is not None:
                ctx.reply(cmd, answer)
                return
            if ctx.closed or services.stopping or loop.time() >= deadline:
                ctx.reply(cmd, _not_found(services, req))
                return
    finally:
        services.suspended -= 1
