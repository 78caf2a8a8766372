"""RocketMQ message <-> stored record for remoting consumers: the stored-message layout
(:func:`encode_record`) over the record format of :mod:`gateway.rocketmq.records`
(shared with the gRPC front end, re-exported here), which describes how a message is
stored and how a record from MQTT or AMQP reads as a RocketMQ message.
"""

from __future__ import annotations

from broker_core import Record
from gateway.remoting.stored import encode_stored, pack_host
from gateway.rocketmq.records import (
    AMQP_ROUTING_KEY,
    BORN_HOST,
    FLAG,
    PROPS,
    RECONSUME,
    SYSFLAG,
    SYSTEM_PROPERTIES,
    USER_PROPERTIES,
    decode_properties,
    encode_properties,
    mqtt_name,
    record_flags,
    rocketmq_properties,
    to_store_message,
)

__all__ = [
    "AMQP_ROUTING_KEY",
    "BORN_HOST",
    "FLAG",
    "PROPS",
    "RECONSUME",
    "SYSFLAG",
    "SYSTEM_PROPERTIES",
    "USER_PROPERTIES",
    "decode_properties",
    "encode_properties",
    "encode_record",
    "mqtt_name",
    "record_flags",
    "rocketmq_properties",
    "to_store_message",
]


def encode_record(
    out: bytearray,
    record: Record,
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    store_host: tuple[bytes, bool],
) -> None:
    """Append ``record`` to ``out`` in the stored-message layout, as a message of queue
    ``queue_id`` of ``topic`` at ``queue_offset``. ``ValueError``: its properties are
    too long for the layout's 2-byte length."""
    sys_flag, flag, reconsume, born = record_flags(record)
    encode_stored(
        out, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        physical_offset=record.position, sys_flag=sys_flag,
        born_ms=record.born_ms or record.store_ms,
        born_host=pack_host(born) if born else store_host,
        store_ms=record.store_ms, store_host=store_host,
        reconsume_times=reconsume, body=record.body, topic=topic,
        properties=rocketmq_properties(record))
