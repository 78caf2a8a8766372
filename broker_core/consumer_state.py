"""Consumer state: the only module that knows the state RocksDB's layout.

Unlike the index, this is a separate truth that the log cannot rebuild: consumer
offsets and pop (in-flight) state. It lives in ``<data-dir>/state/`` and is keyed by LMQ
*name*, not by the index's compact id, so that rebuilding the index (which may assign
new ids) leaves it valid. Writes use the RocksDB WAL; with ``sync=True`` (the store's
sync durability mode) a write returns only after the WAL is fsynced.

Keys and values (integers big-endian; ``s16`` = u16 length + UTF-8 bytes)::

    offset   b"O" | s16 lmq | group (UTF-8, rest)      ->  next_offset u64
    inflight b"P" | visible_at_ms u64 | s16 group | s16 lmq | offset u64
                                                       ->  deliveries u32 | popped_ms u64
    retry    b"R" | s16 lmq | s16 group | offset u64   ->  deliveries u32
    fresh    b"F" | s16 lmq | s16 group | first offset u64
                                  ->  count u32 | popped_ms u64 | visible_at_ms u64 |
                                      unsettled bitmap (little-endian, count bits)
    head     b"H" | s16 lmq | s16 group | offset u64   ->  s16 message group | deliveries u32 |
                                                           since_ms u64 | ready_at_ms u64 |
                                                           in flight u8
    parked   b"K" | s16 lmq | s16 group | s16 message group | offset u64  ->  (empty)
    meta     b"X" | key (UTF-8)                        ->  front-end owned value (bytes)

- ``offset`` keys start with the LMQ, so removing an LMQ removes all its offsets with
  one range delete; ``retry`` likewise.
  :meth:`broker_core.store.MessageStore.commit_offsets` writes several ``offset`` keys
  of one group (an MQTT session's LMQs) in one write batch: a crash keeps all or none.
- ``inflight`` is the time-ordered pop table (RIP-73): reviving is a range scan up to
  now, ack is a delete, changing the invisible time is a delete plus a put. The receipt
  handle a consumer gets is this key, so an ack needs no lookup.
- ``retry`` holds popped messages whose invisible time ran out unacked: visible again
  to the same group, with the delivery count they reached.
- ``fresh`` is the compact in-flight state of the groups that keep it in memory
  (:meth:`broker_core.pop.PopConsumer.set_memory_inflight`): ONE record per pop call
  for the messages popped for the first time (offsets ``first .. first+count-1``),
  with a bit per message still unsettled; acking rewrites the bitmap (or deletes the
  record once every bit is clear). After a crash each set bit is a message delivered
  once and never settled: it becomes a retry with one delivery.
- ``head`` and ``parked`` are FIFO pop state (:mod:`broker_core.fifo`): a message
  group's oldest message not yet acked (its *head*: in flight, or waiting for its
  retry backoff, or ready) keyed by its offset so an ack or a revive finds it with no
  search, and the group's later messages the pop passed while the head was out
  (*parked*), keyed by group then offset so the oldest is one seek away.
- ``meta`` is a small namespace for front ends (sessions, retained messages, broker
  topology) that want the same durability as offsets.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from broker_core import rocks
from broker_core.errors import StorageFull, is_disk_full

#: RocksDB memtable size of the state database (offsets and pop state are rewritten
#: often: every version sits in the memtable until it is flushed).
STATE_WRITE_BUFFER_BYTES = 16 * 1024 * 1024

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_INFLIGHT_VALUE = struct.Struct(">IQ")
_DELIVERIES = struct.Struct(">I")


def _s16(value: str) -> bytes:
    raw = value.encode()
    return _U16.pack(len(raw)) + raw


def _read_s16(raw: bytes, pos: int) -> tuple[str, int]:
    (length,) = _U16.unpack_from(raw, pos)
    pos += 2
    return raw[pos : pos + length].decode(), pos + length


def offset_key(lmq: str, group: str) -> bytes:
    return b"O" + _s16(lmq) + group.encode()


def inflight_key(visible_at: int, group: str, lmq: str, offset: int) -> bytes:
    return b"P" + _U64.pack(visible_at) + _s16(group) + _s16(lmq) + _U64.pack(offset)


def retry_prefix(lmq: str, group: str) -> bytes:
    return b"R" + _s16(lmq) + _s16(group)


def fresh_prefix(lmq: str, group: str) -> bytes:
    return b"F" + _s16(lmq) + _s16(group)


_FRESH_HEAD = struct.Struct(">IQQ")
_HEAD_VALUE = struct.Struct(">IQQB")


def head_prefix(lmq: str, group: str) -> bytes:
    return b"H" + _s16(lmq) + _s16(group)


def parked_prefix(lmq: str, group: str, message_group: str) -> bytes:
    return b"K" + _s16(lmq) + _s16(group) + _s16(message_group)


@dataclass(slots=True)
class HeadRecord:
    """A FIFO message group's head (see the ``head`` key above)."""

    lmq: str
    group: str
    offset: int
    message_group: str
    deliveries: int
    since_ms: int
    ready_at: int
    inflight: bool


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    raw = bytearray(prefix)
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        raise ValueError("no upper bound for an all-0xff prefix")
    raw[-1] += 1
    return bytes(raw)


