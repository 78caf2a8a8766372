"""Server side of an AMQP 0-9-1 connection, sans-IO (h11's shape).

Theory of operation
-------------------
``receive_data(bytes)`` buffers what the socket read (``b""`` is EOF);
``next_event()`` returns the next :mod:`.events` event, ``NEED_DATA``, or raises an
:class:`~.errors.AMQPError`; every ``send_*``/``accept_*``/``deny_*`` method returns
the bytes to write, and nothing is ever queued behind the caller's back. The
caller's loop::

    conn.receive_data(data)
    while True:
        try:
            event = conn.next_event()
        except AMQPError as exc:      # the peer broke the protocol
            out += conn.send_error(exc)
            continue
        if event is NEED_DATA:
            break
        out += handle(event)          # broker logic; it may raise AMQPError too
    sock.write(out)

Connection states and what moves them (``_HANDSHAKE`` is the table of which
channel-0 method each state accepts; anything else there is 503 COMMAND_INVALID)::

    AWAIT_HEADER --header--> AWAIT_START --send_start()--> AWAIT_START_OK
      --StartOk--> AUTHENTICATING --accept_auth()--> AWAIT_TUNE_OK --TuneOk-->
      AWAIT_OPEN --Open--> OPENING --accept_open()--> OPEN
    any state --peer Connection.Close--> CLOSE_RECEIVED --send_close_ok()--> CLOSED
    any state --send_error(hard)/deny_*()/close()--> CLOSING --CloseOk--> CLOSED
    AWAIT_HEADER --wrong header, send_error()--> CLOSED;  EOF --> CLOSED

When the machine raises an error it has already moved its state (the channel to
CLOSING, or the connection to CLOSING); ``send_error`` produces the close method
once. In CLOSING every frame but Connection.Close/Close-Ok is discarded, as the
spec requires. Channels are :class:`.channel.Channel`.

Error choices: framing faults are 501 FRAME_ERROR, undecodable arguments 502
SYNTAX_ERROR, a method in the wrong connection state or a Connection method on a
non-zero channel 503 COMMAND_INVALID, a frame on a channel that is not open or a
second Channel.Open 504 CHANNEL_ERROR, content out of sequence 505 UNEXPECTED_FRAME,
an unknown method 540 NOT_IMPLEMENTED.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable
from typing import Any

from pamqp import commands

from . import fastpath, sasl
from .channel import Channel, ChannelState
from .errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    FRAME_ERROR,
    NOT_ALLOWED,
    UNEXPECTED_FRAME,
    AMQPError,
    ConnectionLevelError,
    LocalProtocolError,
    ProtocolHeaderError,
)
from .events import (
    NEED_DATA,
    AuthenticationRequested,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseRequested,
    ContentReceived,
    Event,
    HeartbeatReceived,
    MethodReceived,
    OpenRequested,
    ProtocolHeaderReceived,
    TuneNegotiated,
    _NeedData,
)
from .framing import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameReader,
    decode_method,
    encode_method,
    method_index,
)

C, Ch, B = commands.Connection, commands.Channel, commands.Basic

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}

DEFAULT_SERVER_PROPERTIES: dict[str, Any] = {
    "product": "LMQ Gateway",
    "version": "0.1.0",
    "platform": "Python",
    "copyright": "Apache-2.0",
    "information": "AMQP 0-9-1 on a light-message-queue store",
}

# Server-to-client methods that carry content; a client sending one is 503.
_SERVER_CONTENT_METHODS = frozenset({B.Deliver.index, B.GetOk.index, B.Return.index})
# Methods send_method() refuses: they change state, use the dedicated helper.
_STATEFUL = {
    Ch.Open.index: "channels are opened by the peer", Ch.OpenOk.index: "send_channel_open_ok()",
    Ch.Close.index: "send_error(ChannelError(...))", Ch.CloseOk.index: "send_channel_close_ok()",
    B.Deliver.index: "send_deliver()", B.GetOk.index: "send_get_ok()",
    B.Return.index: "send_return()",
}
_CHANNEL0_SENDABLE = frozenset({C.Blocked.index, C.Unblocked.index, C.UpdateSecretOk.index})
# For _publish_fast: frame header + method index; frame header + the content header's
# fixed part (class, weight, body size, first flag word); a frame header.
_METHOD_HEAD = struct.Struct(">BHII")
_HEADER_HEAD = struct.Struct(">BHIHHQH")
_FRAME_HEAD = struct.Struct(">BHI")


class ConnectionState(enum.Enum):
    AWAIT_HEADER = "AWAIT_HEADER"
    AWAIT_START = "AWAIT_START"  # caller owes send_start()
    AWAIT_START_OK = "AWAIT_START_OK"
    AUTHENTICATING = "AUTHENTICATING"  # caller owes accept_auth() / deny_auth()
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    AWAIT_OPEN = "AWAIT_OPEN"
    OPENING = "OPENING"  # caller owes accept_open() / deny_open()
    OPEN = "OPEN"
    CLOSE_RECEIVED = "CLOSE_RECEIVED"  # caller owes send_close_ok()
    CLOSING = "CLOSING"  # our Connection.Close is out; waiting for CloseOk
    CLOSED = "CLOSED"


S = ConnectionState
# The one channel-0 method each handshake state accepts (plus Close, always).
_HANDSHAKE = {
    S.AWAIT_START_OK: C.StartOk.index,
    S.AWAIT_TUNE_OK: C.TuneOk.index,
    S.AWAIT_OPEN: C.Open.index,
    S.OPEN: C.UpdateSecret.index,
}


class AMQPConnection:
    """One server-side AMQP 0-9-1 connection. Not thread-safe; no I/O.

    ``frame_max``/``channel_max``/``heartbeat`` are the server's Tune proposal;
    the negotiated values are in the attributes of the same name after TuneOk.
    ``max_message_size`` bounds one message body (406 on the channel above it).
    """

    def __init__(
        self,
        *,
        server_properties: dict[str, Any] | None = None,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
        max_message_size: int = 128 * 1024 * 1024,
        mechanisms: tuple[str, ...] = sasl.MECHANISMS,
    ) -> None:
        props = dict(DEFAULT_SERVER_PROPERTIES)
        props.update(server_properties or {})
        props["capabilities"] = {**CAPABILITIES, **props.get("capabilities", {})}
        self.server_properties = props
        self.mechanisms = mechanisms
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = heartbeat
        self.max_message_size = max_message_size
        self.state = S.AWAIT_HEADER
        self.client_properties: dict[str, Any] = {}
        self.username: str | None = None
        self.virtual_host: str | None = None
        self._reader = FrameReader(frame_max)
        self._channels: dict[int, Channel] = {}
        self._eof = False
        self._closed_reported = False
        self._close_sent = False
        self._clean_close = False
        self._stream_broken = False
        # _publish_fast's last method frame and content header frame, decoded
        self._last_publish: tuple[bytes, int, fastpath.Publish] | None = None
        self._last_header: tuple[bytes, int, fastpath.ContentHeader] | None = None
        self._deliveries = fastpath.DeliveryEncoder()

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes) -> None:
        """Buffer received bytes; ``b""`` means the peer closed its side (EOF)."""
        if data:
            self._reader.feed(data)
        else:
            self._eof = True

    def next_event(self) -> Event | _NeedData:
        """Next event, ``NEED_DATA``, or raise an ``AMQPError`` (see module doc)."""
        if self.state is S.OPEN:
            content = self._publish_fast()
            if content is not None:
                return content
        while True:
            if self.state is S.CLOSED or self._stream_broken:
                self.state = S.CLOSED
                return self._report_closed()
            try:
                if self.state is S.AWAIT_HEADER:
                    if not self._reader.read_protocol_header():
                        return self._need_data()
                    self.state = S.AWAIT_START
                    return ProtocolHeaderReceived()
                frame = self._reader.read_frame()
            except ProtocolHeaderError:
                self.state = S.CLOSING  # send_error() answers with our header, then CLOSED
                raise
            except ConnectionLevelError:
                # The stream cannot be cut into frames any more, so no CloseOk could
                # be read: after send_error() the next event is ConnectionClosed.
                if self.state is not S.CLOSING:
                    self._fail()
                    self._stream_broken = True
                    raise
                self.state = S.CLOSED  # garbage while closing: just drop the peer
                continue
            if frame is None:
                return self._need_data()
            try:
                event = self._handle_frame(*frame)
            except AMQPError as exc:
                if exc.connection_level:
                    self._fail()
                raise
            if event is not None:
                return event

    def _publish_fast(self) -> ContentReceived | None:
        """A whole ``Basic.Publish`` at the head of the buffer (method frame, content
        header, at most one body frame, all complete and valid) in one step.

        The per-message path: the general one (``read_frame`` + ``_handle_frame`` per
        frame) costs about twice as much for these three frames. This takes the
        message only when the general path would produce exactly this
        ``ContentReceived`` with no error; anything else (a partial or multi-frame
        body, another channel's frame in between, a frame that is malformed, too
        large or out of sequence, a closed or busy channel) returns None having
        consumed nothing, and the general path handles the same bytes, errors
        included.

        A publisher mostly repeats itself: the last method frame and the last content
        header frame taken here are kept with what they decoded to, and the same bytes
        again (compared in place) reuse the decoded ``Publish`` / ``ContentHeader``
        (both are treated as immutable; the lazily decoded ``headers`` is read-only).
        Their checks depend on nothing that changes once the connection is OPEN
        (frame_max, max_message_size), except the channel's state, checked each time.
        """
        reader = self._reader
        buf = reader._buf
        pos = reader._pos
        avail = len(buf)
        if avail - pos < 11:
            return None
        last_publish = self._last_publish
        if last_publish is not None and buf.startswith(last_publish[0], pos):
            h = pos + len(last_publish[0])
            channel = last_publish[1]
            method = last_publish[2]
        else:
            frame_type, channel, size, index = _METHOD_HEAD.unpack_from(buf, pos)
            if frame_type != FRAME_METHOD or index != fastpath.PUBLISH_INDEX or size < 9:
                return None  # (9: the smallest Basic.Publish payload)
            frame_max = reader.frame_max
            if frame_max and size + FRAME_OVERHEAD > frame_max:
                return None
            end = pos + 7 + size
            if avail <= end or buf[end] != FRAME_END:
                return None
            # arguments: reserved-1 (u16), exchange, routing-key, bits
            p = pos + 13
            q = p + 1 + buf[p]
            r = q + 1 + buf[q] if q < end else end
            if r >= end:
                return None  # truncated: the general path reports the syntax error
            try:
                method = fastpath.Publish(
                    buf[p + 1 : q].decode(), buf[q + 1 : r].decode(), bool(buf[r] & 1),
                    bool(buf[r] & 2))
            except UnicodeDecodeError:
                return None
            h = end + 1
            self._last_publish = (bytes(buf[pos:h]), channel, method)
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN or chan._method is not None:
            return None
        # the content header frame
        last_header = self._last_header
        if (last_header is not None and last_header[1] == channel
                and buf.startswith(last_header[0], h)):
            b = h + len(last_header[0])
            header = last_header[2]
        else:
            if avail - h < 21:
                return None
            # type, channel, size, class, weight, body size, first flag word
            frame_type, hchannel, size, class_id, _weight, body_size, _flags = (
                _HEADER_HEAD.unpack_from(buf, h))
            frame_max = reader.frame_max
            if (frame_type != FRAME_HEADER or hchannel != channel
                    or class_id != fastpath.BASIC_CLASS or body_size > chan.max_message_size
                    or (frame_max and size + FRAME_OVERHEAD > frame_max)):
                return None
            b = h + 8 + size
            if avail < b or buf[b - 1] != FRAME_END:
                return None
            frame = bytes(buf[h:b])
            try:
                header = fastpath.ContentHeader(frame[7:-1])
            except AMQPError:
                return None
            self._last_header = (frame, channel, header)
        body_size = header.body_size
        if not body_size:
            reader._pos = b
            return ContentReceived(channel, method, header, b"")
        # one body frame carrying the whole body
        if avail - b < 7:
            return None
        frame_type, bchannel, size = _FRAME_HEAD.unpack_from(buf, b)
        frame_max = reader.frame_max
        if (frame_type != FRAME_BODY or bchannel != channel or size != body_size
                or (frame_max and size + FRAME_OVERHEAD > frame_max)):
            return None
        end = b + 7 + size
        if avail <= end or buf[end] != FRAME_END:
            return None
        reader._pos = end + 1
        return ContentReceived(channel, method, header, bytes(buf[b + 7 : end]))

    def _need_data(self) -> Event | _NeedData:
        if self._eof:
            self.state = S.CLOSED
            return self._report_closed()
        return NEED_DATA

    def _report_closed(self) -> Event | _NeedData:
        if self._closed_reported:
            return NEED_DATA
        self._closed_reported = True
        return ConnectionClosed(self._clean_close)

    def _fail(self) -> None:
        """A hard error was found: stop processing; send_error() sends the Close."""
        self.state = S.CLOSING
        self._channels.clear()

    def _handle_frame(self, frame_type: int, channel: int, payload: bytes) -> Event | None:
        if channel and self.state is S.OPEN:  # the per-message path, checked first
            chan = self._channels.get(channel)
            if chan is not None and chan.state is ChannelState.OPEN:
                if frame_type == FRAME_BODY:
                    return chan.on_body(payload)
                if frame_type == FRAME_HEADER:
                    return chan.on_header(payload)
        if self.state is S.CLOSING or self.state is S.CLOSE_RECEIVED:
            return self._while_closing(frame_type, channel, payload)
        if frame_type == FRAME_HEARTBEAT:
            return HeartbeatReceived()
        if channel == 0:
            if frame_type != FRAME_METHOD:
                raise ConnectionLevelError(UNEXPECTED_FRAME, "content frame on channel 0")
            return self._connection_method(decode_method(payload))
        if self.state is not S.OPEN:
            raise ConnectionLevelError(
                CHANNEL_ERROR, f"frame on channel {channel} before connection.open-ok")
        chan = self._channels.get(channel)
        if frame_type == FRAME_METHOD:
            return self._channel_method(channel, chan, payload)
        if chan is None:
            raise ConnectionLevelError(CHANNEL_ERROR, f"channel {channel} is not open")
        if chan.state is not ChannelState.OPEN:
            return None
        if frame_type == FRAME_HEADER:
            return chan.on_header(payload)
        assert frame_type == FRAME_BODY
        return chan.on_body(payload)

    def _while_closing(self, frame_type: int, channel: int, payload: bytes) -> Event | None:
        if frame_type != FRAME_METHOD or channel != 0 or len(payload) < 4:
            return None
        index = method_index(payload)
        if index == C.CloseOk.index and self.state is S.CLOSING:
            self.state = S.CLOSED
            self._clean_close = True
            return None
        if index == C.Close.index and self.state is S.CLOSING:
            # Closes crossed: answer theirs (send_close_ok), ours needs no CloseOk now.
            return self._close_requested(decode_method(payload))
        return None

    def _close_requested(self, method: Any) -> Event:
        self.state = S.CLOSE_RECEIVED
        self._channels.clear()
        return ConnectionCloseRequested(
            method.reply_code, method.reply_text, method.class_id, method.method_id)

    def _connection_method(self, method: Any) -> Event:
        index = method.index
        if index == C.Close.index:
            return self._close_requested(method)
        if index >> 16 != C.frame_id:
            raise ConnectionLevelError(
                COMMAND_INVALID, f"{method.name} on channel 0", method=method)
        if _HANDSHAKE.get(self.state) != index:
            raise ConnectionLevelError(
                COMMAND_INVALID, f"{method.name} unexpected in state {self.state.value}",
                method=method)
        if index == C.StartOk.index:
            return self._start_ok(method)
        if index == C.TuneOk.index:
            return self._tune_ok(method)
        if index == C.Open.index:
            self.state = S.OPENING
            self.virtual_host = method.virtual_host
            return OpenRequested(method.virtual_host)
        return MethodReceived(0, method)  # Connection.UpdateSecret

    def _start_ok(self, method: Any) -> Event:
        if method.mechanism not in self.mechanisms:
            raise ConnectionLevelError(
                ACCESS_REFUSED, f"unsupported authentication mechanism {method.mechanism!r}",
                method=method)
        try:
            username, password = sasl.parse_response(method.mechanism, method.response)
        except AMQPError as exc:
            exc.class_id, exc.method_id = C.frame_id, C.StartOk.frame_id
            raise
        self.state = S.AUTHENTICATING
        self.client_properties = method.client_properties or {}
        self.username = username
        return AuthenticationRequested(
            method.mechanism, username, password, self.client_properties, method.locale)

    def _tune_ok(self, method: Any) -> Event:
        def lower(ours: int, theirs: int) -> int:
            return min(ours, theirs) if ours and theirs else ours or theirs

        if method.frame_max and method.frame_max < FRAME_MIN_SIZE:
            raise ConnectionLevelError(
                NOT_ALLOWED, f"frame_max={method.frame_max} < {FRAME_MIN_SIZE} min size",
                method=method)
        self.frame_max = lower(self.frame_max, method.frame_max)
        self.channel_max = lower(self.channel_max, method.channel_max) or 65535
        self.heartbeat = method.heartbeat
        self._reader.frame_max = self.frame_max
        self.state = S.AWAIT_OPEN
        return TuneNegotiated(self.channel_max, self.frame_max, self.heartbeat)

    def _channel_method(self, channel: int, chan: Channel | None, payload: bytes) -> Event | None:
        if len(payload) < 4:
            raise ConnectionLevelError(FRAME_ERROR, "method frame shorter than 4 octets")
        index = method_index(payload)
        if chan is None:
            if index != Ch.Open.index:
                raise ConnectionLevelError(
                    CHANNEL_ERROR, f"expected 'channel.open' on channel {channel}",
                    index >> 16, index & 0xFFFF)
            # channel_max bounds how many channels are open, not their numbers (any of
            # 1-65535 may be used), as RabbitMQ reads it: one more is 530 NOT_ALLOWED
            if len(self._channels) >= self.channel_max:
                raise ConnectionLevelError(
                    NOT_ALLOWED,
                    f"number of channels opened ({len(self._channels)}) has reached the "
                    f"negotiated channel_max ({self.channel_max})",
                    index >> 16, index & 0xFFFF)
            decode_method(payload)  # validates the (empty) arguments
            self._channels[channel] = Channel(channel, self.max_message_size)
            return ChannelOpenRequested(channel)
        if chan.state is not ChannelState.OPEN:
            if index == Ch.CloseOk.index and chan.state is ChannelState.CLOSING:
                del self._channels[channel]
                return ChannelClosed(channel)
            if index == Ch.Close.index and chan.state is ChannelState.CLOSING:
                method = decode_method(payload)  # closes crossed; chan stays CLOSING
                return ChannelCloseRequested(
                    channel, method.reply_code, method.reply_text, method.class_id,
                    method.method_id)
            return None
        if chan.expecting_content:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME, f"method on channel {channel} while expecting content",
                index >> 16, index & 0xFFFF)
        # The per-message methods skip pamqp.
        if index == fastpath.PUBLISH_INDEX:
            chan.start_content(fastpath.decode_publish(payload))
            return None
        if index == fastpath.ACK_INDEX:
            return MethodReceived(channel, fastpath.decode_ack(payload))
        if index == fastpath.NACK_INDEX:
            return MethodReceived(channel, fastpath.decode_nack(payload))
        method = decode_method(payload)
        if index == Ch.Close.index:
            chan.state = ChannelState.CLOSE_RECEIVED
            chan.reset_content()
            return ChannelCloseRequested(
                channel, method.reply_code, method.reply_text, method.class_id, method.method_id)
        if index == Ch.Open.index:
            raise ConnectionLevelError(
                CHANNEL_ERROR, f"second 'channel.open' on channel {channel}", method=method)
        if index == Ch.CloseOk.index:
            raise ConnectionLevelError(
                CHANNEL_ERROR, f"unexpected 'channel.close-ok' on channel {channel}",
                method=method)
        if index >> 16 == C.frame_id or index in _SERVER_CONTENT_METHODS:
            raise ConnectionLevelError(
                COMMAND_INVALID, f"{method.name} not allowed on channel {channel}",
                method=method)
        if index == Ch.Flow.index:
            chan.flow_active = bool(method.active)
        return MethodReceived(channel, method)

    # ----------------------------------------------------------------- output

    def _expect(self, state: ConnectionState, what: str) -> None:
        if self.state is not state:
            raise LocalProtocolError(f"{what} needs state {state.value}, not {self.state.value}")

    def send_start(self) -> bytes:
        """Connection.Start with ``server_properties`` (capabilities included)."""
        self._expect(S.AWAIT_START, "send_start()")
        self.state = S.AWAIT_START_OK
        return encode_method(0, C.Start(
            server_properties=self.server_properties,
            mechanisms=" ".join(self.mechanisms), locales="en_US"))

    def accept_auth(self) -> bytes:
        """Credentials accepted: Connection.Tune with our proposal."""
        self._expect(S.AUTHENTICATING, "accept_auth()")
        self.state = S.AWAIT_TUNE_OK
        return encode_method(0, C.Tune(self.channel_max, self.frame_max, self.heartbeat))

    def deny_auth(self, reply_text: str = "") -> bytes:
        """Credentials refused: Connection.Close 403 ACCESS_REFUSED."""
        self._expect(S.AUTHENTICATING, "deny_auth()")
        text = reply_text or (
            f"Login was refused using authentication mechanism. User: {self.username!r}")
        return self.send_error(ConnectionLevelError(
            ACCESS_REFUSED, text, C.frame_id, C.StartOk.frame_id))

    def accept_open(self) -> bytes:
        """Virtual host granted: Connection.OpenOk; the connection is OPEN."""
        self._expect(S.OPENING, "accept_open()")
        self.state = S.OPEN
        return encode_method(0, C.OpenOk())

    def deny_open(self, reply_text: str = "", reply_code: int = NOT_ALLOWED) -> bytes:
        """Virtual host refused (unknown, or no permission): Connection.Close 530."""
        self._expect(S.OPENING, "deny_open()")
        text = reply_text or f"vhost {self.virtual_host!r} not found"
        return self.send_error(ConnectionLevelError(
            reply_code, text, C.frame_id, C.Open.frame_id))

    def send_close_ok(self) -> bytes:
        """Answer the peer's Connection.Close; the connection is CLOSED."""
        self._expect(S.CLOSE_RECEIVED, "send_close_ok()")
        self.state = S.CLOSED
        self._clean_close = True
        return encode_method(0, C.CloseOk())

    def close(self, reply_code: int = CONNECTION_FORCED, reply_text: str = "") -> bytes:
        """Server-initiated close, e.g. 320 CONNECTION_FORCED at shutdown."""
        return self.send_error(ConnectionLevelError(reply_code, reply_text or "broker shutdown"))

    def send_error(self, error: AMQPError) -> bytes:
        """The close for ``error``: Channel.Close on its channel for a ChannelError
        (the channel then ignores all but CloseOk), Connection.Close otherwise (the
        connection goes to CLOSING). Idempotent: b"" if that close is already out."""
        if isinstance(error, ProtocolHeaderError):
            self.state = S.CLOSED
            return PROTOCOL_HEADER
        close_args = (error.reply_code, error.reply_text.encode()[:255].decode(
            "utf-8", "ignore"), error.class_id, error.method_id)
        if not error.connection_level:
            if not error.channel:
                raise LocalProtocolError(f"ChannelError without a channel: {error}")
            chan = self._channels.get(error.channel)
            if (chan is None or chan.close_sent or chan.state is ChannelState.CLOSE_RECEIVED
                    or self.state is not S.OPEN):
                return b""  # already closed or closing: one close per channel
            chan.state = ChannelState.CLOSING
            chan.close_sent = True
            chan.reset_content()
            return encode_method(error.channel, Ch.Close(*close_args))
        if self._close_sent or self.state in (S.CLOSED, S.CLOSE_RECEIVED, S.AWAIT_HEADER):
            return b""
        self._fail()
        self._close_sent = True
        return encode_method(0, C.Close(*close_args))

    def _open_channel(self, channel: int, what: str) -> Channel:
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN:
            raise LocalProtocolError(f"{what}: channel {channel} is not open")
        return chan

    def send_channel_open_ok(self, channel: int) -> bytes:
        self._open_channel(channel, "send_channel_open_ok()")
        return encode_method(channel, Ch.OpenOk())

    def send_channel_close_ok(self, channel: int) -> bytes:
        """Answer the peer's Channel.Close; the channel id is free afterwards."""
        chan = self._channels.get(channel)
        if chan is None or chan.state is ChannelState.OPEN:
            raise LocalProtocolError(f"send_channel_close_ok(): no close on channel {channel}")
        if chan.state is ChannelState.CLOSE_RECEIVED:
            del self._channels[channel]
        return encode_method(channel, Ch.CloseOk())

    def send_method(self, channel: int, method: Any) -> bytes:
        """Any other pamqp method (Queue.DeclareOk, Basic.ConsumeOk, Basic.Cancel,
        Confirm.SelectOk, Channel.Flow, Connection.Blocked on channel 0, ...)."""
        if method.index in _STATEFUL:
            raise LocalProtocolError(f"{method.name}: use {_STATEFUL[method.index]}")
        if channel == 0:
            if method.index not in _CHANNEL0_SENDABLE or self.state is not S.OPEN:
                raise LocalProtocolError(f"{method.name} cannot be sent on channel 0 now")
        else:
            self._open_channel(channel, method.name)
        try:
            return encode_method(channel, method)
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {method.name}: {exc}") from exc

    def send_deliver(
        self, channel: int, consumer_tag: str | bytes, delivery_tag: int, redelivered: bool,
        exchange: str | bytes, routing_key: str | bytes, properties_raw: bytes, body: bytes,
    ) -> bytes:
        """Basic.Deliver + content header + body frames, as one chunk."""
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN:
            raise LocalProtocolError(f"send_deliver(): channel {channel} is not open")
        return self._deliveries.encode(
            channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
            properties_raw, body, self.frame_max)

    def deliver_encoder(self, channel: int, consumer_tag: str | bytes,
                        ) -> Callable[[int, bool, str | bytes, str | bytes, bytes, bytes, int],
                                      bytes]:
        """:meth:`send_deliver` for a run of deliveries to one consumer, the channel
        checked once (here, so the run must not span anything that could close it):
        ``encode(delivery_tag, redelivered, exchange, routing_key, properties_raw, body,
        frame_max)``, ``frame_max`` being :attr:`frame_max`."""
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN:
            raise LocalProtocolError(f"deliver_encoder(): channel {channel} is not open")
        return functools.partial(self._deliveries.encode, channel, consumer_tag)

    def send_get_ok(
        self, channel: int, delivery_tag: int, redelivered: bool, exchange: str | bytes,
        routing_key: str | bytes, message_count: int, properties_raw: bytes, body: bytes,
    ) -> bytes:
        """Basic.GetOk + content header + body frames, as one chunk."""
        self._open_channel(channel, "send_get_ok()")
        return fastpath.encode_message(
            fastpath.encode_get_ok(
                channel, delivery_tag, redelivered, exchange, routing_key, message_count),
            channel, properties_raw, body, self.frame_max)

    def send_return(
        self, channel: int, reply_code: int, reply_text: str, exchange: str | bytes,
        routing_key: str | bytes, properties_raw: bytes, body: bytes,
    ) -> bytes:
        """Basic.Return (e.g. 312 "NO_ROUTE") + content, as one chunk."""
        self._open_channel(channel, "send_return()")
        return fastpath.encode_message(
            fastpath.encode_return(channel, reply_code, reply_text, exchange, routing_key),
            channel, properties_raw, body, self.frame_max)

    def send_ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> bytes:
        """Publisher confirm."""
        self._open_channel(channel, "send_ack()")
        return fastpath.encode_ack(channel, delivery_tag, multiple)

    def send_nack(self, channel: int, delivery_tag: int, multiple: bool = False) -> bytes:
        """Negative publisher confirm (requeue is meaningless server-to-client)."""
        self._open_channel(channel, "send_nack()")
        return fastpath.encode_nack(channel, delivery_tag, multiple, False)

    def send_heartbeat(self) -> bytes:
        return HEARTBEAT_FRAME

    # -------------------------------------------------------------- inspection

    def channel_is_open(self, channel: int) -> bool:
        chan = self._channels.get(channel)
        return chan is not None and chan.state is ChannelState.OPEN

    def channel_flow_active(self, channel: int) -> bool:
        """False after the peer's Channel.Flow(active=False): hold deliveries."""
        chan = self._channels.get(channel)
        return chan is not None and chan.flow_active

    @property
    def open_channels(self) -> list[int]:
        return [c for c, chan in self._channels.items() if chan.state is ChannelState.OPEN]

    @property
    def client_capabilities(self) -> dict[str, Any]:
        caps = self.client_properties.get("capabilities")
        return caps if isinstance(caps, dict) else {}
