"""AMQP message <-> stored record, both ways, and across protocols.

A message published over AMQP is stored with ``protocol=AMQP``, ``topic`` = its routing
key, ``qos`` 1 if ``delivery_mode == 2`` else 0, and these record properties:

=====================  ==================================================================
``amqp.header``        the RAW content-header properties (flag words + property list):
                       forwarded unchanged to AMQP consumers (re-encoding is lossy)
``amqp.exchange``      the exchange it was published to (absent: the default exchange)
``amqp.routing_key``   its routing key (absent: the topic, which is the routing key;
                       only dead-lettered copies and older records carry it)
``content_type``       for MQTT 5 subscribers (protocol-neutral names, see
``correlation_data``   :mod:`gateway.mqtt.messages`): content_type, correlation_id,
``user_properties``    the headers whose values are strings,
``expires_at_ms``      and the per-message ``expiration`` as an absolute time
``amqp.group_id``      the ``JMSXGroupID`` header (message groups), and
``amqp.group_close``   ``1`` when ``JMSXGroupSeq`` is negative (it closes the group)
``amqp.due_ms``        the due time of a delayed message (``x-delayed-message``); its
                       ``expires_at_ms`` counts from it too
=====================  ==================================================================

A record published over MQTT reaches AMQP consumers as from exchange ``amq.topic`` with
routing key ``mqtt_to_amqp(topic)``, ``delivery_mode`` 2 for QoS >= 1 (else 1), headers
from the user properties plus ``x-mqtt-publish-qos``, and content_type / correlation_id;
those properties are encoded once per record (a small cache by log position).
"""

from __future__ import annotations

import datetime
import struct
from collections import OrderedDict
from typing import Any

from pamqp import commands, header

from broker_core import Message, Protocol, Record
from gateway.user_properties import decode_user_properties, encode_user_properties
from lmq.topic_space import mqtt_to_amqp
from protocol.amqp.fastpath import (
    FLAG_CONTENT_ENCODING,
    FLAG_CONTENT_TYPE,
    FLAG_CORRELATION_ID,
    FLAG_DELIVERY_MODE,
    FLAG_HEADERS,
    FLAG_PRIORITY,
    ContentHeader,
)

HEADER = "amqp.header"
#: The ``JMSXGroupID`` header of a message (ActiveMQ/Artemis message groups; Artemis's
#: core name ``_AMQ_GROUP_ID`` too), and ``b"1"`` when its ``JMSXGroupSeq`` is negative
#: (it closes the group, as Artemis): kept as properties
#: so a queue reads them without decoding the headers table (gateway.amqp.groups).
#: The due time (epoch ms) of a message delayed by an ``x-delayed-message`` exchange:
#: when it enters its queues, from which ``x-message-ttl`` counts (gateway.amqp.delayed).
DUE_AT = "amqp.due_ms"
GROUP_ID = "amqp.group_id"
GROUP_CLOSE = "amqp.group_close"
EXCHANGE = "amqp.exchange"
ROUTING_KEY = "amqp.routing_key"
EXPIRES_AT = "expires_at_ms"

_U32 = struct.Struct(">I")
_CACHE_SIZE = 1024
_mqtt_props: OrderedDict[int, bytes] = OrderedDict()
#: _neutral_properties by raw properties (read-only values)
_neutral: dict[bytes, dict[str, bytes]] = {}
_NEUTRAL_MAX = 256
_NEUTRAL_MAX_BYTES = 1024


def _short_strings(raw: bytes, flags: int) -> tuple[bytes | None, bytes | None]:
    """content_type and correlation_id from raw properties (flag word first)."""
    p = 2
    content_type = correlation_id = None
    if flags & FLAG_CONTENT_TYPE:
        content_type = raw[p + 1 : p + 1 + raw[p]]
        p += 1 + raw[p]
    if flags & FLAG_CONTENT_ENCODING:
        p += 1 + raw[p]
    if flags & FLAG_HEADERS:
        p += 4 + _U32.unpack_from(raw, p)[0]
    if flags & FLAG_DELIVERY_MODE:
        p += 1
    if flags & FLAG_PRIORITY:
        p += 1
    if flags & FLAG_CORRELATION_ID:
        correlation_id = raw[p + 1 : p + 1 + raw[p]]
    return content_type, correlation_id