@dataclass(frozen=True, slots=True)
class InflightKey:
    visible_at: int
    group: str
    lmq: str
    offset: int

    def encode(self) -> bytes:
        return inflight_key(self.visible_at, self.group, self.lmq, self.offset)

    @classmethod
    def decode(cls, raw: bytes) -> InflightKey:
        if not raw.startswith(b"P") or len(raw) < 1 + 8 + 2 + 2 + 8:
            raise ValueError("not an in-flight key")
        (visible_at,) = _U64.unpack_from(raw, 1)
        group, pos = _read_s16(raw, 9)
        lmq, pos = _read_s16(raw, pos)
        if pos + 8 != len(raw):
            raise ValueError("not an in-flight key")
        (offset,) = _U64.unpack_from(raw, pos)
        return cls(visible_at, group, lmq, offset)


@dataclass(frozen=True, slots=True)
class Inflight:
    key: InflightKey
    deliveries: int
    popped_ms: int


class ConsumerState:
    def __init__(self, path: Path, sync: bool, read_only: bool = False) -> None:
        opts = Options(raw_mode=True)
        if read_only:
            self.db = Rdict(str(path), options=opts, access_type=AccessType.read_only())
        else:
            path.mkdir(parents=True, exist_ok=True)
            opts.create_if_missing(True)
            opts.set_max_open_files(128)
            opts.set_keep_log_file_num(2)
            opts.set_write_buffer_size(STATE_WRITE_BUFFER_BYTES)  # see consume_queue
            self.db = Rdict(str(path), options=opts)
        self._path = path
        self._options = opts
        self._failed = False
        self._write_opts = WriteOptions()
        self._write_opts.sync = sync
        #: A broker group's master ships every change (gateway.replication): called with
        #: each written batch's ops, in write order.
        self.tap: Callable[[list[StateOp]], None] | None = None
        #: On a slave, as CommitLog.fence: only replicated changes are written.
        self.fence: Exception | None = None
        self._tap_lock = threading.Lock()

    def close(self) -> None:
        self.db.close()

    def write(self, batch: StateBatch, *, replicated: bool = False) -> None:
        """Apply a batch; a full disk raises StorageFull and the next write reopens the
        DB first (RocksDB refuses writes after a failed WAL write until reopened). On a
        fenced slave only ``replicated`` batches are written."""
        if self.fence is not None and not replicated:
            raise self.fence
        if batch.ops is not None and self.tap is not None:
            with self._tap_lock:  # the ops are shipped in the order they are written
                self._write(batch)
                self.tap(batch.ops)
            return
        self._write(batch)

    def _write(self, batch: StateBatch) -> None:
        if self._failed:
            try:
                self.db.close()
            except Exception:
                pass
            try:
                self.db = Rdict(str(self._path), options=self._options)
            except Exception as exc:
                if is_disk_full(exc):
                    raise StorageFull(f"no space left reopening the state: {exc}") from exc
                raise
            self._failed = False
        try:
            self.db.write(batch.wb, self._write_opts)
        except Exception as exc:
            if is_disk_full(exc):
                self._failed = True
                raise StorageFull(f"no space left writing consumer state: {exc}") from exc
            raise

    # -- offsets -----------------------------------------------------------------------

    def get_offset(self, lmq: str, group: str) -> int | None:
        raw = self.db.get(offset_key(lmq, group))
        return None if raw is None else _U64.unpack(raw)[0]

    def offsets_of_lmq(self, lmq: str) -> Iterator[tuple[str, int]]:
        prefix = b"O" + _s16(lmq)
        for key, value in self._prefix_items(prefix):
            yield key[len(prefix) :].decode(), _U64.unpack(value)[0]

    def all_offsets(self) -> Iterator[tuple[str, str, int]]:
        """(lmq, group, offset) for every committed offset."""
        for key, value in self._prefix_items(b"O"):
            lmq, pos = _read_s16(key, 1)
            yield lmq, key[pos:].decode(), _U64.unpack(value)[0]

    # -- pop ---------------------------------------------------------------------------

    def get_inflight(self, key: InflightKey) -> Inflight | None:
        raw = self.db.get(key.encode())
        if raw is None:
            return None
        deliveries, popped = _INFLIGHT_VALUE.unpack(raw)
        return Inflight(key, deliveries, popped)

    def due_inflight(self, now_ms: int, limit: int) -> list[Inflight]:
        """In-flight records whose invisible time ended at or before ``now_ms``."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(b"P" + _U64.pack(now_ms + 1))
        out = []
        for key, value in rocks.items(self.db, b"P", opts):
            deliveries, popped = _INFLIGHT_VALUE.unpack(value)
            out.append(Inflight(InflightKey.decode(key), deliveries, popped))
            if len(out) >= limit:
                break
        return out

    def next_visible_at(self) -> int | None:
        for key in rocks.keys(self.db, b"P"):
            if not key.startswith(b"P"):
                return None
            return _U64.unpack_from(key, 1)[0]
        return None

    def all_inflight(self) -> Iterator[Inflight]:
        for key, value in self._prefix_items(b"P"):
            deliveries, popped = _INFLIGHT_VALUE.unpack(value)
            yield Inflight(InflightKey.decode(key), deliveries, popped)

    def retries(self, lmq: str, group: str, limit: int) -> list[tuple[int, int]]:
        """(offset, deliveries) of messages visible again to ``group``, by offset."""
        prefix = retry_prefix(lmq, group)
        out = []
        for key, value in self._prefix_items(prefix):
            (offset,) = _U64.unpack_from(key, len(prefix))
            out.append((offset, _DELIVERIES.unpack(value)[0]))
            if len(out) >= limit:
                break
        return out

    def count_retries(self, lmq: str, group: str) -> int:
        return sum(1 for _ in self._prefix_items(retry_prefix(lmq, group)))

    def all_fresh(self) -> Iterator[tuple[str, str, int, int, int, int, int]]:
        """(lmq, group, first offset, count, popped_ms, visible_at, unsettled bitmap) of
        every ``fresh`` record."""
        size = _FRESH_HEAD.size
        for key, value in self._prefix_items(b"F"):
            lmq, pos = _read_s16(key, 1)
            group, pos = _read_s16(key, pos)
            (first,) = _U64.unpack_from(key, pos)
            count, popped, visible_at = _FRESH_HEAD.unpack_from(value)
            yield (lmq, group, first, count, popped, visible_at,
                   int.from_bytes(value[size:], "little"))

    # -- FIFO (broker_core.fifo) ---------------------------------------------------------

    def fifo_heads(self, lmq: str | None = None, group: str | None = None
                   ) -> Iterator[HeadRecord]:
        """Every FIFO head record (of one LMQ and group, if both are given)."""
        prefix = b"H" if lmq is None or group is None else head_prefix(lmq, group)
        for key, value in self._prefix_items(prefix):
            name, pos = _read_s16(key, 1)
            grp, pos = _read_s16(key, pos)
            (offset,) = _U64.unpack_from(key, pos)
            mgroup, vpos = _read_s16(value, 0)
            deliveries, since, ready_at, flight = _HEAD_VALUE.unpack_from(value, vpos)
            yield HeadRecord(name, grp, offset, mgroup, deliveries, since, ready_at,
                             bool(flight))

    def fifo_parked(self) -> Iterator[tuple[str, str, str, int]]:
        """(lmq, group, message group, offset) of every parked FIFO message."""
        for key in self._prefix_keys(b"K"):
            name, pos = _read_s16(key, 1)
            grp, pos = _read_s16(key, pos)
            mgroup, pos = _read_s16(key, pos)
            yield name, grp, mgroup, _U64.unpack_from(key, pos)[0]

    def first_parked(self, lmq: str, group: str, message_group: str, after: int) -> int | None:
        """The oldest parked offset of a message group above ``after``, or None."""
        prefix = parked_prefix(lmq, group, message_group)
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_prefix_end(prefix))
        for key in rocks.keys(self.db, prefix + _U64.pack(after + 1), opts):
            return _U64.unpack_from(key, len(prefix))[0]
        return None

    def count_parked(self, lmq: str, group: str, message_group: str) -> int:
        return sum(1 for _ in self._prefix_keys(parked_prefix(lmq, group, message_group)))

    def _prefix_keys(self, prefix: bytes) -> Iterator[bytes]:
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_prefix_end(prefix))
        yield from rocks.keys(self.db, prefix, opts)

    # -- front-end metadata ------------------------------------------------------------

    def get_meta(self, key: str) -> bytes | None:
        return self.db.get(b"X" + key.encode())

    def iter_meta(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        raw_prefix = b"X" + prefix.encode()
        for key, value in self._prefix_items(raw_prefix):
            yield key[1:].decode(), value

    def _prefix_items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_prefix_end(prefix))
        yield from rocks.items(self.db, prefix, opts)

    def new_batch(self) -> StateBatch:
        return StateBatch(record=self.tap is not None)

    # -- a broker group (broker_core.replication) ----------------------------------------

    def snapshot(self) -> list[tuple[bytes, bytes]]:
        """Every key and value, for a slave that joins (a consistent point in time)."""
        return list(rocks.items(self.db, b"", ReadOptions()))

    def apply_replicated(self, ops: list[StateOp], wipe: bool) -> None:
        """A slave: apply changes its master shipped (after removing every key, for the
        first chunk of a snapshot)."""
        batch = StateBatch()
        if wipe:
            batch._delete_range(b"\x00", b"\xff" * 8)
        batch.apply(ops)
        self.write(batch, replicated=True)


#: A state change as shipped to a broker group's slaves: (PUT, key, value), (DELETE,
#: key, b"") or (DELETE_RANGE, start, end).
StateOp = tuple[int, bytes, bytes]
PUT, DELETE, DELETE_RANGE = 0, 1, 2


class StateBatch:
    __slots__ = ("wb", "empty", "ops")

    def __init__(self, record: bool = False) -> None:
        self.wb = WriteBatch(raw_mode=True)
        self.empty = True
        #: The batch's changes in order, kept when a broker group ships them
        #: (``ConsumerState.tap``); None otherwise.
        self.ops: list[StateOp] | None = [] if record else None

    def _put(self, key: bytes, value: bytes) -> None:
        self.wb.put(key, value)
        self.empty = False
        if self.ops is not None:
            self.ops.append((PUT, key, value))

    def _delete(self, key: bytes) -> None:
        self.wb.delete(key)
        self.empty = False
        if self.ops is not None:
            self.ops.append((DELETE, key, b""))

    def _delete_range(self, start: bytes, end: bytes) -> None:
        self.wb.delete_range(start, end)
        self.empty = False
        if self.ops is not None:
            self.ops.append((DELETE_RANGE, start, end))

    def apply(self, ops: list[StateOp]) -> None:
        """Add changes shipped from a master (``StateOp``)."""
        for kind, key, value in ops:
            if kind == PUT:
                self._put(key, value)
            elif kind == DELETE:
                self._delete(key)
            else:
                self._delete_range(key, value)

    def set_offset(self, lmq: str, group: str, offset: int) -> None:
        self._put(offset_key(lmq, group), _U64.pack(offset))

    def delete_offset(self, lmq: str, group: str) -> None:
        self._delete(offset_key(lmq, group))

    def put_inflight(self, key: InflightKey, deliveries: int, popped_ms: int) -> None:
        self._put(key.encode(), _INFLIGHT_VALUE.pack(deliveries, popped_ms))

    def delete_inflight(self, key: InflightKey) -> None:
        self._delete(key.encode())

    def put_retry(self, lmq: str, group: str, offset: int, deliveries: int) -> None:
        self._put(retry_prefix(lmq, group) + _U64.pack(offset), _DELIVERIES.pack(deliveries))

    def delete_retry(self, lmq: str, group: str, offset: int) -> None:
        self._delete(retry_prefix(lmq, group) + _U64.pack(offset))

    def put_fresh(self, prefix: bytes, first: int, count: int, popped_ms: int,
                  visible_at: int, bits: int) -> None:
        """``prefix`` = :func:`fresh_prefix` (lmq, group)."""
        self._put(prefix + _U64.pack(first),
                  _FRESH_HEAD.pack(count, popped_ms, visible_at)
                  + bits.to_bytes((count + 7) >> 3, "little"))

    def delete_fresh(self, prefix: bytes, first: int) -> None:
        self._delete(prefix + _U64.pack(first))

    def put_head(self, head: HeadRecord) -> None:
        self._put(head_prefix(head.lmq, head.group) + _U64.pack(head.offset),
                  _s16(head.message_group) + _HEAD_VALUE.pack(
                      head.deliveries, head.since_ms, head.ready_at, int(head.inflight)))

    def delete_head(self, lmq: str, group: str, offset: int) -> None:
        self._delete(head_prefix(lmq, group) + _U64.pack(offset))

    def put_parked(self, lmq: str, group: str, message_group: str, offset: int) -> None:
        self._put(parked_prefix(lmq, group, message_group) + _U64.pack(offset), b"")

    def delete_parked(self, lmq: str, group: str, message_group: str, offset: int) -> None:
        self._delete(parked_prefix(lmq, group, message_group) + _U64.pack(offset))

    def delete_lmq(self, lmq: str) -> None:
        """Every offset, retry, fresh and FIFO record of one LMQ (in-flight records are
        time-ordered: the caller deletes those one by one)."""
        for tag in (b"O", b"R", b"F", b"H", b"K"):
            prefix = tag + _s16(lmq)
            self._delete_range(prefix, _prefix_end(prefix))

    def put_meta(self, key: str, value: bytes) -> None:
        self._put(b"X" + key.encode(), value)

    def delete_meta(self, key: str) -> None:
        self._delete(b"X" + key.encode())
