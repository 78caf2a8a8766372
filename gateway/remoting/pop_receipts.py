"""RocketMQ pop receipts (``extraInfo``, the ``POP_CK`` property) <-> the store's
in-flight keys.

A RocketMQ receipt is ExtraInfoUtil's space-separated string::

    ckOffset popTime invisibleTime reviveQid topicMark brokerName queueId msgOffset

The store tracks a popped message by its in-flight key ``(visible_at, group, lmq,
offset)`` (:class:`broker_core.consumer_state.InflightKey`; the store's receipt handle
is that key encoded). Every field of the key can be rebuilt from the receipt and the
ack's header, with no table of our own:

==============  ==================================================================
key field       from
==============  ==================================================================
``visible_at``  ``popTime + invisibleTime``: every message of one POP response is
                popped with one pop time (``store.pop(..., now=popTime)``), so this
                sum is exactly the time the store recorded
``group``       the header's ``consumerGroup`` (the pop group is the RocketMQ group)
``lmq``         ``rmq:<topic>:<queueId>`` of the header's ``topic`` and ``queueId``
                (clients send the real topic: for ``topicMark`` 1 the pop retry
                topic ``%RETRY%<group>_<topic>``, ExtraInfoUtil.getRealTopic)
``offset``      the header's ``offset`` (the receipt's ``msgOffset``)
==============  ==================================================================

The in-flight key is in the store's state RocksDB, so a receipt handed out before a
restart acks after it. ``ckOffset`` is the lowest offset popped from that queue in the
response (batch acks send bit sets relative to it); ``reviveQid`` is always 0 (the
store revives every group itself; RocketMQ uses 999 for orderly pops, which are not
served); ``brokerName`` is the gateway's.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from broker_core.consumer_state import InflightKey
from broker_core.receipts import encode_receipt
from lmq.rocketmq import RETRY_PREFIX, queue_lmq

__all__ = [
    "MARK_NORMAL",
    "MARK_RETRY",
    "MARK_RETRY_V2",
    "REVIVE_QID",
    "ExtraInfo",
    "bitset_offsets",
    "pop_retry_topic",
    "real_topic",
    "store_receipt",
    "topic_mark",
]

MARK_NORMAL = "0"
MARK_RETRY = "1"
MARK_RETRY_V2 = "2"
REVIVE_QID = 0


class BadReceipt(ValueError):
    """An ``extraInfo`` that is not ExtraInfoUtil's format."""


def pop_retry_topic(topic: str, group: str) -> str:
    """RocketMQ 5's pop retry topic of ``topic`` for ``group`` (KeyBuilder V1)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_mark(topic: str) -> str:
    """ExtraInfoUtil's topic mark: 2 for a V2 retry topic (``%RETRY%g+t``), 1 for any
    other retry topic, else 0."""
    if topic.startswith(RETRY_PREFIX):
        return MARK_RETRY_V2 if "+" in topic else MARK_RETRY
    return MARK_NORMAL


def real_topic(topic: str, group: str, mark: str) -> str:
    """ExtraInfoUtil.getRealTopic: the topic a receipt's message was popped from."""
    if mark == MARK_RETRY:
        return pop_retry_topic(topic, group)
    if mark == MARK_RETRY_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    if mark == MARK_NORMAL:
        return topic
    raise BadReceipt(f"bad topic mark {mark!r}")


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    mark: str
    broker_name: str
    queue_id: int
    msg_offset: int | None = None

    def encode(self) -> str:
        head = (
            f"{self.ck_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} "
            f"{self.mark} {self.broker_name} {self.queue_id}"
        )
        return head if self.msg_offset is None else f"{head} {self.msg_offset}"

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        parts = text.split(" ")
        if len(parts) not in (7, 8):
            raise BadReceipt(f"extraInfo has {len(parts)} fields, not 7 or 8: {text!r}")
        try:
            return cls(
                int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4],
                parts[5], int(parts[6]), int(parts[7]) if len(parts) == 8 else None,
            )
        except ValueError:
            raise BadReceipt(f"extraInfo has a field that is not a number: {text!r}") from None

    @property
    def visible_at(self) -> int:
        return self.pop_time + self.invisible_time


def store_receipt(group: str, topic: str, queue_id: int, offset: int, visible_at: int) -> str:
    """The store's receipt handle of the message ``offset`` of ``topic``'s queue
    ``queue_id`` popped by ``group`` and invisible until ``visible_at``."""
    return encode_receipt(InflightKey(visible_at, group, queue_lmq(topic, queue_id), offset))


def bitset_offsets(start: int, encoded: str) -> list[int]:
    """The offsets of a batch ack's bit set: fastjson writes Java's
    ``BitSet.toByteArray()`` (little-endian bytes, bit ``i`` of byte ``i // 8``) as
    base64; bit ``i`` set means offset ``start + i``."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise BadReceipt("the batch ack's bit set is not base64") from None
    out = []
    for index, byte in enumerate(raw):
        while byte:
            low = byte & -byte
            out.append(start + index * 8 + low.bit_length() - 1)
            byte ^= low
    return out
