"""ReceiveMessage: a pop across the topic's queues through the gateway's one PopService
(``ctx.rocketmq.pop``, shared with remoting's POP_MESSAGE), streamed back.

The request's ``message_queue`` names the topic; its queue id is not used: every
receive pops all the topic's read queues (each pop starting at the next one) and the
group's pop retry topic, as the proxy pops all queues of the broker it names. Nothing
there: the receive waits for messages up to its long-polling time.

The stream: ``{message}`` per message, then ``{delivery_timestamp}`` when it carried
any (the push consumer needs it), then ONE ``{status}``: OK, or MESSAGE_NOT_FOUND for an
empty receive (not an error to the clients). The proxy writes the status first; the
clients read the whole stream before looking at any of it, so the order does not matter
to them, and a status last lets a failure anywhere end the stream with its status.

FIFO: a group that consumes in order (``consume_message_orderly``, which Telemetry's
settings tell the clients as ``subscription.fifo``) receiving from a FIFO topic pops
with the store's FIFO pop: a message group's next message only after the previous one
was acked, a message not acked in time back first for its group after a backoff,
other groups flowing meanwhile (:mod:`broker_core.fifo`). RocketMQ 5 holds the whole
queue behind an unacked message instead.

Parameters, with the proxy's rules and codes:

- ``batch_size``: at least 1 (else BAD_REQUEST); more than :data:`MAX_BATCH` is cut to
  it, as the proxy cuts it;
- ``invisible_duration``: :data:`MIN_INVISIBLE_MS` to 12 hours (else
  ILLEGAL_INVISIBLE_TIME); with ``auto_renew`` (push consumers) the gateway's default
  (60 s) is used and renewed until the consumer settles the message
  (:mod:`gateway.grpc.receipts`);
- ``long_polling_timeout``: at most 20 s; without one, the call's deadline less half the
  clients' 3 s request timeout; either way no later than the call's deadline less
  :data:`DEADLINE_RESERVE_MS` (a deadline already that close: ILLEGAL_POLLING_TIME);
  negative: ILLEGAL_POLLING_TIME;
- ``filter_expression``: TAG (``*``, ``a||b``); SQL92 is ILLEGAL_FILTER_EXPRESSION (not
  served);
- ``attempt_id``: a receive repeating one of the group's attempt ids while that
  attempt's messages are invisible gets the same messages and handles again.

Messages popped for a stream that ends before the consumer got them all (it went away,
the call was cancelled) are made visible again at once, as the proxy nacks them. A
receive holds one of its client's concurrent receives (``call.receive_slot``) while it
pops and waits; a gateway shutting down ends waiting receives at once (empty).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import Record, UnknownLmq
from gateway.grpc.receipts import DEFAULT_INVISIBLE_MS, parse_handle
from gateway.grpc.records import delivered, group_config, readable_topic
from gateway.rocketmq.pop_service import PollingFull, PopItem, PopResult
from lmq.rocketmq import MessageType
from protocol.grpc import Code, StatusError, ok, status
from protocol.grpc.messages import duration_ms, timestamp

if TYPE_CHECKING:
    from gateway.grpc.call import Call

__all__ = ["receive_message", "tag_filter"]

#: The proxy's ``MAX_MSG_NUMS_FOR_POP_REQUEST``.
MAX_BATCH = 32
#: Shortest and longest invisible time of a receive. The proxy's shortest is 10 s
#: (``minInvisibleTimeMillsForRecv``); the store's pop handles any, so 1 s is allowed.
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: The proxy's ``grpcClientConsumerMaxLongPollingTimeoutMillis``.
MAX_POLL_MS = 20_000
#: Half the clients' default request timeout (3 s): the poll without a timeout given.
HALF_REQUEST_TIMEOUT_MS = 1_500
#: Time kept back from the call's deadline to write the answer.
DEADLINE_RESERVE_MS = 200

Response = service_pb2.ReceiveMessageResponse


def tag_filter(expression: pb.FilterExpression) -> Callable[[Record], bool] | None:
    """A TAG expression (``a || b``; ``*`` or empty: everything) as a record filter."""
    if expression.type == pb.SQL:
        raise StatusError(
            Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported")
    tags = {t.strip() for t in expression.expression.split("||") if t.strip()}
    if not tags or "*" in tags:
        return None
    return lambda rec: rec.tag in tags


def _invisible_ms(request: service_pb2.ReceiveMessageRequest) -> int:
    if request.auto_renew:
        return DEFAULT_INVISIBLE_MS
    value = duration_ms(request.invisible_duration)
    if value < MIN_INVISIBLE_MS:
        raise StatusError(Code.ILLEGAL_INVISIBLE_TIME,
                          f"the invisibleTime is too small. min is {MIN_INVISIBLE_MS}")
    if value > MAX_INVISIBLE_MS:
        raise StatusError(Code.ILLEGAL_INVISIBLE_TIME,
                          f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}")
    return value


def _poll_ms(call: Call, request: service_pb2.ReceiveMessageRequest) -> int:
    remaining = call.time_remaining()
    left = None if remaining is None else int(remaining * 1000) - DEADLINE_RESERVE_MS
    if request.HasField("long_polling_timeout"):
        poll = duration_ms(request.long_polling_timeout)
        if poll < 0:
            raise StatusError(Code.ILLEGAL_POLLING_TIME, "the long polling timeout is negative")
    else:
        poll = MAX_POLL_MS if left is None else left - HALF_REQUEST_TIMEOUT_MS
    poll = min(poll, MAX_POLL_MS)
    if left is not None:
        if left < 0:
            raise StatusError(
                Code.ILLEGAL_POLLING_TIME,
                "The deadline time remaining is not enough for polling, please check"
                " network condition")
        poll = min(poll, left)
    return max(0, poll)


async def _pop_until_stopping(
    call: Call, group: str, popping: Coroutine[Any, Any, PopResult]
) -> PopResult:
    """The pop's result, or an empty one when the call must end while it waits (the
    gateway stops, or authentication turns on for an unauthenticated call:
    :meth:`Call.must_end`). A pop that completed while this call was being cancelled
    gives its messages back."""
    pop = call.services.pop
    task = asyncio.ensure_future(popping)
    stopper = asyncio.ensure_future(call.must_end())
    try:
        await asyncio.wait((task, stopper), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        if task.done() and not task.cancelled() and task.exception() is None:
            pop.requeue(group, task.result().items)
        task.cancel()
        raise
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        return await task  # a pop cancelled while it waited has popped nothing
    except asyncio.CancelledError:
        return PopResult(pop.clock(), 0)


async def receive_message(
    call: Call, request: service_pb2.ReceiveMessageRequest
) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
    services = call.services
    pop = call.services.pop
    poll_ms = _poll_ms(call, request)
    group = request.group.name
    topic = request.message_queue.topic.name
    group_cfg = group_config(call, group)
    topic_cfg = readable_topic(call, topic, group)
    # A group consuming in order, on a FIFO topic: each message group in order
    fifo = group_cfg.consume_message_orderly and topic_cfg.accepts(MessageType.FIFO)
    if request.batch_size <= 0:
        raise StatusError(Code.BAD_REQUEST, "the batch size must be positive")
    batch = min(request.batch_size, MAX_BATCH)
    invisible_ms = _invisible_ms(request)
    accept = tag_filter(request.filter_expression)
    state = services.consume

    attempt_key = None
    if request.HasField("attempt_id") and request.attempt_id:
        attempt_key = (group, topic, request.attempt_id)
    cached = None if attempt_key is None else state.attempts.get(attempt_key, pop.clock())
    items: list[PopItem]
    if cached is not None:
        items, pop_time, invisible_ms = cached.items, cached.pop_time, cached.invisible_ms
    else:
        try:
            with call.receive_slot():
                result = await _pop_until_stopping(
                    call, group, pop.pop(group, topic, -1, batch, invisible_ms, poll_ms, accept,
                                            fifo=fifo))
        except PollingFull as exc:
            raise StatusError(Code.TOO_MANY_REQUESTS, f"polling full: {exc}") from None
        except UnknownLmq as exc:
            raise StatusError(Code.TOPIC_NOT_FOUND, str(exc)) from None
        items, pop_time = result.items, result.pop_time
        if attempt_key is not None and items:
            state.attempts.put(attempt_key, items, pop_time, invisible_ms)

    done = False
    try:
        # each message written straight into its response (no copy of it)
        messages = []
        for item in items:
            response = Response()
            delivered(call, item.message.record, topic=topic, queue_id=item.source.queue_id,
                      offset=item.message.offset, receipt=item.extra_info,
                      attempt=item.reconsume_times + 1, invisible_ms=invisible_ms,
                      into=response.message)
            messages.append(response)
        if request.auto_renew and cached is None:
            for item in items:
                state.renewer.track(
                    group, parse_handle(item.extra_info, group, topic), call.client_id)
        for response in messages:
            yield response
        if messages:
            services.sent += len(messages)
            if call.connection is not None:
                call.connection.messages_out += len(messages)
            yield Response(delivery_timestamp=timestamp(pop.clock()))
            yield Response(status=ok())
        else:
            yield Response(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        done = True
    finally:
        if not done and items:
            # The consumer did not get the whole answer: its client drops all of it.
            for item in items:
                state.renewer.take(group, item.extra_info)
            pop.requeue(group, items)
