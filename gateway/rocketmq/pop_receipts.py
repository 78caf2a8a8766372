"""RocketMQ pop receipts (``extraInfo``, the ``POP_CK`` property) <-> the store's
in-flight keys.

A RocketMQ receipt is ExtraInfoUtil's space-separated string::

    ckOffset popTime invisibleTime reviveQid topicMark brokerName queueId msgOffset

The store tracks a popped message by its in-flight key ``(visible_at, group, lmq,
offset)`` (:meth:`broker_core.PopConsumer.receipt`; the store's receipt handle
is that key encoded). Every field of the key can be rebuilt from the receipt and the
ack's header, with no table of our own:

==============  ==================================================================
key field       from
==============  ==================================================================
``visible_at``  ``popTime + invisibleTime``: every message of one POP response is
                popped with one pop time (``store.pop.pop(..., now=popTime)``), so this
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
served); ``brokerName`` is the gateway's. The string itself is the codec's
(:class:`protocol.remoting.pop.ExtraInfo`).
"""

from __future__ import annotations

from broker_core import PopConsumer
from lmq.rocketmq import RETRY_PREFIX, queue_lmq
from protocol.remoting.pop import ExtraInfo

__all__ = ["REVIVE_QID", "ExtraInfo", "pop_retry_topic", "store_receipt", "visible_at"]

#: Every pop's ``reviveQid``: the store revives every group itself (RocketMQ's 999
#: marks an orderly pop, which is not served).
REVIVE_QID = 0


def pop_retry_topic(topic: str, group: str) -> str:
    """RocketMQ 5's pop retry topic of ``topic`` for ``group`` (KeyBuilder V1, what the
    receipt's retry marker 1 names)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def visible_at(info: ExtraInfo) -> int:
    """When the receipt's message becomes visible again: the store's in-flight time."""
    return info.pop_time + info.invisible_time


def store_receipt(group: str, topic: str, queue_id: int, offset: int, visible: int) -> str:
    """The store's receipt handle of the message ``offset`` of ``topic``'s queue
    ``queue_id`` popped by ``group`` and invisible until ``visible``."""
    return PopConsumer.receipt(group, queue_lmq(topic, queue_id), offset, visible)
