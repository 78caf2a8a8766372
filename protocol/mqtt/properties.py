"""MQTT 5 properties (spec 2.2.2).

A properties section is a Variable Byte Integer length followed by (identifier, value)
pairs. The identifier is a Variable Byte Integer (every defined one fits in a byte); the
value's type is fixed by the identifier. :data:`PROPERTY_SPECS` lists, for every
identifier, its attribute name on :class:`Properties`, its type, the packets it may appear
in and whether it may appear more than once. The will properties of a CONNECT are their
own section, keyed :data:`WILL` here.

Rules enforced, with the spec's classification:

* unknown identifier, or an identifier not allowed in this packet -> malformed (0x81):
  "A Control Packet which contains an Identifier which is not valid for its packet type
  ... is a Malformed Packet" (2.2.2.2);
* the same property twice, except User Property and (in PUBLISH) Subscription Identifier
  -> protocol error (0x82);
* value rules -> protocol error: Receive Maximum 0, Maximum Packet Size 0, Subscription
  Identifier 0, a 0/1 flag property with another value; Topic Alias 0 -> 0x94.

:class:`Properties` is one frozen, slotted dataclass for every packet: unset properties are
``None`` (``()`` for the repeatable ones). Its encoding is computed once and cached, so
forwarding one PUBLISH to many subscribers encodes its properties once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, Final

from .errors import InsufficientData, MalformedPacket, ProtocolError, TopicAliasInvalid
from .packet_types import PacketType
from .primitives import (
    VARINT_MAX,
    Reader,
    decode_varint,
    pack_u16,
    pack_u32,
    utf8_bytes,
    varint_bytes,
)

WILL: Final = "WILL"  # the CONNECT's will properties section
PropertyContext = PacketType | str


class PropertyType(IntEnum):
    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 3
    VARIABLE_BYTE_INTEGER = 4
    UTF8_STRING = 5
    BINARY_DATA = 6
    UTF8_STRING_PAIR = 7


class PropertyId(IntEnum):
    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


@dataclass(frozen=True, slots=True)
class PropertySpec:
    id: PropertyId
    name: str  # attribute of Properties
    type: PropertyType
    packets: frozenset[PropertyContext]
    multiple: bool = False  # may appear more than once


_T = PropertyType
_P = PacketType
_PUB_WILL = frozenset({_P.PUBLISH, WILL})
_ACKS = frozenset({
    _P.CONNACK, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK, _P.UNSUBACK,
    _P.DISCONNECT, _P.AUTH,
})
_ALL = _ACKS | {_P.CONNECT, _P.PUBLISH, WILL, _P.SUBSCRIBE, _P.UNSUBSCRIBE}


def _spec(
    pid: PropertyId, ptype: PropertyType, packets: Any, multiple: bool = False
) -> PropertySpec:
    name = "user_properties" if pid is PropertyId.USER_PROPERTY else pid.name.lower()
    if pid is PropertyId.SUBSCRIPTION_IDENTIFIER:
        name = "subscription_identifiers"
    return PropertySpec(pid, name, ptype, frozenset(packets), multiple)


_I = PropertyId
PROPERTY_SPECS: Final[dict[int, PropertySpec]] = {s.id: s for s in (
    _spec(_I.PAYLOAD_FORMAT_INDICATOR, _T.BYTE, _PUB_WILL),
    _spec(_I.MESSAGE_EXPIRY_INTERVAL, _T.FOUR_BYTE_INTEGER, _PUB_WILL),
    _spec(_I.CONTENT_TYPE, _T.UTF8_STRING, _PUB_WILL),
    _spec(_I.RESPONSE_TOPIC, _T.UTF8_STRING, _PUB_WILL),
    _spec(_I.CORRELATION_DATA, _T.BINARY_DATA, _PUB_WILL),
    # Repeatable in PUBLISH (one per matching subscription); once only in SUBSCRIBE,
    # which Subscribe checks itself.
    _spec(_I.SUBSCRIPTION_IDENTIFIER, _T.VARIABLE_BYTE_INTEGER,
          {_P.PUBLISH, _P.SUBSCRIBE}, multiple=True),
    _spec(_I.SESSION_EXPIRY_INTERVAL, _T.FOUR_BYTE_INTEGER,
          {_P.CONNECT, _P.CONNACK, _P.DISCONNECT}),
    _spec(_I.ASSIGNED_CLIENT_IDENTIFIER, _T.UTF8_STRING, {_P.CONNACK}),
    _spec(_I.SERVER_KEEP_ALIVE, _T.TWO_BYTE_INTEGER, {_P.CONNACK}),
    _spec(_I.AUTHENTICATION_METHOD, _T.UTF8_STRING, {_P.CONNECT, _P.CONNACK, _P.AUTH}),
    _spec(_I.AUTHENTICATION_DATA, _T.BINARY_DATA, {_P.CONNECT, _P.CONNACK, _P.AUTH}),
    _spec(_I.REQUEST_PROBLEM_INFORMATION, _T.BYTE, {_P.CONNECT}),
    _spec(_I.WILL_DELAY_INTERVAL, _T.FOUR_BYTE_INTEGER, {WILL}),
    _spec(_I.REQUEST_RESPONSE_INFORMATION, _T.BYTE, {_P.CONNECT}),
    _spec(_I.RESPONSE_INFORMATION, _T.UTF8_STRING, {_P.CONNACK}),
    _spec(_I.SERVER_REFERENCE, _T.UTF8_STRING, {_P.CONNACK, _P.DISCONNECT}),
    _spec(_I.REASON_STRING, _T.UTF8_STRING, _ACKS),
    _spec(_I.RECEIVE_MAXIMUM, _T.TWO_BYTE_INTEGER, {_P.CONNECT, _P.CONNACK}),
    _spec(_I.TOPIC_ALIAS_MAXIMUM, _T.TWO_BYTE_INTEGER, {_P.CONNECT, _P.CONNACK}),
    _spec(_I.TOPIC_ALIAS, _T.TWO_BYTE_INTEGER, {_P.PUBLISH}),
    _spec(_I.MAXIMUM_QOS, _T.BYTE, {_P.CONNACK}),
    _spec(_I.RETAIN_AVAILABLE, _T.BYTE, {_P.CONNACK}),
    _spec(_I.USER_PROPERTY, _T.UTF8_STRING_PAIR, _ALL, multiple=True),
    _spec(_I.MAXIMUM_PACKET_SIZE, _T.FOUR_BYTE_INTEGER, {_P.CONNECT, _P.CONNACK}),
    _spec(_I.WILDCARD_SUBSCRIPTION_AVAILABLE, _T.BYTE, {_P.CONNACK}),
    _spec(_I.SUBSCRIPTION_IDENTIFIER_AVAILABLE, _T.BYTE, {_P.CONNACK}),
    _spec(_I.SHARED_SUBSCRIPTION_AVAILABLE, _T.BYTE, {_P.CONNACK}),
)}
_SCALAR_SPECS = tuple(s for s in PROPERTY_SPECS.values() if not s.multiple)
_SUBSCRIPTION_ID_SPEC = PROPERTY_SPECS[_I.SUBSCRIPTION_IDENTIFIER]
_USER_PROPERTY_SPEC = PROPERTY_SPECS[_I.USER_PROPERTY]
_FLAG_PROPERTIES = frozenset({
    _I.PAYLOAD_FORMAT_INDICATOR, _I.REQUEST_PROBLEM_INFORMATION,
    _I.REQUEST_RESPONSE_INFORMATION, _I.MAXIMUM_QOS, _I.RETAIN_AVAILABLE,
    _I.WILDCARD_SUBSCRIPTION_AVAILABLE, _I.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
    _I.SHARED_SUBSCRIPTION_AVAILABLE,
})
_NONZERO_PROPERTIES = frozenset({_I.RECEIVE_MAXIMUM, _I.MAXIMUM_PACKET_SIZE})
_INT_LIMITS = {
    _T.BYTE: 0xFF, _T.TWO_BYTE_INTEGER: 0xFFFF, _T.FOUR_BYTE_INTEGER: 0xFFFF_FFFF,
    _T.VARIABLE_BYTE_INTEGER: VARINT_MAX,
}


def _encode_value(spec: PropertySpec, value: Any, out: bytearray) -> None:
    """Append one property (identifier and value); also validates the value's type."""
    ptype = spec.type
    out.append(spec.id)
    if ptype in _INT_LIMITS:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{spec.name} must be an int, got {value!r}")
        if not 0 <= value <= _INT_LIMITS[ptype]:
            raise MalformedPacket(f"{spec.name} out of range: {value}")
        if ptype is _T.BYTE:
            out.append(value)
        elif ptype is _T.TWO_BYTE_INTEGER:
            out += pack_u16(value)
        elif ptype is _T.FOUR_BYTE_INTEGER:
            out += pack_u32(value)
        else:
            if value == 0:
                raise ProtocolError("subscription identifier 0")
            out += varint_bytes(value)
    elif ptype is _T.UTF8_STRING:
        raw = utf8_bytes(value)
        out += pack_u16(len(raw))
        out += raw
    elif ptype is _T.BINARY_DATA:
        if not isinstance(value, bytes):
            raise TypeError(f"{spec.name} must be bytes, got {type(value).__name__}")
        if len(value) > 0xFFFF:
            raise MalformedPacket(f"{spec.name} longer than 65,535 bytes")
        out += pack_u16(len(value))
        out += value
    else:
        name, text = value
        for part in (utf8_bytes(name), utf8_bytes(text)):
            out += pack_u16(len(part))
            out += part


