"""The unified port's sniffers (gateway.sniff) over real first packets of every protocol,
built with the MQTT codec or from the specifications' bytes, delivered in arbitrary
splits: each is classified as its own protocol, no prefix of it is claimed by another,
every decision is made within MAX_PREFIX bytes, and no bytes are claimed by two."""

from __future__ import annotations

import ipaddress
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.frontends import FRONT_ENDS
from gateway.sniff import (
    H2_PREFACE,
    MAX_PREFIX,
    classify,
    sniff_amqp,
    sniff_h2,
    sniff_http,
    sniff_mqtt,
    sniff_remoting,
)
from protocol.mqtt import Connect, MQTTVersion, packet_bytes
from protocol.mqtt.packets import Will
from protocol.mqtt.properties import Properties

SNIFFERS = [(spec.name, spec.sniff) for spec in FRONT_ENDS if spec.unified]
BY_NAME = dict(SNIFFERS)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_registry_has_every_sniffer():
    assert BY_NAME == {
        "mqtt": sniff_mqtt, "amqp": sniff_amqp, "http": sniff_http,
        "remoting": sniff_remoting, "grpc": sniff_h2,
    }


# -- first packets ----------------------------------------------------------------------

_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=40
)
_topic = st.text(alphabet="abcxyz/0123", min_size=1, max_size=30).filter(
    lambda t: "+" not in t and "#" not in t
)


@st.composite
def mqtt_connects(draw: st.DrawFn) -> bytes:
    version = draw(st.sampled_from(list(MQTTVersion)))
    username = draw(st.none() | _text)
    password = draw(st.none() | st.binary(max_size=40))
    if version is not MQTTVersion.V5 and username is None:
        password = None  # MQTT-3.1.2-22
    will = None
    if draw(st.booleans()):
        payload = draw(st.binary(max_size=300))
        will = Will(draw(_topic), payload, draw(st.integers(0, 2)), draw(st.booleans()))
    properties = Properties()
    if version is MQTTVersion.V5 and draw(st.booleans()):
        properties = Properties(session_expiry_interval=draw(st.integers(0, 2**32 - 1)))
    connect = Connect(
        client_id=draw(_text),
        protocol_version=version,
        clean_start=draw(st.booleans()),
        keep_alive=draw(st.integers(0, 65535)),
        username=username,
        password=password,
        will=will,
        properties=properties,
    )
    # a large will payload makes the remaining length take 2 or 3 bytes
    return packet_bytes(connect, version)


AMQP_HEADERS = [
    b"AMQP\x00\x00\x09\x01",  # 0-9-1
    b"AMQP\x01\x01\x00\x09",  # 0-9 (answered with our header by the front end)
    b"AMQP\x00\x01\x00\x00",  # 1.0
    b"AMQP\x03\x01\x00\x00",  # 1.0 SASL
]


@st.composite
def http_requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]))
    path = draw(st.sampled_from(["/", "/health", "/metrics", "/a?b=c"]))
    version = draw(st.sampled_from(["HTTP/1.0", "HTTP/1.1"]))
    return f"{method} {path} {version}\r\nHost: gw\r\n\r\n".encode()


