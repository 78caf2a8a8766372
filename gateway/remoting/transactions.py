"""Transactional messages over remoting: half sends, END_TRANSACTION and check-backs.

**Half send.** A send with ``TRAN_MSG=true`` or the prepared sysFlag (type
TRANSACTION, on a topic of that type: :mod:`gateway.remoting.send`) is stored as the
store's half message (``MessageStore.append_half``): not delivered, its producer group
(the ``PGROUP`` property the Java client sets, else the header's ``producerGroup``)
recorded in the log. Answered once durable, as any send, with ``msgId`` = the offsetMsgId
of the half record (the client sends its log position back as ``commitLogOffset``),
``queueOffset`` 0 (no queue offset is assigned until the commit; it comes back as
``tranStateTableOffset`` and is ignored) and ``transactionId`` = the message's
``UNIQ_KEY``, as the broker answers. A half is stored with its sysFlag's transaction
bits set to COMMIT: it is only ever delivered committed, and a consumer sees the
commit type as a broker's consumer does (the broker rewrites them when it re-puts the
committed message).

**END_TRANSACTION** ``{producerGroup, tranStateTableOffset, commitLogOffset,
commitOrRollback, fromTransactionCheck, msgId, transactionId}`` ends the half at
``commitLogOffset``: 8 commits it (one control record dispatches it to every LMQ it was
sent to, atomically), 12 rolls it back, 0 (UNKNOWN) leaves it pending for the next
check. Ending is idempotent in the store: a repeated commit (or rollback) is SUCCESS and
delivers nothing twice (the broker stores a repeated commit twice, apache/rocketmq#5574);
a commit after a rollback (or after the last check dead-lettered it), and the reverse,
is SYSTEM_ERROR naming the earlier outcome; no half at that position is SYSTEM_ERROR
(the broker's "Find prepared transaction message failed"); another producer group than
the half's is SYSTEM_ERROR (the broker's ``checkPrepareMessage``). The answer goes out
once the control record is durable under the configured durability; the Java client
sends END_TRANSACTION oneway, so it gets none, and a later END_TRANSACTION or the next
check settles what a crash lost.

**CHECK_TRANSACTION_STATE.** :func:`check_sender` is remoting's way out of the gateway's
one check-back loop (:mod:`gateway.rocketmq.transaction_checks`): a oneway request to
one connected producer of the half's producer group (known from its heartbeats), with
the broker's header ``{topic, tranStateTableOffset, commitLogOffset, msgId,
transactionId, offsetMsgId, brokerName}`` (``msgId`` and ``transactionId`` are the
``UNIQ_KEY``, ``commitLogOffset`` the half's position) and the half message in the body
in the stored-message layout (the client picks its producer by the ``PGROUP`` property
there). The producer's checker answers with END_TRANSACTION ``fromTransactionCheck``.
The broker re-appends a half for every check, so the ``commitLogOffset`` it checks with
moves; here it is always the half's one position.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.fields import get_bool, get_int, get_str
from gateway.remoting.messages import encode_record
from gateway.remoting.replies import failure, request, response
from gateway.remoting.stored import pack_host
from gateway.rocketmq.producer import TransactionNotFound
from lmq.rocketmq import BROKER_NAME, parse_queue_lmq, split_mqtt_topic
from protocol.remoting.codes import RequestCode, ResponseCode, SysFlag

if TYPE_CHECKING:
    from broker_core import Message, PendingTransaction, Record
    from gateway.remoting.services import RemotingServices
    from gateway.rocketmq.transaction_checks import CheckSender
    from protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

#: The key this front end's check-back sender is registered under (its name).
FRONT_END = "remoting"

#: commitOrRollback values (``MessageSysFlag``): the transaction type bits.
NOT_TYPE = 0
COMMIT_TYPE = int(SysFlag.TRANSACTION_COMMIT)
ROLLBACK_TYPE = int(SysFlag.TRANSACTION_ROLLBACK)
_TX_MASK = int(SysFlag.TRANSACTION_MASK)

def register(table: DispatchTable) -> None:
    table.register(RequestCode.END_TRANSACTION, end_transaction)
    table.on_start.append(_start)
    table.on_stop.append(_stop)


def _start(services: RemotingServices) -> None:
    services.transactions.register(FRONT_END, check_sender(services))


def _stop(services: RemotingServices) -> None:
    services.transactions.unregister(FRONT_END)


def committed_sys_flag(sys_flag: int) -> int:
    """``sys_flag`` with its transaction type COMMIT (what a consumer sees)."""
    return (sys_flag & ~_TX_MASK) | COMMIT_TYPE


async def send_half(
    ctx: RequestContext, message: Message, lmqs: list[str], group: str, queue_id: int,
    uniq_key: str,
) -> RemotingCommand:
    """Store a half message and answer the send once it is durable."""
    try:
        result = await ctx.services.producer.send_half(message, lmqs, group)
    except Exception as exc:
        log.info("remoting transactional send refused: %s", exc, extra=ctx.conn.log_fields())
        return failure(exc)
    ctx.services.sent += 1
    ctx.conn.messages_in += 1
    return response(fields={
        "msgId": ctx.msg_id(result.position),
        "queueId": queue_id,
        "queueOffset": 0,
        "transactionId": uniq_key or None,
    })


async def end_transaction(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    group = get_str(cmd, "producerGroup")
    position = get_int(cmd, "commitLogOffset")
    resolution = get_int(cmd, "commitOrRollback")
    from_check = get_bool(cmd, "fromTransactionCheck")
    if resolution not in (COMMIT_TYPE, ROLLBACK_TYPE):
        if resolution != NOT_TYPE:
            raise RequestError(
                ResponseCode.INVALID_PARAMETER,
                f"commitOrRollback must be 8 (commit), 12 (rollback) or 0, not {resolution}")
        # UNKNOWN: the half stays pending and is checked again (the broker answers
        # nothing at all; a response keeps a two-way caller from waiting its timeout)
        return response(remark="the transaction stays pending; it will be checked back")
    try:
        result = await ctx.services.producer.end_transaction(
            position, resolution == COMMIT_TYPE, ctx.principal, ctx.client_id, group)
    except TransactionNotFound as exc:
        raise RequestError(
            ResponseCode.SYSTEM_ERROR, f"Find prepared transaction message failed: {exc}"
        ) from None
    log.debug("remoting transaction ended", extra={
        **ctx.conn.log_fields(), "position": position, "outcome": result.outcome.value,
        "from_check": from_check})
    return response()


def check_sender(services: RemotingServices) -> CheckSender:
    """CHECK_TRANSACTION_STATE to one connected producer of the half's group."""

    def send(txn: PendingTransaction, record: Record) -> bool:
        channels = [c for c in services.consumers.producer_channels(txn.group) if not c.closed]
        if not channels:
            return False
        channel = random.choice(channels)
        topic = split_mqtt_topic(txn.topic)[0]
        queue_id = 0
        for lmq in txn.lmqs:
            parsed = parse_queue_lmq(lmq)
            if parsed is not None and parsed[0] == topic:
                queue_id = parsed[1]
                break
        body = bytearray()
        host = pack_host("{}:{}".format(*channel.store_address))
        encode_record(body, record, topic=topic, queue_id=queue_id, queue_offset=0,
                      store_host=host)
        uniq = record.properties.get("UNIQ_KEY", b"").decode(errors="replace")
        channel.send_request(request(RequestCode.CHECK_TRANSACTION_STATE, {
            "topic": topic,
            "tranStateTableOffset": 0,
            "commitLogOffset": txn.position,
            "msgId": uniq or None,
            "transactionId": uniq or None,
            "offsetMsgId": channel.msg_id(txn.position),
            "brokerName": BROKER_NAME,
        }, bytes(body)))
        return True

    return send
