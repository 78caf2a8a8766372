"""RocketMQ message <-> stored record for remoting consumers: the stored-message layout
(:func:`encode_record`) over the record format of :mod:`gateway.rocketmq.records`
(shared with the gRPC front end, re-exported here), which describes how a message is
stored and how a record from MQTT or AMQP reads as a RocketMQ message.

Writing a record in the stored-message layout (PULL_MESSAGE, QUERY_MESSAGE): from a
decoded :class:`Record` with :func:`encode_record` / :func:`write_record`, or from one
read undecoded (``store.pull_raw``) with :func:`write_raw`, which copies a RocketMQ
record's ``rmq.props`` bytes as they are and decodes nothing else but the few flags.
"""

from __future__ import annotations

from broker_core import Record
from broker_core.record import RawMessage, raw_properties
from gateway.remoting.stored import pack_host, topic_field, write_stored
from gateway.rocketmq.records import (
    AMQP_ROUTING_KEY,
    BORN_HOST,
    FLAG,
    PROPS,
    RECONSUME,
    SYSFLAG,
    USER_PROPERTIES,
    decode_properties,
    encode_properties,
    foreign_properties,
    mqtt_name,
    record_flags,
    rocketmq_properties,
    to_store_message,
)
from lmq.rocketmq import SYSTEM_PROPERTIES

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
    "foreign_properties",
    "mqtt_name",
    "record_flags",
    "rocketmq_properties",
    "to_store_message",
    "write_raw",
    "write_record",
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
    write_record(out, record, topic_field(topic), queue_id, queue_offset, store_host)


def write_record(
    out: bytearray,
    record: Record,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    store_host: tuple[bytes, bool],
) -> None:
    """:func:`encode_record` for the pull path: positional, the topic as
    :func:`~gateway.remoting.stored.topic_field` gives it."""
    props = record.properties
    text = props.get(PROPS)
    if text is None:
        write_stored(
            out, queue_id, 0, queue_offset, record.position, 0,
            record.born_ms or record.store_ms, store_host, record.store_ms, store_host, 0,
            record.body, topic,
            foreign_properties(record.protocol, record.topic, record.tag, props).encode())
        return
    sys_flag = props.get(SYSFLAG)
    flag = props.get(FLAG)
    reconsume = props.get(RECONSUME)
    born = props.get(BORN_HOST)
    write_stored(
        out, queue_id, int(flag) if flag else 0, queue_offset, record.position,
        int(sys_flag) if sys_flag else 0, record.born_ms or record.store_ms,
        pack_host(born.decode()) if born else store_host, record.store_ms, store_host,
        int(reconsume) if reconsume else 0, record.body, topic, text)


_PROPS_RAW = PROPS.encode()
_SYSFLAG_RAW = SYSFLAG.encode()
_FLAG_RAW = FLAG.encode()
_RECONSUME_RAW = RECONSUME.encode()
_BORN_HOST_RAW = BORN_HOST.encode()


def write_raw(
    out: bytearray,
    message: RawMessage,
    topic: bytes,
    queue_id: int,
    store_host: tuple[bytes, bool],
) -> None:
    """:func:`write_record` for a record read undecoded (``store.pull_raw``): the same
    bytes, from the record's stored fields; the properties string of a RocketMQ record
    is copied as stored, never decoded."""
    block = message.properties
    props = raw_properties(block) if block else {}
    text = props.get(_PROPS_RAW)
    if text is None:
        names = {k.decode(): v for k, v in props.items()}
        write_stored(
            out, queue_id, 0, message.offset, message.position, 0,
            message.born_ms or message.store_ms, store_host, message.store_ms, store_host, 0,
            message.body, topic,
            foreign_properties(message.protocol, message.topic.decode(),
                               message.tag.decode(), names).encode())
        return
    sys_flag = props.get(_SYSFLAG_RAW)
    flag = props.get(_FLAG_RAW)
    reconsume = props.get(_RECONSUME_RAW)
    born = props.get(_BORN_HOST_RAW)
    write_stored(
        out, queue_id, int(flag) if flag else 0, message.offset, message.position,
        int(sys_flag) if sys_flag else 0, message.born_ms or message.store_ms,
        pack_host(born.decode()) if born else store_host, message.store_ms, store_host,
        int(reconsume) if reconsume else 0, message.body, topic, text)