def _check_value(spec: PropertySpec, value: Any) -> None:
    pid = spec.id
    if pid in _FLAG_PROPERTIES and value not in (0, 1):
        raise ProtocolError(f"{spec.name} must be 0 or 1, got {value}")
    if pid in _NONZERO_PROPERTIES and value == 0:
        raise ProtocolError(f"{spec.name} must not be 0")
    if pid is _I.TOPIC_ALIAS and value == 0:
        raise TopicAliasInvalid("topic alias 0 is not permitted")


@dataclass(frozen=True, slots=True, repr=False)
class Properties:
    """The MQTT 5 properties of one packet (or of a will). ``None`` = absent."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None
    # The encoded section, length prefix included. Computed (and the values validated) in
    # __post_init__; the decoder sets the bytes it read (see _decoded). Not an init field,
    # so dataclasses.replace() re-encodes.
    _wire: bytes = field(default=b"\x00", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.subscription_identifiers, tuple):
            object.__setattr__(self, "subscription_identifiers",
                               tuple(self.subscription_identifiers))
        if not isinstance(self.user_properties, tuple):
            object.__setattr__(self, "user_properties",
                               tuple(tuple(p) for p in self.user_properties))
        out = bytearray()
        for spec in _SCALAR_SPECS:
            value = getattr(self, spec.name)
            if value is not None:
                _check_value(spec, value)
                _encode_value(spec, value, out)
        for sid in self.subscription_identifiers:
            _encode_value(_SUBSCRIPTION_ID_SPEC, sid, out)
        for pair in self.user_properties:
            if len(pair) != 2:
                raise TypeError(f"user property must be a (name, value) pair: {pair!r}")
            _encode_value(_USER_PROPERTY_SPEC, pair, out)
        object.__setattr__(self, "_wire", varint_bytes(len(out)) + out if out else b"\x00")

    def __repr__(self) -> str:
        shown = ", ".join(f"{s.name}={getattr(self, s.name)!r}" for s in self.present())
        return f"Properties({shown})"

    def __bool__(self) -> bool:
        return len(self._wire) > 1

    def present(self) -> list[PropertySpec]:
        """The specs of the properties that are set."""
        found = [s for s in _SCALAR_SPECS if getattr(self, s.name) is not None]
        if self.subscription_identifiers:
            found.append(_SUBSCRIPTION_ID_SPEC)
        if self.user_properties:
            found.append(_USER_PROPERTY_SPEC)
        return found

    def check_allowed(self, context: PropertyContext) -> None:
        """Raise :class:`MalformedPacket` if a property may not appear in ``context``."""
        if len(self._wire) > 1:
            for spec in self.present():
                if context not in spec.packets:
                    raise MalformedPacket(f"property {spec.name} not allowed in {context}")

    def wire(self) -> bytes:
        """The encoded properties section, length prefix included."""
        return self._wire


EMPTY_PROPERTIES: Final = Properties()


def encode_properties(props: Properties, buf: bytearray) -> None:
    buf += props.wire()


def _read_string_pair(reader: Reader) -> tuple[str, str]:
    return reader.utf8(), reader.utf8()


_READERS: dict[PropertyType, Any] = {
    _T.BYTE: Reader.u8, _T.TWO_BYTE_INTEGER: Reader.u16, _T.FOUR_BYTE_INTEGER: Reader.u32,
    _T.VARIABLE_BYTE_INTEGER: Reader.varint, _T.UTF8_STRING: Reader.utf8,
    _T.BINARY_DATA: Reader.binary, _T.UTF8_STRING_PAIR: _read_string_pair,
}


_SCALAR, _CHECKED, _USER, _SUBSCRIPTION_ID = "scalar", "checked", "user", "subscription_id"
_DECODE_TABLE: dict[int, tuple[PropertySpec, Any, str]] = {
    pid: (
        spec,
        _READERS[spec.type],
        _USER if spec is _USER_PROPERTY_SPEC
        else _SUBSCRIPTION_ID if spec is _SUBSCRIPTION_ID_SPEC
        else _CHECKED if pid in _FLAG_PROPERTIES or pid in _NONZERO_PROPERTIES
        or pid == PropertyId.TOPIC_ALIAS
        else _SCALAR,
    )
    for pid, spec in PROPERTY_SPECS.items()
}


def read_properties(reader: Reader, context: PropertyContext) -> Properties:
    """Read a properties section from a packet body being decoded."""
    length = reader.varint()
    if length == 0:
        return EMPTY_PROPERTIES
    data = reader.data
    pos = reader.pos
    end = pos + length
    if end > reader.end:
        raise MalformedPacket("property length exceeds the packet")
    reader.pos = end
    sub = Reader(data[:end], pos)
    values: dict[str, Any] = {}
    user_properties: list[tuple[str, str]] = []
    subscription_ids: list[int] = []
    table = _DECODE_TABLE
    while sub.pos < end:
        pid = data[sub.pos]
        if pid < 0x80:  # every defined identifier is one byte
            sub.pos += 1
        else:
            pid = sub.varint()
        entry = table.get(pid)
        if entry is None:
            raise MalformedPacket(f"unknown property identifier 0x{pid:02X}")
        spec, read, kind = entry
        if context not in spec.packets:
            raise MalformedPacket(f"property {spec.name} not allowed in {context}")
        value = read(sub)
        if kind is _SCALAR:
            if spec.name in values:
                raise ProtocolError(f"property {spec.name} included more than once")
            values[spec.name] = value
        elif kind is _CHECKED:
            if spec.name in values:
                raise ProtocolError(f"property {spec.name} included more than once")
            _check_value(spec, value)
            values[spec.name] = value
        elif kind is _USER:
            user_properties.append(value)
        else:
            if value == 0:
                raise ProtocolError("subscription identifier 0")
            subscription_ids.append(value)
    if user_properties:
        values["user_properties"] = tuple(user_properties)
    if subscription_ids:
        values["subscription_identifiers"] = tuple(subscription_ids)
    return _decoded(values, varint_bytes(length) + bytes(data[pos:end]))


_FIELD_DEFAULTS = tuple(
    (f.name, f.default) for f in fields(Properties) if f.name != "_wire"
)
_set = object.__setattr__


def _decoded(values: dict[str, Any], wire: bytes) -> Properties:
    """A Properties from validated decoded values, keeping the received encoding.

    Bypasses __init__/__post_init__, which would validate and encode all over again.
    """
    props = object.__new__(Properties)
    get = values.get
    for name, default in _FIELD_DEFAULTS:
        _set(props, name, get(name, default))
    _set(props, "_wire", wire)
    return props


def decode_properties(
    view: memoryview | bytes, context: PropertyContext
) -> tuple[Properties, int]:
    """Decode a properties section at the start of ``view``: (properties, bytes used)."""
    length, used = decode_varint(view)
    if len(view) < used + length:
        raise InsufficientData("properties incomplete")
    reader = Reader(bytes(view[: used + length]))
    return read_properties(reader, context), reader.pos
