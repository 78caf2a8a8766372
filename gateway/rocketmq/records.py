"""RocketMQ message <-> stored record: the record format every RocketMQ front end
(remoting, gRPC) writes and reads, so a message sent over one is read by the other and
by MQTT and AMQP.

A message sent over remoting to topic ``T`` is stored as one record:

=====================  ==================================================================
record field           from
=====================  ==================================================================
``topic``              the full MQTT-style name: ``T`` joined with ``mqttSecondTopic``
                       (``orders`` + ``/eu/42`` = ``orders/eu/42``; ``orders`` without)
``tag``                the ``TAGS`` property ("" without)
``body``               the body as sent (a compressed body stays compressed, flagged)
``born_ms``            ``bornTimestamp``
``origin``             the producer group
``qos``                1 (stored, acknowledged: at least once for MQTT subscribers)
property ``rmq.props`` the RocketMQ properties string as sent (``k\\x01v\\x02``...)
property ``KEYS``,     copies of those two properties, for the store's key index
``UNIQ_KEY``           (``QUERY_MESSAGE`` by key, lookups by message id)
property               a copy of the message group (gRPC ``message_group``, remoting's
``__SHARDINGKEY``      sharding key), read by the store's FIFO pop (broker_core.fifo)
``user_properties``    the properties that are not RocketMQ system properties, as MQTT 5
                       user properties (see :mod:`gateway.user_properties`): MQTT 5
                       subscribers and AMQP consumers (headers) see them
``rmq.sysflag``,       ``sysFlag`` and ``flag`` when not 0, ``reconsumeTimes`` when not
``rmq.flag``,          0, and the producer's address (``host:port``): what the
``rmq.reconsume``,     stored-message layout gives back to a RocketMQ consumer
``rmq.born_host``
=====================  ==================================================================

A record written by MQTT or AMQP is read by a RocketMQ consumer with its user
properties as message properties, its tag as ``TAGS`` and ``mqttSecondTopic`` derived
from its MQTT name (:func:`mqtt_name`: an AMQP record's routing key mapped to MQTT) by
:func:`rocketmq_properties`.

Also what redelivery (send-back, pop dead letters) needs of a stored record: its
reconsume count, and a copy of its properties with RocketMQ properties added. A
redelivered copy always gets an ``rmq.props`` (the derived one plus what redelivery
adds), so its reconsume count is read back like a sent message's.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_core import Message, Protocol, Record
from gateway.user_properties import decode_user_properties, encode_user_properties
from lmq.rocketmq import MQTT_SECOND_TOPIC, SYSTEM_PROPERTIES, join_mqtt_topic, split_mqtt_topic
from lmq.topic_space import amqp_to_mqtt
from protocol.remoting.messages import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    decode_properties,
    encode_properties,
)

__all__ = [
    "AMQP_ROUTING_KEY",
    "BORN_HOST",
    "FLAG",
    "PROPS",
    "RECONSUME",
    "SYSFLAG",
    "USER_PROPERTIES",
    "decode_properties",
    "encode_properties",
    "foreign_properties",
    "mqtt_name",
    "record_flags",
    "record_reconsume_times",
    "rocketmq_properties",
    "to_store_message",
    "with_rocketmq_properties",
]

_INTERNAL = Protocol.INTERNAL
PROPS = "rmq.props"
SYSFLAG = "rmq.sysflag"
FLAG = "rmq.flag"
RECONSUME = "rmq.reconsume"
BORN_HOST = "rmq.born_host"
USER_PROPERTIES = "user_properties"
#: Where an AMQP record keeps its routing key (set by the AMQP front end).
AMQP_ROUTING_KEY = "amqp.routing_key"

NAME_SEPARATOR = NAME_VALUE_SEPARATOR



def to_store_message(
    topic: str,
    body: bytes,
    props_text: str,
    props: Mapping[str, str],
    *,
    origin: str = "",
    born_ms: int = 0,
    sys_flag: int = 0,
    flag: int = 0,
    reconsume_times: int = 0,
    born_host: str = "",
) -> Message:
    """The record of a message sent to RocketMQ topic ``topic`` (see the module doc)."""
    stored: dict[str, bytes] = {PROPS: props_text.encode()}
    keys = props.get("KEYS")
    if keys:
        stored["KEYS"] = keys.encode()
    uniq = props.get("UNIQ_KEY")
    if uniq:
        stored["UNIQ_KEY"] = uniq.encode()
    group = props.get("__SHARDINGKEY")
    if group:  # the message group: the unit of order of the store's FIFO pop
        stored["__SHARDINGKEY"] = group.encode()
    if not props.keys() <= SYSTEM_PROPERTIES:  # one C-level test in the common case
        user = [(k, v) for k, v in props.items() if k not in SYSTEM_PROPERTIES]
        stored[USER_PROPERTIES] = encode_user_properties(user)
    if sys_flag:
        stored[SYSFLAG] = str(sys_flag).encode()
    if flag:
        stored[FLAG] = str(flag).encode()
    if reconsume_times:
        stored[RECONSUME] = str(reconsume_times).encode()
    if born_host:
        stored[BORN_HOST] = born_host.encode()
    second = props.get(MQTT_SECOND_TOPIC)
    # positional: Message's field order (topic, body, properties, origin, tag, qos,
    # retain, protocol, born_ms); keywords cost a measurable part of a send
    return Message(
        join_mqtt_topic(topic, second) if second else topic, body, stored, origin,
        props.get("TAGS", ""), 1, False, _INTERNAL, born_ms,
    )


def rocketmq_properties(record: Record) -> str:
    """The properties string a RocketMQ consumer gets for ``record``."""
    props = record.properties
    raw = props.get(PROPS)
    if raw is not None:
        return raw.decode()
    return foreign_properties(record.protocol, record.topic, record.tag, props)


def foreign_properties(
    protocol: int, topic: str, tag: str, props: Mapping[str, bytes]
) -> str:
    """The properties string of a record not sent over RocketMQ (MQTT, AMQP, internal):
    its user properties, its tag as ``TAGS`` and its second topic as
    ``mqttSecondTopic``."""
    out: dict[str, str] = {}
    user = props.get(USER_PROPERTIES)
    if user:
        for name, value in decode_user_properties(user):
            # what the properties string cannot carry is left out
            if name and value and NAME_SEPARATOR not in name + value and (
                PROPERTY_SEPARATOR not in name + value
            ):
                out[name] = value
    if tag:
        out["TAGS"] = tag
    second = split_mqtt_topic(_mqtt_name(protocol, topic, props))[1]
    if second:
        out[MQTT_SECOND_TOPIC] = second
    return encode_properties(out)


def mqtt_name(record: Record) -> str:
    """The record's name in the one topic space: its topic, or for an AMQP record (whose
    topic is its routing key) the routing key mapped to MQTT (``orders.eu.42`` ->
    ``orders/eu/42``), as the MQTT front end reads it."""
    return _mqtt_name(record.protocol, record.topic, record.properties)


def _mqtt_name(protocol: int, topic: str, props: Mapping[str, bytes]) -> str:
    if protocol == Protocol.AMQP:
        key = props.get(AMQP_ROUTING_KEY)
        return amqp_to_mqtt(key.decode() if key is not None else topic)
    return topic


def record_flags(record: Record) -> tuple[int, int, int, str]:
    """``(sysFlag, flag, reconsumeTimes, born host)`` stored with ``record``."""
    props = record.properties
    if PROPS not in props:
        return 0, 0, 0, ""
    sys_flag = props.get(SYSFLAG)
    flag = props.get(FLAG)
    reconsume = props.get(RECONSUME)
    born = props.get(BORN_HOST)
    return (
        int(sys_flag) if sys_flag else 0,
        int(flag) if flag else 0,
        int(reconsume) if reconsume else 0,
        born.decode() if born else "",
    )


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
