"""The MQTT control packets as slotted dataclasses that validate when built, all frozen
but :class:`Publish` (see there).

One class per packet type, shared by all three protocol versions: a field that a version
cannot carry (properties, reason codes of acknowledgements) is simply not encoded for it,
except where dropping it would change the meaning (a failure PUBACK for 3.x is refused by
the encoder). ``Connect`` alone records its version, because the CONNECT is what chooses
the version of the connection.

Validation raises the error the spec prescribes for a received packet, so the decoder only
has to build the packet: :class:`MalformedPacket` (0x81) for QoS 3, a DUP flag on QoS 0,
inconsistent will flags, a property not allowed in the packet; :class:`ProtocolError`
(0x82, or the specific code) for packet identifier 0, an empty SUBSCRIBE, retain handling
3, a wildcard in a topic name (0x90), No Local on a shared subscription, and so on.

Reason codes are plain ``int`` fields (a :class:`~.reason_codes.ReasonCode` after
decoding). ``Connack.reason_code`` holds either an MQTT 5 reason code or a 3.x return code
0..5; the encoder maps between them (see :func:`~.reason_codes.connack_return_code`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .errors import MalformedPacket, ProtocolError
from .packet_types import MQTTVersion, PacketType
from .primitives import utf8_bytes
from .properties import EMPTY_PROPERTIES, WILL, Properties
from .reason_codes import (
    AUTH_REASON_CODES,
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    PUBACK_REASON_CODES,
    PUBCOMP_REASON_CODES,
    PUBREC_REASON_CODES,
    PUBREL_REASON_CODES,
    SUBACK_REASON_CODES,
    UNSUBACK_REASON_CODES,
    ReasonCode,
    connack_return_code,
)


def _check_packet_id(packet_id: object) -> None:
    if type(packet_id) is not int or not 0 < packet_id <= 0xFFFF:  # type: ignore[operator]
        raise ProtocolError(f"packet identifier must be 1..65535, got {packet_id!r}")


def _check_binary(value: object, what: str) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    if len(value) > 0xFFFF:
        raise MalformedPacket(f"{what} longer than 65,535 bytes")


def check_topic_name(topic: str, raw: bytes, alias: int | None) -> None:
    if "+" in topic or "#" in topic:
        raise ProtocolError(f"wildcard in topic name {topic!r}", ReasonCode.TOPIC_NAME_INVALID)
    if not raw and alias is None:
        raise ProtocolError("empty topic name", ReasonCode.TOPIC_NAME_INVALID)


def _check_properties(props: Properties, context: PacketType | str) -> None:
    if props is not EMPTY_PROPERTIES:
        if not isinstance(props, Properties):
            raise TypeError(f"properties must be Properties, got {type(props).__name__}")
        props.check_allowed(context)


def _check_reason_code(code: int, allowed: frozenset[int], packet: str) -> None:
    if code not in allowed:
        raise MalformedPacket(f"reason code 0x{code:02X} not valid in {packet}")


@dataclass(frozen=True, slots=True)
class Will:
    """The will message of a CONNECT."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        if self.qos not in (0, 1, 2):
            raise MalformedPacket(f"will QoS must be 0, 1 or 2, got {self.qos!r}")
        check_topic_name(self.topic, utf8_bytes(self.topic), None)
        _check_binary(self.payload, "will payload")
        _check_properties(self.properties, WILL)


@dataclass(frozen=True, slots=True)
class Connect:
    packet_type: ClassVar[PacketType] = PacketType.CONNECT

    client_id: str = ""
    protocol_version: MQTTVersion = MQTTVersion.V5
    clean_start: bool = True  # "clean session" in 3.x
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "protocol_version", MQTTVersion(self.protocol_version))
        except ValueError:
            raise ProtocolError(
                f"unsupported protocol level {self.protocol_version!r}",
                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            ) from None
        if not 0 <= self.keep_alive <= 0xFFFF:
            raise MalformedPacket(f"keep alive must be 0..65535, got {self.keep_alive}")
        utf8_bytes(self.client_id)
        if self.username is not None:
            utf8_bytes(self.username)
        if self.password is not None:
            _check_binary(self.password, "password")
        if self.will is not None and not isinstance(self.will, Will):
            raise TypeError("will must be a Will")
        if self.protocol_version < MQTTVersion.V5:
            # MQTT-3.1.2-22: no password without a user name before MQTT 5.
            if self.password is not None and self.username is None:
                raise MalformedPacket("password without user name before MQTT 5")
            if self.properties or (self.will is not None and self.will.properties):
                raise ProtocolError("properties need MQTT 5")
        _check_properties(self.properties, PacketType.CONNECT)