def remoting_json_frame(code: int, opaque: int, ext: dict[str, str], body: bytes) -> bytes:
    """A frame as RemotingCommand.encode writes it with the JSON header (the reference,
    section 1: length, serialize type << 24 | header length, header, body)."""
    header = json.dumps(
        {"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
         "serializeTypeCurrentRPC": "JSON", "version": 479},
        separators=(",", ":"),
    ).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def remoting_binary_frame(code: int, opaque: int, ext: dict[str, str], body: bytes) -> bytes:
    """The ROCKETMQ binary header (RocketMQSerializable): code i16, language i8, version
    i16, opaque i32, flag i32, remark length + UTF-8, ext length + (i16 key, i32 value)*."""
    fields = b"".join(
        struct.pack(">H", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in ext.items()
    )
    header = struct.pack(">hbhiii", code, 0, 479, opaque, 0, 0) + struct.pack(
        ">i", len(fields)
    ) + fields
    mark = (1 << 24) | len(header)
    return struct.pack(">iI", 4 + len(header) + len(body), mark) + header + body


_ext = st.dictionaries(
    st.text(alphabet="abcdefgh", min_size=1, max_size=12), _text, max_size=5
)


@st.composite
def remoting_frames(draw: st.DrawFn) -> bytes:
    build = draw(st.sampled_from([remoting_json_frame, remoting_binary_frame]))
    # GET_ROUTEINFO_BY_TOPIC 105, HEART_BEAT 34, SEND_MESSAGE_V2 310, PULL 11
    code = draw(st.sampled_from([105, 34, 310, 11, 38, 36]))
    return build(code, draw(st.integers(0, 2**31 - 1)), draw(_ext), draw(st.binary(max_size=200)))


@st.composite
def h2_openings(draw: st.DrawFn) -> bytes:
    settings_frame = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"
    return H2_PREFACE + draw(st.sampled_from([b"", settings_frame]))


def first_packets() -> st.SearchStrategy[tuple[str, bytes]]:
    return st.one_of(
        st.tuples(st.just("mqtt"), mqtt_connects()),
        st.tuples(st.just("amqp"), st.sampled_from(AMQP_HEADERS)),
        st.tuples(st.just("http"), http_requests()),
        st.tuples(st.just("remoting"), remoting_frames()),
        st.tuples(st.just("grpc"), h2_openings()),
    )


def proxy_v1(source: str, port: int) -> bytes:
    family = "TCP4" if ipaddress.ip_address(source).version == 4 else "TCP6"
    return f"PROXY {family} {source} 192.0.2.1 {port} 8080\r\n".encode()


def proxy_v2(source: str, port: int) -> bytes:
    address = ipaddress.ip_address(source)
    family = 0x11 if address.version == 4 else 0x21
    body = address.packed + bytes(len(address.packed)) + struct.pack(">HH", port, 8080)
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, family]) + struct.pack(">H", len(body)) + body


