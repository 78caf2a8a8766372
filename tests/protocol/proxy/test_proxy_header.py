"""The PROXY protocol parser (protocol.proxy) against headers built from HAProxy's
proxy-protocol.txt: every prefix is incomplete, the whole header is parsed exactly (the
client's bytes after it untouched), malformed ones are refused, random bytes only ever
give ProxyProtocolError."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.proxy import MAX_V1_LENGTH, V2_SIGNATURE, ProxyHeader, ProxyProtocolError, parse


def v1(source: str, destination: str, sport: int, dport: int) -> bytes:
    family = "TCP4" if ipaddress.ip_address(source).version == 4 else "TCP6"
    return f"PROXY {family} {source} {destination} {sport} {dport}\r\n".encode()


def v2(
    source: str | None, destination: str | None, sport: int, dport: int, *,
    command: int = 1, tlvs: bytes = b"", family: int | None = None,
) -> bytes:
    if source is None or destination is None:
        body = b""
        fam = 0x00 if family is None else family
        if fam >> 4 == 3:
            body = b"/run/client.sock".ljust(108, b"\0") + b"/run/gw.sock".ljust(108, b"\0")
    else:
        src, dst = ipaddress.ip_address(source), ipaddress.ip_address(destination)
        fam = 0x11 if src.version == 4 else 0x21
        body = src.packed + dst.packed + struct.pack(">HH", sport, dport)
    body += tlvs
    return V2_SIGNATURE + bytes([0x20 | command, fam]) + struct.pack(">H", len(body)) + body


ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)
#: TLVs: type, 16-bit length, value (PP2_TYPE_ALPN 0x01, AUTHORITY 0x02, NOOP 0x04, ...)
tlvs = st.lists(
    st.tuples(st.integers(0, 255), st.binary(max_size=40)), max_size=4
).map(lambda items: b"".join(bytes([t]) + struct.pack(">H", len(v)) + v for t, v in items))


@st.composite
def headers(draw: st.DrawFn) -> tuple[bytes, ProxyHeader]:
    addresses = draw(st.sampled_from([ipv4, ipv6]))
    source, destination = draw(addresses), draw(addresses)
    sport, dport = draw(ports), draw(ports)
    if draw(st.booleans()):
        data = v1(source, destination, sport, dport)
        version = 1
    else:
        data = v2(source, destination, sport, dport, tlvs=draw(tlvs))
        version = 2
    expected = ProxyHeader(
        version, True, (source, sport), (destination, dport), len(data)
    )
    return data, expected


@settings(max_examples=300, deadline=None)
@given(header=headers(), tail=st.binary(max_size=20))
def test_every_prefix_incomplete_then_exact(header, tail):
    data, expected = header
    for n in range(len(data)):
        assert parse(data[:n]) is None, n
    parsed = parse(data + tail)
    assert parsed == expected
    assert (data + tail)[parsed.length:] == tail


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_only_refused(data):
    try:
        header = parse(data)
    except ProxyProtocolError:
        return
    assert header is None or header.length <= len(data)


@settings(max_examples=300, deadline=None)
@given(header=headers(), at=st.integers(0, 60), byte=st.integers(0, 255))
def test_one_byte_changed_is_refused_or_still_consistent(header, at, byte):
    data, _ = header
    at = min(at, len(data) - 1)
    mutated = data[:at] + bytes([byte]) + data[at + 1:]
    try:
        parsed = parse(mutated)
    except ProxyProtocolError:
        return
    assert parsed is None or parsed.length <= len(mutated)


def test_v1_examples():
    header = parse(b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n")
    assert header == ProxyHeader(1, True, ("192.168.0.1", 56324), ("192.168.0.11", 443), 47)
    header = parse(b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n")
    assert header is not None and header.source == ("2001:db8::1", 1)
    assert parse(b"PROXY UNKNOWN\r\n") == ProxyHeader(1, True, None, None, 15)
    assert parse(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nx") == ProxyHeader(
        1, True, None, None, 35
    )
    # the longest line (TCP6 with the longest addresses) is 104 bytes + CRLF: accepted
    longest = v1("ffff:" * 7 + "ffff", "ffff:" * 7 + "ffff", 65535, 65535)
    assert len(longest) <= MAX_V1_LENGTH and parse(longest) is not None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2" + b" " * 80, "longer than 107"),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "TCP4, TCP6 or UNKNOWN"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "two addresses and two ports"),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "two addresses and two ports"),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "is not IPv4"),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "is not IPv6"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "not 0-65535"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "leading zero"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "not ended by CRLF"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 \xff 2\r\n", "not ASCII"),
        (b"PROXYTCP4", "no PROXY protocol header"),
        (b"\x10\x0c\x00\x04MQTT", "no PROXY protocol header"),
        (V2_SIGNATURE + b"\x11\x11\x00\x0c", "version nibble must be 2"),
        (V2_SIGNATURE + b"\x22\x11\x00\x0c", "LOCAL or PROXY"),
        (V2_SIGNATURE + b"\x21\x41\x00\x00", "unknown address family"),
        (V2_SIGNATURE + b"\x21\x11\x00\x08" + bytes(8), "too short for its addresses"),
        (V2_SIGNATURE + b"\x21\x21\x00\x0c" + bytes(12), "too short for its addresses"),
    ],
)
def test_malformed(data, message):
    with pytest.raises(ProxyProtocolError, match=message):
        parse(data)


def test_v2_local_unspec_unix_and_tlvs():
    local = v2("10.0.0.1", "10.0.0.2", 1, 2, command=0)
    assert parse(local + b"rest") == ProxyHeader(2, False, None, None, len(local))
    unspec = v2(None, None, 0, 0, tlvs=b"\x04\x00\x02hi")
    assert parse(unspec) == ProxyHeader(2, True, None, None, len(unspec))
    unix = v2(None, None, 0, 0, family=0x31)
    assert parse(unix) == ProxyHeader(2, True, None, None, len(unix))
    with_tlvs = v2("198.51.100.9", "10.0.0.2", 40000, 8080, tlvs=b"\x01\x00\x02h2" * 3)
    header = parse(with_tlvs + b"\x10")
    assert header is not None and header.source == ("198.51.100.9", 40000)
    assert header.length == len(with_tlvs)


def test_versions_accepted():
    assert parse(v1("1.2.3.4", "5.6.7.8", 1, 2), frozenset({1})) is not None
    with pytest.raises(ProxyProtocolError, match="v2 is not accepted"):
        parse(v2("1.2.3.4", "5.6.7.8", 1, 2), frozenset({1}))
    with pytest.raises(ProxyProtocolError, match="v1 is not accepted"):
        parse(v1("1.2.3.4", "5.6.7.8", 1, 2), frozenset({2}))
    # undecided prefixes stay undecided whatever is accepted
    assert parse(b"PRO", frozenset({2})) is None and parse(b"\r\n\r\n", frozenset({1})) is None
