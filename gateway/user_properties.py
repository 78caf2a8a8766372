"""The stored form of MQTT 5 user properties (the record property
``user_properties``), shared by the front ends that read or write it: MQTT, and AMQP,
which maps them to and from string headers. Here, not in either front end, so that
``gateway.mqtt`` and ``gateway.amqp`` stay independent of each other.

Format: for each (name, value) pair, the name then the value, each a big-endian u16
byte length followed by its UTF-8 bytes (MQTT's own UTF-8 string encoding).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_U16 = struct.Struct(">H")


def encode_user_properties(pairs: Sequence[tuple[str, str]]) -> bytes:
    out = bytearray()
    for name, value in pairs:
        for text in (name, value):
            raw = text.encode()
            out += _U16.pack(len(raw))
            out += raw
    return bytes(out)


def decode_user_properties(raw: bytes) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    pos = 0
    texts: list[str] = []
    while pos < len(raw):
        (n,) = _U16.unpack_from(raw, pos)
        pos += 2
        texts.append(raw[pos : pos + n].decode())
        pos += n
        if len(texts) == 2:
            pairs.append((texts[0], texts[1]))
            texts = []
    return tuple(pairs)
