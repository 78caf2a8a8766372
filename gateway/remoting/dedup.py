"""Dropping a copy already stored: the connector's dedup id on the send path.

An MQTT or AMQP broker cannot deduplicate, so the connector copies from one
at-least-once: a message in flight when the connector stops is delivered again. Into a
gateway, the connector sends each such copy with the property ``__LMQ_DEDUP_ID`` (the
message's id at the source: AMQP ``message-id``, MQTT 5 ``msg-id`` or the MQTT source's
digest; :data:`gateway.connector.endpoints.DEDUP_ID`). The JSON API's ``Idempotency-Key``
mechanism (docs/http.md), reused:

- the copy's RocketMQ message id (``UNIQ_KEY``, which the store's key index holds,
  durable with the record and replayed by recovery) is derived from the topic and the
  dedup id: SHA-256 of ``topic + "\\n" + id``, 32 hex digits, upper case;
- before it is stored, the key index is asked for that id on the topic among the
  records stored in the last ``remoting_dedup_window`` seconds; found, the send stores
  nothing and is answered as the first one was (its msgId, queueId and queueOffset);
- in a SEND_BATCH_MESSAGE, copies found (or repeated within the batch) are left out of
  the append and named by the first one's msgId in the answer.

Limits: the lookup is not serialised with an append still in flight, so two sends of
one id racing on two connections may both be stored (the connector writes one source
queue from one task, and a redelivery comes after a reconnect); a copy older than the
window is stored again; with ``store.key_index_properties`` emptied nothing is found.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from broker_core.clock import now_ms
from gateway.rocketmq.records import rocketmq_properties
from protocol.remoting.messages import decode_properties

if TYPE_CHECKING:
    from gateway.remoting.dispatch import RequestContext

DEDUP_ID = "__LMQ_DEDUP_ID"
ID_PROPERTY = "UNIQ_KEY"


def dedup_message_id(topic: str, dedup_id: str) -> str:
    """The ``UNIQ_KEY`` a copy with ``dedup_id`` is stored under on ``topic``."""
    return hashlib.sha256(f"{topic}\n{dedup_id}".encode()).hexdigest()[:32].upper()


def apply(topic: str, props: dict[str, str]) -> str:
    """Set ``props``' UNIQ_KEY from its dedup id; return that id."""
    message_id = dedup_message_id(topic, props[DEDUP_ID])
    props[ID_PROPERTY] = message_id
    return message_id


def stored(ctx: RequestContext, topic: str, message_id: str) -> tuple[int, int, int] | None:
    """(log position, queue id, queue offset) of the copy stored on ``topic`` with
    ``message_id`` within the window, or None."""
    since = now_ms() - ctx.services.dedup_window_ms
    prefix = f"rmq:{topic}:"
    for record in ctx.services.store.find_by_key(topic, message_id, 4, since):
        if record.topic.split("/")[0] != topic:
            continue
        if decode_properties(rocketmq_properties(record)).get(ID_PROPERTY) != message_id:
            continue
        for lmq, offset in record.dispatch:
            if lmq.startswith(prefix):
                queue = lmq[len(prefix):]
                if queue.isdigit():
                    return record.position, int(queue), offset
        return record.position, 0, 0
    return None
