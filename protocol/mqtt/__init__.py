"""MQTT 3.1, 3.1.1 and 5.0, sans-IO: bytes in, events out; no sockets, no clock, no storage.

* :mod:`.packets` -- one frozen dataclass per control packet, validated when built.
* :mod:`.properties`, :mod:`.reason_codes` -- every MQTT 5 property and reason code.
* :mod:`.codec` -- ``encode_packet`` / ``decode_packet`` and the per-packet codec pairs;
  :mod:`.primitives` -- Variable Byte Integer, UTF-8 strings, binary data.
* :mod:`.connection` -- the connection state machine (server or client side); its states
  and the table of legal moves are in :mod:`._state`.
* :mod:`.errors` -- ``InsufficientData`` versus the ``MQTTError`` family, each error
  carrying its MQTT 5 reason code.
"""

from ._state import NEED_DATA, PAUSED, Role, State
from .codec import MAX_PACKET_SIZE, decode_packet, encode_packet, packet_bytes
from .connection import Connection, ConnectionClosed, Event, Pubacks
from .errors import (
    InsufficientData,
    LocalProtocolError,
    MalformedPacket,
    MQTTError,
    OutgoingPacketTooLarge,
    PacketTooLarge,
    ProtocolError,
    RemoteProtocolError,
    TopicAliasInvalid,
    UnsupportedProtocolVersion,
)
from .packet_types import MQTTVersion, PacketType
from .packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
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
)
from .properties import EMPTY_PROPERTIES, PROPERTY_SPECS, Properties, PropertyId, PropertyType
from .reason_codes import ConnackReturnCode, ReasonCode, connack_return_code

__all__ = [
    "EMPTY_PROPERTIES", "MAX_PACKET_SIZE", "NEED_DATA", "PAUSED", "PROPERTY_SPECS", "Auth",
    "Connack", "ConnackReturnCode", "Connect", "Connection", "ConnectionClosed",
    "Disconnect", "Event", "InsufficientData", "LocalProtocolError", "MQTTError",
    "MQTTVersion", "MalformedPacket", "OutgoingPacketTooLarge", "Packet", "PacketTooLarge",
    "PacketType", "Pingreq", "Pingresp", "Properties", "PropertyId", "PropertyType",
    "ProtocolError", "Puback", "Pubacks", "Pubcomp", "Publish", "Pubrec", "Pubrel", "ReasonCode",
    "RemoteProtocolError", "Role", "State", "Suback", "Subscribe", "Subscription",
    "TopicAliasInvalid", "Unsuback", "Unsubscribe", "UnsupportedProtocolVersion", "Will",
    "connack_return_code", "decode_packet", "encode_packet", "packet_bytes",
]
