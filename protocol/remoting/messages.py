"""Message encodings: properties, the stored-message layout, the batch body.

**Properties** are one string: ``name \\x01 value \\x02`` per property
(``MessageDecoder.messageProperties2String``). Reading follows
``string2messageProperties``: a piece without a ``\\x01``, with an empty name or an empty
value is skipped, and the last piece may lack its ``\\x02``.

**Stored message** (``MessageDecoder.encode``/``decode``), the records a PULL or POP
response body concatenates, all big-endian::

    i32 TOTALSIZE | i32 MAGIC | i32 BODYCRC | i32 QUEUEID | i32 FLAG | i64 QUEUEOFFSET
    | i64 PHYSICALOFFSET | i32 SYSFLAG | i64 BORNTIMESTAMP | BORNHOST | i64 STORETIMESTAMP
    | STOREHOST | i32 RECONSUMETIMES | i64 PREPARED_TX_OFFSET | i32 BODYLEN, body
    | TOPICLEN, topic | i16 PROPLEN, properties

A host is 4 address bytes and an i32 port, or 16 bytes and the port when the sysFlag has
``BORNHOST_V6`` (0x10) / ``STOREHOST_V6`` (0x20). MAGIC ``-626843481`` (v1) has an i8
topic length, ``-626843477`` (v2) an i16 one; v1 is written whenever the topic fits
(127 bytes), because ali-ons reads only v1 and IPv4. BODYCRC is ``UtilAll.crc32``: zlib's
CRC-32 masked to 31 bits, over the body as stored. A compressed body (sysFlag
``COMPRESSED``) stays compressed and flagged; the client inflates it.

**Batch body** (SEND_BATCH_MESSAGE, ``MessageDecoder.encodeMessages``), per message::

    i32 TOTALSIZE | i32 MAGIC (0) | i32 BODYCRC (0) | i32 FLAG | i32 BODYLEN, body
    | i16 PROPLEN, properties
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from .codes import SysFlag
from .errors import MessageError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
MAX_PROPERTIES_LENGTH = (1 << 15) - 1  # an i16 on the wire
MAX_V1_TOPIC_LENGTH = 127  # an i8 on the wire

Host = tuple[str, int]
# Plain ints: ``~`` on an IntFlag member inverts only the named bits and would drop any
# other bit a client set.
_HOST_V6_FLAGS = int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
_COMPRESSED = int(SysFlag.COMPRESSED)
_BORN_V6 = int(SysFlag.BORNHOST_V6)
_STORE_V6 = int(SysFlag.STOREHOST_V6)
_I32 = struct.Struct(">i")


def encode_properties(properties: dict[str, str]) -> str:
    """Raises :class:`MessageError` for a name or value the separators would break."""
    parts = []
    for name, value in properties.items():
        if not name or NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise MessageError(f"property name {name!r} is empty or holds a separator")
        if PROPERTY_SEPARATOR in value:
            raise MessageError(f"property {name!r}: the value holds the \\x02 separator")
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts)


def decode_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        name, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body as the producer wrote it: inflated if the sysFlag says COMPRESSED.

    Compression type 0 (older clients) and 0x300 mean zlib; LZ4 and zstd are not in
    the standard library and raise :class:`MessageError`.
    """
    if not sys_flag & SysFlag.COMPRESSED:
        return body
    kind = sys_flag & SysFlag.COMPRESSION_MASK
    if kind not in (0, SysFlag.COMPRESSION_ZLIB):
        name = {SysFlag.COMPRESSION_LZ4: "LZ4", SysFlag.COMPRESSION_ZSTD: "zstd"}.get(
            kind, hex(kind)
        )
        raise MessageError(f"body compressed with {name}: no decompressor for it")
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise MessageError(f"compressed body does not inflate: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _pack_host(host: Host, what: str) -> tuple[bytes, bool]:
    # Cached: a pull answer writes the same store host, and few born hosts, many times.
    try:
        address = ipaddress.ip_address(host[0])
    except ValueError:
        raise MessageError(f"{what} {host[0]!r} is not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.packed + struct.pack(">i", host[1]), address.version == 6


def offset_msg_id(store_host: Host, commit_log_offset: int) -> str:
    """``MessageDecoder.createMessageId``: the store's address (4 bytes for IPv4, 16 for
    IPv6; an IPv4-mapped IPv6 address as IPv4), its port as 4 bytes and the commit-log
    offset as 8, big-endian, in upper-case hex (32 or 56 characters)."""
    packed, _ = _pack_host(store_host, "store host")
    return (packed + struct.pack(">q", commit_log_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """``(store host, commit-log offset)`` of an offsetMsgId; :class:`MessageError` if
    it is not one (not 32 or 56 hex digits)."""
    if len(msg_id) not in (32, 56):
        raise MessageError(f"not an offset message id (32 or 56 hex digits): {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageError(f"not an offset message id (not hex): {msg_id!r}") from None
    port, offset = struct.unpack(">iq", raw[-12:])
    return (str(ipaddress.ip_address(raw[:-12])), port), offset


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as a consumer sees it (``MessageExt``)."""

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: Host = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None  # None: computed from the body when encoding

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: where the message is stored."""
        return offset_msg_id(self.store_host, self.commit_log_offset)


_HEAD = struct.Struct(">iiiiiqqiq")  # size, magic, crc, queue, flag, qoff, poff, sys, born
_MID = struct.Struct(">q")
_TAIL = struct.Struct(">iq")  # reconsume times, prepared tx offset


def encode_stored(msg: StoredMessage, *, magic: int | None = None) -> bytes:
    """One stored-message record. The host flags in ``sys_flag`` are set from the
    addresses; the body is written as given (compressed or not)."""
    born, born_v6 = _pack_host(msg.born_host, "born host")
    store, store_v6 = _pack_host(msg.store_host, "store host")
    sys_flag = msg.sys_flag & ~_HOST_V6_FLAGS
    sys_flag |= (_BORN_V6 if born_v6 else 0) | (_STORE_V6 if store_v6 else 0)
    topic = msg.topic.encode()
    if magic is None:
        magic = MAGIC_V1 if len(topic) <= MAX_V1_TOPIC_LENGTH else MAGIC_V2
    if magic == MAGIC_V1 and len(topic) > MAX_V1_TOPIC_LENGTH:
        raise MessageError(f"topic of {len(topic)} bytes needs MAGIC v2")
    if magic not in (MAGIC_V1, MAGIC_V2) or len(topic) > 0x7FFF:
        raise MessageError(f"cannot encode a topic of {len(topic)} bytes with magic {magic}")
    props = encode_properties(msg.properties).encode()
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise MessageError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_LENGTH}")
    topic_len = struct.pack(">b" if magic == MAGIC_V1 else ">h", len(topic))
    crc = body_crc(msg.body) if msg.body_crc is None else msg.body_crc
    size = (
        _HEAD.size
        + len(born)
        + _MID.size
        + len(store)
        + _TAIL.size
        + 4
        + len(msg.body)
        + len(topic_len)
        + len(topic)
        + 2
        + len(props)
    )
    return b"".join(
        (
            _HEAD.pack(
                size,
                magic,
                crc,
                msg.queue_id,
                msg.flag,
                msg.queue_offset,
                msg.commit_log_offset,
                sys_flag,
                msg.born_timestamp,
            ),
            born,
            _MID.pack(msg.store_timestamp),
            store,
            _TAIL.pack(msg.reconsume_times, msg.prepared_transaction_offset),
            struct.pack(">i", len(msg.body)),
            msg.body,
            topic_len,
            topic,
            struct.pack(">h", len(props)),
            props,
        )
    )


class _Reader:
    __slots__ = ("data", "end", "pos", "what")

    def __init__(self, data: memoryview, pos: int, end: int, what: str) -> None:
        self.data, self.pos, self.end, self.what = data, pos, end, what

    def take(self, n: int, name: str) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise MessageError(f"{self.what}: {name} of {n} bytes runs past the record")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct, name: str) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size, name))

    def text(self, n: int, name: str) -> str:
        try:
            return self.take(n, name).decode()
        except UnicodeDecodeError:
            raise MessageError(f"{self.what}: {name} is not UTF-8") from None


@functools.lru_cache(maxsize=4096)
def _ip_text(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def _host(r: _Reader, v6: bool, name: str) -> Host:
    raw = r.take(16 if v6 else 4, name)
    (port,) = r.unpack(_I32, f"{name} port")
    return _ip_text(raw), port


def decode_stored(
    body: bytes, *, decompress: bool = True, check_crc: bool = False
) -> list[StoredMessage]:
    """Every record of a PULL/POP body. Raises :class:`MessageError` naming the record.

    With ``decompress`` a compressed body is inflated and COMPRESSED cleared from its
    sysFlag, as the Java client does.
    """
    view = memoryview(body)
    out: list[StoredMessage] = []
    pos = 0
    while pos < len(view):
        what = f"message {len(out)} at byte {pos}"
        if len(view) - pos < 8:
            raise MessageError(f"{what}: {len(view) - pos} bytes cannot hold a record")
        size, magic = struct.unpack_from(">ii", view, pos)
        if size <= 0 or pos + size > len(view):
            raise MessageError(f"{what}: size {size} does not fit the {len(view) - pos} left")
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise MessageError(f"{what}: unknown magic {magic}")
        r = _Reader(view, pos, pos + size, what)
        _, _, crc, queue_id, flag, qoff, poff, sys_flag, born_ts = r.unpack(_HEAD, "header")
        born = _host(r, bool(sys_flag & _BORN_V6), "born host")
        (store_ts,) = r.unpack(_MID, "store timestamp")
        store = _host(r, bool(sys_flag & _STORE_V6), "store host")
        reconsume, prepared = r.unpack(_TAIL, "reconsume times")
        (body_len,) = r.unpack(_I32, "body length")
        payload = r.take(body_len, "body")
        topic_fmt = struct.Struct(">b" if magic == MAGIC_V1 else ">h")
        (topic_len,) = r.unpack(topic_fmt, "topic length")
        topic = r.text(topic_len, "topic")
        (props_len,) = r.unpack(struct.Struct(">h"), "properties length")
        props = decode_properties(r.text(props_len, "properties"))
        if r.pos != pos + size:
            raise MessageError(f"{what}: {pos + size - r.pos} bytes left inside the record")
        if check_crc and body_crc(payload) != crc:
            raise MessageError(f"{what}: body CRC {body_crc(payload)} != {crc}")
        if decompress and sys_flag & _COMPRESSED:
            payload = decompress_body(payload, sys_flag)
            sys_flag &= ~_COMPRESSED
        out.append(
            StoredMessage(
                topic=topic,
                body=payload,
                properties=props,
                queue_id=queue_id,
                flag=flag,
                queue_offset=qoff,
                commit_log_offset=poff,
                sys_flag=sys_flag,
                born_timestamp=born_ts,
                born_host=born,
                store_timestamp=store_ts,
                store_host=store,
                reconsume_times=reconsume,
                prepared_transaction_offset=prepared,
                body_crc=crc,
            )
        )
        pos += size
    return out


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """One message of a SEND_BATCH_MESSAGE body (topic and queue come from the header)."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


_BATCH_HEAD = struct.Struct(">iiiii")  # size, magic, crc, flag, body length


def encode_batch(messages: list[BatchMessage]) -> bytes:
    parts = []
    for msg in messages:
        props = encode_properties(msg.properties).encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise MessageError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_LENGTH}")
        size = _BATCH_HEAD.size + len(msg.body) + 2 + len(props)
        parts += [_BATCH_HEAD.pack(size, 0, 0, msg.flag, len(msg.body)), msg.body]
        parts += [struct.pack(">h", len(props)), props]
    return b"".join(parts)


def decode_batch(body: bytes) -> list[BatchMessage]:
    """The messages of a batch body. A bad message raises :class:`MessageError` naming
    its index (``index`` attribute), so the whole batch can be refused with a reason."""
    view = memoryview(body)
    out: list[BatchMessage] = []
    pos = 0
    while pos < len(view):
        what = f"batch message {len(out)}"
        try:
            if len(view) - pos < _BATCH_HEAD.size:
                raise MessageError(f"{what}: {len(view) - pos} bytes cannot hold a message")
            size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
            r = _Reader(view, pos + _BATCH_HEAD.size, len(view), what)
            payload = r.take(body_len, "body")
            (props_len,) = r.unpack(struct.Struct(">h"), "properties length")
            props = decode_properties(r.text(props_len, "properties"))
            if size != r.pos - pos:
                raise MessageError(f"{what}: total size {size} != the {r.pos - pos} bytes read")
        except MessageError as exc:
            raise MessageError(str(exc), index=len(out)) from None
        out.append(BatchMessage(payload, props, flag))
        pos = r.pos
    return out
