"""PullMessage, UpdateOffset, GetOffset, QueryOffset: a pull consumer's RPCs, on the
queue LMQs (``rmq:<topic>:<queueId>``) and the group's committed offsets, the same
ones remoting's PULL_MESSAGE, QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET use
(RocketMQ's Java proxy does not serve these four; the semantics are the v2 protocol's
documentation's and remoting's).

- PullMessage (server-streamed): up to ``batch_size`` (1 .. :data:`MAX_BATCH`)
  messages of the queue from ``offset`` on (an offset below the queue's first starts at
  its first), filtered by a TAG expression; nothing there: waits up to
  ``long_polling_timeout`` (bounded by the call's deadline) for an append. The stream
  is ``{message}``xN, ``{next_offset}``, then one ``{status}``: OK, or
  MESSAGE_NOT_FOUND when nothing came. An offset past the queue's end is
  ILLEGAL_OFFSET. A pull does not commit: the client calls UpdateOffset.
- UpdateOffset: commits ``offset`` for the group on the queue (durably, as remoting's
  update); a negative one is ILLEGAL_OFFSET.
- GetOffset: the group's committed offset; a group that never committed one on a queue
  that still starts at 0 gets 0 (as remoting answers), else OFFSET_NOT_FOUND.
- QueryOffset: BEGINNING (the queue's first offset), END (its next), TIMESTAMP (the
  first message stored at or after the time).

A queue id the topic does not have is BAD_REQUEST.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from gateway.grpc.receive import DEADLINE_RESERVE_MS, MAX_POLL_MS, tag_filter
from gateway.grpc.records import delivered, group_config, readable_topic
from gateway.rocketmq.offsets import committed_offset, offset_at_time
from gateway.rocketmq.records import record_reconsume_times
from lmq.rocketmq import queue_lmq
from protocol.grpc import Code, StatusError, ok, status
from protocol.grpc.messages import duration_ms, millis

if TYPE_CHECKING:
    from gateway.grpc.call import Call

__all__ = ["get_offset", "pull_message", "query_offset", "update_offset"]

MAX_BATCH = 32

PullResponse = service_pb2.PullMessageResponse


def _queue(call: Call, queue: pb.MessageQueue, group: str | None) -> tuple[str, int, str]:
    """``(topic, queue id, LMQ)`` of a request's queue, after the topic's checks."""
    topic = queue.topic.name
    if group is None:
        config = readable_topic(call, topic, "")
    else:
        group_config(call, group)
        config = readable_topic(call, topic, group)
    if not 0 <= queue.id < config.queue_count:
        raise StatusError(
            Code.BAD_REQUEST,
            f"queue id {queue.id} is illegal, topic {topic} has {config.queue_count} queues")
    return topic, queue.id, queue_lmq(topic, queue.id)


async def _wait_append(call: Call, lmq: str, timeout_s: float) -> None:
    store = call.services.store
    event = asyncio.Event()
    loop = call.services.loop

    def woken(_lmq: str, _next: int) -> None:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            pass

    remove = store.add_listener(lmq, woken)
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
    finally:
        remove()


async def pull_message(
    call: Call, request: service_pb2.PullMessageRequest
) -> AsyncIterator[service_pb2.PullMessageResponse]:
    topic, queue_id, lmq = _queue(call, request.message_queue, request.group.name)
    if request.batch_size <= 0:
        raise StatusError(Code.BAD_REQUEST, "the batch size must be positive")
    if request.offset < 0:
        raise StatusError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
    batch = min(request.batch_size, MAX_BATCH)
    accept = tag_filter(request.filter_expression)
    store = call.services.store
    poll_ms = min(max(0, duration_ms(request.long_polling_timeout)), MAX_POLL_MS)
    remaining = call.time_remaining()
    if remaining is not None:
        poll_ms = max(0, min(poll_ms, int(remaining * 1000) - DEADLINE_RESERVE_MS))
    deadline = call.services.loop.time() + poll_ms / 1000
    offset = request.offset
    while True:
        info = store.lmq(lmq)
        high = 0 if info is None else info.max_offset
        if offset > high:
            raise StatusError(
                Code.ILLEGAL_OFFSET, f"offset {offset} is past the end of the queue ({high})")
        result = store.pull(lmq, offset, batch)
        found = [m for m in result.messages if accept is None or accept(m.record)]
        offset = result.next_offset
        left = deadline - call.services.loop.time()
        if found or left <= 0 or result.next_offset < result.max_offset:
            break
        await _wait_append(call, lmq, left)
    for message in found:
        response = PullResponse()  # the message written into it, not copied
        delivered(call, message.record, topic=topic, queue_id=queue_id, offset=message.offset,
                  attempt=record_reconsume_times(message.record) + 1, into=response.message)
        yield response
    yield PullResponse(next_offset=offset)
    if found:
        yield PullResponse(status=ok())
    else:
        yield PullResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))


async def update_offset(
    call: Call, request: service_pb2.UpdateOffsetRequest
) -> service_pb2.UpdateOffsetResponse:
    _topic, _qid, lmq = _queue(call, request.message_queue, request.group.name)
    if request.offset < 0:
        raise StatusError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
    store = call.services.store
    if store.lmq(lmq) is None:
        raise StatusError(Code.BAD_REQUEST, f"the queue {lmq} does not exist")
    store.commit_offset(request.group.name, lmq, request.offset)
    return service_pb2.UpdateOffsetResponse(status=ok())


async def get_offset(
    call: Call, request: service_pb2.GetOffsetRequest
) -> service_pb2.GetOffsetResponse:
    _topic, _qid, lmq = _queue(call, request.message_queue, request.group.name)
    offset = committed_offset(call.services.store, request.group.name, lmq)
    if offset is None:
        raise StatusError(Code.OFFSET_NOT_FOUND,
                          "the group has no committed offset on the queue")
    return service_pb2.GetOffsetResponse(status=ok(), offset=offset)


async def query_offset(
    call: Call, request: service_pb2.QueryOffsetRequest
) -> service_pb2.QueryOffsetResponse:
    _topic, _qid, lmq = _queue(call, request.message_queue, None)
    store = call.services.store
    info = store.lmq(lmq)
    policy = request.query_offset_policy
    if policy == pb.BEGINNING:
        offset = 0 if info is None else info.min_offset
    elif policy == pb.END:
        offset = 0 if info is None else info.max_offset
    elif policy == pb.TIMESTAMP:
        if not request.HasField("timestamp"):
            raise StatusError(Code.BAD_REQUEST, "a TIMESTAMP query needs a timestamp")
        offset = offset_at_time(store, lmq, millis(request.timestamp))
    else:
        raise StatusError(Code.BAD_REQUEST, f"unknown query offset policy {policy}")
    return service_pb2.QueryOffsetResponse(status=ok(), offset=offset)
