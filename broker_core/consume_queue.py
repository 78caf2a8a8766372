"""The consume-queue index: the only module that knows the index RocksDB's layout.

The index is derived data: every key below can be rebuilt by replaying the commit log
(:mod:`broker_core.recovery`). It lives in ``<data-dir>/index/`` (one RocksDB, default
column family) and holds, for millions of LMQs, no file and no open handle per LMQ.

Keys and values (all integers big-endian, fixed width, so one LMQ's entries are one
contiguous key range and sort by offset)::

    entry   b"E" | lmq_id u64 | offset u64   ->  position u64 | record_size u32 |
                                                 body_size u32 | tag_hash u64 | store_ms u64
    meta    b"M" | lmq_id u64                ->  next_offset u64 | min_offset u64 |
                                                 bytes u64 | created_ms u64 |
                                                 last_write_ms u64 | touched_ms u64 |
                                                 min_position u64 | name (UTF-8, rest)
    name    b"N" | name (UTF-8)              ->  lmq_id u64
    checkpoint b"C"                          ->  dispatched_to u64 | next_id u64 |
                                                 cleaned_to u64

- ``next_offset`` is the offset the next message dispatched to the LMQ gets (the LMQ's
  max offset, exclusive); ``min_offset`` the lowest offset still held. Both only grow.
- ``bytes`` is the sum of the body sizes held; ``min_position`` the log position of the
  entry at ``min_offset`` (lets retention skip LMQs with nothing to drop).
- ``touched_ms`` is the last consumer activity (offset commit), used by the idle TTL.
- ``dispatched_to`` is the log position up to which every record is in the index; it is
  written in the same WriteBatch as the entries it covers, so after a crash the index is
  exactly "everything before ``dispatched_to``". ``cleaned_to`` is the log start the
  index was last trimmed to by retention.

Thread safety: RocksDB is thread-safe; the callers serialise writers (the store's
append lock).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, cast

from rocksdict import AccessType, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from broker_core import rocks
from broker_core.errors import StorageFull, is_disk_full
from broker_core.record import dispatch_name

ENTRY = struct.Struct(">QIIQQ")
_ENTRY_SPAN = struct.Struct(">QII")  # an entry's position, record size and body size
META = struct.Struct(">QQQQQQQ")
CHECKPOINT = struct.Struct(">QQQ")
_ID = struct.Struct(">Q")
_ENTRY_KEY = struct.Struct(">cQQ")
_OFFSET_UNPACK = _ID.unpack_from  # the offset in an entry key, at byte 9
_META_KEY = struct.Struct(">cQ")
_DISPATCH_ONE = struct.pack(">I", 1)  # the count of a one-LMQ dispatch list (record.py)
_CHECKPOINT_KEY = b"C"


def entry_key(lmq_id: int, offset: int) -> bytes:
    return _ENTRY_KEY.pack(b"E", lmq_id, offset)


def meta_key(lmq_id: int) -> bytes:
    return _META_KEY.pack(b"M", lmq_id)


def name_key(raw_name: bytes) -> bytes:
    return b"N" + raw_name


class IndexEntry(NamedTuple):
    """One index entry. A NamedTuple: one is built per entry read (a frozen dataclass
    costs about a microsecond more to build)."""

    offset: int
    position: int
    record_size: int
    body_size: int
    tag_hash: int
    store_ms: int


#: ``bytes`` inside LmqMeta's body is its byte-count field, not the type.
_bytes = bytes


@dataclass(slots=True)
class LmqMeta:
    """What the index knows of one LMQ (mutable: the dispatcher updates it in place)."""

    id: int
    name: str
    next_offset: int = 0
    min_offset: int = 0
    bytes: int = 0
    created_ms: int = 0
    last_write_ms: int = 0
    touched_ms: int = 0
    min_position: int = 0
    #: Not stored: the LMQ's entry-key prefix and its name as written in dispatch lists,
    #: computed once per cached LMQ so the append path does not redo them per message.
    key_prefix: _bytes = field(default=b"", compare=False, repr=False)
    wire: _bytes = field(default=b"", compare=False, repr=False)
    #: A dispatch list naming only this LMQ, up to its offset (count 1 + ``wire``).
    wire1: _bytes = field(default=b"", compare=False, repr=False)
    #: The key of this record itself (:func:`meta_key`) and the name as UTF-8.
    meta_key: _bytes = field(default=b"", compare=False, repr=False)
    raw_name: _bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        self.key_prefix = _META_KEY.pack(b"E", self.id)
        self.raw_name = raw = self.name.encode()
        self.wire = dispatch_name(raw)
        self.wire1 = _DISPATCH_ONE + self.wire
        self.meta_key = _META_KEY.pack(b"M", self.id)

    @property
    def count(self) -> int:
        return self.next_offset - self.min_offset

    def encode(self) -> _bytes:
        return (
            META.pack(
                self.next_offset,
                self.min_offset,
                self.bytes,
                self.created_ms,
                self.last_write_ms,
                self.touched_ms,
                self.min_position,
            )
            + self.raw_name
        )

    @classmethod
    def decode(cls, lmq_id: int, raw: _bytes) -> LmqMeta:
        next_offset, min_offset, nbytes, created, written, touched, min_position = (
            META.unpack_from(raw, 0)
        )
        return cls(lmq_id, raw[META.size :].decode(), next_offset, min_offset, nbytes,
                   created, written, touched, min_position)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    dispatched_to: int = 0
    next_id: int = 1
    cleaned_to: int = 0


#: RocksDB memtable size of the index and state databases.
WRITE_BUFFER_BYTES = 16 * 1024 * 1024


def _db_options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_background_jobs(2)
    # A bounded table cache: RocksDB's own file count stays small and does not depend on
    # the number of LMQs (which never map to files at all).
    opts.set_max_open_files(256)
    opts.set_keep_log_file_num(2)
    # The memtable is the one part of RocksDB's memory that grows with writes (an index
    # entry is ~80 bytes there): RocksDB's 64 MiB default (x2 while one flushes) let a
    # 1M-message backlog add ~70 MB of RSS. 16 MiB bounds that at a few more, smaller
    # flushes (docs/benchmarks-peers.md, backlog).
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    return opts


class ConsumeQueueIndex:
    """The index RocksDB. Writes go through :class:`IndexBatch`."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = path
        self._failed = False
        if read_only:
            # A snapshot as of opening; takes no lock, so it works beside a running gateway.
            access = AccessType.read_only()
            self.db = Rdict(str(path), options=Options(raw_mode=True), access_type=access)
        else:
            path.mkdir(parents=True, exist_ok=True)
            self.db = Rdict(str(path), options=_db_options())
        self._write_opts = WriteOptions()

    def write(self, wb: WriteBatch) -> None:
        """Apply a batch. A full disk raises :class:`StorageFull` (nothing applied); as
        RocksDB then refuses every write until it is reopened, the next write reopens it
        first (and raises StorageFull again while there is still no space)."""
        if self._failed:
            self._reopen()
        try:
            self.db.write(wb, self._write_opts)
        except Exception as exc:
            if is_disk_full(exc):
                self._failed = True
                raise StorageFull(f"no space left writing the index: {exc}") from exc
            raise

    def _reopen(self) -> None:
        try:
            self.db.close()
        except Exception:  # a DB in its error state may refuse a clean close
            pass
        try:
            self.db = Rdict(str(self.path), options=_db_options())
        except Exception as exc:
            if is_disk_full(exc):
                raise StorageFull(f"no space left reopening the index: {exc}") from exc
            raise
        self._failed = False

    @staticmethod
    def destroy(path: Path) -> None:
        if path.exists():
            shutil.rmtree(path)

    def reset(self) -> None:
        """Drop every key: the index is deleted and created empty in place (a rebuild
        from the log follows). Holders of this object keep using it."""
        self.db.close()
        self.destroy(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.db = Rdict(str(self.path), options=_db_options())
        self._failed = False

    def close(self) -> None:
        self.db.close()

    def flush(self) -> None:
        self.db.flush_wal(True)

    # -- checkpoint --------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint | None:
        raw = self.db.get(_CHECKPOINT_KEY)
        if raw is None:
            return None
        return Checkpoint(*CHECKPOINT.unpack(raw))

    # -- LMQ lookups -------------------------------------------------------------------

    def lookup_id(self, raw_name: bytes) -> int | None:
        raw = self.db.get(name_key(raw_name))
        return None if raw is None else _ID.unpack(raw)[0]

    def meta(self, lmq_id: int) -> LmqMeta | None:
        raw = self.db.get(meta_key(lmq_id))
        return None if raw is None else LmqMeta.decode(lmq_id, raw)

    def meta_by_name(self, name: str) -> LmqMeta | None:
        lmq_id = self.lookup_id(name.encode())
        return None if lmq_id is None else self.meta(lmq_id)

    def iter_meta(self, prefix: str = "", after: str = "") -> Iterator[LmqMeta]:
        """Every LMQ (optionally those whose name starts with ``prefix``, and those
        named after ``after``), by name: a seek, not a scan from the first."""
        start = name_key(prefix.encode())
        if after:
            start = max(start, name_key(after.encode() + b"\x00"))
        opts = ReadOptions()
        opts.set_iterate_upper_bound(b"O")  # just past the "N" key space
        for key, value in rocks.items(self.db, start, opts):
            name = key[1:]
            if not name.startswith(prefix.encode()):
                break
            (lmq_id,) = _ID.unpack(value)
            meta = self.meta(lmq_id)
            if meta is not None:
                yield meta

    def iter_names(self, prefix: str = "", after: str = "") -> Iterator[str]:
        """The names :meth:`iter_meta` gives, read off the name keys alone (no lookup
        per LMQ): a filtered listing scans these and reads the metadata of its matches."""
        raw_prefix = prefix.encode()
        start = name_key(raw_prefix)
        if after:
            start = max(start, name_key(after.encode() + b"\x00"))
        opts = ReadOptions()
        opts.set_iterate_upper_bound(b"O")  # just past the "N" key space
        for key in rocks.keys(self.db, start, opts):
            name = key[1:]
            if not name.startswith(raw_prefix):
                break
            yield name.decode()

    def iter_all_meta(self) -> Iterator[LmqMeta]:
        """Every LMQ's meta, by id (a scan of the meta keys only)."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(b"N")  # the meta key space ends where names start
        for key, value in rocks.items(self.db, b"M", opts):
            yield LmqMeta.decode(_META_KEY.unpack(key)[1], value)

    def estimated_keys(self) -> int:
        """RocksDB's estimate of the number of keys (entries dominate)."""
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def count_lmqs(self) -> int:
        opts = ReadOptions()
        opts.set_iterate_upper_bound(b"N")
        return sum(1 for _ in rocks.keys(self.db, b"M", opts))

    # -- entries -----------------------------------------------------------------------

    def entries(self, lmq_id: int, start: int, stop: int) -> Iterator[IndexEntry]:
        """Entries of one LMQ with ``start <= offset < stop``, by offset."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(entry_key(lmq_id, stop))
        unpack_value = ENTRY.unpack
        make = IndexEntry._make
        for key, value in rocks.items(self.db, entry_key(lmq_id, start), opts):
            # the offset is the key's last 8 bytes (b"E" | lmq_id | offset)
            yield make((_OFFSET_UNPACK(key, 9)[0], *unpack_value(value)))

    def spans(
        self, lmq_id: int, start: int, stop: int, max_count: int
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """The first ``max_count`` entries of :meth:`entries` as four lists: offsets,
        positions, record sizes, body sizes. For a pull that reads every record: one
        loop, no generator step and no IndexEntry per entry."""
        offsets: list[int] = []
        positions: list[int] = []
        sizes: list[int] = []
        bodies: list[int] = []
        if max_count <= 0:
            return offsets, positions, sizes, bodies
        opts = ReadOptions()
        opts.set_iterate_upper_bound(entry_key(lmq_id, stop))
        unpack_span = _ENTRY_SPAN.unpack_from
        for key, value in rocks.items(self.db, entry_key(lmq_id, start), opts):
            offsets.append(_OFFSET_UNPACK(key, 9)[0])
            position, size, body = unpack_span(value)
            positions.append(position)
            sizes.append(size)
            bodies.append(body)
            if len(offsets) >= max_count:
                break
        return offsets, positions, sizes, bodies

    def entry(self, lmq_id: int, offset: int) -> IndexEntry | None:
        raw = self.db.get(entry_key(lmq_id, offset))
        return None if raw is None else IndexEntry(offset, *ENTRY.unpack(raw))

    def all_items(self) -> Iterator[tuple[bytes, bytes]]:
        return rocks.items(self.db)

    def new_batch(self) -> IndexBatch:
        return IndexBatch(self)


class IndexBatch:
    """One atomic RocksDB write: entries, metadata and the checkpoint together."""

    __slots__ = ("index", "wb", "puts")

    def __init__(self, index: ConsumeQueueIndex) -> None:
        self.index = index
        self.wb = WriteBatch(raw_mode=True)
        self.puts = 0

    def put_raw(self, key: bytes, value: bytes) -> None:
        """Hot path of :meth:`put_entry`: ``key`` = ``meta.key_prefix`` + offset (u64)
        and ``value`` packed with :data:`ENTRY`, once per message for all its LMQs."""
        self.wb.put(key, value)

    def raw_putter(self) -> Callable[[bytes, bytes], None]:
        """:meth:`put_raw` without the method call, for a loop over many entries."""
        return cast(Callable[[bytes, bytes], None], self.wb.put)

    def put_entry(
        self,
        lmq_id: int,
        offset: int,
        position: int,
        record_size: int,
        body_size: int,
        tag_hash: int,
        store_ms: int,
    ) -> None:
        self.wb.put(
            _ENTRY_KEY.pack(b"E", lmq_id, offset),
            ENTRY.pack(position, record_size, body_size, tag_hash, store_ms),
        )
        self.puts += 1

    def put_meta(self, meta: LmqMeta) -> None:
        self.wb.put(meta.meta_key, meta.encode())

    def put_name(self, raw_name: bytes, lmq_id: int) -> None:
        self.wb.put(name_key(raw_name), _ID.pack(lmq_id))

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.wb.put(
            _CHECKPOINT_KEY,
            CHECKPOINT.pack(checkpoint.dispatched_to, checkpoint.next_id, checkpoint.cleaned_to),
        )

    def delete_entries(self, lmq_id: int, start: int, stop: int) -> None:
        """Delete entries ``start <= offset < stop`` of one LMQ (a range delete)."""
        self.wb.delete_range(entry_key(lmq_id, start), entry_key(lmq_id, stop))

    def delete_lmq(self, meta: LmqMeta) -> None:
        self.wb.delete_range(entry_key(meta.id, 0), entry_key(meta.id + 1, 0))
        self.wb.delete(meta_key(meta.id))
        self.wb.delete(name_key(meta.name.encode()))

    def commit(self) -> None:
        self.index.write(self.wb)
