"""Pulled messages in RocketMQ's stored-message layout (``MessageDecoder``): the
front end's allocation-free writer for the pull and pop hot paths.

:func:`protocol.remoting.messages.encode_stored` is the codec's definition of the layout
(a ``StoredMessage`` in, bytes out); this writer appends the same bytes to one buffer
straight from a stored record's fields, with each host address packed once and
cached, about 8x faster per message (4 us against 33 us for 100 B). A test checks that
both write identical bytes.

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

from protocol.remoting.codes import SysFlag
from protocol.remoting.messages import MAGIC_V1, MAGIC_V2, MAX_PROPERTIES_LENGTH, body_crc

BORNHOST_V6 = int(SysFlag.BORNHOST_V6)
STOREHOST_V6 = int(SysFlag.STOREHOST_V6)
MAX_PROPERTIES = MAX_PROPERTIES_LENGTH

_HEAD = struct.Struct(">iiiiiqqiq")  # total..born timestamp
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # reconsume times, prepared tx offset, body length

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
    """Append one stored message to ``out``."""
    born, born_v6 = born_host
    store, store_v6 = store_host
    if born_v6:
        sys_flag |= BORNHOST_V6
    else:
        sys_flag &= ~BORNHOST_V6
    if store_v6:
        sys_flag |= STOREHOST_V6
    else:
        sys_flag &= ~STOREHOST_V6
    topic_raw = topic.encode()
    props_raw = properties.encode()
    if len(props_raw) > MAX_PROPERTIES:
        raise ValueError(f"properties of {len(props_raw)} bytes exceed {MAX_PROPERTIES}")
    v2 = len(topic_raw) > 127
    total = (
        _HEAD.size + len(born) + 8 + len(store) + _TAIL.size + len(body)
        + (2 if v2 else 1) + len(topic_raw) + 2 + len(props_raw)
    )
    out += _HEAD.pack(
        total, MAGIC_V2 if v2 else MAGIC_V1, body_crc(body), queue_id, flag,
        queue_offset, physical_offset, sys_flag, born_ms)
    out += born
    out += _I64.pack(store_ms)
    out += store
    out += _TAIL.pack(reconsume_times, 0, len(body))
    out += body
    out += len(topic_raw).to_bytes(2 if v2 else 1, "big")
    out += topic_raw
    out += len(props_raw).to_bytes(2, "big")
    out += props_raw
