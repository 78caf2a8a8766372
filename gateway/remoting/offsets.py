"""Offsets: QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME.

Queue ``q`` of topic ``T`` is the LMQ ``rmq:T:q``; its offsets are the LMQ's offsets,
and a consumer group's committed offset is the store's offset of group ``<group>`` on
that LMQ (one RocksDB write, fsynced in sync durability before the reply: a committed
offset survives kill -9).

As RocketMQ's ``ConsumerOffsetManager``, an update stores what the client sends, also
an offset lower than the one committed (a reset); negative offsets are ignored (ali-ons
persists a queue at offset 0 as -1). A group without a committed offset on a queue gets
offset 0 when the queue still starts at 0 (nothing was ever cleaned from it, as the
broker does while the queue's first message is still held), else QUERY_NOT_FOUND and
the client falls back to its consume-from-where policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.remoting.dispatch import DispatchTable, RequestContext
from gateway.remoting.fields import get_int, get_str
from gateway.remoting.replies import error, response
from gateway.rocketmq.offsets import committed_offset, offset_at_time
from lmq.rocketmq import queue_lmq
from protocol.remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from protocol.remoting import RemotingCommand


def register(table: DispatchTable) -> None:
    table.register(RequestCode.QUERY_CONSUMER_OFFSET, query_consumer_offset)
    table.register(RequestCode.UPDATE_CONSUMER_OFFSET, update_consumer_offset)
    table.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search_offset_by_timestamp)
    table.register(RequestCode.GET_MAX_OFFSET, get_max_offset)
    table.register(RequestCode.GET_MIN_OFFSET, get_min_offset)
    table.register(RequestCode.GET_EARLIEST_MSG_STORETIME, get_earliest_msg_storetime)


def _queue(cmd: RemotingCommand) -> str:
    return queue_lmq(get_str(cmd, "topic"), get_int(cmd, "queueId"))


def query_consumer_offset(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    lmq = _queue(cmd)
    offset = committed_offset(ctx.services.store, group, lmq)
    if offset is not None:
        return response(fields={"offset": offset})
    return error(ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")


def update_consumer_offset(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    topic = get_str(cmd, "topic")
    queue_id = get_int(cmd, "queueId")
    offset = get_int(cmd, "commitOffset")
    commit(ctx, group, topic, queue_id, offset)
    return response()


def commit(ctx: RequestContext, group: str, topic: str, queue_id: int, offset: int) -> bool:
    """Commit ``group``'s offset on a queue (pulls with the commit flag use it too).
    False when nothing was written (a negative offset, or a queue that does not exist)."""
    if offset < 0:
        return False
    lmq = queue_lmq(topic, queue_id)
    store = ctx.services.store
    if store.lmq(lmq) is None:
        return False
    store.commit_offset(group, lmq, offset)
    return True


def get_max_offset(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    info = ctx.services.store.lmq(_queue(cmd))
    return response(fields={"offset": 0 if info is None else info.max_offset})


def get_min_offset(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    info = ctx.services.store.lmq(_queue(cmd))
    return response(fields={"offset": 0 if info is None else info.min_offset})


def get_earliest_msg_storetime(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    store = ctx.services.store
    lmq = _queue(cmd)
    info = store.lmq(lmq)
    stamp = -1
    if info is not None:
        for offset in range(info.min_offset, min(info.max_offset, info.min_offset + 16)):
            message = store.read_at(lmq, offset)
            if message is not None:
                stamp = message.record.store_ms
                break
    return response(fields={"timestamp": stamp})


def search_offset_by_timestamp(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    lmq = _queue(cmd)
    timestamp = get_int(cmd, "timestamp")
    return response(fields={"offset": offset_at_time(ctx.services.store, lmq, timestamp)})