# -- properties -------------------------------------------------------------------------


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=8)))
    bounds = [0, *(c for c in cuts if c < len(data)), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


@FAST
@given(packet=first_packets(), data=st.data())
def test_first_packets_in_any_split_are_classified(packet, data):
    name, payload = packet
    prefix = b""
    for chunk in data.draw(splits(payload)):
        prefix += chunk
        decision = classify(prefix, SNIFFERS)
        if decision is not None:
            assert decision == name, (prefix, decision)
            return
    pytest.fail(f"{name} not decided after {len(prefix)} bytes")


@FAST
@given(packet=first_packets())
def test_no_prefix_is_claimed_by_another_protocol(packet):
    name, payload = packet
    decided_at = None
    for n in range(len(payload) + 1):
        for other, sniff in SNIFFERS:
            if other != name:
                assert not sniff(payload[:n]), (other, payload[:n])
        if decided_at is None and BY_NAME[name](payload[:n]):
            decided_at = n
    assert decided_at is not None and decided_at <= MAX_PREFIX


@FAST
@given(st.binary(max_size=2 * MAX_PREFIX))
def test_random_bytes_never_classify_as_two(data):
    for n in range(len(data) + 1):
        claimed = [name for name, sniff in SNIFFERS if sniff(data[:n])]
        assert len(claimed) <= 1, (data[:n], claimed)


@FAST
@given(packet=first_packets(), garbage=st.binary(min_size=1, max_size=30), at=st.integers(0, 30))
def test_mutated_packets_never_classify_as_two(packet, garbage, at):
    _, payload = packet
    at = min(at, len(payload))
    data = payload[:at] + garbage + payload[at + len(garbage):]
    claimed = [name for name, sniff in SNIFFERS if sniff(data[:MAX_PREFIX])]
    assert len(claimed) <= 1


@FAST
@given(st.binary(min_size=MAX_PREFIX, max_size=MAX_PREFIX + 8))
def test_every_sniffer_decides_within_max_prefix(data):
    for name, sniff in SNIFFERS:
        assert sniff(data[:MAX_PREFIX]) is not None, name
    assert classify(data, SNIFFERS) is not None


@FAST
@given(
    source=st.ip_addresses().map(str),
    port=st.integers(0, 65535),
    build=st.sampled_from([proxy_v1, proxy_v2]),
)
def test_proxy_headers_are_nobodys(source, port, build):
    header = build(source, port)
    for n in range(len(header) + 1):
        assert not any(sniff(header[:n]) for _, sniff in SNIFFERS), header[:n]
    assert classify(header, SNIFFERS) is False


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", True),  # 3.1.1
        (b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00", True),  # 5
        (b"\x10\x0e\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x00", True),  # 3.1
        (b"\x10\x8c\x01\x00\x04MQTT\x04\x02", True),  # remaining length 140, two bytes
        (b"\x10\x0c\x00\x04MQTT\x06\x02", False),  # level 6
        (b"\x10\x0c\x00\x06MQIsdp\x04\x02", False),  # MQIsdp is level 3 only
        (b"\x10\x0c\x00\x04MQTT\x04\x03", False),  # reserved connect flag set
        (b"\x10\x80\x80\x80\x80\x01", False),  # a fifth remaining-length byte
        (b"\x10\x8c\x00\x00\x04MQTT\x04\x02", False),  # 12 in two bytes: not minimal
        (b"\x10\x05\x00\x04MQTT\x04\x02", False),  # too short for a CONNECT body
        (b"\x10\x0c\x00\x04MQTX", False),
        (b"\x20\x02\x00\x00", False),  # CONNACK first
        (b"\x10\xff\xff\xff", None),  # remaining length still open
        (b"\x10\x0c\x00\x04MQ", None),
    ],
)
def test_mqtt_fixed_header_and_name(data, expected):
    assert sniff_mqtt(data) is expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (remoting_json_frame(105, 1, {"topic": "t"}, b""), True),
        (remoting_binary_frame(105, 1, {"topic": "t"}, b""), True),
        (b"\x00\x00\x00\x10\x02\x00\x00\x08{", False),  # serialize type 2
        (b"\x00\x00\x00\x10\x00\x00\x00\x20{", False),  # header longer than the frame
        (b"\x00\x00\x00\x10\x00\x00\x00\x01{", False),  # a JSON header is at least "{}"
        (b"\x00\x00\x00\x10\x00\x00\x00\x08[", False),  # JSON header not an object
        (b"\x00\x00\x00\x30\x01\x00\x00\x10\x00i\x00", False),  # binary header under 21
        (b"\x00\x00\x00\x30\x01\x00\x00\x20\x00i\xff", False),  # language 255
        (b"\x10\x00\x00\x10\x00\x00\x00\x08{", False),  # 256 MiB frame: first byte 0x10
        (b"\x00\x00\x00\x10\x00", None),
    ],
)
def test_remoting_frame_shape(data, expected):
    assert sniff_remoting(data) is expected


def test_h2_preface_is_not_http1():
    assert sniff_h2(H2_PREFACE) is True
    assert sniff_http(H2_PREFACE) is False
    assert sniff_h2(b"PRI * HTTP/1.1") is False
    assert classify(H2_PREFACE[:10], SNIFFERS) is None
    assert classify(H2_PREFACE, SNIFFERS) == "grpc"


def test_undecided_until_max_prefix_then_unknown():
    assert classify(b"\x00", SNIFFERS) is None
    assert classify(b"\x17\x03", SNIFFERS) is False  # no sniffer wants it
    assert classify(b"\x16\x03\x01\x00\x05hello", SNIFFERS) is False  # TLS on a plain port

