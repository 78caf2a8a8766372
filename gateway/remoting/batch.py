"""The batch body of SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessages``).

Each message, back to back (integers big-endian)::

    TOTALSIZE i32 | MAGIC i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | body
    | PROPLEN i16 | properties (UTF-8, ``k\\x01v\\x02``...)

``TOTALSIZE`` counts the whole entry, itself included. Anything that does not add up
is a :class:`ValueError` and the whole batch is refused.
"""

from __future__ import annotations

import struct

_HEAD = struct.Struct(">iiiii")
_PROPLEN = struct.Struct(">h")


def decode_batch(data: bytes) -> list[tuple[int, bytes, str]]:
    """``(flag, body, properties string)`` of every message of a batch body."""
    out: list[tuple[int, bytes, str]] = []
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < _HEAD.size + _PROPLEN.size:
            raise ValueError(f"truncated batch entry at byte {pos}")
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(view, pos)
        if total < _HEAD.size + _PROPLEN.size or pos + total > end:
            raise ValueError(f"batch entry at byte {pos} has an impossible size {total}")
        body_start = pos + _HEAD.size
        if body_len < 0 or body_start + body_len + _PROPLEN.size > pos + total:
            raise ValueError(f"batch entry at byte {pos}: body length {body_len} overruns it")
        body = bytes(view[body_start : body_start + body_len])
        (props_len,) = _PROPLEN.unpack_from(view, body_start + body_len)
        props_start = body_start + body_len + _PROPLEN.size
        if props_len < 0 or props_start + props_len != pos + total:
            raise ValueError(f"batch entry at byte {pos}: properties length {props_len} is wrong")
        try:
            props = bytes(view[props_start : props_start + props_len]).decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"batch entry at byte {pos}: properties are not UTF-8") from exc
        out.append((flag, body, props))
        pos += total
    return out