@dataclass(frozen=True, slots=True)
class Connack:
    packet_type: ClassVar[PacketType] = PacketType.CONNACK

    session_present: bool = False
    reason_code: int = ReasonCode.SUCCESS  # MQTT 5 reason code, or a 3.x return code 1..5
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        code = self.reason_code
        if code not in CONNACK_REASON_CODES and not 0 < code <= 5:
            raise MalformedPacket(f"reason code 0x{code:02X} not valid in CONNACK")
        if code and self.session_present:
            raise ProtocolError("session present set on a refused CONNACK")
        _check_properties(self.properties, PacketType.CONNACK)

    @property
    def return_code(self) -> int:
        """The MQTT 3.x return code this CONNACK carries (0..5)."""
        return connack_return_code(self.reason_code)


@dataclass(slots=True, eq=True)
class Publish:
    """Treat it as immutable, like every packet here. It is not ``frozen`` so that the
    decoder can fill a received one slot by slot, without ``__post_init__``. Its rules
    are checked in two places with one meaning: ``__post_init__`` for a PUBLISH built
    by a caller, :func:`~.codec.decode_publish_at` for one received (a test holds them
    equal)."""

    packet_type: ClassVar[PacketType] = PacketType.PUBLISH

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None  # required for QoS 1 and 2, absent for QoS 0
    properties: Properties = EMPTY_PROPERTIES
    _topic_bytes: bytes = field(default=b"", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The common case runs few, cheap checks; the rare ones raise the right error.
        qos = self.qos
        if qos == 0:
            if self.packet_id is not None:
                raise ProtocolError("QoS 0 PUBLISH with a packet identifier")
            if self.dup:
                raise MalformedPacket("DUP flag set on a QoS 0 PUBLISH")
        elif qos == 1 or qos == 2:
            packet_id = self.packet_id
            if type(packet_id) is not int or not 0 < packet_id <= 0xFFFF:
                _check_packet_id(packet_id)
        else:
            raise MalformedPacket(f"PUBLISH QoS must be 0, 1 or 2, got {qos!r}")
        topic = self.topic
        try:
            raw = topic.encode()
        except (AttributeError, UnicodeEncodeError):
            raw = utf8_bytes(topic)  # raises the right error
        if len(raw) > 0xFFFF or b"\x00" in raw:
            utf8_bytes(topic)  # raises the right error
        props = self.properties
        if not raw or "+" in topic or "#" in topic:
            check_topic_name(topic, raw, props.topic_alias)
        self._topic_bytes = raw
        if type(self.payload) is not bytes:
            if isinstance(self.payload, str):
                raise TypeError("payload must be bytes, not str")
            self.payload = bytes(self.payload)
        if props is not EMPTY_PROPERTIES:
            _check_properties(props, PacketType.PUBLISH)


@dataclass(frozen=True, slots=True)
class _PacketIdAck:
    """PUBACK, PUBREC, PUBREL, PUBCOMP: a packet identifier and a reason code."""

    packet_type: ClassVar[PacketType]
    reason_codes: ClassVar[frozenset[int]]

    packet_id: int
    reason_code: int = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        pid = self.packet_id
        if (
            self.reason_code == 0
            and self.properties is EMPTY_PROPERTIES
            and type(pid) is int
            and 0 < pid <= 0xFFFF
        ):
            return  # the common case, valid as it stands
        _check_packet_id(pid)
        _check_reason_code(self.reason_code, self.reason_codes, self.packet_type.name)
        _check_properties(self.properties, self.packet_type)


@dataclass(frozen=True, slots=True)
class Puback(_PacketIdAck):
    packet_type: ClassVar[PacketType] = PacketType.PUBACK
    reason_codes: ClassVar[frozenset[int]] = PUBACK_REASON_CODES


@dataclass(frozen=True, slots=True)
class Pubrec(_PacketIdAck):
    packet_type: ClassVar[PacketType] = PacketType.PUBREC
    reason_codes: ClassVar[frozenset[int]] = PUBREC_REASON_CODES


@dataclass(frozen=True, slots=True)
class Pubrel(_PacketIdAck):
    packet_type: ClassVar[PacketType] = PacketType.PUBREL
    reason_codes: ClassVar[frozenset[int]] = PUBREL_REASON_CODES


@dataclass(frozen=True, slots=True)
class Pubcomp(_PacketIdAck):
    packet_type: ClassVar[PacketType] = PacketType.PUBCOMP
    reason_codes: ClassVar[frozenset[int]] = PUBCOMP_REASON_CODES


@dataclass(frozen=True, slots=True)
class Subscription:
    """One (topic filter, options) entry of a SUBSCRIBE."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False  # MQTT 5 only, like the two below
    retain_as_published: bool = False
    retain_handling: int = 0

    def __post_init__(self) -> None:
        if self.qos not in (0, 1, 2):
            raise MalformedPacket(f"subscription QoS must be 0, 1 or 2, got {self.qos!r}")
        if self.retain_handling not in (0, 1, 2):
            raise ProtocolError(f"retain handling must be 0, 1 or 2, got {self.retain_handling!r}")
        if not utf8_bytes(self.topic_filter):
            raise ProtocolError("empty topic filter", ReasonCode.TOPIC_FILTER_INVALID)
        if self.no_local and self.topic_filter.startswith("$share/"):
            raise ProtocolError("No Local on a shared subscription")


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_type: ClassVar[PacketType] = PacketType.SUBSCRIBE

    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_packet_id(self.packet_id)
        if not isinstance(self.subscriptions, tuple):
            object.__setattr__(self, "subscriptions", tuple(self.subscriptions))
        if not self.subscriptions:
            raise ProtocolError("SUBSCRIBE without a topic filter")
        for sub in self.subscriptions:
            if not isinstance(sub, Subscription):
                raise TypeError(f"expected Subscription, got {type(sub).__name__}")
        _check_properties(self.properties, PacketType.SUBSCRIBE)
        if len(self.properties.subscription_identifiers) > 1:
            raise ProtocolError("more than one subscription identifier in SUBSCRIBE")


@dataclass(frozen=True, slots=True)
class Suback:
    packet_type: ClassVar[PacketType] = PacketType.SUBACK

    packet_id: int
    reason_codes: tuple[int, ...]  # one per subscription; 3.x: 0, 1, 2 or 0x80
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_packet_id(self.packet_id)
        if not isinstance(self.reason_codes, tuple):
            object.__setattr__(self, "reason_codes", tuple(self.reason_codes))
        if not self.reason_codes:
            raise ProtocolError("SUBACK without a reason code")
        for code in self.reason_codes:
            _check_reason_code(code, SUBACK_REASON_CODES, "SUBACK")
        _check_properties(self.properties, PacketType.SUBACK)


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_type: ClassVar[PacketType] = PacketType.UNSUBSCRIBE

    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_packet_id(self.packet_id)
        if not isinstance(self.topic_filters, tuple):
            object.__setattr__(self, "topic_filters", tuple(self.topic_filters))
        if not self.topic_filters:
            raise ProtocolError("UNSUBSCRIBE without a topic filter")
        for topic_filter in self.topic_filters:
            if not utf8_bytes(topic_filter):
                raise ProtocolError("empty topic filter", ReasonCode.TOPIC_FILTER_INVALID)
        _check_properties(self.properties, PacketType.UNSUBSCRIBE)


@dataclass(frozen=True, slots=True)
class Unsuback:
    packet_type: ClassVar[PacketType] = PacketType.UNSUBACK

    packet_id: int
    reason_codes: tuple[int, ...] = ()  # MQTT 5 only: one per topic filter
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_packet_id(self.packet_id)
        if not isinstance(self.reason_codes, tuple):
            object.__setattr__(self, "reason_codes", tuple(self.reason_codes))
        for code in self.reason_codes:
            _check_reason_code(code, UNSUBACK_REASON_CODES, "UNSUBACK")
        _check_properties(self.properties, PacketType.UNSUBACK)


@dataclass(frozen=True, slots=True)
class Pingreq:
    packet_type: ClassVar[PacketType] = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class Pingresp:
    packet_type: ClassVar[PacketType] = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    packet_type: ClassVar[PacketType] = PacketType.DISCONNECT

    reason_code: int = ReasonCode.NORMAL_DISCONNECTION  # MQTT 5 only
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_reason_code(self.reason_code, DISCONNECT_REASON_CODES, "DISCONNECT")
        _check_properties(self.properties, PacketType.DISCONNECT)


@dataclass(frozen=True, slots=True)
class Auth:
    """MQTT 5 enhanced authentication exchange."""

    packet_type: ClassVar[PacketType] = PacketType.AUTH

    reason_code: int = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES

    def __post_init__(self) -> None:
        _check_reason_code(self.reason_code, AUTH_REASON_CODES, "AUTH")
        _check_properties(self.properties, PacketType.AUTH)


Packet = (
    Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback
    | Unsubscribe | Unsuback | Pingreq | Pingresp | Disconnect | Auth
)
