"""EndTransaction (not served until the message-types issue, 17) and RecallMessage.

SendMessage refuses TRANSACTION messages with UNSUPPORTED, so no transaction is ever
half-done: EndTransaction answers UNSUPPORTED with a message saying so, the status
RocketMQ's proxy uses for what it does not serve (docs/rocketmq.md, "Differences from
RocketMQ").

RecallMessage cancels a pending DELAY message by the ``recall_handle`` its send
returned (``lmq:<log position>``, :mod:`gateway.grpc.send`): the store's
``cancel_timer``, durable before the answer; the message is then never delivered. A
handle that is not ours is ILLEGAL_MESSAGE_ID; one whose message already fired, was
recalled, or is of another topic is NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import service_pb2

from broker_core import Durability
from gateway.grpc.send import RECALL_PREFIX
from protocol.grpc import Code, StatusError, ok, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call

__all__ = ["end_transaction", "recall_message"]


async def end_transaction(
    call: Call, request: service_pb2.EndTransactionRequest
) -> service_pb2.EndTransactionResponse:
    return service_pb2.EndTransactionResponse(status=status(
        Code.UNSUPPORTED,
        "transactional messages are not supported by LMQ Gateway yet; no transaction"
        f" {request.transaction_id!r} was started (TRANSACTION sends are refused)"))


async def recall_message(
    call: Call, request: service_pb2.RecallMessageRequest
) -> service_pb2.RecallMessageResponse:
    handle = request.recall_handle
    digits = handle[len(RECALL_PREFIX):] if handle.startswith(RECALL_PREFIX) else ""
    if not digits.isdigit():
        raise StatusError(Code.ILLEGAL_MESSAGE_ID, f"not a recall handle: {handle!r}")
    position = int(digits)
    store = call.front.store
    pending = store.pending_timer(position)
    record = store.record_at(position)
    if pending is None or record is None or pending.topic != request.topic.name:
        raise StatusError(
            Code.NOT_FOUND,
            f"no delayed message of topic {request.topic.name!r} is pending under that"
            " handle (delivered, recalled, or never sent)")
    if not store.cancel_timer(position, wait=False):
        raise StatusError(Code.NOT_FOUND, "the delayed message was delivered meanwhile")
    if store.config.durability == Durability.SYNC:
        await asyncio.wrap_future(store.acknowledged(store.log_end))
    message_id = record.properties.get("UNIQ_KEY", b"").decode()
    return service_pb2.RecallMessageResponse(status=ok(), message_id=message_id)
