"""gRPC's message framing on an HTTP/2 stream: each message is a 5-byte prefix
(``compressed`` flag, then the length as a big-endian uint32) and the message bytes.
Sans-IO: :class:`MessageReader` turns a stream's DATA bytes, in pieces of any size, into
whole messages; :func:`prefix` is the prefix of an outgoing message.

A message longer than the reader's limit is refused from its prefix, before its bytes
are buffered (:class:`MessageTooLarge`; gRPC's RESOURCE_EXHAUSTED), and so is a
compressed one (:class:`CompressedMessage`: this side accepts only ``identity``).
"""

from __future__ import annotations

PREFIX = 5


class FramingError(Exception):
    """The stream's messages cannot be read on (the call fails)."""


class MessageTooLarge(FramingError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Received message larger than max ({size} vs. {limit})")
        self.size = size
        self.limit = limit


class CompressedMessage(FramingError):
    def __init__(self) -> None:
        super().__init__("compressed messages are not supported (grpc-encoding identity only)")


def prefix(length: int) -> bytes:
    """The 5-byte prefix of an uncompressed message of ``length`` bytes."""
    return b"\x00" + length.to_bytes(4, "big")


class MessageReader:
    """Whole messages out of a stream's bytes. :attr:`buffered` is the number of bytes
    of an incomplete message held (0 between messages)."""

    __slots__ = ("limit", "_buf", "_need")

    def __init__(self, limit: int) -> None:
        #: The largest message accepted (bytes, the prefix not counted).
        self.limit = limit
        self._buf = bytearray()
        #: Bytes of the current message still wanted, prefix included; 0: none started.
        self._need = 0

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """The messages ``data`` completes, in order. Raises :class:`FramingError`
        (and reads nothing more) when a prefix announces a message refused."""
        buf = self._buf
        if not buf and len(data) >= PREFIX:  # fast path: whole messages in one piece
            out: list[bytes] = []
            pos = 0
            end = len(data)
            while end - pos >= PREFIX:
                length = self._check(data, pos)
                stop = pos + PREFIX + length
                if stop > end:
                    break
                out.append(data[pos + PREFIX : stop])
                pos = stop
            if pos == end:
                return out
            buf += memoryview(data)[pos:]
            return out + self._drain()
        buf += data
        return self._drain()

    def _drain(self) -> list[bytes]:
        buf = self._buf
        out: list[bytes] = []
        while len(buf) >= PREFIX:
            length = self._check(buf, 0)
            stop = PREFIX + length
            if len(buf) < stop:
                break
            out.append(bytes(buf[PREFIX:stop]))
            del buf[:stop]
        return out

    def _check(self, data: bytes | bytearray, pos: int) -> int:
        flag = data[pos]
        length = int.from_bytes(data[pos + 1 : pos + PREFIX], "big")
        if flag & 1:
            raise CompressedMessage()
        if length > self.limit:
            raise MessageTooLarge(length, self.limit)
        return length


__all__ = [
    "PREFIX",
    "CompressedMessage",
    "FramingError",
    "MessageReader",
    "MessageTooLarge",
    "prefix",
]
