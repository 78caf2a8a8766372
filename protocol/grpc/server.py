"""The server side of gRPC over HTTP/2, sans-IO: bytes in, call events out; replies in,
bytes out. One :class:`ServerConnection` per accepted connection.

HTTP/2 (framing, HPACK, stream states, flow-control windows, PING and SETTINGS
acknowledgements, the protocol's own error handling) is PyPI ``ngh2`` over libnghttp2
(the HTTP/2 engine of curl and Node.js); this module is the only one that imports it,
so direct libnghttp2 bindings could replace it behind the same interface. On top of
it: gRPC's request headers (``:path``, ``grpc-timeout``, metadata, ``-bin`` values),
the 5-byte message framing (:mod:`.framing`), replies (headers, messages, trailers
with ``grpc-status``, ``grpc-message`` and ``grpc-status-details-bin``).

Use (the adapter owns the socket)::

    conn = ServerConnection(max_message)
    conn.receive_data(data)            # bytes read; may be called with any split
    for event in conn.events(): ...    # CallStarted, MessageReceived, InputEnded,
                                       # CallClosed, ConnectionTerminated
    conn.send_message(stream_id, payload); conn.end_call(stream_id, code, message)
    transport.write(conn.data_to_send())

Events, per call (``stream_id``): :class:`CallStarted` (the request headers), then
any number of :class:`MessageReceived`, then :class:`InputEnded` (the client
half-closed); or, at any point, :class:`CallClosed` (the client reset the stream, or
this layer ended the call because of bad input: after it nothing more is said about
the call and the application stops serving it). Per connection:
:class:`ConnectionTerminated` (a GOAWAY was sent or received with an error, or the
input was not HTTP/2): write what :meth:`ServerConnection.data_to_send` still gives,
then close.

Bad input is answered here, the protocol's way:

- not HTTP/2, a frame that breaks the protocol, bad HPACK: GOAWAY with
  PROTOCOL_ERROR, COMPRESSION_ERROR, FRAME_SIZE_ERROR... and
  :class:`ConnectionTerminated`;
- a request that is not gRPC (a method other than POST, a content type other than
  ``application/grpc*``): HTTP 415 or 405 with a gRPC status, and no event;
- a malformed ``grpc-timeout``: INTERNAL; a message above the limit:
  RESOURCE_EXHAUSTED; a compressed message: UNIMPLEMENTED; a stream that ends in the
  middle of a message: INTERNAL; each then :class:`CallClosed`.

Flow control: the receive windows are released as the application consumes what it
was given (:meth:`ServerConnection.consumed` with :attr:`MessageReceived.size`); the
bytes of a message still being received are released at once (a message is bounded
by the limit). Outgoing messages wait in ngh2 until the client's windows admit them:
:meth:`ServerConnection.queued` tells a producer how much of a call's output waits.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import ngh2

from .framing import CompressedMessage, FramingError, MessageReader, MessageTooLarge, prefix

#: gRPC status codes (the transport's, not RocketMQ's: see :mod:`.status`).
OK = 0
CANCELLED = 1
UNKNOWN = 2
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

#: HTTP/2 error codes (RFC 9113 section 7).
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
CANCEL = 0x8
ENHANCE_YOUR_CALM = 0xB

#: The stream receive window advertised (SETTINGS_INITIAL_WINDOW_SIZE) and the
#: connection's; both above HTTP/2's 64 KiB default, for loopback and LAN speeds.
STREAM_WINDOW = 1024 * 1024
CONNECTION_WINDOW = 16 * 1024 * 1024
#: Largest request header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE), gRPC's default.
MAX_HEADER_LIST = 16 * 1024

_TIMEOUT_UNITS = {
    ord(u): f
    for u, f in (("H", 3600.0), ("M", 60.0), ("S", 1.0), ("m", 1e-3), ("u", 1e-6), ("n", 1e-9))
}
#: Request headers that are the transport's, not the call's metadata: what each is.
_SKIP, _PATH, _METHOD, _CONTENT_TYPE, _TIMEOUT = range(5)
_SPECIAL = {
    b":path": _PATH,
    b":method": _METHOD,
    b"content-type": _CONTENT_TYPE,
    b"grpc-timeout": _TIMEOUT,
    b":scheme": _SKIP,
    b":authority": _SKIP,
    b"te": _SKIP,
    b"grpc-encoding": _SKIP,
    b"grpc-accept-encoding": _SKIP,
}
#: Metadata names decoded (they repeat on every call); bounded.
_NAMES: dict[bytes, str] = {}
_NAMES_MAX = 1024
_RESPONSE_HEADERS = ((b":status", b"200"), (b"content-type", b"application/grpc"))


@dataclass(slots=True)
class CallStarted:
    stream_id: int
    #: ``/package.Service/Method``.
    path: str
    #: The call's metadata in order: keys lower case, values str (ASCII), the values of
    #: ``-bin`` keys as bytes (base64-decoded).
    metadata: list[tuple[str, str | bytes]]
    #: ``grpc-timeout`` in seconds (None: no deadline).
    timeout: float | None


@dataclass(slots=True)
class MessageReceived:
    stream_id: int
    payload: bytes
    #: Window bytes to release with :meth:`ServerConnection.consumed` once handled.
    size: int


@dataclass(slots=True)
class InputEnded:
    stream_id: int


@dataclass(slots=True)
class CallClosed:
    stream_id: int
    reason: str


@dataclass(slots=True)
class ConnectionTerminated:
    error_code: int
    reason: str


Event = CallStarted | MessageReceived | InputEnded | CallClosed | ConnectionTerminated


class _Stream:
    __slots__ = ("reader", "headers_sent", "ended", "input_ended")

    def __init__(self, limit: int) -> None:
        self.reader = MessageReader(limit)
        self.headers_sent = False
        #: This side sent its trailers.
        self.ended = False
        self.input_ended = False


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout``: 1-8 ASCII digits and a unit (H M S m u n), in seconds."""
    scale = _TIMEOUT_UNITS.get(value[-1]) if value else None
    digits = value[:-1]
    if scale is None or not 1 <= len(digits) <= 8 or not digits.isdigit():
        raise ValueError(f"malformed grpc-timeout {value!r}")
    return int(digits) * scale


