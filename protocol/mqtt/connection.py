"""The MQTT connection state machine, sans-IO, after h11's ``Connection``.

Theory of operation
===================

One :class:`Connection` object per network connection, on either side (``our_role``).
It never touches a socket or a clock: the caller feeds received bytes with
:meth:`Connection.receive_data` (``b""`` = the peer closed), pulls events with
:meth:`Connection.next_event`, and turns packets into bytes to write with
:meth:`Connection.send`. Events are the packet dataclasses of :mod:`.packets`, plus
:class:`ConnectionClosed` at EOF, or one of two sentinels: :data:`NEED_DATA` (feed more
bytes) and :data:`PAUSED` (server only: the client pipelined packets after its CONNECT,
and they are held back until we have sent the CONNACK, because the server MUST NOT
process them before).

One state describes the whole connection; both peers' packets move it. The states and
the table of legal moves are in :mod:`._state`; a packet not in the table is a protocol
error and moves the connection to ERROR.

Invariants: in ERROR, ``receive_data`` and ``next_event`` raise; ``send`` still accepts a
CONNACK (if none was sent) or an MQTT 5 DISCONNECT, so the caller can tell the peer why,
and :meth:`Connection.error_response` builds exactly that. A packet that would exceed
the peer's Maximum Packet Size raises :class:`OutgoingPacketTooLarge` *without* changing
state (the caller skips the message). The protocol version is fixed by the CONNECT.

What the machine enforces: CONNECT first and only once; protocol name and level;
the empty client identifier rules of 3.1 / 3.1.1; our maximum packet size on input (0x95,
before the body is buffered); inbound MQTT 5 topic aliases (0 or above our Topic Alias
Maximum -> 0x94; an unknown alias -> 0x82), resolved so the caller always sees the topic;
no Subscription Identifier in a client's PUBLISH; a DISCONNECT may not set a session
expiry when the CONNECT had 0; our Receive Maximum (MQTT 5: the one we sent in our
CONNECT or CONNACK, 65,535 when absent): a peer with more QoS 1 PUBLISH not yet PUBACKed
by us and QoS 2 PUBLISH not yet PUBCOMPed (or refused with a PUBREC of 0x80 or above) by
us is an error with reason code 0x93. On output: the version's encoding, the peer's Maximum
Packet Size (dropping reason string and user properties first where the spec allows),
the peer's Topic Alias Maximum, and optional automatic outbound topic aliases.

What it leaves to the caller: timers (enforce :attr:`Connection.keep_alive` x 1.5),
packet identifier bookkeeping and inflight windows (session state, which outlives the
connection; :attr:`Connection.peer_receive_maximum` is the window), authentication,
authorisation, topic filter syntax (SUBACK 0x8F), and what to do with each packet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from ._state import NEED_DATA, PAUSED, TRANSITIONS, Role, Sentinel, State
from .codec import (
    MAX_PACKET_SIZE,
    PlainPublishEncoder,
    decode_packet,
    decode_publish_at,
    encode_packet,
    encode_publish_fields,
)
from .errors import (
    InsufficientData,
    LocalProtocolError,
    MQTTError,
    OutgoingPacketTooLarge,
    ProtocolError,
    RemoteProtocolError,
    TopicAliasInvalid,
)
from .packet_types import MQTTVersion, PacketType
from .packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
)
from .properties import EMPTY_PROPERTIES, Properties
from .reason_codes import (
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    ConnackReturnCode,
    ReasonCode,
)


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection (``receive_data(b"")``); any partial packet in the
    buffer is discarded. A DISCONNECT before it, if any, was its own event."""


class Pubacks:
    """Several plain PUBACKs received back to back (``batch_pubacks=True`` only): the
    packet identifiers, in order. Each stands for ``Puback(packet_id)`` (reason code 0,
    no properties, the four bytes ``40 02 id id``); anything else, a PUBACK with a
    reason code or properties included, comes as a :class:`~.packets.Puback` event.
    Spares a packet object and a dispatch per acknowledgement while a server drains a
    backlog (every QoS 1 message comes back as one of these)."""

    __slots__ = ("packet_ids",)

    def __init__(self, packet_ids: list[int]) -> None:
        self.packet_ids = packet_ids

    def __repr__(self) -> str:
        return f"Pubacks({self.packet_ids!r})"


