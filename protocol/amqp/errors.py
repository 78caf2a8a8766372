"""AMQP 0-9-1 errors: what the wire needs to close a channel or the connection.

Like h11's ``RemoteProtocolError``, an error carries everything the close method
needs: ``reply_code``, ``reply_text``, ``class_id`` and ``method_id``. The class
says how far the damage goes:

- :class:`ChannelError` (a "soft" error in the spec: 311-313, 403-406): the server
  sends ``Channel.Close`` on that channel and the rest of the connection goes on.
- :class:`ConnectionLevelError` (a "hard" error: 320, 402, 501-506, 530, 540, 541):
  the server sends ``Connection.Close`` on channel 0 and the connection goes to
  ``CLOSING``.

Both are raised by ``AMQPConnection.next_event()`` when the peer breaks the
protocol, and the broker raises them too (``ChannelError(NOT_FOUND, "no queue
'q'")``); either way the caller hands the exception to
``AMQPConnection.send_error()`` and writes the bytes it returns.

The level is a property of the situation, not of the code alone: ``403`` is a
channel close for a reserved exchange name but a connection close for bad
credentials. :func:`amqp_error` picks the usual level for a code.
"""

from __future__ import annotations

from typing import Any

# Reply codes (AMQP 0-9-1 spec, section "constants").
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

REPLY_NAMES: dict[int, str] = {
    REPLY_SUCCESS: "REPLY_SUCCESS",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}

#: Codes the spec classes as soft errors: by default they close only the channel.
CHANNEL_LEVEL_CODES = frozenset(
    {CONTENT_TOO_LARGE, NO_ROUTE, NO_CONSUMERS, ACCESS_REFUSED, NOT_FOUND,
     RESOURCE_LOCKED, PRECONDITION_FAILED}
)


def _method_ids(method: Any) -> tuple[int, int]:
    """(class_id, method_id) of a pamqp or fast-path method object, else (0, 0)."""
    index = getattr(method, "index", 0) if method is not None else 0
    return index >> 16, index & 0xFFFF


class AMQPError(Exception):
    """A protocol error that ends in a close method. Do not raise this base class.

    ``reply_text`` gets RabbitMQ's ``"NAME - detail"`` form: the code's name is
    prefixed unless the text already starts with it. ``method`` (a pamqp or
    fast-path method object) fills ``class_id``/``method_id`` when given.
    """

    connection_level: bool = False

    def __init__(
        self,
        reply_code: int,
        reply_text: str = "",
        class_id: int = 0,
        method_id: int = 0,
        *,
        channel: int = 0,
        method: Any = None,
    ) -> None:
        name = REPLY_NAMES.get(reply_code, "")
        if name and not reply_text.startswith(name):
            reply_text = f"{name} - {reply_text}" if reply_text else name
        if method is not None:
            class_id, method_id = _method_ids(method)
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.channel = channel
        super().__init__(reply_code, reply_text)

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


class ChannelError(AMQPError):
    """Soft error: close just ``channel`` with ``Channel.Close``."""

    connection_level = False


class ConnectionLevelError(AMQPError):
    """Hard error: close the whole connection with ``Connection.Close``."""

    connection_level = True


class ProtocolHeaderError(ConnectionLevelError):
    """The peer did not open with ``AMQP\\x00\\x00\\x09\\x01``.

    There is no AMQP connection yet, so no ``Connection.Close``: the answer is our
    own protocol header, then the socket is closed (RabbitMQ does the same).
    ``send_error()`` returns that header. ``received`` holds the bytes seen.
    """

    def __init__(self, received: bytes) -> None:
        super().__init__(FRAME_ERROR, f"bad protocol header {received!r}")
        self.received = received


class LocalProtocolError(Exception):
    """We (the caller of this package) tried something the protocol forbids,
    e.g. sending a delivery on a channel that is not open."""


def amqp_error(
    reply_code: int, reply_text: str = "", *, channel: int = 0, method: Any = None
) -> AMQPError:
    """Build the error of the usual level for ``reply_code``: 311-313 and 403-406
    close the channel, everything else closes the connection."""
    cls = ChannelError if reply_code in CHANNEL_LEVEL_CODES and channel else ConnectionLevelError
    return cls(reply_code, reply_text, channel=channel, method=method)
