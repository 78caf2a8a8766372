"""AMQP 0-9-1 framing: the protocol header, then frames, cut from a byte stream.

Wire layout of every frame after the 8-byte protocol header::

    +------+---------+---------+----------------+-----------+
    | type | channel |  size   | payload        | frame-end |
    | u8   | u16 BE  | u32 BE  | `size` octets  | 0xCE      |
    +------+---------+---------+----------------+-----------+

    type 1 = method:    payload = class-id u16, method-id u16, arguments
    type 2 = header:    payload = class-id u16, weight u16, body-size u64,
                                  property flags u16 (+ more words), properties
    type 3 = body:      payload = body octets
    type 8 = heartbeat: channel 0, size 0

pamqp's ``frame.unmarshal`` raises the same ``UnmarshalingException`` for a short
buffer and for a corrupt one, so we never use it to find frame boundaries.
:class:`FrameReader` reads the 7-byte header with ``struct '>BHI'``, waits for
``size + 1`` more octets, checks the end octet and the negotiated ``frame_max`` and
only then hands an exact, complete payload on. "Need more bytes" is ``None``; bad
bytes are a :class:`~protocol.amqp.errors.ConnectionLevelError`. Method payloads on
the control path are decoded by pamqp (:func:`decode_method`); any failure there
is a malformed frame, never a short one.

This module is also the one place that knows how to relax pamqp's name validation
(:func:`relax_pamqp_name_validation`). Importing it changes nothing in pamqp: a server
calls that function once (the gateway's AMQP front end does), since it changes pamqp
for the whole process, clients in the same process included.
"""

from __future__ import annotations

import re
import struct
import warnings
from typing import Any

from pamqp import commands, constants

from .errors import (
    FRAME_ERROR,
    NOT_IMPLEMENTED,
    SYNTAX_ERROR,
    ConnectionLevelError,
    ProtocolHeaderError,
)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
#: 7-byte frame header plus the end octet: the overhead of every frame.
FRAME_OVERHEAD = 8
#: The spec's minimum frame_max; every peer must accept frames this large.
FRAME_MIN_SIZE = 4096

_HEADER = struct.Struct(">BHI")
_METHOD_INDEX = struct.Struct(">I")

_FRAME_TYPES = frozenset({FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT})

HEARTBEAT_FRAME = _HEADER.pack(FRAME_HEARTBEAT, 0, 0) + FRAME_END_BYTE

# Basic.RecoverAsync warns DeprecationWarning in its constructor, which pamqp calls
# to unmarshal it; clients may still send it (pika's basic_recover did once).
_DEPRECATED_INDEXES = frozenset({commands.Basic.RecoverAsync.index})


def relax_pamqp_name_validation() -> None:
    """Let pamqp build methods carrying any queue or exchange name RabbitMQ accepts.

    pamqp checks names against ``^[a-zA-Z0-9-_.:@#,/+ ]*$`` in the constructors and
    in ``marshal()`` of e.g. ``Queue.DeclareOk``; RabbitMQ accepts any UTF-8 of up to
    255 bytes (a pika ``queue_declare("weird$name/ü")`` must work). The 255-byte
    bound is still enforced by pamqp's short-string encoder (``TypeError``). pamqp's
    127-character check on exchange names in ``Basic.Deliver/GetOk/Return`` remains,
    which is one more reason those three are encoded by :mod:`.fastpath`.
    Unmarshalling never validated names. Idempotent; process-wide by nature, which is
    why it is an explicit call and not done at import.
    """
    anything = re.compile(".*", re.S)
    constants.DOMAIN_REGEX["queue-name"] = anything
    constants.DOMAIN_REGEX["exchange-name"] = anything



