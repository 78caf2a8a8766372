"""gateway.amqp.messages: the record an AMQP publish is stored as."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands, frame, header

from broker_core import Protocol, Record
from gateway.amqp import messages
from gateway.mqtt.messages import decode_user_properties, mqtt_topic
from protocol.amqp.fastpath import ContentHeader

B = commands.Basic


def content_header(size: int = 3, **props: Any) -> ContentHeader:
    data = frame.marshal(header.ContentHeader(0, size, B.Properties(**props)), 1)
    return ContentHeader(data[7:-1])


PROPS = [
    {},
    {"delivery_mode": 2},
    {"content_type": "text/plain", "correlation_id": "c-1"},
    {"headers": {"who": "me", "n": 5, "t": True}, "delivery_mode": 1},
    {"headers": {"n": 5}},  # no string-valued header: no user_properties
    {"content_type": "a/b", "headers": {"x": "y"}, "correlation_id": "c", "expiration": "100",
     "priority": 3, "message_id": "m"},
    {"expiration": "not a number"},
    {"headers": {"big": "v" * 2000}},  # raw properties above the kept size
]


@pytest.mark.parametrize("props", PROPS)
def test_store_message_fields_and_kept_properties(props: dict[str, Any]) -> None:
    """The derived properties kept by raw properties give what computing them gives."""
    messages._neutral.clear()
    ch = content_header(**props)
    first = messages.to_store_message("ex", "a.b", ch, b"xyz", "peer", 1000)
    again = messages.to_store_message("ex", "a.b", content_header(**props), b"xyz", "peer", 1000)
    assert first == again
    assert (first.topic, first.body, first.origin, first.protocol, first.born_ms) == (
        "a.b", b"xyz", "peer", Protocol.AMQP, 1000)
    assert first.qos == (1 if props.get("delivery_mode") == 2 else 0)
    p = dict(first.properties or {})
    assert p.pop(messages.HEADER) == ch.properties_raw
    assert p.pop(messages.EXCHANGE) == b"ex"  # routing key: the topic, not repeated
    if "content_type" in props:
        assert p.pop("content_type") == props["content_type"].encode()
    if "correlation_id" in props:
        assert p.pop("correlation_data") == props["correlation_id"].encode()
    strings = [(k, v) for k, v in (props.get("headers") or {}).items() if isinstance(v, str)]
    if strings:
        assert list(decode_user_properties(p.pop("user_properties"))) == strings
    if props.get("expiration", "").isdigit():
        assert p.pop(messages.EXPIRES_AT) == str(1000 + int(props["expiration"])).encode()
    assert p == {}
    big = len(ch.properties_raw) > messages._NEUTRAL_MAX_BYTES
    assert (ch.properties_raw in messages._neutral) is not big


def test_kept_properties_are_bounded() -> None:
    messages._neutral.clear()
    for i in range(messages._NEUTRAL_MAX + 10):
        messages.to_store_message("", "q", content_header(correlation_id=f"c{i}"), b"", "p", 1)
    assert 0 < len(messages._neutral) <= messages._NEUTRAL_MAX
    last = messages.to_store_message("", "q", content_header(correlation_id="c3"), b"", "p", 1)
    assert last.properties["correlation_data"] == b"c3"


def test_default_exchange_and_routing_key_are_implied() -> None:
    """Neither the routing key (the topic) nor the default exchange is stored as a
    property; deliveries, dead-lettering and MQTT subscribers read them back the same."""
    stored = messages.to_store_message("", "a.b", content_header(), b"x", "peer", 1000)
    assert stored.properties == {messages.HEADER: content_header().properties_raw}
    record = Record.of_message(stored, store_ms=1000)
    assert messages.delivery_fields(record) == (b"", "a.b", stored.properties[messages.HEADER])
    assert mqtt_topic(record) == "a/b"
    copy, key, _ = messages.dead_letter_message(record, "q", "rejected", "dlx", None, 2000)
    assert key == "a.b"
    assert copy.properties[messages.EXCHANGE] == b"dlx"
    assert Record.of_message(copy, store_ms=2000).topic == "a.b"
