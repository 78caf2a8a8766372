"""The protocol versions and the control packet types."""

from __future__ import annotations

from enum import IntEnum


class MQTTVersion(IntEnum):
    """The CONNECT protocol level."""

    V3_1 = 3  # protocol name "MQIsdp"
    V3_1_1 = 4  # protocol name "MQTT"
    V5 = 5  # protocol name "MQTT"

    @property
    def protocol_name(self) -> str:
        return "MQIsdp" if self is MQTTVersion.V3_1 else "MQTT"


class PacketType(IntEnum):
    """The high nibble of the fixed header's first byte."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5 only; reserved (malformed) in 3.x
