"""Incremental frame decoding: bytes in, :class:`RemotingCommand` out.

The decoder buffers what it is fed and cuts frames by their 4-byte length, like Netty's
``LengthFieldBasedFrameDecoder(maxFrameLength, 0, 4, 0, 4)`` in RocketMQ. It never
consumes a byte past the frame it returns, so what follows stays buffered for the next
call. Two kinds of error, told apart by :attr:`FrameError.fatal`:

* the length field itself is impossible (shorter than the header mark, or a frame over
  the limit): framing is lost, the decoder stays failed and raises the same error again;
  the caller closes the connection;
* the frame's length is plausible but its header cannot be decoded: that frame's bytes
  are consumed and the error raised once; the next call goes on with the next frame, so
  the caller can answer the bad one (``opaque`` when known) and keep the connection.
"""

from __future__ import annotations

from .command import MAX_FRAME_LENGTH, RemotingCommand, decode_command
from .errors import FrameError


class FrameDecoder:
    """Feed bytes with :meth:`feed`, take commands with :meth:`next_command`.

    ``max_frame_length`` counts the whole frame, its own 4-byte length field included,
    as Netty does (16 MiB by default, RocketMQ's ``frameMaxLength``).
    """

    __slots__ = ("_buffer", "_error", "_pos", "max_frame_length")

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        if max_frame_length < 8:
            raise ValueError("max_frame_length must allow at least the 8-byte prefix")
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        #: Where the next frame starts in ``_buffer``: frames are cut by position and
        #: the consumed prefix dropped once per feed, not once per frame (a read of
        #: many small pipelined frames would otherwise move the rest every time).
        self._pos = 0
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buffer) - self._pos

    @property
    def failed(self) -> FrameError | None:
        """The fatal error that stopped this decoder, if any."""
        return self._error

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:
            if self._pos:
                del self._buffer[: self._pos]
                self._pos = 0
            self._buffer += data

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or ``None`` if more bytes are needed.

        Raises :class:`FrameError`; see the module docstring for fatal and per-frame ones.
        """
        if self._error is not None:
            raise self._error
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < 4:
            return None
        length = int.from_bytes(buffer[pos : pos + 4], "big")
        if length < 4:
            self._fail(f"frame length {length} is shorter than the 4-byte header mark")
        if length + 4 > self.max_frame_length:
            self._fail(
                f"frame of {length + 4} bytes exceeds the maximum of {self.max_frame_length} bytes"
            )
        end = pos + 4 + length
        if len(buffer) < end:
            return None
        frame = bytes(buffer[pos + 4 : end])
        if end == len(buffer):
            buffer.clear()
            self._pos = 0
        else:
            self._pos = end
        return decode_command(frame)

    def receive(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand | FrameError]:
        """Feed ``data`` and return every frame it completes, errors in their place.

        A fatal error ends the list; later calls return it again.
        """
        self.feed(data)
        out: list[RemotingCommand | FrameError] = []
        while True:
            try:
                command = self.next_command()
            except FrameError as exc:
                out.append(exc)
                if exc.fatal:
                    return out
                continue
            if command is None:
                return out
            out.append(command)

    def _fail(self, message: str) -> None:
        self._error = FrameError(message, fatal=True)
        self._buffer.clear()
        self._pos = 0
        raise self._error
