"""The states of an MQTT connection and the table of legal moves, after h11's ``_state``.

One state describes the whole connection; both peers' packets move it. The legal moves
are a table, ``TRANSITIONS[state][(role of the sender, packet type)] -> next state``; a
packet not in the table is a protocol error::

    CONNECTING --CONNECT (client)--> AWAITING_CONNACK --CONNACK ok (server)--> CONNECTED
                                       |  AUTH both ways; client packets may be
                                       |  pipelined before the CONNACK
                                       +--CONNACK refused--> CLOSED
    CONNECTED: PUBLISH and acks both ways, SUBSCRIBE/UNSUBSCRIBE/PINGREQ from the client,
               SUBACK/UNSUBACK/PINGRESP from the server, AUTH (MQTT 5) both ways
    AWAITING_CONNACK, CONNECTED --DISCONNECT (either; the server only in MQTT 5)--> CLOSED
    any state --received bytes break the protocol--> ERROR (RemoteProtocolError)
    any state --we try to send an illegal packet--> ERROR (LocalProtocolError)

Invariant the connection's one-step paths rely on: in CONNECTED, PUBLISH and PUBACK from
either side leave the state as it is, so a received PUBLISH or run of PUBACKs needs no
table lookup (tests assert the table says so).
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from .packet_types import PacketType


class Role(Enum):
    CLIENT = "client"
    SERVER = "server"

    # Members are singletons compared by identity: hash them in C, not with Enum's
    # Python-level __hash__ (the transition table is consulted on every packet).
    __hash__ = object.__hash__


class State(Enum):
    CONNECTING = "connecting"  # no CONNECT yet
    AWAITING_CONNACK = "awaiting_connack"
    CONNECTED = "connected"
    CLOSED = "closed"  # DISCONNECT, refused CONNACK, or EOF
    ERROR = "error"

    __hash__ = object.__hash__  # as Role's


class Sentinel:
    """A value of ``next_event`` that is not an event."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Feed more bytes.
NEED_DATA: Final = Sentinel("NEED_DATA")
#: Server only: the client pipelined packets after its CONNECT; they are held back until
#: the CONNACK has been sent (the server MUST NOT process them before).
PAUSED: Final = Sentinel("PAUSED")

_C, _S = Role.CLIENT, Role.SERVER
_P = PacketType
_FROM_CLIENT = (_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBSCRIBE,
                _P.UNSUBSCRIBE, _P.PINGREQ, _P.AUTH)
_FROM_SERVER = (_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK,
                _P.UNSUBACK, _P.PINGRESP, _P.AUTH)

TRANSITIONS: Final[dict[State, dict[tuple[Role, PacketType], State]]] = {
    State.CONNECTING: {(_C, _P.CONNECT): State.AWAITING_CONNACK},
    State.AWAITING_CONNACK: {
        **{(_C, t): State.AWAITING_CONNACK for t in _FROM_CLIENT},
        (_S, _P.AUTH): State.AWAITING_CONNACK,
        (_S, _P.CONNACK): State.CONNECTED,  # CLOSED if refused
        (_C, _P.DISCONNECT): State.CLOSED,
    },
    State.CONNECTED: {
        **{(_C, t): State.CONNECTED for t in _FROM_CLIENT},
        **{(_S, t): State.CONNECTED for t in _FROM_SERVER},
        (_C, _P.DISCONNECT): State.CLOSED,
        (_S, _P.DISCONNECT): State.CLOSED,
    },
    State.CLOSED: {},
    State.ERROR: {},
}
