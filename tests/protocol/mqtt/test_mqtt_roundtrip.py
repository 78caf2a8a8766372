"""Hypothesis round trips: decode(encode(p)) == p for every packet type in every version,
fed whole and in random chunks through a connection-sized buffer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.mqtt import (
    PROPERTY_SPECS,
    Auth,
    Connack,
    Connect,
    Disconnect,
    InsufficientData,
    MQTTVersion,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    PropertyId,
    PropertyType,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    decode_packet,
    packet_bytes,
)
from protocol.mqtt.properties import WILL
from protocol.mqtt.reason_codes import (
    AUTH_REASON_CODES,
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    PUBACK_REASON_CODES,
    PUBREL_REASON_CODES,
    SUBACK_REASON_CODES,
    UNSUBACK_REASON_CODES,
)

V31, V311, V5 = MQTTVersion.V3_1, MQTTVersion.V3_1_1, MQTTVersion.V5

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
topic_names = text.filter(lambda t: t and "+" not in t and "#" not in t)
topic_filters = text.filter(bool)
binary = st.binary(max_size=24)
packet_ids = st.integers(1, 65535)
qos = st.integers(0, 2)

_FLAGS = {PropertyId.PAYLOAD_FORMAT_INDICATOR, PropertyId.REQUEST_PROBLEM_INFORMATION,
          PropertyId.REQUEST_RESPONSE_INFORMATION, PropertyId.MAXIMUM_QOS,
          PropertyId.RETAIN_AVAILABLE, PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
          PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE, PropertyId.SHARED_SUBSCRIPTION_AVAILABLE}
_NONZERO = {PropertyId.RECEIVE_MAXIMUM, PropertyId.MAXIMUM_PACKET_SIZE, PropertyId.TOPIC_ALIAS}
_VALUES = {
    PropertyType.BYTE: st.integers(0, 255),
    PropertyType.TWO_BYTE_INTEGER: st.integers(0, 0xFFFF),
    PropertyType.FOUR_BYTE_INTEGER: st.integers(0, 0xFFFF_FFFF),
    PropertyType.UTF8_STRING: text,
    PropertyType.BINARY_DATA: binary,
}


def _value_strategy(pid: PropertyId, ptype: PropertyType) -> st.SearchStrategy[Any]:
    if pid in _FLAGS:
        return st.integers(0, 1)
    strategy = _VALUES[ptype]
    return strategy.filter(bool) if pid in _NONZERO else strategy


@st.composite
def properties(draw: st.DrawFn, context: PacketType | str) -> Properties:
    kwargs: dict[str, Any] = {}
    for spec in PROPERTY_SPECS.values():
        if context not in spec.packets or spec.id is PropertyId.TOPIC_ALIAS:
            continue
        if spec.id is PropertyId.USER_PROPERTY:
            kwargs["user_properties"] = tuple(draw(st.lists(st.tuples(text, text), max_size=3)))
        elif spec.id is PropertyId.SUBSCRIPTION_IDENTIFIER:
            ids = st.integers(1, 268_435_455)
            most = 1 if context is PacketType.SUBSCRIBE else 3
            kwargs["subscription_identifiers"] = tuple(draw(st.lists(ids, max_size=most)))
        elif draw(st.booleans()):
            kwargs[spec.name] = draw(_value_strategy(spec.id, spec.type))
    return Properties(**kwargs)


def props_for(version: MQTTVersion, context: PacketType | str) -> st.SearchStrategy[Properties]:
    return properties(context) if version is MQTTVersion.V5 else st.just(Properties())


def codes(version: MQTTVersion, allowed: frozenset[int]) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(allowed)) if version is MQTTVersion.V5 else st.just(0)


@st.composite
def publishes(draw: st.DrawFn, version: MQTTVersion) -> Publish:
    q = draw(qos)
    return Publish(
        draw(topic_names), draw(st.binary(max_size=300)), q, draw(st.booleans()),
        draw(st.booleans()) if q else False, draw(packet_ids) if q else None,
        draw(props_for(version, PacketType.PUBLISH)),
    )


@st.composite
def connects(draw: st.DrawFn, version: MQTTVersion) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(draw(topic_names), draw(binary), draw(qos), draw(st.booleans()),
                    draw(props_for(version, WILL)))
    username = draw(st.none() | text)
    password = draw(st.none() | binary)
    if version is not MQTTVersion.V5 and username is None:
        password = None
    return Connect(draw(text), version, draw(st.booleans()), draw(st.integers(0, 65535)),
                   username, password, will, draw(props_for(version, PacketType.CONNECT)))


@st.composite
def connacks(draw: st.DrawFn, version: MQTTVersion) -> Connack:
    if version is MQTTVersion.V5:
        code = draw(st.sampled_from(sorted(CONNACK_REASON_CODES)))
    else:
        code = draw(st.integers(0, 5))
    present = False if code or version is V31 else draw(st.booleans())
    return Connack(present, code, draw(props_for(version, PacketType.CONNACK)))


def acks(cls: type, allowed: frozenset[int], version: MQTTVersion) -> st.SearchStrategy[Packet]:
    return st.builds(cls, packet_ids, codes(version, allowed),
                     props_for(version, cls.packet_type))


@st.composite
def subscribes(draw: st.DrawFn, version: MQTTVersion) -> Subscribe:
    subs = []
    for _ in range(draw(st.integers(1, 3))):
        if version is MQTTVersion.V5:
            sub = Subscription(draw(topic_filters.filter(lambda f: not f.startswith("$share/"))),
                               draw(qos), draw(st.booleans()), draw(st.booleans()),
                               draw(st.integers(0, 2)))
        else:
            sub = Subscription(draw(topic_filters), draw(qos))
        subs.append(sub)
    return Subscribe(draw(packet_ids), tuple(subs), draw(props_for(version, PacketType.SUBSCRIBE)))


def subacks(version: MQTTVersion) -> st.SearchStrategy[Suback]:
    allowed = SUBACK_REASON_CODES if version is MQTTVersion.V5 else frozenset({0, 1, 2, 0x80})
    return st.builds(Suback, packet_ids,
                     st.lists(st.sampled_from(sorted(allowed)), min_size=1, max_size=4)
                     .map(tuple), props_for(version, PacketType.SUBACK))


def unsubscribes(version: MQTTVersion) -> st.SearchStrategy[Unsubscribe]:
    return st.builds(Unsubscribe, packet_ids,
                     st.lists(topic_filters, min_size=1, max_size=3).map(tuple),
                     props_for(version, PacketType.UNSUBSCRIBE))


def unsubacks(version: MQTTVersion) -> st.SearchStrategy[Unsuback]:
    if version is not MQTTVersion.V5:
        return st.builds(Unsuback, packet_ids)
    return st.builds(Unsuback, packet_ids,
                     st.lists(st.sampled_from(sorted(UNSUBACK_REASON_CODES)), max_size=4)
                     .map(tuple), properties(PacketType.UNSUBACK))


def all_packets(version: MQTTVersion) -> st.SearchStrategy[Packet]:
    strategies: list[st.SearchStrategy[Any]] = [
        connects(version), connacks(version), publishes(version),
        acks(Puback, PUBACK_REASON_CODES, version), acks(Pubrec, PUBACK_REASON_CODES, version),
        acks(Pubrel, PUBREL_REASON_CODES, version), acks(Pubcomp, PUBREL_REASON_CODES, version),
        subscribes(version), subacks(version), unsubscribes(version), unsubacks(version),
        st.just(Pingreq()), st.just(Pingresp()),
        st.builds(Disconnect, codes(version, DISCONNECT_REASON_CODES),
                  props_for(version, PacketType.DISCONNECT)),
    ]
    if version is MQTTVersion.V5:
        strategies.append(st.builds(Auth, st.sampled_from(sorted(AUTH_REASON_CODES)),
                                    properties(PacketType.AUTH)))
    return st.one_of(strategies)


PER_TYPE = {
    "CONNECT": connects, "CONNACK": connacks, "PUBLISH": publishes,
    "PUBACK": lambda v: acks(Puback, PUBACK_REASON_CODES, v),
    "PUBREC": lambda v: acks(Pubrec, PUBACK_REASON_CODES, v),
    "PUBREL": lambda v: acks(Pubrel, PUBREL_REASON_CODES, v),
    "PUBCOMP": lambda v: acks(Pubcomp, PUBREL_REASON_CODES, v),
    "SUBSCRIBE": subscribes, "SUBACK": subacks, "UNSUBSCRIBE": unsubscribes,
    "UNSUBACK": unsubacks, "PINGREQ": lambda v: st.just(Pingreq()),
    "PINGRESP": lambda v: st.just(Pingresp()),
    "DISCONNECT": lambda v: st.builds(Disconnect, codes(v, DISCONNECT_REASON_CODES),
                                      props_for(v, PacketType.DISCONNECT)),
    "AUTH": lambda v: st.builds(Auth, st.sampled_from(sorted(AUTH_REASON_CODES)),
                                properties(PacketType.AUTH)),
}
CASES = [pytest.param(name, v, id=f"{name}-v{int(v)}")
         for name in PER_TYPE for v in (V31, V311, V5)
         if not (name == "AUTH" and v is not V5)]


@pytest.mark.parametrize(("name", "version"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(name: str, version: MQTTVersion, data: st.DataObject) -> None:
    packet = data.draw(PER_TYPE[name](version))
    encoded = packet_bytes(packet, version)
    decoded, used = decode_packet(encoded + b"\xe0", version)
    assert decoded == packet
    assert used == len(encoded)
    # Re-encoding what was decoded gives the same bytes.
    assert packet_bytes(decoded, version) == encoded


@pytest.mark.parametrize("version", [V31, V311, V5], ids=lambda v: f"v{int(v)}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_stream_in_random_chunks(version: MQTTVersion, data: st.DataObject) -> None:
    """Several packets back to back, split anywhere: the decoder never mis-frames."""
    packets = data.draw(st.lists(all_packets(version), min_size=1, max_size=5))
    stream = b"".join(packet_bytes(p, version) for p in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    buf = bytearray()
    got: list[Packet] = []
    start = 0
    for end in [*cuts, len(stream)]:
        buf += stream[start:end]
        start = end
        while True:
            try:
                packet, used = decode_packet(bytes(buf), version)
            except InsufficientData:
                break
            got.append(packet)
            del buf[:used]
    assert got == packets
    assert not buf
