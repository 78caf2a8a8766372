"""AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue: settling
received messages through the gateway's one PopService (``ctx.rocketmq.pop``).

A handle is a pop receipt (:mod:`gateway.grpc.receipts`); one a push consumer got from
an auto-renewing receive is first mapped to its renewed form. Answers, as the proxy
gives them:

- AckMessage: one entry per request entry, each with its own status: OK (also for a
  message no longer in flight that has not come back yet: acked already); an expired
  handle (its invisible time is over: the message is or will be delivered again) is
  INVALID_RECEIPT_HANDLE "receipt handle is expired"; a handle that is not the
  gateway's, INVALID_RECEIPT_HANDLE. The response's status is the entries' one code,
  or MULTIPLE_RESULTS when they differ.
- ChangeInvisibleDuration: the NEW receipt handle (the client replaces its own); a
  handle no longer in flight is INVALID_RECEIPT_HANDLE; a duration outside
  0 .. 12 hours, ILLEGAL_INVISIBLE_TIME. A push consumer's nack is one of these.
- ForwardMessageToDeadLetterQueue: a copy goes to ``%DLQ%<group>`` (the send-back
  service's dead-letter path: ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, the reconsume
  count) once stored durably, then the message is acked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import UnknownLmq, UnknownReceipt
from gateway.grpc.receipts import Handle, parse_handle
from gateway.grpc.records import group_config, readable_topic, store_host
from gateway.rocketmq.pop_receipts import ExtraInfo
from gateway.rocketmq.pop_service import OffsetOutOfRange
from lmq.rocketmq import queue_lmq
from protocol.grpc import Code, StatusError, ok, status
from protocol.grpc.messages import duration_ms

if TYPE_CHECKING:
    from gateway.grpc.call import Call

__all__ = ["ack_message", "change_invisible_duration", "forward_message_to_dead_letter_queue"]

#: Longest invisible time a message can be given (the proxy's ``maxInvisibleTimeMills``).
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: Entries in one AckMessage.
MAX_ACK_ENTRIES = 1024


def _settle_errors(exc: Exception) -> StatusError:
    if isinstance(exc, StatusError):
        return exc
    if isinstance(exc, UnknownLmq):
        return StatusError(Code.TOPIC_NOT_FOUND, str(exc))
    if isinstance(exc, (OffsetOutOfRange, ValueError)):
        return StatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is invalid: {exc}")
    if isinstance(exc, UnknownReceipt):
        return StatusError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    raise exc


def _handle(call: Call, group: str, topic: str, text: str) -> Handle:
    """The handle to settle for the one the consumer sent (renewed form if any)."""
    current = call.services.consume.renewer.take(group, text)
    return parse_handle(current, group, topic)


def _check_live(call: Call, handle: Handle) -> None:
    if handle.visible_at <= call.services.pop.clock():
        raise StatusError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")


async def ack_message(
    call: Call, request: service_pb2.AckMessageRequest
) -> service_pb2.AckMessageResponse:
    group, topic = request.group.name, request.topic.name
    group_config(call, group)
    readable_topic(call, topic, group)
    if not request.entries:
        raise StatusError(Code.BAD_REQUEST, "no entry to ack")
    if len(request.entries) > MAX_ACK_ENTRIES:
        raise StatusError(Code.PAYLOAD_TOO_LARGE,
                          f"{len(request.entries)} entries; at most {MAX_ACK_ENTRIES}")
    # the handles checked one by one, then the live ones acked in one store write
    results: list[Exception | None] = []
    live: list[int] = []
    acks: list[tuple[str, int, int, int]] = []
    for entry in request.entries:
        try:
            handle = _handle(call, group, topic, entry.receipt_handle)
            _check_live(call, handle)
        except StatusError as exc:
            results.append(exc)
            continue
        live.append(len(results))
        results.append(None)
        acks.append((handle.topic, handle.queue_id, handle.offset, handle.visible_at))
    if acks:
        for at, failed in zip(live, call.services.pop.ack_each(group, acks), strict=True):
            results[at] = failed
    entries = []
    codes = set()
    for entry, failed in zip(request.entries, results, strict=True):
        result = ok() if failed is None else _settle_errors(failed).status()
        codes.add(result.code)
        entries.append(service_pb2.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result))
    if len(codes) == 1:
        code = Code(next(iter(codes)))
        overall = status(code, code.name)
    else:
        overall = status(pb.MULTIPLE_RESULTS, "MULTIPLE_RESULTS")
    return service_pb2.AckMessageResponse(status=overall, entries=entries)


async def change_invisible_duration(
    call: Call, request: service_pb2.ChangeInvisibleDurationRequest
) -> service_pb2.ChangeInvisibleDurationResponse:
    group, topic = request.group.name, request.topic.name
    group_config(call, group)
    readable_topic(call, topic, group)
    invisible = duration_ms(request.invisible_duration)
    if not 0 <= invisible <= MAX_INVISIBLE_MS:
        raise StatusError(Code.ILLEGAL_INVISIBLE_TIME,
                          f"the invisibleTime must be 0 to {MAX_INVISIBLE_MS} ms")
    pop = call.services.pop
    try:
        handle = _handle(call, group, topic, request.receipt_handle)
        _check_live(call, handle)
        pop_time, invisible = pop.change_invisible_time(
            group, handle.topic, handle.queue_id, handle.offset, handle.text, invisible)
    except Exception as exc:
        raise _settle_errors(exc) from None
    info = handle.info
    new = ExtraInfo(info.ck_queue_offset, pop_time, invisible, info.revive_qid, info.retry,
                    info.broker_name, info.queue_id, info.queue_offset)
    return service_pb2.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=str(new))


async def forward_message_to_dead_letter_queue(
    call: Call, request: service_pb2.ForwardMessageToDeadLetterQueueRequest
) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
    group, topic = request.group.name, request.topic.name
    group_config(call, group)
    readable_topic(call, topic, group)
    services = call.services
    try:
        handle = _handle(call, group, topic, request.receipt_handle)
        _check_live(call, handle)
        stored = call.services.store.read_at(queue_lmq(handle.topic, handle.queue_id),
                                          handle.offset)
        if stored is None:
            raise StatusError(Code.MESSAGE_NOT_FOUND, "the message is no longer stored")
        await services.sendback.send_back(
            group, stored.record.position, delay_level=-1, store_host=store_host(call))
        services.pop.ack(group, handle.topic, handle.queue_id, handle.offset, handle.text)
    except Exception as exc:
        raise _settle_errors(exc) from None
    return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=ok())