def _metadata_name(name: bytes) -> str:
    key = name.decode("latin-1")
    if len(_NAMES) < _NAMES_MAX:
        _NAMES[name] = key
    return key


def encode_message(text: str) -> bytes:
    """``grpc-message``: UTF-8, percent-encoding every byte outside printable ASCII
    and ``%`` itself (the gRPC HTTP/2 protocol's rule)."""
    raw = text.encode("utf-8", "replace")
    if all(0x20 <= b <= 0x7E and b != 0x25 for b in raw):
        return raw
    return b"".join(bytes((b,)) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b for b in raw)


def _b64(value: bytes) -> bytes:
    return base64.b64encode(value).rstrip(b"=")


def _unb64(value: bytes) -> bytes:
    return base64.b64decode(value + b"=" * (-len(value) % 4), validate=True)


class ServerConnection:
    """One HTTP/2 connection's gRPC calls, server side. Not thread-safe."""

    def __init__(self, max_message: int, *, max_concurrent_streams: int = 1000) -> None:
        self._h2 = ngh2.Connection(
            ngh2.Role.SERVER,
            ngh2.Configuration(
                auto_window_update=False, max_inbound_header_list_size=MAX_HEADER_LIST
            ),
        )
        self._h2.initiate_connection(
            {
                ngh2.Setting.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
                ngh2.Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                ngh2.Setting.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
            }
        )
        self._h2.set_local_window_size(CONNECTION_WINDOW)
        self.max_message = max_message
        self._streams: dict[int, _Stream] = {}
        self._events: list[Event] = []
        #: Raw bytes to write after ngh2's (a GOAWAY when ngh2 gave up on the input).
        self._final = b""
        self._failed = False
        self._last_stream = 0
        #: The connection is over (a terminating GOAWAY went out or came in).
        self.terminated = False

    # -- input -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Process bytes read from the client; then read :meth:`events` and write
        :meth:`data_to_send`."""
        if self._failed:
            return
        try:
            self._h2.receive_data(data)
        except ngh2.NGH2Error as exc:
            code = (
                ENHANCE_YOUR_CALM if isinstance(exc, ngh2.DenialOfServiceError) else PROTOCOL_ERROR
            )
            self._fail(code, str(exc) or type(exc).__name__)

    def events(self) -> list[Event]:
        """What happened since the last call, in order."""
        if not self._failed:
            self._translate(self._h2.events())
        out = self._events
        self._events = []
        return out

    def _fail(self, code: int, reason: str) -> None:
        # ngh2 gave up on the input (not HTTP/2, a resource limit): it writes nothing
        # more, so the GOAWAY is built here (RFC 9113 section 6.8).
        self._failed = True
        self.terminated = True
        payload = (
            self._last_stream.to_bytes(4, "big")
            + code.to_bytes(4, "big")
            + reason.encode("utf-8", "replace")[:256]
        )
        self._final = len(payload).to_bytes(3, "big") + b"\x07\x00\x00\x00\x00\x00" + payload
        for stream_id in self._streams:
            self._events.append(CallClosed(stream_id, f"connection failed: {reason}"))
        self._streams.clear()
        self._events.append(ConnectionTerminated(code, reason))

    def _translate(self, raw: list[ngh2.Event]) -> None:
        out = self._events
        streams = self._streams
        for ev in raw:
            if type(ev) is ngh2.DataReceived:
                self._data(ev.stream_id, ev.data, ev.end_stream)
            elif type(ev) is ngh2.RequestReceived:
                self._request(ev.stream_id, ev.headers, ev.end_stream)
            elif type(ev) is ngh2.StreamClosed:
                st = streams.pop(ev.stream_id, None)
                if st is not None and not st.ended:
                    reason = f"stream closed (HTTP/2 error {ev.error_code})"
                    out.append(CallClosed(ev.stream_id, reason))
            elif type(ev) is ngh2.StreamReset:
                st = streams.pop(ev.stream_id, None)
                if st is not None and not st.ended:
                    reason = f"cancelled by the client (HTTP/2 error {ev.error_code})"
                    out.append(CallClosed(ev.stream_id, reason))
            elif type(ev) is ngh2.TrailersReceived:
                self._input_ended(ev.stream_id)
            elif type(ev) is ngh2.ConnectionClosed:
                self._terminated(ev.error_code, ev.debug_data.decode("utf-8", "replace"))
            elif type(ev) is ngh2.GoAwayReceived and ev.error_code:
                debug = ev.debug_data.decode("utf-8", "replace")
                self._terminated(ev.error_code, f"GOAWAY from the client: {debug}")
            # SETTINGS, PING (acknowledged by libnghttp2), WINDOW_UPDATE, PRIORITY: no
            # concern of the calls

    def _terminated(self, code: int, reason: str) -> None:
        self.terminated = True
        for stream_id in self._streams:
            self._events.append(CallClosed(stream_id, "connection closed"))
        self._streams.clear()
        self._events.append(ConnectionTerminated(code, reason))

    def _request(self, stream_id: int, headers: tuple[ngh2.Header, ...], end: bool) -> None:
        self._last_stream = stream_id
        method = path = content_type = b""
        timeout: float | None = None
        metadata: list[tuple[str, str | bytes]] = []
        bad = ""
        special = _SPECIAL.get
        for name, value in headers:
            kind = special(name)
            if kind is None:
                key = _NAMES.get(name) or _metadata_name(name)
                if key[-4:] == "-bin":
                    try:
                        metadata.append((key, _unb64(value)))
                    except (binascii.Error, ValueError):
                        bad = f"metadata {key} is not base64"
                elif key[0] != ":":
                    metadata.append((key, value.decode("latin-1")))
            elif kind == _PATH:
                path = value
            elif kind == _METHOD:
                method = value
            elif kind == _CONTENT_TYPE:
                content_type = value
            elif kind == _TIMEOUT:
                try:
                    timeout = parse_timeout(value)
                except ValueError as exc:
                    bad = str(exc)
        if not content_type.startswith(b"application/grpc"):
            self._not_grpc(stream_id, b"415", UNKNOWN, b"content-type must be application/grpc")
            return
        if method != b"POST":
            self._not_grpc(stream_id, b"405", UNIMPLEMENTED, b"gRPC calls are POST requests")
            return
        st = self._streams[stream_id] = _Stream(self.max_message)
        if bad:
            self._refuse(stream_id, st, INTERNAL, bad)
            return
        self._events.append(CallStarted(stream_id, path.decode("latin-1"), metadata, timeout))
        if end:
            self._input_ended(stream_id)

    def _not_grpc(self, stream_id: int, http_status: bytes, code: int, message: bytes) -> None:
        """Answer a request that is not a gRPC call (no call event)."""
        headers = (
            (b":status", http_status),
            (b"content-type", b"application/grpc"),
            (b"grpc-status", b"%d" % code),
            (b"grpc-message", message),
        )
        self._h2.send_response(stream_id, headers, end_stream=True)

    def _data(self, stream_id: int, data: bytes, end: bool) -> None:
        st = self._streams.get(stream_id)
        if st is None or st.ended:  # refused or answered: read and drop
            self._release(stream_id, len(data))
            if end and st is not None:
                st.input_ended = True
            return
        reader = st.reader
        before = reader.buffered
        try:
            messages = reader.feed(data)
        except FramingError as exc:
            self._release(stream_id, len(data))
            code = (
                RESOURCE_EXHAUSTED
                if isinstance(exc, MessageTooLarge)
                else (UNIMPLEMENTED if isinstance(exc, CompressedMessage) else INTERNAL)
            )
            self._refuse(stream_id, st, code, str(exc))
            if end:
                st.input_ended = True
            return
        after = reader.buffered
        if messages:
            # the bytes of the messages completed here wait for consumed(); the rest
            # (the start of the next message) is released now
            out = self._events
            first = True
            for payload in messages:
                size = len(payload) + 5
                if first:
                    size -= before
                    first = False
                out.append(MessageReceived(stream_id, payload, size))
            self._release(stream_id, after)
        else:
            self._release(stream_id, len(data))
        if end:
            self._input_ended(stream_id)

    def _input_ended(self, stream_id: int) -> None:
        st = self._streams.get(stream_id)
        if st is None or st.input_ended:
            return
        st.input_ended = True
        if st.ended:
            return
        if st.reader.buffered:
            self._refuse(stream_id, st, INTERNAL, "the request ended inside a message")
            return
        self._events.append(InputEnded(stream_id))

    def _refuse(self, stream_id: int, st: _Stream, code: int, message: str) -> None:
        self.end_call(stream_id, code, message)
        self._events.append(CallClosed(stream_id, message))

    def _release(self, stream_id: int, amount: int) -> None:
        if amount > 0:
            try:
                self._h2.acknowledge_received_data(amount, stream_id)
            except (ngh2.NGH2Error, ValueError):
                pass  # the stream (or the connection) is gone; nothing to release

    def consumed(self, stream_id: int, size: int) -> None:
        """The application handled a :class:`MessageReceived` of ``size``: release its
        bytes of the windows."""
        if not self._failed:
            self._release(stream_id, size)

    # -- output ------------------------------------------------------------------------

    def send_message(self, stream_id: int, payload: bytes) -> None:
        """Send one message on the call (its response headers first, once). Ignored
        when the call is over."""
        st = self._streams.get(stream_id)
        if st is None or st.ended or self._failed:
            return
        h2 = self._h2
        if not st.headers_sent:
            st.headers_sent = True
            h2.send_response(stream_id, _RESPONSE_HEADERS)
        h2.send_data(stream_id, prefix(len(payload)))
        if payload:
            h2.send_data(stream_id, payload)

    def end_call(self, stream_id: int, code: int, message: str = "", details: bytes = b"") -> None:
        """End the call with its status: trailers after its messages, or a
        trailers-only response. ``details``: a serialized ``google.rpc.Status``
        (``grpc-status-details-bin``). Ignored when the call is over."""
        st = self._streams.get(stream_id)
        if st is None or st.ended or self._failed:
            return
        st.ended = True
        trailers = [(b"grpc-status", b"%d" % code)]
        if message:
            trailers.append((b"grpc-message", encode_message(message)))
        if details:
            trailers.append((b"grpc-status-details-bin", _b64(details)))
        try:
            if st.headers_sent:
                self._h2.send_trailers(stream_id, trailers)
            else:
                self._h2.send_response(stream_id, (*_RESPONSE_HEADERS, *trailers), end_stream=True)
        except ngh2.StreamProtocolError:
            self._streams.pop(stream_id, None)  # closed meanwhile (a reset crossed it)
            return
        if st.input_ended:
            self._streams.pop(stream_id, None)

    def cancel_call(self, stream_id: int) -> None:
        """Drop the call with RST_STREAM CANCEL (no status)."""
        st = self._streams.pop(stream_id, None)
        if st is not None and not self._failed:
            st.ended = True
            self._h2.reset_stream(stream_id, CANCEL)

    def queued(self, stream_id: int) -> int:
        """Bytes of the call's messages not yet taken by :meth:`data_to_send` (waiting
        for the client's flow-control windows)."""
        if self._failed:
            return 0
        try:
            return self._h2.queued_body_size(stream_id)
        except ngh2.NGH2Error:
            return 0

    def shutdown_notice(self) -> None:
        """First stage of a graceful close: GOAWAY with the largest stream id (the
        client opens no new call; calls racing the notice are still served)."""
        if not self._failed and not self.terminated:
            self._h2.send_shutdown_notice()

    def goaway(self, error_code: int = NO_ERROR, debug: str = "") -> None:
        """GOAWAY naming the last call accepted (calls up to it go on)."""
        if not self._failed and not self.terminated:
            self._h2.send_goaway(
                error_code, last_stream_id=self._last_stream, debug_data=debug.encode()
            )

    @property
    def open_calls(self) -> int:
        return len(self._streams)

    def data_to_send(self, amount: int | None = None) -> bytes:
        """Bytes to write now (at most ``amount``); then read :meth:`events`."""
        if self._failed:
            final, self._final = self._final, b""
            return final
        return self._h2.data_to_send(amount)

    @property
    def want_write(self) -> bool:
        return bool(self._final) if self._failed else self._h2.want_write


__all__ = [
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "INTERNAL",
    "OK",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "UNIMPLEMENTED",
    "UNKNOWN",
    "CallClosed",
    "CallStarted",
    "ConnectionTerminated",
    "Event",
    "InputEnded",
    "MessageReceived",
    "ServerConnection",
    "encode_message",
    "parse_timeout",
]
