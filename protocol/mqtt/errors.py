"""Exceptions of the MQTT package.

Two families, kept apart on purpose (as in mqttproto):

* :class:`InsufficientData` -- the buffer ends before the packet does. Not an error: feed
  more bytes and try again. It is raised only while the fixed header or the body of the
  packet is still incomplete; once the whole packet is there, any problem is malformed.
* :class:`MQTTError` and subclasses -- the bytes or the packet break the protocol. Every
  one carries ``reason_code`` (the MQTT 5 reason code to put in a CONNACK or DISCONNECT)
  and ``connack_return_code`` (the MQTT 3.x CONNACK return code to send before closing,
  or ``None``: close without a CONNACK).

The codec and the packet constructors raise the specific classes (:class:`MalformedPacket`,
:class:`ProtocolError`, ...), which are also ``ValueError``. The connection state machine
re-raises them as :class:`RemoteProtocolError` (the peer broke the protocol; raised by
``next_event``) or :class:`LocalProtocolError` (we tried to send something wrong; raised by
``send``), like h11, with the original exception as ``__cause__`` and its reason code
copied.
"""

from __future__ import annotations

from .reason_codes import ReasonCode


class InsufficientData(Exception):
    """The buffer holds only part of a packet; more bytes are needed."""


class MQTTError(Exception):
    """Base of every protocol error. ``reason_code`` is what MQTT 5 would send."""

    default_reason_code = ReasonCode.UNSPECIFIED_ERROR

    def __init__(
        self,
        message: str,
        reason_code: int | None = None,
        connack_return_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason_code = ReasonCode(
            self.default_reason_code if reason_code is None else reason_code
        )
        self.connack_return_code = connack_return_code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, reason_code={self.reason_code.name})"


class MalformedPacket(MQTTError, ValueError):
    """The bytes cannot be parsed as the spec says (0x81)."""

    default_reason_code = ReasonCode.MALFORMED_PACKET


class ProtocolError(MQTTError, ValueError):
    """The packet parses but its content is not allowed (0x82, or a more specific code)."""

    default_reason_code = ReasonCode.PROTOCOL_ERROR


class TopicAliasInvalid(ProtocolError):
    """Topic alias 0, or above the receiver's Topic Alias Maximum (0x94)."""

    default_reason_code = ReasonCode.TOPIC_ALIAS_INVALID


class UnsupportedProtocolVersion(ProtocolError):
    """CONNECT with an unknown protocol name or level (0x84; 3.x CONNACK return code 1)."""

    default_reason_code = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


class PacketTooLarge(MQTTError):
    """A received packet exceeds our maximum packet size (0x95)."""

    default_reason_code = ReasonCode.PACKET_TOO_LARGE


class RemoteProtocolError(MQTTError):
    """The peer broke the protocol. Raised by ``Connection.next_event`` / ``receive_data``.

    The connection is in state ERROR afterwards. ``Connection.error_response()`` gives the
    bytes to send before closing (a CONNACK or an MQTT 5 DISCONNECT, or nothing).
    """


class LocalProtocolError(MQTTError):
    """We tried to send something the protocol or the connection state forbids."""


class OutgoingPacketTooLarge(LocalProtocolError):
    """The packet would exceed the peer's Maximum Packet Size even after dropping the
    reason string and user properties. Nothing was sent and the connection is still
    usable: the caller skips the message (MQTT-3.1.2-25: behave as if it was sent)."""

    default_reason_code = ReasonCode.PACKET_TOO_LARGE