def pack_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One complete frame around ``payload``."""
    return b"".join((_HEADER.pack(frame_type, channel, len(payload)), payload, FRAME_END_BYTE))


def encode_method(channel: int, method: Any) -> bytes:
    """A pamqp method object as one method frame (the control path)."""
    return pack_frame(FRAME_METHOD, channel, _METHOD_INDEX.pack(method.index) + method.marshal())


def method_index(payload: bytes) -> int:
    """``class_id << 16 | method_id`` of a method payload (caller checked len >= 4)."""
    return int(_METHOD_INDEX.unpack_from(payload)[0])


def decode_method(payload: bytes) -> Any:
    """Decode a complete method payload with pamqp.

    Raises ``ConnectionLevelError``: 540 NOT_IMPLEMENTED for an unknown class or
    method id, 502 SYNTAX_ERROR for arguments pamqp cannot decode.
    """
    if len(payload) < 4:
        raise ConnectionLevelError(FRAME_ERROR, "method frame shorter than 4 octets")
    index = method_index(payload)
    cls = commands.INDEX_MAPPING.get(index)
    if cls is None:
        raise ConnectionLevelError(
            NOT_IMPLEMENTED, f"unknown method {index >> 16}.{index & 0xFFFF}",
            index >> 16, index & 0xFFFF)
    try:
        if index in _DEPRECATED_INDEXES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                method = cls()
        else:
            method = cls()
        method.unmarshal(payload[4:])
    except (struct.error, ValueError, TypeError, IndexError) as exc:
        raise ConnectionLevelError(
            SYNTAX_ERROR, f"cannot decode {getattr(cls, 'name', index)}: {exc}",
            method=cls) from exc
    except RecursionError:
        # pamqp decodes field tables and arrays recursively: a few KB of nested 'A'/'F'
        # values (e.g. in StartOk's client_properties) exhaust the stack.
        raise ConnectionLevelError(
            SYNTAX_ERROR, f"cannot decode {getattr(cls, 'name', index)}: "
            "field table nested too deeply", method=cls) from None
    return method


class FrameReader:
    """Cuts complete frames out of a byte stream. Not thread-safe (nothing here is).

    Call :meth:`feed` with received bytes, then :meth:`read_protocol_header` once
    until it returns True, then :meth:`read_frame` until it returns ``None`` (need
    more bytes). Bytes after the last complete frame are kept for the next feed.
    ``frame_max`` is the largest frame (header + payload + end octet) accepted; the
    connection lowers it once Tune/TuneOk has negotiated a value.
    """

    __slots__ = ("_buf", "_pos", "frame_max")

    def __init__(self, frame_max: int = constants.FRAME_MAX_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.frame_max = frame_max

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Octets received but not yet consumed."""
        return len(self._buf) - self._pos

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def read_protocol_header(self) -> bool:
        """True once the 8-octet header was consumed; False if more bytes are needed.

        Raises :class:`ProtocolHeaderError` as soon as the bytes seen cannot be the
        start of ``AMQP\\x00\\x00\\x09\\x01`` (an HTTP request fails at its first byte).
        """
        seen = bytes(self._buf[self._pos : self._pos + 8])
        if not PROTOCOL_HEADER.startswith(seen):
            raise ProtocolHeaderError(seen)
        if len(seen) < 8:
            return False
        self._pos += 8
        return True

    def read_frame(self) -> tuple[int, int, bytes] | None:
        """Next complete frame as ``(type, channel, payload)``, or None for "need more".

        Raises ``ConnectionLevelError(501 FRAME_ERROR)`` for a frame larger than
        ``frame_max``, a missing end octet, an unknown frame type or a malformed
        heartbeat. The size is checked from the header alone, before the payload
        arrives, so an oversized frame is refused without buffering it.
        """
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 7:
            self._compact()
            return None
        frame_type, channel, size = _HEADER.unpack_from(buf, pos)
        if frame_type not in _FRAME_TYPES:
            raise ConnectionLevelError(FRAME_ERROR, f"unknown frame type {frame_type}")
        if size + FRAME_OVERHEAD > self.frame_max and self.frame_max:
            raise ConnectionLevelError(
                FRAME_ERROR,
                f"frame of {size + FRAME_OVERHEAD} octets exceeds frame_max {self.frame_max}")
        end = pos + 7 + size
        if len(buf) <= end:
            self._compact()
            return None
        if buf[end] != FRAME_END:
            raise ConnectionLevelError(
                FRAME_ERROR, f"frame end octet 0x{buf[end]:02x}, expected 0xce")
        if frame_type == FRAME_HEARTBEAT and (channel or size):
            raise ConnectionLevelError(FRAME_ERROR, "heartbeat must be on channel 0, empty")
        payload = bytes(buf[pos + 7 : end])
        self._pos = end + 1
        return frame_type, channel, payload
