"""Events that ``AMQPConnection.next_event()`` returns (the AMQP analogue of h11's).

Each event says what the peer did; the docstring says what the caller owes in
return. Everything the caller sends is bytes returned by an ``AMQPConnection``
method, written to the socket in the order the calls were made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .fastpath import ContentHeader, Publish


class _NeedData:
    """Sentinel: no complete event in the buffer; feed more with ``receive_data``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


@dataclass(slots=True)
class ProtocolHeaderReceived:
    """The peer sent ``AMQP 0-9-1``. Answer: ``send_start()``."""


@dataclass(slots=True)
class AuthenticationRequested:
    """Connection.StartOk arrived. Answer ``accept_auth()`` (sends Tune) or
    ``deny_auth(text)`` (sends Connection.Close 403 ACCESS_REFUSED)."""

    mechanism: str
    username: str
    password: str
    client_properties: dict[str, Any]
    locale: str


@dataclass(slots=True)
class TuneNegotiated:
    """Connection.TuneOk arrived; these are the values now in force. Start the
    heartbeat timers: send ``send_heartbeat()`` every ``heartbeat / 2`` seconds of
    send silence and drop the peer after ``2 * heartbeat`` seconds of receive
    silence (``heartbeat == 0``: no heartbeats). Nothing to send."""

    channel_max: int
    frame_max: int
    heartbeat: int


@dataclass(slots=True)
class OpenRequested:
    """Connection.Open arrived. Answer ``accept_open()`` (Connection.OpenOk) or
    ``deny_open(text)`` (Connection.Close 530 NOT_ALLOWED by default)."""

    virtual_host: str


@dataclass(slots=True)
class ChannelOpenRequested:
    """Channel.Open on a free channel id; the channel is open from now on.
    Answer: ``send_channel_open_ok(channel)``."""

    channel: int


@dataclass(slots=True)
class ChannelCloseRequested:
    """The peer sent Channel.Close. Release the channel's resources (requeue its
    unacked messages, cancel its consumers), then ``send_channel_close_ok(channel)``.
    Frames on the channel are ignored until then."""

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(slots=True)
class ChannelClosed:
    """Channel.CloseOk answered our Channel.Close: the channel id is free again.
    (Release resources when you *send* the close, not here.)"""

    channel: int


@dataclass(slots=True)
class MethodReceived:
    """Any other method on an open channel (Queue.Declare, Basic.Consume, ...).

    ``method`` is a pamqp ``commands.*`` object, except the fast-path decoded
    ``fastpath.Ack`` and ``fastpath.Nack``; all have ``.name`` (``"Basic.Ack"``)
    and ``.index`` (``class_id << 16 | method_id``), so dispatch on those.
    Answer with ``send_method()`` where the method is synchronous."""

    channel: int
    method: Any


@dataclass(slots=True)
class ContentReceived:
    """A complete Basic.Publish: method, content header and body.

    ``header.properties_raw`` is what to store and forward; ``header.delivery_mode``,
    ``.priority``, ``.expiration`` and ``.headers`` (decoded on access) are parsed."""

    channel: int
    method: Publish
    header: ContentHeader
    body: bytes


@dataclass(slots=True)
class HeartbeatReceived:
    """A heartbeat frame. Any received bytes prove liveness; nothing to send."""


@dataclass(slots=True)
class ConnectionCloseRequested:
    """The peer sent Connection.Close. Release everything, then
    ``send_close_ok()``, write it and close the socket."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(slots=True)
class ConnectionClosed:
    """The connection is over (state ``CLOSED``): close the socket after writing
    what is pending. ``clean`` is True after a complete Close/CloseOk exchange,
    False after EOF, a bad protocol header, or garbage while closing. Returned
    once; ``next_event()`` then returns ``NEED_DATA`` forever."""

    clean: bool


Event = (
    ProtocolHeaderReceived | AuthenticationRequested | TuneNegotiated | OpenRequested
    | ChannelOpenRequested | ChannelCloseRequested | ChannelClosed | MethodReceived
    | ContentReceived | HeartbeatReceived | ConnectionCloseRequested | ConnectionClosed
)
