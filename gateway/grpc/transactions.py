"""EndTransaction, transaction check-backs, and RecallMessage.

**Transactions.** SendMessage stores a TRANSACTION message as the store's half message
(:mod:`gateway.grpc.send`; its transaction id is ``lmq-tx:<log position>``).
EndTransaction commits it (one control record dispatches it to every LMQ it was sent
to) or rolls it back, answered once that record is durable under the configured
durability. Ending is idempotent in the store: a repeated commit (or rollback) answers
OK and delivers nothing twice; a commit after a rollback, or after the message was
dead-lettered, is PRECONDITION_FAILED naming the earlier outcome (and the reverse). An
id that is not ours, or names no transaction of the request's topic, is
INVALID_TRANSACTION_ID.

**Check-backs.** The gateway's one check-back loop
(:mod:`gateway.rocketmq.transaction_checks`, shared with remoting) asks the store every
second for the half messages whose check is due; :func:`check_sender` is the gRPC way
out: as RocketMQ's proxy does, a ``RecoverOrphanedTransactionCommand`` (the message and
its transaction id ``lmq-tx:<position>``) on the Telemetry stream of one producer
publishing to its topic; the producer's checker answers with EndTransaction (source
SOURCE_SERVER_CHECK). A half sent over remoting may be checked this way too (when no
remoting producer of its group is connected): its gRPC transaction id works as well.

**RecallMessage** cancels a pending DELAY message by the ``recall_handle`` its send
returned (``lmq:<log position>``, :mod:`gateway.grpc.send`): the store's
``cancel_timer``, durable before the answer; the message is then never delivered. A
handle that is not ours is ILLEGAL_MESSAGE_ID; one whose message already fired, was
recalled, or is of another topic is NOT_FOUND. EndTransaction and RecallMessage are the
producer service's (:mod:`gateway.rocketmq.producer`); both need the publish right on
the topic.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from gateway.grpc.records import encode_record, gateway_store_host
from gateway.grpc.send import RECALL_PREFIX, TRANSACTION_PREFIX, failure
from gateway.rocketmq.producer import ProducerError
from lmq.rocketmq import parse_queue_lmq, split_mqtt_topic
from protocol.grpc import Code, StatusError, ok

if TYPE_CHECKING:
    from broker_core import PendingTransaction, Record
    from gateway.grpc.call import Call
    from gateway.grpc.services import GrpcServices
    from gateway.rocketmq.transaction_checks import CheckSender

__all__ = ["check_sender", "end_transaction", "recall_message"]

log = logging.getLogger("lmq.grpc")

def _transaction_position(transaction_id: str) -> int:
    digits = (transaction_id[len(TRANSACTION_PREFIX):]
              if transaction_id.startswith(TRANSACTION_PREFIX) else "")
    if not digits.isdigit():
        raise StatusError(
            Code.INVALID_TRANSACTION_ID,
            f"not a transaction id of this gateway: {transaction_id!r}")
    return int(digits)


async def end_transaction(
    call: Call, request: service_pb2.EndTransactionRequest
) -> service_pb2.EndTransactionResponse:
    topic = request.topic.name
    if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
        raise StatusError(Code.BAD_REQUEST, "the transaction resolution must be COMMIT or ROLLBACK")
    position = _transaction_position(request.transaction_id)
    try:
        result = await call.services.producer.end_transaction(
            position, request.resolution == pb.COMMIT, call.principal, call.client_id,
            topic=topic)
    except ProducerError as exc:
        raise failure(exc) from None
    log.debug("gRPC transaction ended", extra={
        **call.log_fields(), "position": position, "outcome": result.outcome.value,
        "source": pb.TransactionSource.Name(request.source)})
    return service_pb2.EndTransactionResponse(status=ok())


def check_sender(services: GrpcServices) -> CheckSender:
    """The gRPC way to a producer for the gateway's one check-back loop
    (:mod:`gateway.rocketmq.transaction_checks`): a ``RecoverOrphanedTransactionCommand``
    on the Telemetry stream of one producer publishing to the half's topic."""

    def producers(topic: str) -> list[str]:
        out = []
        for client in services.clients.clients.values():
            settings = client.settings
            if client.outbox is None or settings is None or not settings.HasField("publishing"):
                continue
            if any(t.name == topic for t in settings.publishing.topics):
                out.append(client.client_id)
        return out

    def send(txn: PendingTransaction, rec: Record) -> bool:
        topic = split_mqtt_topic(txn.topic)[0]
        found = producers(topic)
        if not found:
            return False
        queue_id = 0
        for lmq in txn.lmqs:
            parsed = parse_queue_lmq(lmq)
            if parsed is not None and parsed[0] == topic:
                queue_id = parsed[1]
                break
        message = encode_record(
            services, gateway_store_host(services), rec, topic=topic, queue_id=queue_id, offset=0)
        command = service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=f"{TRANSACTION_PREFIX}{txn.position}"))
        random.shuffle(found)
        return any(services.clients.send_command(cid, command) for cid in found)

    return send


async def recall_message(
    call: Call, request: service_pb2.RecallMessageRequest
) -> service_pb2.RecallMessageResponse:
    handle = request.recall_handle
    digits = handle[len(RECALL_PREFIX):] if handle.startswith(RECALL_PREFIX) else ""
    if not digits.isdigit():
        raise StatusError(Code.ILLEGAL_MESSAGE_ID, f"not a recall handle: {handle!r}")
    try:
        record = await call.services.producer.recall(
            int(digits), request.topic.name, call.principal, call.client_id)
    except ProducerError as exc:
        raise failure(exc) from None
    message_id = record.properties.get("UNIQ_KEY", b"").decode()
    return service_pb2.RecallMessageResponse(status=ok(), message_id=message_id)
