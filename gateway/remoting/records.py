"""What redelivery (send-back, pop dead letters) needs of a stored record in the
remoting front end's record format (:mod:`gateway.remoting.messages`): its reconsume
count, and a copy of its properties with RocketMQ properties added.

A record sent over remoting keeps its RocketMQ properties string under ``rmq.props``
and its reconsume count under ``rmq.reconsume``; a record from MQTT or AMQP has
neither, and a RocketMQ consumer reads it with properties derived from its tag, topic
and user properties. A redelivered copy always gets an ``rmq.props`` (the derived one
plus what redelivery adds), so its reconsume count is read back like a sent message's.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_core import Record
from gateway.remoting.messages import (
    PROPS,
    RECONSUME,
    decode_properties,
    encode_properties,
    record_flags,
    rocketmq_properties,
)

__all__ = ["PROPS", "RECONSUME", "record_reconsume_times", "with_rocketmq_properties"]


def record_reconsume_times(rec: Record) -> int:
    """The reconsume count the stored layout shows for ``rec``."""
    return max(0, record_flags(rec)[2])


def with_rocketmq_properties(rec: Record, defaults: Mapping[str, str]) -> dict[str, bytes]:
    """``rec``'s stored properties, with ``defaults`` added to its RocketMQ properties
    where they are not set already."""
    props = dict(rec.properties)
    rmq = decode_properties(rocketmq_properties(rec))
    for name, value in defaults.items():
        rmq.setdefault(name, value)
    props[PROPS] = encode_properties(rmq).encode()
    return props
