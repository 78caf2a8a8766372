"""Frames of the replication stream.

Every frame, either way::

    0   4  magic  b"LMQR"
    4   1  version (1)
    5   1  kind (Kind)
    6   2  reserved, 0
    8   8  epoch  the sender's master epoch (u64): every request carries it (fencing)
    16  4  length of the payload (u32)
    20  4  CRC32C of bytes [0, 20) and of the payload
    24  .. payload

All integers big-endian; strings are ``u16 length, UTF-8``. Payloads:

- ``HELLO`` (slave -> master): group, member name, the slave's log end (u64), its epoch
  history (``u32 n``, then ``n`` x ``epoch u64, start u64``). The frame's epoch is the
  newest the slave knows.
- ``WELCOME`` (master -> slave): where the slave cuts its log (u64), the master's log
  start and end (u64 each), the master's client addresses (a string,
  ``name=host:port`` comma-separated: where the slave sends clients it refuses). The
  frame's epoch is the session's from here on.
- ``DATA`` (master -> slave): position (u64), the epoch that wrote these records (u64),
  the master's log end (u64), then whole records, their bytes as in the master's log.
  No records: a heartbeat.
- ``ACK`` (slave -> master): the slave's log end (u64), every record before it written
  (and, in sync durability, fsynced) and dispatched.
- ``REFUSE`` (either way): why (a string); the sender closes the connection.
- ``STATE`` (master -> slave): consumer-state changes shipped beside the log: a flag
  byte (1: the first chunk of a snapshot, remove every key first), ``u32 n``, then ``n``
  x (``u8`` kind 0 put / 1 delete / 2 delete range, ``u32`` length + key, ``u32``
  length + value or range end).
- ``FILE`` (master -> slave): a file kept beside the store that is not in it (the users
  file): its name (a string) and its whole content (the rest of the payload).

A frame that fails any check (magic, version, kind, length, CRC, payload layout) is a
:class:`FrameError`: the stream is not trusted past it and the connection is closed.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from crc32c import crc32c

from .epochs import EpochEntry

MAGIC = b"LMQR"
VERSION = 1
HEADER = struct.Struct(">4sBBHQII")
HEADER_SIZE = HEADER.size  # 24
#: The largest payload accepted (a DATA chunk is cut well below it).
MAX_FRAME = 64 * 1024 * 1024
_U64 = struct.Struct(">Q")
_U64X2 = struct.Struct(">QQ")
_U64X3 = struct.Struct(">QQQ")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


class Kind(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    DATA = 3
    ACK = 4
    REFUSE = 5
    STATE = 6
    FILE = 7
    TRIM = 8


class FrameError(ValueError):
    """A frame that cannot be trusted; the connection is closed."""


@dataclass(frozen=True, slots=True)
class Hello:
    group: str
    member: str
    log_end: int
    history: list[EpochEntry]
    #: The slave's client addresses (``name=host:port,...``): what the master's routes
    #: name for reads from this slave. Absent (``""``) in a HELLO that ends after the
    #: history.
    clients: str = ""


@dataclass(frozen=True, slots=True)
class Welcome:
    truncate_to: int
    log_start: int
    log_end: int
    clients: str = ""


@dataclass(frozen=True, slots=True)
class Data:
    position: int
    data_epoch: int
    master_end: int
    records: bytes


@dataclass(frozen=True, slots=True)
class Ack:
    position: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class State:
    wipe: bool
    ops: list[tuple[int, bytes, bytes]]


@dataclass(frozen=True, slots=True)
class File:
    name: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Trim:
    """The master's log now starts at ``log_start`` (its retention removed what was
    before): the slave removes its segments that end at or before it."""

    log_start: int


Message = Hello | Welcome | Data | Ack | Refuse | State | File | Trim


def _s16(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("string too long for the replication protocol")
    return _U16.pack(len(raw)) + raw


def _payload(message: Message) -> tuple[Kind, bytes]:
    if isinstance(message, Hello):
        body = [
            _s16(message.group),
            _s16(message.member),
            _U64.pack(message.log_end),
            _U32.pack(len(message.history)),
        ]
        body += [_U64X2.pack(e.epoch, e.start) for e in message.history]
        if message.clients:
            body.append(_s16(message.clients))
        return Kind.HELLO, b"".join(body)
    if isinstance(message, Welcome):
        fixed = _U64X3.pack(message.truncate_to, message.log_start, message.log_end)
        return Kind.WELCOME, fixed + _s16(message.clients)
    if isinstance(message, Data):
        return Kind.DATA, _U64X3.pack(
            message.position, message.data_epoch, message.master_end
        ) + message.records
    if isinstance(message, Ack):
        return Kind.ACK, _U64.pack(message.position)
    if isinstance(message, File):
        return Kind.FILE, _s16(message.name) + message.content
    if isinstance(message, Trim):
        return Kind.TRIM, _U64.pack(message.log_start)
    if isinstance(message, State):
        parts = [bytes((int(message.wipe),)), _U32.pack(len(message.ops))]
        for kind, key, value in message.ops:
            parts += [bytes((kind,)), _U32.pack(len(key)), key, _U32.pack(len(value)), value]
        return Kind.STATE, b"".join(parts)
    return Kind.REFUSE, _s16(message.reason)


def encode(epoch: int, message: Message) -> bytes:
    """One frame carrying ``message`` with the sender's ``epoch``."""
    kind, payload = _payload(message)
    if len(payload) > MAX_FRAME:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_FRAME}")
    head = HEADER.pack(MAGIC, VERSION, kind, 0, epoch, len(payload), 0)[:20]
    crc = crc32c(payload, crc32c(head))
    return head + _U32.pack(crc) + payload