def _neutral_properties(ch: ContentHeader) -> dict[str, bytes]:
    """The protocol-neutral record properties of raw AMQP properties: content_type,
    correlation_data, user_properties (string-valued headers). A function of the raw
    bytes only, so kept by them (publishers mostly repeat their properties; decoding a
    headers table costs ~10 us)."""
    raw = ch.properties_raw
    found = _neutral.get(raw)
    if found is not None:
        return found
    found = {}
    flags = (raw[0] << 8) | raw[1] if len(raw) >= 2 else 0
    if flags & (FLAG_CONTENT_TYPE | FLAG_CORRELATION_ID):
        content_type, correlation_id = _short_strings(raw, flags)
        if content_type is not None:
            found["content_type"] = content_type
        if correlation_id is not None:
            found["correlation_data"] = correlation_id
    if flags & FLAG_HEADERS:
        headers = ch.headers or {}
        pairs = [(k, v) for k, v in headers.items() if isinstance(v, str)]
        if pairs:
            found["user_properties"] = encode_user_properties(pairs)
        group = headers.get("JMSXGroupID", headers.get("_AMQ_GROUP_ID"))
        if isinstance(group, str) and group:
            found[GROUP_ID] = group.encode()
        elif isinstance(group, bytes | bytearray) and group:
            found[GROUP_ID] = bytes(group)
        seq = headers.get("JMSXGroupSeq")
        if GROUP_ID in found and isinstance(seq, int) and not isinstance(seq, bool) and seq < 0:
            found[GROUP_CLOSE] = b"1"  # a negative sequence number closes the group
    if len(raw) <= _NEUTRAL_MAX_BYTES:  # (bounded: at most 256 entries of 1 KiB)
        if len(_neutral) >= _NEUTRAL_MAX:
            _neutral.clear()
        _neutral[raw] = found
    return found


def to_store_message(
    exchange: str, routing_key: str, ch: ContentHeader, body: bytes, origin: str, now: int
) -> Message:
    # amqp.routing_key is the topic and amqp.exchange "" is the default: both are left
    # out then (every reader falls back to those), a third of the per-publish property
    # encoding and decoding
    props: dict[str, bytes] = {HEADER: ch.properties_raw}
    if exchange:
        props[EXCHANGE] = exchange.encode()
    neutral = _neutral_properties(ch)
    if neutral:
        props.update(neutral)
    if ch.expiration is not None:
        try:
            props[EXPIRES_AT] = str(now + max(0, int(ch.expiration))).encode()
        except ValueError:
            pass
    # positional: keywords double the cost of building it, once per publish
    return Message(
        routing_key,  # topic
        body,
        props,  # properties
        origin,
        "",  # tag
        1 if ch.delivery_mode == 2 else 0,  # qos
        False,  # retain
        Protocol.AMQP,
        now,  # born_ms
    )


def forget_cached_properties() -> None:
    """Drop the properties cached by log position: a store opened in this process
    after another (tests, a restart in place) reuses positions."""
    _mqtt_props.clear()


def delivery_fields(record: Record) -> tuple[str | bytes, str | bytes, bytes]:
    """(exchange, routing key, raw properties) to deliver ``record`` over AMQP (str or
    UTF-8 bytes, as the encoders take them)."""
    rp = record.properties
    raw = rp.get(HEADER)
    if raw is not None:
        return rp.get(EXCHANGE, b""), rp.get(ROUTING_KEY) or record.topic, raw
    routing_key = mqtt_to_amqp(record.topic)
    cached = _mqtt_props.get(record.position)
    if cached is None:
        cached = properties_raw(foreign_properties(record))
        _mqtt_props[record.position] = cached
        if len(_mqtt_props) > _CACHE_SIZE:
            _mqtt_props.popitem(last=False)
    return "amq.topic", routing_key, cached


