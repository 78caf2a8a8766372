"""Pulled messages in RocketMQ's stored-message layout (``MessageDecoder``): the
front end's allocation-free writer for the pull and pop hot paths.

:func:`protocol.remoting.messages.encode_stored` is the codec's definition of the layout
(a ``StoredMessage`` in, bytes out); :func:`write_stored` appends the same bytes to one
buffer straight from a stored record's fields (positional arguments, the topic field
and the properties already bytes, everything up to the body in one ``struct`` call when
both hosts are IPv4), with each host address packed once and cached. The pull path
feeds it from records read undecoded (:func:`gateway.remoting.messages.write_raw`).
Tests check that every writer gives the codec's bytes.

A PULL_MESSAGE body is these records back to back (integers big-endian)::

    TOTALSIZE i32 | MAGIC i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip4|ip16, port i32)
    | STORETIMESTAMP i64 | STOREHOST (ip4|ip16, port i32) | RECONSUMETIMES i32
    | PREPARED_TX_OFFSET i64 | BODYLEN i32, body | TOPICLEN i8, topic | PROPLEN i16, props

- MAGIC is V1 (-626843481, a 1-byte topic length), which every client reads; V2
  (-626843477, a 2-byte topic length) only for a topic over 127 bytes.
- SYSFLAG keeps the producer's flags (compression) and sets BORNHOST_V6 (0x10) /
  STOREHOST_V6 (0x20) when the address is IPv6 (16 bytes instead of 4).
- BODYCRC is CRC32 of the body, masked to 31 bits (``UtilAll.crc32``).
- PHYSICALOFFSET is the record's log position: with the store host it makes the
  offsetMsgId, and CONSUMER_SEND_MSG_BACK and VIEW_MESSAGE_BY_ID find the record by it.
"""

from __future__ import annotations

import ipaddress
import struct
from zlib import crc32

from protocol.remoting.codes import SysFlag
from protocol.remoting.messages import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_LENGTH,
    MAX_V1_TOPIC_LENGTH,
)

BORNHOST_V6 = int(SysFlag.BORNHOST_V6)
STOREHOST_V6 = int(SysFlag.STOREHOST_V6)
MAX_PROPERTIES = MAX_PROPERTIES_LENGTH
MAX_V1_TOPIC = MAX_V1_TOPIC_LENGTH
_NOT_V6 = ~(BORNHOST_V6 | STOREHOST_V6)

_HEAD = struct.Struct(">iiiiiqqiq")  # total..born timestamp
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # reconsume times, prepared tx offset, body length
#: Everything up to the body when both hosts are IPv4 (8 bytes each).
_V4_HEAD = struct.Struct(">iiiiiqqiq8sq8siqi").pack
_U16 = struct.Struct(">H").pack
#: The layout's bytes besides the hosts, body, topic field and properties.
_FIXED = _HEAD.size + 8 + _TAIL.size + 2

_topic_cache: dict[str, bytes] = {}

_host_cache: dict[str, tuple[bytes, bool]] = {}


def pack_host(address: str) -> tuple[bytes, bool]:
    """``host:port`` (``[v6]:port`` or a bare v6 ``a::b:port``) as RocketMQ's socket
    address bytes, and whether it is IPv6. Unparseable: 0.0.0.0:0."""
    cached = _host_cache.get(address)
    if cached is not None:
        return cached
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # an IPv4 client on a dual-stack socket
        port = int(port_text)
        packed = ip.packed + _I32.pack(port)
        out = (packed, ip.version == 6)
    except ValueError:
        out = (bytes(8), False)
    if len(_host_cache) < 4096:
        _host_cache[address] = out
    return out


def topic_field(topic: str) -> bytes:
    """TOPICLEN and the topic's bytes as :func:`write_stored` takes them: a 1-byte
    length (MAGIC V1) when the topic fits in 127 bytes, else a 2-byte one (V2). Cached:
    a pull writes one topic many times."""
    field = _topic_cache.get(topic)
    if field is None:
        raw = topic.encode()
        field = len(raw).to_bytes(2 if len(raw) > MAX_V1_TOPIC else 1, "big") + raw
        if len(_topic_cache) < 4096:
            _topic_cache[topic] = field
    return field


def write_stored(
    out: bytearray,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_ms: int,
    born_host: tuple[bytes, bool],
    store_ms: int,
    store_host: tuple[bytes, bool],
    reconsume_times: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> None:
    """Append one stored message to ``out``: the hot path (positional arguments; the
    topic as :func:`topic_field` gives it, the properties string already UTF-8).
    ``ValueError`` when the properties exceed the layout's 2-byte length."""
    born, born_v6 = born_host
    store, store_v6 = store_host
    sys_flag &= _NOT_V6
    if born_v6:
        sys_flag |= BORNHOST_V6
    if store_v6:
        sys_flag |= STOREHOST_V6
    n_props = len(properties)
    if n_props > MAX_PROPERTIES:
        raise ValueError(f"properties of {n_props} bytes exceed {MAX_PROPERTIES}")
    n_body = len(body)
    n_topic = len(topic)
    total = _FIXED + len(born) + len(store) + n_body + n_topic + n_props
    magic = MAGIC_V2 if n_topic > MAX_V1_TOPIC + 1 else MAGIC_V1
    crc = crc32(body) & 0x7FFFFFFF
    if not born_v6 and not store_v6:  # the common case: one pack up to the body
        out += _V4_HEAD(
            total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
            born_ms, born, store_ms, store, reconsume_times, 0, n_body)
    else:
        out += _HEAD.pack(
            total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
            born_ms)
        out += born
        out += _I64.pack(store_ms)
        out += store
        out += _TAIL.pack(reconsume_times, 0, n_body)
    out += body
    out += topic
    out += _U16(n_props)
    out += properties


def encode_stored(
    out: bytearray,
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_ms: int,
    born_host: tuple[bytes, bool],
    store_ms: int,
    store_host: tuple[bytes, bool],
    reconsume_times: int,
    body: bytes,
    topic: str,
    properties: str,
) -> None:
    """Append one stored message to ``out`` (:func:`write_stored` with keywords)."""
    write_stored(
        out, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ms, born_host,
        store_ms, store_host, reconsume_times, body, topic_field(topic), properties.encode())