Event = Packet | ConnectionClosed | Pubacks

_P = PacketType
# Fixed header of a PUBACK / PUBREC / PUBCOMP with remaining length 2 (see send_ack_success).
_ACK_HEADS: Final[dict[PacketType, bytes]] = {
    PacketType.PUBACK: b"\x40\x02",
    PacketType.PUBREC: b"\x50\x02",
    PacketType.PUBCOMP: b"\x70\x02",
}
# Acknowledgements whose reason string and user properties may be dropped to fit the
# peer's Maximum Packet Size (MQTT-3.1.2-24 and the property descriptions).
_TRIMMABLE = frozenset({_P.CONNACK, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK,
                        _P.UNSUBACK, _P.DISCONNECT, _P.AUTH})


class Connection:
    """One side of an MQTT connection. See the module docstring.

    ``max_packet_size`` bounds received packets from the first byte on; if we send a
    CONNECT (client) or CONNACK (server) carrying Maximum Packet Size, that value
    replaces it. ``outbound_topic_aliases`` makes ``send`` assign MQTT 5 topic aliases
    to outgoing PUBLISH packets, up to the peer's Topic Alias Maximum (first come, first
    served; a topic that finds the table full goes out in full). ``batch_pubacks``
    makes ``next_event`` return consecutive plain PUBACKs received in CONNECTED as one
    :class:`Pubacks` event.
    """

    def __init__(
        self,
        our_role: Role = Role.SERVER,
        *,
        max_packet_size: int = MAX_PACKET_SIZE,
        outbound_topic_aliases: bool = False,
        batch_pubacks: bool = False,
    ) -> None:
        self.our_role = our_role
        self.their_role = Role.SERVER if our_role is Role.CLIENT else Role.CLIENT
        self.state = State.CONNECTING
        #: The protocol version, once the CONNECT has been sent or received.
        self.version: MQTTVersion | None = None
        #: Negotiated keep-alive in seconds (0 = none): the CONNECT's, or the CONNACK's
        #: Server Keep Alive. The caller closes the connection after 1.5x without a packet.
        self.keep_alive: int | None = None
        #: The CONNECT, once sent or received (client id, clean start, will, properties).
        self.connect: Connect | None = None
        self.connack_sent_or_received = False
        self.max_packet_size = max_packet_size
        self.topic_alias_maximum = 0  # inbound aliases we accept (from our CONNECT/CONNACK)
        self.peer_max_packet_size = MAX_PACKET_SIZE
        self.peer_receive_maximum = 65535
        self.peer_topic_alias_maximum = 0
        #: Our Receive Maximum (MQTT 5), from the CONNECT (client) or CONNACK (server)
        #: we sent: how many QoS 1 and 2 PUBLISH the peer may have unacknowledged.
        self.receive_maximum = 65535
        # packet ids of the peer's QoS 1 / 2 PUBLISH not yet PUBACKed / PUBCOMPed (or
        # refused by a PUBREC >= 0x80) by us; None while the limit cannot be exceeded
        self._unacked: set[int] | None = None
        #: The error that moved the connection to ERROR, if any.
        self.error: MQTTError | None = None
        self._outbound_aliases_enabled = outbound_topic_aliases
        self._inbound_aliases: dict[int, str] = {}
        self._outbound_aliases: dict[str, int] = {}
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._plain: PlainPublishEncoder | None = None
        self._batch_pubacks = batch_pubacks

    # -- input ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Add received bytes to the buffer; ``b""`` means the peer closed."""
        if self.state is State.ERROR:
            raise self._remote_error_again()
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        if not data:
            self._eof = True
            return
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @property
    def trailing_data(self) -> bytes:
        """Bytes received but not yet turned into events."""
        return bytes(self._buf[self._pos :])

    def next_event(self) -> Event | Sentinel:
        """The next event, :data:`NEED_DATA` or :data:`PAUSED`.

        Raises :class:`RemoteProtocolError` (and moves to ERROR) when the peer broke the
        protocol; ``reason_code`` / ``connack_return_code`` say what to answer, and
        :meth:`error_response` builds the answer.
        """
        state = self.state
        buf, pos = self._buf, self._pos
        if state is State.CONNECTED:
            if pos < len(buf) and buf[pos] & 0xF0 == 0x30:
                # the per-message path: a PUBLISH from either side leaves CONNECTED as
                # it is (see _state), so no table lookup
                try:
                    publish, self._pos = decode_publish_at(
                        buf, pos, self.version, self.max_packet_size  # type: ignore[arg-type]
                    )
                    if publish.properties is not EMPTY_PROPERTIES:
                        publish = self._received_publish(publish)
                    if self._unacked is not None and publish.qos:
                        self._count_unacked(publish.packet_id)  # type: ignore[arg-type]
                    return publish
                except InsufficientData:
                    return self._at_end() if self._eof else NEED_DATA
                except MQTTError as exc:
                    raise self._remote_error(exc) from exc
        elif state is State.ERROR:
            raise self._remote_error_again()
        if pos >= len(buf):
            return self._at_end()
        first_type = buf[pos] >> 4
        if state is State.CONNECTING and (
            self.our_role is Role.CLIENT or first_type != PacketType.CONNECT
        ):
            raise self._remote_error(ProtocolError(
                "the first packet must be a CONNECT" if self.our_role is Role.SERVER
                else "packet from the server before our CONNECT"
            ))
        if (state is State.AWAITING_CONNACK and self.our_role is Role.SERVER
                and first_type != PacketType.AUTH):
            return PAUSED
        if buf[pos] == 0x40 and self._batch_pubacks and state is State.CONNECTED:
            acks = self._take_pubacks(buf, pos)
            if acks is not None:
                return acks
        try:
            packet, used = decode_packet(
                memoryview(buf)[pos:], self.version, self.max_packet_size
            )
        except InsufficientData:
            return self._at_end() if self._eof else NEED_DATA
        except MQTTError as exc:
            raise self._remote_error(exc) from exc
        self._pos = pos + used
        try:
            return self._process_received(packet)
        except MQTTError as exc:
            raise self._remote_error(exc) from exc

    def _count_unacked(self, packet_id: int) -> None:
        """A QoS 1 or 2 PUBLISH received: one more the peer may not exceed our Receive
        Maximum with (a resent packet id counts once)."""
        unacked = self._unacked
        assert unacked is not None
        unacked.add(packet_id)
        if len(unacked) > self.receive_maximum:
            raise ProtocolError(
                f"more than Receive Maximum ({self.receive_maximum}) QoS 1 and 2 PUBLISH "
                "packets unacknowledged", ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
            )

    def _take_pubacks(self, buf: bytearray, pos: int) -> Pubacks | None:
        """The plain PUBACKs (``40 02``, packet id not 0) from ``pos`` on, consumed.
        Exactly what decoding them one by one would give: a PUBACK is legal from either
        side in CONNECTED and leaves the state as it is (see TRANSITIONS), and four
        bytes are below any maximum packet size. None if the first is not one (a longer
        PUBACK, packet id 0, or not all there yet): the ordinary path takes it."""
        end = len(buf)
        ids = []
        while pos + 4 <= end and buf[pos] == 0x40 and buf[pos + 1] == 2:
            pid = (buf[pos + 2] << 8) | buf[pos + 3]
            if not pid:
                break
            ids.append(pid)
            pos += 4
        if not ids:
            return None
        self._pos = pos
        return Pubacks(ids)

    def _at_end(self) -> ConnectionClosed | Sentinel:
        if not self._eof:
            return NEED_DATA
        self.state = State.CLOSED
        return ConnectionClosed()

    def _process_received(self, packet: Packet) -> Packet:
        ptype = packet.packet_type
        next_state = TRANSITIONS[self.state].get((self.their_role, ptype))
        if next_state is None:
            raise ProtocolError(f"unexpected {ptype.name} from the {self.their_role.value} "
                                f"in state {self.state.name}")
        if isinstance(packet, Publish):
            packet = self._received_publish(packet)
            if packet.qos and self._unacked is not None:
                self._count_unacked(packet.packet_id)  # type: ignore[arg-type]
        elif isinstance(packet, Connect):
            self._received_connect(packet)
        elif isinstance(packet, Connack):
            self._connack_seen(packet, ours=False)
            if packet.reason_code:
                next_state = State.CLOSED
        elif isinstance(packet, Disconnect) and self.our_role is Role.SERVER:
            expiry = packet.properties.session_expiry_interval
            connect = self.connect
            if expiry and connect is not None and not connect.properties.session_expiry_interval:
                raise ProtocolError("DISCONNECT sets a session expiry after a CONNECT with 0")
        self.state = next_state
        return packet

    def _received_connect(self, packet: Connect) -> None:
        version = packet.protocol_version
        if not packet.client_id and (version is MQTTVersion.V3_1 or (
                version is MQTTVersion.V3_1_1 and not packet.clean_start)):
            # 3.1: a client id is 1..23 characters; 3.1.1: MQTT-3.1.3-8.
            self._set_connect(packet)
            raise ProtocolError(
                "empty client identifier", ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                ConnackReturnCode.IDENTIFIER_REJECTED,
            )
        props = packet.properties
        if props.authentication_data is not None and props.authentication_method is None:
            self._set_connect(packet)
            raise ProtocolError("authentication data without authentication method")
        self._set_connect(packet)

    def _set_connect(self, packet: Connect) -> None:
        self.connect = packet
        self.version = packet.protocol_version
        self.keep_alive = packet.keep_alive
        self._apply_limits(packet.properties, ours=self.our_role is Role.CLIENT)

    def _connack_seen(self, packet: Connack, ours: bool) -> None:
        self.connack_sent_or_received = True
        if self.version is not MQTTVersion.V5:
            return
        props = packet.properties
        if props.server_keep_alive is not None:
            self.keep_alive = props.server_keep_alive
        self._apply_limits(props, ours)

    def _apply_limits(self, props: Properties, ours: bool) -> None:
        """The limits a CONNECT or CONNACK carries: ``ours`` (we sent it) bound what we
        receive, the peer's bound what we send. An absent property leaves the value as
        it is (the protocol's maximum, or what the CONNECT said)."""
        size, aliases, receive = (
            props.maximum_packet_size, props.topic_alias_maximum, props.receive_maximum)
        if ours:
            if size is not None:
                self.max_packet_size = size
            if aliases is not None:
                self.topic_alias_maximum = aliases
            if receive is not None:
                self.receive_maximum = receive
                # 65,535 distinct packet ids cannot exceed 65,535: nothing to count
                self._unacked = set() if receive < 65535 else None
        else:
            if size is not None:
                self.peer_max_packet_size = size
            if aliases is not None:
                self.peer_topic_alias_maximum = aliases
            if receive is not None:
                self.peer_receive_maximum = receive

    def _received_publish(self, packet: Publish) -> Publish:
        props = packet.properties
        if props is EMPTY_PROPERTIES or not props:
            return packet
        if props.subscription_identifiers and self.our_role is Role.SERVER:
            raise ProtocolError("PUBLISH from a client with a subscription identifier")
        alias = props.topic_alias
        if alias is None:
            return packet
        if not 0 < alias <= self.topic_alias_maximum:
            raise TopicAliasInvalid(
                f"topic alias {alias} outside 1..{self.topic_alias_maximum}"
            )
        topic = packet.topic
        if topic:
            self._inbound_aliases[alias] = topic
        else:
            known = self._inbound_aliases.get(alias)
            if known is None:
                raise ProtocolError(f"topic alias {alias} used before it was set")
            topic = known
        # The caller sees the topic, never the alias: the alias belongs to this connection.
        return dataclasses.replace(
            packet, topic=topic, properties=dataclasses.replace(props, topic_alias=None)
        )

    def _remote_error(self, exc: MQTTError) -> RemoteProtocolError:
        self.state = State.ERROR
        self.error = exc
        err = RemoteProtocolError(str(exc), exc.reason_code, exc.connack_return_code)
        return err

    def _remote_error_again(self) -> RemoteProtocolError:
        exc = self.error
        if exc is None:  # pragma: no cover - ERROR always has an error
            return RemoteProtocolError("connection in ERROR state")
        return RemoteProtocolError(f"connection in ERROR state: {exc}", exc.reason_code,
                                   exc.connack_return_code)

    # -- output ---------------------------------------------------------------------------

    def send(self, packet: Packet) -> bytes:
        """The bytes to write for ``packet``, after checking it against the state.

        Raises :class:`LocalProtocolError` (state -> ERROR) for a packet the state or the
        version does not allow, and :class:`OutgoingPacketTooLarge` (state unchanged) for
        one above the peer's Maximum Packet Size. A server's DISCONNECT to a 3.x client
        returns ``b""`` (3.x has no such packet: just close) and moves to CLOSED.
        """
        ptype = packet.packet_type
        if self.state is State.ERROR:
            return self._send_in_error(packet)
        next_state = TRANSITIONS[self.state].get((self.our_role, ptype))
        if next_state is None:
            raise self._local_error(LocalProtocolError(
                f"cannot send {ptype.name} as the {self.our_role.value} "
                f"in state {self.state.name}"
            ))
        if isinstance(packet, Connect):
            self._set_connect(packet)
        version = self.version
        assert version is not None  # CONNECT comes first
        if ptype is PacketType.DISCONNECT and version is not MQTTVersion.V5 \
                and self.our_role is Role.SERVER:
            self.state = State.CLOSED
            return b""
        new_alias: tuple[str, int] | None = None
        if isinstance(packet, Publish) and version is MQTTVersion.V5:
            packet, new_alias = self._outgoing_publish(packet)
        data = self._encode(packet, version)
        if len(data) > self.peer_max_packet_size:
            data = self._shrink(packet, version, len(data))
        if isinstance(packet, Connack):
            self._connack_seen(packet, ours=True)
            if packet.reason_code:
                next_state = State.CLOSED
        if new_alias is not None:
            self._outbound_aliases[new_alias[0]] = new_alias[1]
        unacked = self._unacked
        if unacked is not None and (isinstance(packet, (Puback, Pubcomp)) or (
                isinstance(packet, Pubrec) and packet.reason_code >= 0x80)):
            unacked.discard(packet.packet_id)  # the flow of a peer's PUBLISH ends
        self.state = next_state
        return data

    def send_publish(
        self,
        topic: str | bytes,
        payload: bytes,
        qos: int,
        retain: bool,
        dup: bool,
        packet_id: int | None,
        properties: Properties = EMPTY_PROPERTIES,
    ) -> bytes:
        """:meth:`send` for a PUBLISH whose fields are known to be valid (a server
        forwarding a stored message), the topic as ``str`` or as its UTF-8 bytes: the
        same bytes and checks of state, Maximum Packet Size and topic aliases, without
        building and validating a :class:`Publish` (built only for the cases ``send``
        handles: not CONNECTED, topic aliases, a packet too large for the peer)."""
        if (
            self.state is not State.CONNECTED
            or (self._outbound_aliases_enabled and self.peer_topic_alias_maximum)
            or (properties is not EMPTY_PROPERTIES and properties.topic_alias is not None)
        ):
            return self.send(self._publish(topic, payload, qos, retain, dup, packet_id,
                                           properties))
        version = self.version
        assert version is not None  # CONNECTED
        data = encode_publish_fields(
            version, topic if type(topic) is bytes else topic.encode(),  # type: ignore[union-attr]
            payload, qos, retain, dup, packet_id, properties._wire,
        )
        if len(data) > self.peer_max_packet_size:
            packet = self._publish(topic, payload, qos, retain, dup, packet_id, properties)
            return self._shrink(packet, version, len(data))
        return data

    @staticmethod
    def _publish(
        topic: str | bytes, payload: bytes, qos: int, retain: bool, dup: bool,
        packet_id: int | None, properties: Properties,
    ) -> Publish:
        return Publish(
            topic=topic.decode() if isinstance(topic, bytes) else topic, payload=payload,
            qos=qos, retain=retain, dup=dup, packet_id=packet_id, properties=properties,
        )

    def plain_publish_encoder(self) -> PlainPublishEncoder | None:
        """An encoder of QoS 0 PUBLISH packets without properties whose bytes are what
        :meth:`send_publish` would return for them (same Maximum Packet Size rule: a
        packet it refuses goes the general way), or None when they need more than an
        encoder: not CONNECTED, or outbound topic aliases in use. Valid until the next
        call that changes the state: ask again for each run of packets."""
        if self.state is not State.CONNECTED or (
            self._outbound_aliases_enabled and self.peer_topic_alias_maximum
        ):
            return None
        plain = self._plain
        if plain is None:
            # version and the peer's limits are fixed from CONNECT / CONNACK on
            assert self.version is not None
            plain = self._plain = PlainPublishEncoder(self.version, self.peer_max_packet_size)
        return plain

    def send_ack_success(self, ptype: PacketType, packet_id: int) -> bytes:
        """:meth:`send` for a successful PUBACK / PUBREC / PUBCOMP (reason code 0, no
        properties) in the CONNECTED state: the same four bytes ``send`` would encode
        (MQTT 5 omits a zero reason code with no properties, 3.1.2 / 3.2.2 / 3.4.2),
        without building the packet object."""
        if self.state is not State.CONNECTED or not 0 < packet_id <= 0xFFFF:
            ack: Puback | Pubrec | Pubcomp = (
                Puback(packet_id) if ptype is PacketType.PUBACK
                else Pubrec(packet_id) if ptype is PacketType.PUBREC
                else Pubcomp(packet_id))
            return self.send(ack)
        if self._unacked is not None and ptype is not PacketType.PUBREC:
            self._unacked.discard(packet_id)
        return _ACK_HEADS[ptype] + packet_id.to_bytes(2, "big")

    def _encode(self, packet: Packet, version: MQTTVersion) -> bytes:
        buf = bytearray()
        try:
            encode_packet(packet, buf, version)
        except MQTTError as exc:
            raise self._local_error(
                LocalProtocolError(str(exc), exc.reason_code, exc.connack_return_code)
            ) from exc
        return bytes(buf)

    def _shrink(self, packet: Packet, version: MQTTVersion, size: int) -> bytes:
        limit = self.peer_max_packet_size
        props = getattr(packet, "properties", None)
        if packet.packet_type in _TRIMMABLE and props is not None and (
                props.reason_string is not None or props.user_properties):
            trimmed = dataclasses.replace(
                packet,  # type: ignore[arg-type]
                properties=dataclasses.replace(props, reason_string=None, user_properties=()),
            )
            data = self._encode(trimmed, version)
            if len(data) <= limit:
                return data
            size = len(data)
        raise OutgoingPacketTooLarge(
            f"{packet.packet_type.name} of {size} bytes exceeds the peer's maximum "
            f"packet size {limit}"
        )

    def _outgoing_publish(self, packet: Publish) -> tuple[Publish, tuple[str, int] | None]:
        props = packet.properties
        alias = props.topic_alias
        limit = self.peer_topic_alias_maximum
        if alias is not None:
            if alias > limit:
                raise self._local_error(LocalProtocolError(
                    f"topic alias {alias} above the peer's maximum {limit}",
                    ReasonCode.TOPIC_ALIAS_INVALID,
                ))
            return packet, ((packet.topic, alias) if packet.topic else None)
        if not self._outbound_aliases_enabled or not limit:
            return packet, None
        known = self._outbound_aliases.get(packet.topic)
        if known is not None:
            return dataclasses.replace(
                packet, topic="", properties=dataclasses.replace(props, topic_alias=known)
            ), None
        if len(self._outbound_aliases) >= limit:
            return packet, None
        alias = len(self._outbound_aliases) + 1
        return dataclasses.replace(
            packet, properties=dataclasses.replace(props, topic_alias=alias)
        ), (packet.topic, alias)

    def _local_error(self, exc: LocalProtocolError) -> LocalProtocolError:
        self.state = State.ERROR
        if self.error is None:
            self.error = exc
        return exc

    # -- after an error -------------------------------------------------------------------

    def _send_in_error(self, packet: Packet) -> bytes:
        version = self.version
        if isinstance(packet, Connack) and self.our_role is Role.SERVER \
                and not self.connack_sent_or_received:
            self.connack_sent_or_received = True
            return self._encode_unchecked(packet, version or MQTTVersion.V3_1_1)
        if isinstance(packet, Disconnect) and version is MQTTVersion.V5 \
                and self.connack_sent_or_received:
            data = self._encode_unchecked(packet, version)
            if len(data) > self.peer_max_packet_size and packet.properties:
                # MQTT-3.1.2-24: the properties (a reason string) are optional; the
                # reason code alone (at most 3 bytes) is what the client must get.
                data = self._encode_unchecked(Disconnect(packet.reason_code), version)
            return data
        raise LocalProtocolError(f"cannot send {packet.packet_type.name} in state ERROR")

    @staticmethod
    def _encode_unchecked(packet: Packet, version: MQTTVersion) -> bytes:
        buf = bytearray()
        encode_packet(packet, buf, version)
        return bytes(buf)

    def error_response(self) -> bytes:
        """After an error: the bytes to send before closing (may be ``b""``).

        Before a CONNACK went out (server): a CONNACK refusing the connection -- MQTT 5
        with the error's reason code; 3.x with its return code, or nothing if the error
        has none (3.x closes without a CONNACK for malformed input). After it: an MQTT 5
        DISCONNECT with the reason code; nothing for 3.x. Call once, then close.
        """
        exc = self.error
        if self.state is not State.ERROR or exc is None:
            raise LocalProtocolError("error_response() without an error")
        code = exc.reason_code
        if self.version is None:
            self.version = self._sniff_version()
        version = self.version
        if self.our_role is Role.SERVER and not self.connack_sent_or_received:
            if version is MQTTVersion.V5:
                if code not in CONNACK_REASON_CODES:
                    code = ReasonCode.UNSPECIFIED_ERROR
                return self.send(Connack(reason_code=code))
            if exc.connack_return_code is None:
                return b""
            return self.send(Connack(reason_code=exc.connack_return_code))
        if version is MQTTVersion.V5 and self.connack_sent_or_received:
            if code not in DISCONNECT_REASON_CODES:
                code = ReasonCode.UNSPECIFIED_ERROR
            # A reason string says what was wrong (allowed on DISCONNECT whatever the
            # client's Request Problem Information, MQTT 5 3.1.2.11.7); the machine
            # drops it again if it would exceed the client's Maximum Packet Size.
            reason = str(exc.__cause__ or exc)[:256]
            return self.send(Disconnect(reason_code=code,
                                        properties=Properties(reason_string=reason)))
        return b""

    def _sniff_version(self) -> MQTTVersion | None:
        """The protocol level of a CONNECT that failed to decode, if it is readable."""
        data = bytes(self._buf[self._pos : self._pos + 16])
        if len(data) >= 2 and data[0] == 0x10:
            for i in range(1, min(len(data), 5)):
                if not data[i] & 0x80:
                    body = data[i + 1 :]
                    if body[:6] == b"\x00\x04MQTT" and body[6:7] == b"\x05":
                        return MQTTVersion.V5
                    break
        return None
