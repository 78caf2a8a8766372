"""The PROXY protocol header a load balancer puts in front of a connection (HAProxy's
proxy-protocol.txt, versions 1 and 2): who the client is, before any byte of its own.

:func:`parse` takes the bytes received so far and answers ``None`` (need more),
a :class:`ProxyHeader` (whose ``length`` bytes are the header; the rest is the client's)
or raises :class:`ProxyProtocolError`. It never reads past the header and needs at most
:data:`MAX_V1_LENGTH` bytes (v1) or 16 + 65535 (v2, whose length field says how many).

Version 1 is one text line, at most 107 bytes with its CRLF::

    PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\\r\\n
    PROXY TCP6 2001:db8::1 2001:db8::2 56324 443\\r\\n
    PROXY UNKNOWN[ anything]\\r\\n

Version 2 is binary: the 12-byte :data:`V2_SIGNATURE`, a version/command byte (0x20
LOCAL, 0x21 PROXY), an address-family/transport byte (0x11 TCP over IPv4, 0x21 TCP over
IPv6, 0x00 unspecified, 0x31 unix, ...), a big-endian 16-bit length of the rest, the
addresses (4+4+2+2 bytes for IPv4, 16+16+2+2 for IPv6, 108+108 for unix) and TLVs,
which are skipped. A LOCAL header (a balancer's own health check) or an UNKNOWN /
unspecified / unix one carries no client address: ``source`` is ``None`` and the
connection's own peer stands.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
#: The longest v1 line, CRLF included (proxy-protocol.txt 2.1).
MAX_V1_LENGTH = 107
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16
_V2_ADDRESS_LENGTH = {0x1: 12, 0x2: 36, 0x3: 216}


class ProxyProtocolError(ValueError):
    """Not a valid PROXY header (or not one of the accepted versions)."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int
    #: False for a v2 LOCAL command: the connection is the balancer's own.
    proxied: bool
    #: The client's (host, port), or None when the header names none.
    source: tuple[str, int] | None
    #: The address the client connected to at the balancer, when named.
    destination: tuple[str, int] | None
    #: Bytes the header took: the client's own bytes start here.
    length: int


def detect(data: bytes) -> int | None:
    """1 or 2 when ``data`` starts a v1 or v2 header, 0 when it cannot, None when too
    short to tell."""
    for version, signature in ((1, V1_PREFIX), (2, V2_SIGNATURE)):
        n = min(len(data), len(signature))
        if data[:n] == signature[:n]:
            return version if len(data) >= len(signature) else None
    return 0


def parse(data: bytes, versions: frozenset[int] = frozenset({1, 2})) -> ProxyHeader | None:
    """The header at the start of ``data``; None while incomplete. Raises
    ProxyProtocolError when ``data`` does not start with a valid header of one of
    ``versions``."""
    version = detect(data)
    if version is None:
        return None
    if version == 0:
        raise ProxyProtocolError("no PROXY protocol header")
    if version not in versions:
        raise ProxyProtocolError(f"PROXY protocol v{version} is not accepted here")
    return _parse_v1(data) if version == 1 else _parse_v2(data)


def _parse_v1(data: bytes) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, MAX_V1_LENGTH)
    if end < 0:
        if len(data) >= MAX_V1_LENGTH:
            raise ProxyProtocolError(f"v1 line longer than {MAX_V1_LENGTH} bytes")
        if b"\n" in data or b"\r" in data[:-1]:
            raise ProxyProtocolError("v1 line not ended by CRLF")
        return None
    try:
        line = data[len(V1_PREFIX) : end].decode("ascii")
    except UnicodeDecodeError:
        raise ProxyProtocolError("v1 line is not ASCII") from None
    length = end + 2
    fields = line.split(" ")
    if fields[0] == "UNKNOWN":
        return ProxyHeader(1, True, None, None, length)
    if fields[0] not in ("TCP4", "TCP6"):
        raise ProxyProtocolError(f"v1 protocol must be TCP4, TCP6 or UNKNOWN, got {fields[0]!r}")
    if len(fields) != 5:
        raise ProxyProtocolError("v1 line needs two addresses and two ports")
    kind = ipaddress.IPv4Address if fields[0] == "TCP4" else ipaddress.IPv6Address
    source = (_v1_address(fields[1], kind), _v1_port(fields[3]))
    destination = (_v1_address(fields[2], kind), _v1_port(fields[4]))
    return ProxyHeader(1, True, source, destination, length)


def _v1_address(text: str, kind: type[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> str:
    try:
        return str(kind(text))
    except ValueError:
        raise ProxyProtocolError(f"v1 address {text!r} is not {kind.__name__[:4]}") from None


def _v1_port(text: str) -> int:
    if not text.isdigit() or not text.isascii() or len(text) > 5 or int(text) > 65535:
        raise ProxyProtocolError(f"v1 port {text!r} is not 0-65535")
    if len(text) > 1 and text[0] == "0":
        raise ProxyProtocolError(f"v1 port {text!r} has a leading zero")
    return int(text)


def _parse_v2(data: bytes) -> ProxyHeader | None:
    if len(data) < V2_FIXED:
        return None
    version_command, family_transport = data[12], data[13]
    if version_command >> 4 != 2:
        raise ProxyProtocolError(f"v2 version nibble must be 2, got {version_command >> 4}")
    command = version_command & 0x0F
    if command not in (0, 1):
        raise ProxyProtocolError(f"v2 command must be LOCAL or PROXY, got {command}")
    length = V2_FIXED + int.from_bytes(data[14:16], "big")
    family, transport = family_transport >> 4, family_transport & 0x0F
    if family > 3 or transport > 2:
        raise ProxyProtocolError(f"v2 unknown address family/transport 0x{family_transport:02x}")
    needed = _V2_ADDRESS_LENGTH.get(family, 0)
    if length - V2_FIXED < needed:
        raise ProxyProtocolError(f"v2 length {length - V2_FIXED} too short for its addresses")
    if len(data) < length:
        return None
    if command == 0:
        return ProxyHeader(2, False, None, None, length)
    source = destination = None
    body = data[V2_FIXED:length]
    if family == 1:
        source = (str(ipaddress.IPv4Address(body[0:4])), int.from_bytes(body[8:10], "big"))
        destination = (str(ipaddress.IPv4Address(body[4:8])), int.from_bytes(body[10:12], "big"))
    elif family == 2:
        source = (str(ipaddress.IPv6Address(body[0:16])), int.from_bytes(body[32:34], "big"))
        destination = (
            str(ipaddress.IPv6Address(body[16:32])), int.from_bytes(body[34:36], "big")
        )
    return ProxyHeader(2, True, source, destination, length)
