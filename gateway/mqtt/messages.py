"""MQTT PUBLISH <-> stored message.

What an MQTT 5 PUBLISH carries besides topic and payload is kept in the record's
properties under protocol-neutral names, so the AMQP front end reads the same fields
(``content_type``, ``correlation_data``, user properties as headers):

=====================  ==================================================================
record property        from
=====================  ==================================================================
``payload_format``     Payload Format Indicator (``b"1"`` = UTF-8 text)
``expires_at_ms``      Message Expiry Interval, as an absolute time (born + interval)
``content_type``       Content Type
``response_topic``     Response Topic
``correlation_data``   Correlation Data
``user_properties``    User Properties, in order, as ``u16 len, name, u16 len, value``...
``mqtt.qos2``          ``<client id>\\0<packet id>`` of a QoS 2 PUBLISH (exactly-once
                       bookkeeping across a crash, see :mod:`gateway.mqtt.sessions`)
=====================  ==================================================================

The Topic Alias and Subscription Identifiers are per connection and never stored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from broker_core import Message, Protocol, Record
from gateway.user_properties import decode_user_properties, encode_user_properties
from lmq.topic_space import amqp_to_mqtt
from protocol.mqtt import MQTTVersion, Properties, Publish
from protocol.mqtt.properties import EMPTY_PROPERTIES

EXPIRES_AT = "expires_at_ms"
QOS2_KEY = "mqtt.qos2"
#: The routing key and exchange of a message published over AMQP (set by the AMQP side).
AMQP_ROUTING_KEY = "amqp.routing_key"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_store_message(
    publish: Publish, client_id: str, now: int, qos2_packet_id: int | None = None,
    delayed: tuple[str, int] | None = None,
) -> Message:
    """The stored message of ``publish``. ``delayed``: (real topic, due ms) of a
    ``$delayed`` publish: stored under the real topic, its Message Expiry Interval
    counted from the due time (when it is published to the subscribers)."""
    props: dict[str, bytes] | None = None
    p = publish.properties
    if p is not EMPTY_PROPERTIES and p:
        props = {}
        if p.payload_format_indicator:
            props["payload_format"] = b"1"
        if p.message_expiry_interval is not None:
            start = now if delayed is None else delayed[1]
            props[EXPIRES_AT] = str(start + p.message_expiry_interval * 1000).encode()
        if p.content_type is not None:
            props["content_type"] = p.content_type.encode()
        if p.response_topic is not None:
            props["response_topic"] = p.response_topic.encode()
        if p.correlation_data is not None:
            props["correlation_data"] = p.correlation_data
        if p.user_properties:
            props["user_properties"] = encode_user_properties(p.user_properties)
    if qos2_packet_id is not None:
        props = props or {}
        props[QOS2_KEY] = f"{client_id}\x00{qos2_packet_id}".encode()
    # positional: keywords double the cost of building it (0.9 -> 0.4 us), once per publish
    return Message(
        publish.topic if delayed is None else delayed[0],  # topic
        publish.payload,  # body
        props,  # properties
        client_id,  # origin
        "",  # tag
        publish.qos,
        publish.retain,
        Protocol.MQTT,
        now,  # born_ms
    )


def mqtt_topic(record: Record) -> str:
    """The MQTT topic of a stored message (AMQP routing keys are translated)."""
    if record.protocol == Protocol.AMQP:
        key = record.properties.get(AMQP_ROUTING_KEY)
        return amqp_to_mqtt(key.decode() if key is not None else record.topic)
    return record.topic


def remaining_expiry(record: Record, now: int) -> int | None:
    """Seconds left of the message's expiry interval; None = never expires; 0 or less
    = expired (do not deliver)."""
    raw = record.properties.get(EXPIRES_AT)
    if raw is None:
        return None
    return (int(raw) - now + 999) // 1000


def publish_properties(
    rp: Mapping[str, bytes],
    version: MQTTVersion,
    expiry_left: int | None,
    subscription_ids: tuple[int, ...],
) -> Properties:
    """The MQTT 5 properties of a PUBLISH of a stored message whose store properties
    are ``rp`` (EMPTY_PROPERTIES for 3.x, or when there is nothing to carry)."""
    if version != MQTTVersion.V5:
        return EMPTY_PROPERTIES
    if not rp and expiry_left is None and not subscription_ids:
        return EMPTY_PROPERTIES
    user = rp.get("user_properties")
    ctype = rp.get("content_type")
    rtopic = rp.get("response_topic")
    return Properties(
        payload_format_indicator=1 if rp.get("payload_format") == b"1" else None,
        message_expiry_interval=expiry_left,
        content_type=ctype.decode() if ctype is not None else None,
        response_topic=rtopic.decode() if rtopic is not None else None,
        correlation_data=rp.get("correlation_data"),
        user_properties=decode_user_properties(user) if user else (),
        subscription_identifiers=subscription_ids,
    )