def foreign_properties(record: Record) -> commands.Basic.Properties:
    """AMQP properties of a record published over MQTT (or by the gateway)."""
    rp = record.properties
    headers: dict[str, Any] = {}
    user = rp.get("user_properties")
    if user:
        headers.update(decode_user_properties(user))
    headers["x-mqtt-publish-qos"] = record.qos
    ctype = rp.get("content_type")
    corr = rp.get("correlation_data")
    expiration = None
    exp = rp.get(EXPIRES_AT)
    if exp is not None:
        expiration = str(max(0, int(exp) - record.store_ms))
    return commands.Basic.Properties(
        content_type=ctype.decode("utf-8", "replace") if ctype is not None else None,
        headers=headers,
        delivery_mode=2 if record.qos >= 1 else 1,
        correlation_id=corr.decode("utf-8", "replace")[:255] if corr is not None else None,
        expiration=expiration,
    )


def properties_raw(props: commands.Basic.Properties) -> bytes:
    """Flag words + property list of ``props`` (what ``amqp.header`` holds)."""
    return header.ContentHeader(0, 0, props).marshal()[12:]


def decode_properties(raw: bytes) -> commands.Basic.Properties:
    """pamqp properties from raw property bytes (lossy: used for dead-lettering only)."""
    h = header.ContentHeader()
    h.unmarshal(b"\x00\x3c\x00\x00" + b"\x00" * 8 + raw)
    return h.properties


def expired(record: Record, queue_ttl: int | None, now: int) -> bool:
    if queue_ttl is not None:
        # a delayed message enters its queues when it is due, not when it was stored
        due = record.properties.get(DUE_AT)
        if (int(due) if due is not None else record.store_ms) + queue_ttl <= now:
            return True
    exp = record.properties.get(EXPIRES_AT)
    return exp is not None and int(exp) <= now


def dead_letter_message(
    record: Record, queue: str, reason: str, exchange: str, routing_key: str | None, now: int
) -> tuple[Message, str, dict[str, Any]]:
    """The copy of ``record`` that a queue's dead-letter exchange receives, with the
    ``x-death`` header RabbitMQ adds; its routing key and headers to route it by."""
    rp = record.properties
    raw = rp.get(HEADER)
    if raw is not None:
        props = decode_properties(raw)
        old_exchange = rp.get(EXCHANGE, b"").decode()
        old_key = rp.get(ROUTING_KEY, record.topic.encode()).decode()
    else:
        props = foreign_properties(record)
        old_exchange, old_key = "amq.topic", mqtt_to_amqp(record.topic)
    headers = dict(props.headers or {})
    raw_deaths = headers.get("x-death")
    deaths: list[Any] = list(raw_deaths) if isinstance(raw_deaths, list) else []
    entry: dict[str, Any] | None = None
    for d in deaths:
        if isinstance(d, dict) and d.get("queue") == queue and d.get("reason") == reason:
            entry = d
            deaths.remove(d)
            break
    if entry is None:
        entry = {"count": 0, "reason": reason, "queue": queue, "exchange": old_exchange,
                 "routing-keys": [old_key]}
        if props.expiration is not None:
            entry["original-expiration"] = props.expiration
    entry["count"] = int(entry.get("count", 0)) + 1
    entry["time"] = datetime.datetime.fromtimestamp(now // 1000, datetime.UTC)
    deaths.insert(0, entry)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", old_exchange)
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = queue
    headers["x-last-death-exchange"] = old_exchange
    props.headers = headers
    props.expiration = None  # RabbitMQ drops it, so the copy does not expire again
    key = routing_key if routing_key is not None else old_key
    raw_new = properties_raw(props)
    message = Message(
        topic=key, body=record.body,
        properties={HEADER: raw_new, EXCHANGE: exchange.encode(), ROUTING_KEY: key.encode()},
        origin=record.origin, qos=record.qos, protocol=Protocol.AMQP, born_ms=now,
    )
    return message, key, headers
