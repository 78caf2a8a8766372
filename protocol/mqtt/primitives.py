"""MQTT data representations (spec 1.5): the codec pairs for the primitive types.

=====================  ==========================================================
Two Byte Integer       big-endian unsigned 16 bits
Four Byte Integer      big-endian unsigned 32 bits
Variable Byte Integer  7 bits per byte, least significant group first, high bit =
                       "more bytes follow"; at most 4 bytes, so at most 268,435,455;
                       the shortest encoding MUST be used
UTF-8 Encoded String   Two Byte Integer length, then that many bytes of well-formed
                       UTF-8: no surrogates (U+D800..U+DFFF), no U+0000
Binary Data            Two Byte Integer length, then that many bytes
String Pair            two UTF-8 Encoded Strings (user properties)
=====================  ==========================================================

Every pair is ``encode_x(value, buf: bytearray) -> None`` and
``decode_x(view: memoryview) -> tuple[value, consumed]``. ``decode_x`` raises
:class:`InsufficientData` when the view ends early and :class:`MalformedPacket` when the
bytes are wrong; a caller decoding inside a packet whose length is already known turns
``InsufficientData`` into ``MalformedPacket`` (the packet is shorter than its content).
"""

from __future__ import annotations

from struct import Struct

from .errors import InsufficientData, MalformedPacket

VARINT_MAX = 268_435_455
_U16 = Struct(">H")
_U32 = Struct(">I")
pack_u16 = _U16.pack
pack_u32 = _U32.pack
unpack_u16 = _U16.unpack_from
unpack_u32 = _U32.unpack_from

# Precomputed encodings of the small varints: the remaining length of most packets.
_VARINT_SMALL = [bytes((i,)) for i in range(128)]


def varint_bytes(value: int) -> bytes:
    """The Variable Byte Integer encoding of ``value`` (0..268,435,455)."""
    if value < 128:
        if value < 0:
            raise ValueError(f"variable byte integer must not be negative: {value}")
        return _VARINT_SMALL[value]
    if value > VARINT_MAX:
        raise ValueError(f"variable byte integer too large: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_varint(value: int, buf: bytearray) -> None:
    buf += varint_bytes(value)


def decode_varint(view: memoryview | bytes | bytearray, pos: int = 0) -> tuple[int, int]:
    """Decode a Variable Byte Integer at ``pos``; returns (value, bytes consumed).

    A fifth byte (the fourth has its continuation bit set) or a non-shortest encoding is
    malformed; running out of bytes before the last one is :class:`InsufficientData`.
    """
    value = 0
    shift = 0
    end = len(view)
    for i in range(4):
        if pos + i >= end:
            raise InsufficientData("variable byte integer incomplete")
        byte = view[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i:
                raise MalformedPacket("variable byte integer not in its shortest form")
            return value, i + 1
        shift += 7
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def encode_u16(value: int, buf: bytearray) -> None:
    buf += pack_u16(value)


def decode_u16(view: memoryview | bytes) -> tuple[int, int]:
    if len(view) < 2:
        raise InsufficientData("two byte integer incomplete")
    return (view[0] << 8) | view[1], 2


def encode_u32(value: int, buf: bytearray) -> None:
    buf += pack_u32(value)


def decode_u32(view: memoryview | bytes) -> tuple[int, int]:
    if len(view) < 4:
        raise InsufficientData("four byte integer incomplete")
    return unpack_u32(view)[0], 4


def utf8_bytes(value: str) -> bytes:
    """Encode a UTF-8 Encoded String's content, enforcing the spec's rules."""
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise MalformedPacket(f"string is not valid UTF-8: {exc.reason}") from None
    except AttributeError:
        raise TypeError(f"expected str, got {type(value).__name__}") from None
    if len(raw) > 65535:
        raise MalformedPacket("string longer than 65,535 bytes")
    if b"\x00" in raw:
        raise MalformedPacket("string contains U+0000")
    return raw


def utf8_text(raw: bytes | memoryview) -> str:
    """Decode a UTF-8 Encoded String's content, enforcing the spec's rules."""
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError as exc:  # ill-formed, overlong, or encoded surrogates
        raise MalformedPacket(f"string is not valid UTF-8: {exc.reason}") from None
    if "\x00" in text:
        raise MalformedPacket("string contains U+0000")
    return text


def encode_utf8(value: str, buf: bytearray) -> None:
    raw = utf8_bytes(value)
    buf += pack_u16(len(raw))
    buf += raw


def decode_utf8(view: memoryview | bytes) -> tuple[str, int]:
    raw, used = decode_binary(view)
    return utf8_text(raw), used


def encode_binary(value: bytes, buf: bytearray) -> None:
    if len(value) > 65535:
        raise MalformedPacket("binary data longer than 65,535 bytes")
    buf += pack_u16(len(value))
    buf += value


def decode_binary(view: memoryview | bytes) -> tuple[bytes, int]:
    if len(view) < 2:
        raise InsufficientData("length prefix incomplete")
    end = 2 + ((view[0] << 8) | view[1])
    if len(view) < end:
        raise InsufficientData("binary data incomplete")
    return bytes(view[2:end]), end


def encode_string_pair(value: tuple[str, str], buf: bytearray) -> None:
    encode_utf8(value[0], buf)
    encode_utf8(value[1], buf)


def decode_string_pair(view: memoryview | bytes) -> tuple[tuple[str, str], int]:
    name, used = decode_utf8(view)
    value, used2 = decode_utf8(view[used:])
    return (name, value), used + used2


class Reader:
    """A cursor over one packet body whose length is known.

    Running off the end is :class:`MalformedPacket` (the remaining length promised fewer
    bytes than the content needs), never :class:`InsufficientData`.
    """

    __slots__ = ("data", "pos", "end")

    # ``end`` is always len(data): a body is sliced out before a Reader is made on it.
    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def _need(self, n: int) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise MalformedPacket("packet shorter than its content (remaining length)")
        self.pos = pos + n
        return pos

    def remaining(self) -> int:
        return self.end - self.pos

    def u8(self) -> int:
        return self.data[self._need(1)]

    def u16(self) -> int:
        pos = self._need(2)
        return (self.data[pos] << 8) | self.data[pos + 1]

    def u32(self) -> int:
        return unpack_u32(self.data, self._need(4))[0]

    def varint(self) -> int:
        try:
            value, used = decode_varint(self.data, self.pos)
        except InsufficientData:
            raise MalformedPacket("packet shorter than its content (remaining length)") from None
        self.pos += used
        return value

    def raw(self, n: int) -> bytes:
        pos = self._need(n)
        return bytes(self.data[pos : pos + n])

    def binary(self) -> bytes:
        return self.raw(self.u16())

    def utf8(self) -> str:
        n = self.u16()
        pos = self._need(n)
        return utf8_text(self.data[pos : pos + n])

    def rest(self) -> bytes:
        pos = self.pos
        self.pos = self.end
        return bytes(self.data[pos : self.end])
