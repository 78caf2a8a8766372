"""One AMQP channel's protocol state: open/closing, flow, and content assembly.

Theory of operation
-------------------
A channel exists from the peer's Channel.Open until the close handshake ends; a
channel id absent from the connection's table is closed, and any frame on it but
Channel.Open is 504 CHANNEL_ERROR. Its life::

    (absent) --Channel.Open--> OPEN --peer Channel.Close--> CLOSE_RECEIVED
                                 |                            | send_channel_close_ok()
                                 |                            v
                                 +--our Channel.Close-----> CLOSING --CloseOk--> (absent)

In CLOSE_RECEIVED and CLOSING every frame on the channel is ignored (spec: after
sending Channel.Close, discard all but Channel.Close-Ok), except that Channel.Close
crossing ours is reported so the caller can answer it.

A content-carrying method (Basic.Publish) is followed by exactly one content header
and then body frames until ``body_size`` octets have arrived. :class:`Assembly`
tracks that; a method while content is expected, a content frame without a method,
a second header or a body past ``body_size`` is 505 UNEXPECTED_FRAME, a connection
error. A message larger than ``max_message_size`` is 406 PRECONDITION_FAILED on the
channel, as RabbitMQ >= 3.8 answers.
"""

from __future__ import annotations

import enum

from .errors import (
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    ChannelError,
    ConnectionLevelError,
)
from .events import ContentReceived
from .fastpath import BASIC_CLASS, ContentHeader, Publish


class ChannelState(enum.Enum):
    OPEN = "OPEN"
    CLOSE_RECEIVED = "CLOSE_RECEIVED"  # peer sent Close; we owe CloseOk
    CLOSING = "CLOSING"  # we sent (or are about to send) Close; waiting for CloseOk


class Channel:
    """Protocol state of one open channel. Owned by ``AMQPConnection``."""

    __slots__ = ("id", "state", "close_sent", "flow_active", "max_message_size",
                 "_method", "_header", "_parts", "_received")

    def __init__(self, channel_id: int, max_message_size: int) -> None:
        self.id = channel_id
        self.state = ChannelState.OPEN
        #: True once our Channel.Close bytes were produced (only one per channel).
        self.close_sent = False
        #: Last Channel.Flow ``active`` from the peer: False asks us to stop deliveries.
        self.flow_active = True
        self.max_message_size = max_message_size
        self._method: Publish | None = None
        self._header: ContentHeader | None = None
        self._parts: list[bytes] = []
        self._received = 0

    @property
    def expecting_content(self) -> bool:
        return self._method is not None

    def reset_content(self) -> None:
        self._method = None
        self._header = None
        self._parts = []
        self._received = 0

    def start_content(self, method: Publish) -> None:
        """A content-carrying method arrived; header and body frames must follow."""
        self._method = method

    def on_header(self, payload: bytes) -> ContentReceived | None:
        """A content-header frame; returns the message when its body is empty."""
        if self._method is None:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME, f"content header on channel {self.id} without a method")
        if self._header is not None:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME, f"second content header on channel {self.id}")
        header = ContentHeader(payload)
        if header.class_id != BASIC_CLASS:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME,
                f"content header for class {header.class_id}, expected {BASIC_CLASS}")
        if header.body_size > self.max_message_size:
            method = self._method
            self.reset_content()
            self.state = ChannelState.CLOSING
            raise ChannelError(
                PRECONDITION_FAILED,
                f"message size {header.body_size} is larger than configured max size "
                f"{self.max_message_size}", channel=self.id, method=method)
        if header.body_size == 0:
            event = ContentReceived(self.id, self._method, header, b"")
            self.reset_content()
            return event
        self._header = header
        return None

    def on_body(self, payload: bytes) -> ContentReceived | None:
        """A body frame; returns the message once ``body_size`` octets are in."""
        header = self._header
        if header is None:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME, f"content body on channel {self.id} without a header")
        self._received += len(payload)
        if self._received > header.body_size:
            raise ConnectionLevelError(
                UNEXPECTED_FRAME,
                f"content body of {self._received} octets exceeds body size {header.body_size}")
        if self._received < header.body_size:
            self._parts.append(payload)
            return None
        if self._parts:
            self._parts.append(payload)
            payload = b"".join(self._parts)
        assert self._method is not None
        event = ContentReceived(self.id, self._method, header, payload)
        self.reset_content()
        return event
