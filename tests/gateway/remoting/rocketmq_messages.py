"""Test-side decoding of RocketMQ's stored-message layout and encoding of batch bodies,
written from MessageDecoder's documented layout (docs/rocketmq.md), independently of
the gateway's encoder."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass


@dataclass
class Pulled:
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_ms: int
    born_host: str
    store_ms: int
    store_host: str
    reconsume_times: int
    body: bytes
    topic: str
    properties: dict[str, str]
    body_crc: int


def _host(data: bytes, pos: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    ip = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, data[pos:pos + n])
    (port,) = struct.unpack_from(">i", data, pos + n)
    return f"{ip}:{port}", pos + n + 4


def decode_pulled(data: bytes) -> list[Pulled]:
    out = []
    pos = 0
    while pos < len(data):
        start = pos
        total, magic, crc, qid, flag, qoff, phys, sysflag, born_ms = struct.unpack_from(
            ">iiiiiqqiq", data, pos)
        assert magic in (-626843481, -626843477)
        pos += 4 * 5 + 8 * 2 + 4 + 8
        born, pos = _host(data, pos, bool(sysflag & 0x10))
        (store_ms,) = struct.unpack_from(">q", data, pos)
        pos += 8
        store, pos = _host(data, pos, bool(sysflag & 0x20))
        reconsume, _prepared, body_len = struct.unpack_from(">iqi", data, pos)
        pos += 16
        body = data[pos:pos + body_len]
        pos += body_len
        if magic == -626843481:
            topic_len = data[pos]
            pos += 1
        else:
            (topic_len,) = struct.unpack_from(">h", data, pos)
            pos += 2
        topic = data[pos:pos + topic_len].decode()
        pos += topic_len
        (props_len,) = struct.unpack_from(">h", data, pos)
        pos += 2
        props_text = data[pos:pos + props_len].decode()
        pos += props_len
        assert pos - start == total, (pos - start, total)
        props = {}
        for item in props_text.split("\x02"):
            if "\x01" in item:
                k, v = item.split("\x01", 1)
                props[k] = v
        out.append(Pulled(qid, flag, qoff, phys, sysflag, born_ms, born, store_ms, store,
                          reconsume, body, topic, props, crc))
    return out


def properties(**props: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def batch_body(messages: list[tuple[bytes, str]]) -> bytes:
    out = bytearray()
    for body, props in messages:
        raw = props.encode()
        total = 4 * 5 + len(body) + 2 + len(raw)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(raw)) + raw
    return bytes(out)