class _Reader:
    __slots__ = ("data", "pos", "kind")

    def __init__(self, data: bytes, kind: Kind) -> None:
        self.data = data
        self.pos = 0
        self.kind = kind

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise FrameError(f"{self.kind.name} payload too short")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def s16(self) -> str:
        (n,) = _U16.unpack(self.take(2))
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise FrameError(f"{self.kind.name}: a string is not UTF-8") from None

    def done(self) -> None:
        if self.pos != len(self.data):
            raise FrameError(f"{self.kind.name}: {len(self.data) - self.pos} bytes left over")


def _decode(kind: Kind, payload: bytes) -> Message:
    r = _Reader(payload, kind)
    message: Message
    if kind == Kind.HELLO:
        group, member, end, n = r.s16(), r.s16(), r.u64(), r.u32()
        if n * 16 > len(payload) - r.pos:
            raise FrameError(f"HELLO: {n} epoch entries do not fit the payload")
        history = [EpochEntry(r.u64(), r.u64()) for _ in range(n)]
        clients = r.s16() if r.pos < len(payload) else ""
        message = Hello(group, member, end, history, clients)
    elif kind == Kind.WELCOME:
        message = Welcome(r.u64(), r.u64(), r.u64(), r.s16())
    elif kind == Kind.DATA:
        position, data_epoch, master_end = r.u64(), r.u64(), r.u64()
        message = Data(position, data_epoch, master_end, payload[r.pos :])
        r.pos = len(payload)
    elif kind == Kind.ACK:
        message = Ack(r.u64())
    elif kind == Kind.TRIM:
        message = Trim(r.u64())
    elif kind == Kind.FILE:
        name = r.s16()
        message = File(name, payload[r.pos :])
        r.pos = len(payload)
    elif kind == Kind.STATE:
        flag, n = r.take(1)[0], r.u32()
        if flag > 1:
            raise FrameError(f"STATE: unknown flag {flag}")
        ops = []
        for _ in range(n):
            op = r.take(1)[0]
            if op > 2:
                raise FrameError(f"STATE: unknown change kind {op}")
            key = r.take(r.u32())
            ops.append((op, key, r.take(r.u32())))
        message = State(bool(flag), ops)
    else:
        message = Refuse(r.s16())
    r.done()
    return message


class FrameDecoder:
    """Feed bytes with :meth:`feed`; :meth:`next` returns ``(epoch, message)`` or None
    when more bytes are needed, and raises :class:`FrameError` for a bad frame (and
    again on every later call: the stream is not trusted past it)."""

    __slots__ = ("_buf", "_error", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._error: FrameError | None = None
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        if self._error is None:
            self._buf += data

    def next(self) -> tuple[int, Message] | None:
        if self._error is not None:
            raise self._error
        buf = self._buf
        if len(buf) < HEADER_SIZE:
            if buf[: min(len(buf), 4)] != MAGIC[: min(len(buf), 4)]:
                self._fail("bad magic (not a replication stream)")
            return None
        magic, version, kind, reserved, epoch, length, crc = HEADER.unpack_from(buf)
        if magic != MAGIC:
            self._fail("bad magic (not a replication stream)")
        if version != VERSION:
            self._fail(f"unsupported protocol version {version}")
        if kind not in Kind._value2member_map_ or reserved:
            self._fail(f"unknown frame kind {kind}")
        if length > self.max_frame:
            self._fail(f"frame of {length} bytes exceeds the limit of {self.max_frame}")
        if len(buf) < HEADER_SIZE + length:
            return None
        payload = bytes(buf[HEADER_SIZE : HEADER_SIZE + length])
        if crc32c(payload, crc32c(bytes(buf[:20]))) != crc:
            self._fail(f"{Kind(kind).name} frame fails its CRC (forged or damaged)")
        del buf[: HEADER_SIZE + length]
        try:
            return epoch, _decode(Kind(kind), payload)
        except FrameError as exc:
            self._error = exc
            raise

    def _fail(self, reason: str) -> None:
        self._error = FrameError(reason)
        raise self._error
