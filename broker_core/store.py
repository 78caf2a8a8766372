"""The message store: one commit log, atomic multi-dispatch into LMQs, pull and pop.

Theory of operation
-------------------
``append_batch`` takes the append lock and, for each message, assigns every target LMQ
its next offset, encodes the record with that dispatch list, and buffers it; then it
writes the buffered records to the commit log, and commits one RocksDB WriteBatch with
the index entries, the LMQs' metadata and the "dispatched up to" checkpoint. Only then
does it release the lock. So:

- offsets are dense and monotonic per LMQ (assigned under one lock, in log order);
- a reader sees a message in all of its LMQs or in none (one atomic WriteBatch);
- the log holds the dispatch list, so replaying it rebuilds the same index entries
  (see :mod:`broker_core.recovery`); the index is derived data.

An LMQ's dispatch state (id, next offset, ...) is cached in an LRU of
``lmq_cache_size`` entries; everything else lives in RocksDB, so memory does not grow
with the number of LMQs, and no file or handle exists per LMQ. The cache is trimmed only
after a batch is committed, so an evicted entry is always in RocksDB.

Thread safety: every public method may be called from any thread. Appends, LMQ
creation, retention and removal serialise on the append lock; pop, ack and revive on
the pop lock (taken before the append lock when both are needed); pulls take no lock.
Listener callbacks run on the appending thread after the lock is released: they must
be quick and must not block (an asyncio front end uses ``call_soon_threadsafe``).
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from struct import Struct
from typing import TYPE_CHECKING, NamedTuple

from broker_core.commit_log import CommitLog, SegmentGone
from broker_core.config import Durability, StoreConfig
from broker_core.consume_queue import (
    ENTRY,
    Checkpoint,
    ConsumeQueueIndex,
    IndexBatch,
    IndexEntry,
    LmqMeta,
)
from broker_core.consumer_state import ConsumerState
from broker_core.errors import (
    CorruptRecord,
    InvalidLmqName,
    MessageTooLarge,
    StoreClosed,
    StoreError,
    UnknownLmq,
)
from broker_core.group_commit import Flusher
from broker_core.record import (
    Message,
    PlainMessage,
    Record,
    RecordType,
    decode_plain,
    decode_record,
    encode_record_with_tail,
    record_of_message,
)

if TYPE_CHECKING:
    from broker_core.recovery import RecoveryReport

log = logging.getLogger(__name__)

Listener = Callable[[str, int], None]
_OFFSET = Struct(">Q")
_COUNT = Struct(">I")  # a dispatch list's count (broker_core.record)
#: Decoded records kept for readers at the tail (see MessageStore._read_entries).
_RECORD_CACHE = 4096
#: Entries of one generation of the hot tail (see MessageStore.pull): it holds between
#: this many and twice this many (plus one append batch) of the latest records.
_HOT_GENERATION = 8192


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def tag_hash(tag: str) -> int:
    """A stable 64-bit hash of a tag (0 = no tag), kept in index entries for filtering."""
    if not tag:
        return 0
    return int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "big") or 1


class AppendResult(NamedTuple):
    """Where an appended message went: its log position and its offset in each LMQ (in
    the order the LMQs were given). A NamedTuple: one is built per message."""

    position: int
    size: int
    store_ms: int
    offsets: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(slots=True, eq=True)
class StoredMessage:
    """A message read from one LMQ, at one offset. Treat it as immutable (not ``frozen``
    only because that makes one per delivery slower to build)."""

    lmq: str
    offset: int
    record: Record

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def body(self) -> bytes:
        return self.record.body


@dataclass(frozen=True, slots=True)
class PullResult:
    messages: list[StoredMessage]
    #: The offset to pull from next time.
    next_offset: int
    #: The LMQ's lowest held offset and its next (max, exclusive) offset at read time.
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class LmqInfo:
    id: int
    name: str
    min_offset: int
    max_offset: int
    messages: int
    bytes: int
    created_ms: int
    last_write_ms: int
    touched_ms: int

    @classmethod
    def of(cls, meta: LmqMeta) -> LmqInfo:
        return cls(
            meta.id,
            meta.name,
            meta.min_offset,
            meta.next_offset,
            meta.count,
            meta.bytes,
            meta.created_ms,
            meta.last_write_ms,
            meta.touched_ms,
        )


@dataclass(slots=True)
class _Pending:
    """Per-batch bookkeeping so a failed batch can be undone in memory."""

    metas: dict[int, LmqMeta] = field(default_factory=dict)
    start: int = 0
    next_id: int = 0


class MessageStore:
    """Open with :meth:`open`; close with :meth:`close` (or use as a context manager)."""

    def __init__(self, data_dir: Path, config: StoreConfig, *, read_only: bool = False) -> None:
        self.data_dir = data_dir
        self.config = config
        self.read_only = read_only
        self._lock = threading.RLock()
        self._pop_lock = threading.RLock()
        self._closed = False
        self._cache: OrderedDict[str, LmqMeta] = OrderedDict()
        self._records: dict[int, Record] = {}  # position -> decoded record, FIFO-bounded
        self._record_order: deque[int] = deque()  # its keys, oldest first
        #: (lmq, offset) -> record, for LMQs somebody listens to: a reader at the tail
        #: is served from memory, without the index, a read or a decode. Keyed by the
        #: LMQ's id, never reused for another LMQ in this process, so a removed LMQ's
        #: entries can simply age out (no scan at removal). Two generations: new
        #: records go to ``_hot``; when it holds ``_HOT_GENERATION`` it becomes
        #: ``_hot_old`` and the previous old one is dropped whole (one C-level free
        #: instead of an eviction per append).
        self._hot: dict[tuple[int, int], Record] = {}
        self._hot_old: dict[tuple[int, int], Record] = {}
        self._lmq_count_cache: tuple[float, int] | None = None
        #: Records whose CRC failed on read and were skipped (``on_corrupt = "skip"``).
        self.corrupt_reads = 0
        self._listeners: dict[str, list[Listener]] = {}
        self._listeners_lock = threading.Lock()
        self._lock_fd = -1
        if read_only:
            if not (data_dir / "commitlog").is_dir() or not (data_dir / "index").is_dir():
                raise StoreError(f"{data_dir} holds no store (no commitlog/ and index/)")
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                raise StoreError(
                    f"data directory {data_dir} is in use by another process"
                ) from None
        self.log = CommitLog(data_dir / "commitlog", config.segment_bytes, read_only)
        self.index = ConsumeQueueIndex(data_dir / "index", read_only)
        self.state = ConsumerState(
            data_dir / "state", sync=config.durability == Durability.SYNC, read_only=read_only
        )
        cp = self.index.checkpoint() or Checkpoint()
        self._next_id = cp.next_id
        self._cleaned_to = cp.cleaned_to
        self.flusher: Flusher | None = None
        #: What opening found and repaired (set by :meth:`open`).
        self.recovery: RecoveryReport | None = None
        from broker_core.pop import PopConsumer  # circular: pop uses the store

        self.pop_consumer = PopConsumer(self)

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls, data_dir: str | os.PathLike[str], config: StoreConfig | None = None
    ) -> MessageStore:
        """Open (creating if needed) and recover the store in ``data_dir``. The report of
        what recovery truncated and replayed is in ``store.recovery``."""
        from broker_core.recovery import recover

        store = cls(Path(data_dir), config or StoreConfig())
        try:
            store.recovery = recover(store)
        except BaseException:
            store._close_files()
            raise
        store.flusher = Flusher(
            store.log.sync,
            durable_on_write=store.config.durability == Durability.ASYNC,
            interval_s=store.config.flush_interval_ms / 1000,
        )
        return store

    @classmethod
    def open_read_only(
        cls, data_dir: str | os.PathLike[str], config: StoreConfig | None = None
    ) -> MessageStore:
        """Open a snapshot of the store for reading (stats, listing, verify), without
        recovery and without the directory lock, so it works beside a running gateway."""
        return cls(Path(data_dir), config or StoreConfig(), read_only=True)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._pop_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self.flusher is not None:
                self.flusher.close()
            if not self.read_only:
                try:
                    self.index.flush()
                except Exception as exc:
                    log.warning("flushing the index at close: %s", exc)
            self._close_files()

    def _close_files(self) -> None:
        """Close everything, even if one part refuses (a RocksDB in its error state
        after a full disk), so the same process can open the store again."""
        errors: list[BaseException] = []
        for close in (self.log.close, self.index.close, self.state.close):
            try:
                close()
            except Exception as exc:
                errors.append(exc)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        if errors:
            log.warning("closing the store: %s", errors[0])

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")
        if self.read_only:
            raise StoreError("the store was opened read-only")

    # -- LMQ state ---------------------------------------------------------------------

    def _validate_name(self, name: str) -> bytes:
        try:
            raw = name.encode()
        except UnicodeEncodeError:
            raise InvalidLmqName(f"LMQ name {name!r} is not valid UTF-8") from None
        if not raw:
            raise InvalidLmqName("an LMQ name must not be empty")
        if len(raw) > self.config.max_lmq_name_bytes:
            raise InvalidLmqName(
                f"LMQ name of {len(raw)} bytes exceeds {self.config.max_lmq_name_bytes}"
            )
        if b"\x00" in raw:
            raise InvalidLmqName(f"LMQ name {name!r} contains U+0000")
        return raw

    def _meta_for_write(self, name: str, now: int, batch: IndexBatch, pending: _Pending) -> LmqMeta:
        """The LMQ's cached state, loading or creating it. Append lock held. A created or
        loaded LMQ goes into ``pending.metas`` so a failed batch can forget it."""
        meta = self._cache.get(name)
        if meta is not None:
            self._cache.move_to_end(name)
            return meta
        raw = self._validate_name(name)
        lmq_id = self.index.lookup_id(raw)
        meta = self.index.meta(lmq_id) if lmq_id is not None else None
        if meta is None:
            meta = LmqMeta(self._next_id, name, created_ms=now, last_write_ms=now)
            self._next_id += 1
            batch.put_name(raw, meta.id)
        pending.metas[meta.id] = meta
        self._cache[name] = meta
        return meta

    def _trim_cache(self) -> None:
        excess = len(self._cache) - self.config.lmq_cache_size
        for _ in range(max(0, excess)):
            self._cache.popitem(last=False)

    def _meta_for_read(self, name: str) -> LmqMeta | None:
        meta = self._cache.get(name)
        if meta is not None:
            return meta
        return self.index.meta_by_name(name)

    # -- appending ---------------------------------------------------------------------

    def append(self, message: Message, lmqs: Sequence[str], *, wait: bool = True) -> AppendResult:
        """Append one message and dispatch it to ``lmqs``. See :meth:`append_batch`."""
        return self.append_batch([(message, lmqs)], wait=wait)[0]

    def append_batch(
        self, items: Sequence[tuple[Message, Sequence[str]]], *, wait: bool = True
    ) -> list[AppendResult]:
        """Append messages, each dispatched atomically to its LMQs, in one log write and
        one index write. With ``wait`` (the default) in sync durability this returns only
        after an fsync covers the batch; otherwise use :meth:`acknowledged` to learn when
        the batch may be acknowledged. Raises :class:`MessageTooLarge`,
        :class:`InvalidLmqName` or :class:`StorageFull` with nothing stored."""
        cfg = self.config
        max_body, max_fanout = cfg.max_message_bytes, cfg.max_fanout
        for message, lmqs in items:
            if len(message.body) > max_body or len(lmqs) > max_fanout:
                if len(message.body) > max_body:
                    raise MessageTooLarge(len(message.body), max_body)
                raise StoreError(
                    f"fan-out of {len(lmqs)} LMQs exceeds the maximum of {max_fanout}"
                )
        with self._lock:
            self._check_open()
            results, touched = self._write_locked(items)
        self._notify(touched)
        if wait and results and cfg.durability == Durability.SYNC:
            self.acknowledged(results[-1].end).result()
        return results

    def acknowledged(self, position: int) -> Future[int]:
        """A future done once an append ending at ``position`` may be acknowledged under
        the configured durability (immediately in async mode, after the covering fsync in
        sync mode)."""
        if self.flusher is None:
            raise StoreClosed("the store is not open for writing")
        return self.flusher.request(position)

    def _write_locked(
        self,
        items: Sequence[tuple[Message, Sequence[str]]],
        rtype: RecordType = RecordType.MESSAGE,
    ) -> tuple[list[AppendResult], list[LmqMeta]]:
        """Encode, write and index ``items``, records of type ``rtype``. Append lock held.
        This is the hot path: per message one encode, one log buffer append and one index
        value; per target LMQ one key and one WriteBatch put."""
        now = now_ms()
        log_ = self.log
        batch = self.index.new_batch()
        put = batch.wb.put
        pending = _Pending(start=log_.end, next_id=self._next_id)
        touched = pending.metas
        results: list[AppendResult] = []
        buf = bytearray()
        pos = log_.end
        seg_room = self.config.segment_bytes
        room = seg_room - log_.active_size  # what fits in the active segment
        cache = self._cache
        listened = self._listeners
        # the hot tail's young generation, filled as records are built (emptied if the
        # batch fails: it is a cache, and a failed batch's offsets are reused)
        hot = self._hot
        of_message = record_of_message
        pack_entry = ENTRY.pack
        pack_offset = _OFFSET.pack
        pack_count = _COUNT.pack
        encode = encode_record_with_tail
        new_result = tuple.__new__  # a NamedTuple's own __new__ is a Python lambda
        message_type = RecordType.MESSAGE
        is_message = rtype == message_type
        try:
            for message, lmqs in items:
                if is_message and len(lmqs) == 1:
                    # The common case (one subscription filter, one queue): no lists,
                    # one key. Same steps as the general path below.
                    name = lmqs[0]
                    meta = cache.get(name)
                    if meta is None:
                        meta = self._meta_for_write(name, now, batch, pending)
                    offset = meta.next_offset
                    record = encode(pos, now, message, meta.wire1 + pack_offset(offset), rtype)
                    size = len(record)
                    if len(buf) + size > room:
                        buf, room = self._room_for(buf, size, seg_room)
                    buf += record
                    if listened and name in listened:
                        hot[(meta.id, offset)] = of_message(
                            message, pos, size, now, ((name, offset),))
                    body = len(message.body)
                    put(
                        meta.key_prefix + pack_offset(offset),
                        pack_entry(
                            pos, size, body, tag_hash(message.tag) if message.tag else 0, now
                        ),
                    )
                    if offset == meta.min_offset:
                        meta.min_position = pos
                    meta.next_offset = offset + 1
                    meta.bytes += body
                    touched[meta.id] = meta
                    results.append(new_result(AppendResult, (pos, size, now, (offset,))))
                    pos += size
                    continue
                if len(set(lmqs)) != len(lmqs):
                    lmqs = list(dict.fromkeys(lmqs))
                # One pass over the targets: each LMQ's offset, its part of the dispatch
                # list (name, offset) and its index key share the packed offset.
                metas = []
                offsets = []
                keys = []
                parts = [pack_count(len(lmqs))]
                for name in lmqs:
                    meta = cache.get(name)
                    if meta is None:
                        meta = self._meta_for_write(name, now, batch, pending)
                    metas.append(meta)
                    offset = meta.next_offset
                    offsets.append(offset)
                    packed = pack_offset(offset)
                    parts.append(meta.wire)
                    parts.append(packed)
                    keys.append(meta.key_prefix + packed)
                record = encode(pos, now, message, b"".join(parts), rtype)
                size = len(record)
                if len(buf) + size > room:
                    buf, room = self._room_for(buf, size, seg_room)
                buf += record
                if is_message:
                    body = len(message.body)
                    thash = tag_hash(message.tag) if message.tag else 0
                    value = pack_entry(pos, size, body, thash, now)
                    shared: Record | None = None  # one hot-tail record for all its LMQs
                    for meta, key in zip(metas, keys, strict=True):
                        put(key, value)
                        offset = meta.next_offset
                        if listened and meta.name in listened:
                            if shared is None:
                                shared = of_message(
                                    message, pos, size, now, tuple(zip(lmqs, offsets, strict=True)))
                            hot[(meta.id, offset)] = shared
                        if offset == meta.min_offset:
                            meta.min_position = pos
                        meta.next_offset = offset + 1
                        meta.bytes += body
                        touched[meta.id] = meta
                else:
                    for meta in metas:
                        self._drop_lmq_locked(meta, batch)
                        touched.pop(meta.id, None)
                results.append(new_result(AppendResult, (pos, size, now, tuple(offsets))))
                pos += size
            if buf:
                log_.write(buf)
            move_to_end = cache.move_to_end
            for meta in touched.values():
                # LRU order and the write time, once per LMQ of the batch (not per message)
                meta.last_write_ms = now
                if meta.name in cache:
                    move_to_end(meta.name)
                batch.put_meta(meta)
            batch.put_checkpoint(Checkpoint(pos, self._next_id, self._cleaned_to))
            batch.commit()
        except BaseException:
            hot.clear()
            self._undo_locked(pending)
            raise
        self._trim_cache()
        if len(hot) >= _HOT_GENERATION:
            self._hot_old = hot
            self._hot = {}
        return results, list(touched.values())

    def _room_for(self, buf: bytearray, size: int, seg_room: int) -> tuple[bytearray, int]:
        """A record of ``size`` bytes does not fit behind ``buf`` in the active segment:
        write ``buf`` out, roll if need be; the new (empty) buffer and the room left."""
        if size > seg_room:
            raise MessageTooLarge(size, seg_room)
        log_ = self.log
        if buf:
            log_.write(buf)
            buf = bytearray()
        if not log_.fits(size):
            log_.roll()
        return buf, seg_room - log_.active_size

    def _undo_locked(self, pending: _Pending) -> None:
        """Forget in-memory changes of a failed batch and cut its records off the log."""
        for meta in pending.metas.values():
            self._cache.pop(meta.name, None)
        self._next_id = pending.next_id
        self._records.clear()  # positions past pending.start will be reused
        self._record_order.clear()
        if self.log.end > pending.start:
            try:
                self.log.truncate(pending.start)
            except OSError:
                log.exception("could not cut a failed batch off the log")

    def _drop_lmq_locked(self, meta: LmqMeta, batch: IndexBatch) -> None:
        batch.delete_lmq(meta)
        self._cache.pop(meta.name, None)

    def create_lmq(self, name: str) -> LmqInfo:
        """Make sure an LMQ exists (e.g. on subscribe) and return its info. An empty LMQ
        is index metadata only; a rebuild of the index from the log forgets it, and the
        front end that owns it declares it again."""
        with self._lock:
            self._check_open()
            existing = self._meta_for_read(name)
            if existing is not None:
                return LmqInfo.of(existing)
            batch = self.index.new_batch()
            pending = _Pending(start=self.log.end, next_id=self._next_id)
            try:
                meta = self._meta_for_write(name, now_ms(), batch, pending)
                meta.min_position = self.log.end
                batch.put_meta(meta)
                batch.put_checkpoint(Checkpoint(self.log.end, self._next_id, self._cleaned_to))
                batch.commit()
            except BaseException:
                self._undo_locked(pending)
                raise
            return LmqInfo.of(meta)

    # -- notification ------------------------------------------------------------------

    def add_listener(self, lmq: str, callback: Listener) -> Callable[[], None]:
        """Call ``callback(lmq, next_offset)`` whenever ``lmq`` gains entries (or, for pop
        groups, messages become visible again). Returns a function that removes it."""
        with self._listeners_lock:
            self._listeners.setdefault(lmq, []).append(callback)

        def remove() -> None:
            with self._listeners_lock:
                callbacks = self._listeners.get(lmq)
                if callbacks and callback in callbacks:
                    callbacks.remove(callback)
                    if not callbacks:
                        del self._listeners[lmq]

        return remove

    def has_listeners(self, lmq: str) -> bool:
        return lmq in self._listeners

    def _notify(self, metas: Iterable[LmqMeta]) -> None:
        listeners = self._listeners
        if not listeners:
            return
        get = listeners.get
        for meta in metas:
            callbacks = get(meta.name)
            if callbacks:
                if len(callbacks) == 1:  # the common case, without a copy of the list
                    try:
                        callbacks[0](meta.name, meta.next_offset)
                    except Exception:
                        log.exception("LMQ listener for %r failed", meta.name)
                else:
                    self._call_listeners(meta.name, meta.next_offset, callbacks)

    def notify(self, lmq: str) -> None:
        callbacks = self._listeners.get(lmq)
        if callbacks:
            meta = self._meta_for_read(lmq)
            self._call_listeners(lmq, meta.next_offset if meta else 0, callbacks)

    @staticmethod
    def _call_listeners(name: str, next_offset: int, callbacks: list[Listener]) -> None:
        for cb in list(callbacks):
            try:
                cb(name, next_offset)
            except Exception:
                log.exception("LMQ listener for %r failed", name)

    # -- reading -----------------------------------------------------------------------

    def lmq(self, name: str) -> LmqInfo | None:
        meta = self._meta_for_read(name)
        return None if meta is None else LmqInfo.of(meta)

    def lmq_by_id(self, lmq_id: int) -> LmqInfo | None:
        meta = self.index.meta(lmq_id)
        if meta is None:
            return None
        cached = self._cache.get(meta.name)
        return LmqInfo.of(cached if cached is not None else meta)

    def lmqs(self, prefix: str = "") -> Iterator[LmqInfo]:
        """Every LMQ whose name starts with ``prefix``, in name order."""
        for meta in self.index.iter_meta(prefix):
            cached = self._cache.get(meta.name)
            yield LmqInfo.of(cached if cached is not None else meta)

    def pull(
        self,
        lmq: str,
        offset: int,
        max_count: int = 32,
        max_bytes: int = 4 * 1024 * 1024,
        tag: str | None = None,
    ) -> PullResult:
        """Read up to ``max_count`` messages (and about ``max_bytes`` of bodies; at least
        one message is returned if any is there) from ``offset`` on. An offset below the
        LMQ's minimum starts at the minimum. With ``tag``, only messages with that tag are
        returned (``next_offset`` still moves past the others)."""
        lmq_id, start, min_offset, max_offset, done = self._pull_start(
            lmq, offset, max_count, max_bytes, tag is None)
        if done is not None:
            return done
        want_hash = tag_hash(tag) if tag else None
        # With a tag filter, look at more entries than we return, but bounded.
        scan_limit = max_count if want_hash is None else max(max_count * 16, 1024)
        next_offset = start
        if want_hash is None:  # the first max_count entries, without a loop in Python
            entries = list(
                itertools.islice(self.index.entries(lmq_id, start, max_offset), max_count)
            )
            if entries:
                next_offset = entries[-1].offset + 1
        else:
            entries = []
            for entry in self.index.entries(lmq_id, start, max_offset):
                next_offset = entry.offset + 1
                if entry.tag_hash == want_hash:
                    entries.append(entry)
                    if len(entries) >= max_count:
                        break
                scan_limit -= 1
                if scan_limit <= 0:
                    break
        messages: list[StoredMessage] = []
        budget = max_bytes
        for entry, record in zip(entries, self._read_entries(entries), strict=True):
            if record is None:  # its segment was removed by retention meanwhile
                continue
            if tag is not None and record.tag != tag:
                continue
            if messages and budget - entry.body_size < 0:
                next_offset = entry.offset
                break
            budget -= entry.body_size
            messages.append(StoredMessage(lmq, entry.offset, record))
        return PullResult(messages, next_offset, min_offset, max_offset)

    def pull_plain(
        self, lmq: str, offset: int, max_count: int = 32, max_bytes: int = 4 * 1024 * 1024
    ) -> PullResult:
        """:meth:`pull` (no tag filter) for a reader that passes messages on as they are
        stored (an MQTT subscriber): a *plain* record read from the log comes as a
        :class:`~broker_core.record.PlainMessage` (see
        :func:`~broker_core.record.decode_plain`: checked, not decoded in full), any
        other as a :class:`StoredMessage`, as do records found in the hot tail. Meant
        for backlogs, where each record is read once: the decoded-record cache is
        neither consulted nor filled. Corrupt records are handled as by :meth:`pull`
        (``on_corrupt``)."""
        lmq_id, start, min_offset, max_offset, done = self._pull_start(
            lmq, offset, max_count, max_bytes, True)
        if done is not None:
            return done
        offsets, positions, sizes, bodies = self.index.spans(lmq_id, start, max_offset, max_count)
        if not offsets:
            return PullResult([], start, min_offset, max_offset)
        next_offset = offsets[-1] + 1
        raws = self.log.read_each(positions, sizes)
        messages: list[StoredMessage | PlainMessage] = []
        append = messages.append
        budget = max_bytes
        for i, raw in enumerate(raws):
            if raw is None:  # its segment was removed by retention meanwhile
                continue
            body_size = bodies[i]
            if messages and budget - body_size < 0:
                next_offset = offsets[i]
                break
            position = positions[i]
            try:
                plain = decode_plain(raw, position, offsets[i])
                if plain is None:
                    record = decode_record(raw, position)
            except CorruptRecord as exc:
                if self.config.on_corrupt != "skip":
                    raise
                # reported, counted and stepped over; never served (as in _read_entries)
                self.corrupt_reads += 1
                log.error("corrupt record skipped: %s", exc, extra={"position": position})
                continue
            budget -= body_size
            append(plain if plain is not None else StoredMessage(lmq, offsets[i], record))
        return PullResult(messages, next_offset, min_offset, max_offset)  # type: ignore[arg-type]

    def _pull_start(
        self, lmq: str, offset: int, max_count: int, max_bytes: int, hot: bool
    ) -> tuple[int, int, int, int, PullResult | None]:
        """The start of :meth:`pull` and :meth:`pull_plain`: (LMQ id, first offset to
        read, the LMQ's min and max offsets, the result if the pull is answered
        already: nothing to read, or served from the hot tail when ``hot``)."""
        meta = self._cache.get(lmq)
        if meta is None:
            meta = self.index.meta_by_name(lmq)
            if meta is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
        lmq_id, min_offset, max_offset = meta.id, meta.min_offset, meta.next_offset
        start = max(offset, min_offset)
        if start >= max_offset or max_count <= 0:
            empty = PullResult([], max(start, min(offset, max_offset)), min_offset, max_offset)
            return lmq_id, start, min_offset, max_offset, empty
        if hot:
            key = (lmq_id, start)
            first = self._hot.get(key)
            if first is None:
                first = self._hot_old.get(key)
            if first is not None:
                found = self._pull_hot(lmq, lmq_id, start, max_count, max_bytes, first)
                served = PullResult(found, found[-1].offset + 1, min_offset, max_offset)
                return lmq_id, start, min_offset, max_offset, served
        return lmq_id, start, min_offset, max_offset, None

    def _pull_hot(
        self, lmq: str, lmq_id: int, start: int, max_count: int, max_bytes: int, first: Record
    ) -> list[StoredMessage]:
        """Consecutive records from ``start`` (whose record, ``first``, the caller found
        in the hot tail) that are still in the hot tail."""
        young = self._hot
        old = self._hot_old
        out = [StoredMessage(lmq, start, first)]
        budget = max_bytes - len(first.body)
        offset = start + 1
        while len(out) < max_count:
            key = (lmq_id, offset)
            record = young.get(key)
            if record is None:
                record = old.get(key)
                if record is None:
                    break
            size = len(record.body)
            if budget - size < 0:
                break
            budget -= size
            out.append(StoredMessage(lmq, offset, record))
            offset += 1
        return out

    def _read_entries(self, entries: Sequence[IndexEntry]) -> list[Record | None]:
        """Read the records of index entries, coalescing adjacent ones into one read.
        Recently read records come from a small cache of decoded records: many
        subscribers at the tail of one LMQ (or of LMQs sharing records) decode each
        record once."""
        out: list[Record | None] = []
        cache = self._records
        order = self._record_order
        read_raw = self.log.read_raw
        i, n = 0, len(entries)
        while i < n:
            first = entries[i]
            hit = cache.get(first.position)
            if hit is not None:
                out.append(hit)
                i += 1
                continue
            j, end = i + 1, first.position + first.record_size
            while j < n and entries[j].position == end and end - first.position < 1 << 20:
                end += entries[j].record_size
                j += 1
            try:
                raw = read_raw(first.position, end - first.position)
            except SegmentGone:
                out.extend([None] * (j - i))
                i = j
                continue
            off = 0
            for entry in entries[i:j]:
                try:
                    record = decode_record(
                        # a bytes copy of exactly the record: decode_record's fast case
                        raw if j - i == 1 else raw[off : off + entry.record_size],
                        entry.position,
                    )
                except CorruptRecord as exc:
                    if self.config.on_corrupt != "skip":
                        raise
                    # reported, counted and stepped over; never served
                    self.corrupt_reads += 1
                    log.error("corrupt record skipped: %s", exc, extra={"position": entry.position})
                    out.append(None)
                    off += entry.record_size
                    continue
                out.append(record)
                cache[entry.position] = record
                order.append(entry.position)
                off += entry.record_size
            i = j
        # oldest first, O(1) each: any iteration from the front of the dict would walk
        # over the slots every earlier eviction left there (as for the hot table)
        while len(order) > _RECORD_CACHE:
            cache.pop(order.popleft(), None)
        return out

    def read_at(self, lmq: str, offset: int) -> StoredMessage | None:
        meta = self._meta_for_read(lmq)
        if meta is None:
            raise UnknownLmq(f"no LMQ named {lmq!r}")
        entry = self.index.entry(meta.id, offset)
        if entry is None:
            return None
        try:
            record = self.log.read(entry.position, entry.record_size)
        except SegmentGone:
            return None
        return StoredMessage(lmq, offset, record)

    # -- consumer offsets --------------------------------------------------------------

    def get_offset(self, group: str, lmq: str) -> int | None:
        """The committed next offset of ``group`` (a consumer group or a session) on
        ``lmq``, or None if it never committed one."""
        return self.state.get_offset(lmq, group)

    def commit_offset(self, group: str, lmq: str, offset: int) -> None:
        """Commit ``group``'s next offset on ``lmq``. Also marks the LMQ as in use for
        the idle TTL."""
        if self.read_only:
            raise StoreError("the store was opened read-only")
        meta = self._meta_for_read(lmq)
        if meta is None:
            raise UnknownLmq(f"no LMQ named {lmq!r}")
        if offset < 0:
            raise ValueError("an offset cannot be negative")
        batch = self.state.new_batch()
        batch.set_offset(lmq, group, offset)
        self.state.write(batch)
        self._touch(meta)

    def delete_offsets(self, group: str, lmqs: Iterable[str]) -> None:
        """Forget ``group``'s offsets on ``lmqs`` (a session or consumer group ended)."""
        if self.read_only or self._closed:
            raise StoreError("the store is closed or read-only")
        batch = self.state.new_batch()
        for lmq in lmqs:
            batch.delete_offset(lmq, group)
        if not batch.empty:
            self.state.write(batch)

    def _touch(self, meta: LmqMeta) -> None:
        now = now_ms()
        if now - meta.touched_ms < 60_000:
            return
        with self._lock:
            current = self._cache.get(meta.name) or self.index.meta(meta.id)
            if current is None:
                return
            current.touched_ms = now
            batch = self.index.new_batch()
            batch.put_meta(current)
            batch.commit()

    def offsets(self, lmq: str | None = None) -> Iterator[tuple[str, str, int]]:
        """(lmq, group, offset) of committed offsets, of one LMQ or of all."""
        if lmq is not None:
            for group, offset in self.state.offsets_of_lmq(lmq):
                yield lmq, group, offset
        else:
            yield from self.state.all_offsets()

    # -- front-end metadata ------------------------------------------------------------

    def get_meta(self, key: str) -> bytes | None:
        """Front ends keep small durable state (sessions, retained messages, topology)
        in the state RocksDB under their own key prefix, as durable as offsets."""
        return self.state.get_meta(key)

    def iter_meta(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        return self.state.iter_meta(prefix)

    def put_meta(self, key: str, value: bytes) -> None:
        self.update_meta({key: value})

    def delete_meta(self, key: str) -> None:
        self.update_meta({key: None})

    def update_meta(self, changes: dict[str, bytes | None]) -> None:
        """Put (value) or delete (None) several metadata keys in one atomic write."""
        if self.read_only or self._closed:
            raise StoreError("the store is closed or read-only")
        batch = self.state.new_batch()
        for key, value in changes.items():
            if value is None:
                batch.delete_meta(key)
            else:
                batch.put_meta(key, value)
        self.state.write(batch)

    # -- pop (see broker_core.pop) -----------------------------------------------------

    def pop(self, group: str, lmq: str, max_messages: int, invisible_ms: int):  # type: ignore[no-untyped-def]
        return self.pop_consumer.pop(group, lmq, max_messages, invisible_ms)

    def ack(self, receipt: str) -> None:
        self.pop_consumer.ack(receipt)

    def ack_many(self, receipts: list[str]) -> None:
        """Ack receipts in one write; receipts no longer in flight are ignored."""
        self.pop_consumer.ack_many(receipts)

    def change_invisible_time(self, receipt: str, invisible_ms: int) -> str:
        return self.pop_consumer.change_invisible_time(receipt, invisible_ms)

    def requeue_many(self, receipts: list[str]) -> int:
        """Make the receipts' messages visible again now, in one write (receipts no
        longer in flight are ignored); listeners are notified."""
        return self.pop_consumer.requeue_many(receipts)

    def set_memory_inflight(self, group: str, enabled: bool = True) -> None:
        """Keep ``group``'s first deliveries in memory with one compact durable record
        per pop (see broker_core.pop). In memory: a front end sets it at start."""
        self.pop_consumer.set_memory_inflight(group, enabled)

    def revive(self, now: int | None = None) -> int:
        return self.pop_consumer.revive(now)

    def count_retries(self, group: str, lmq: str) -> int:
        """Messages of ``lmq`` popped by ``group`` that came back unacked and wait to be
        popped again."""
        return self.state.count_retries(lmq, group)

    def inflight_count(self, group: str, lmq: str | None = None) -> int:
        """Messages popped by ``group`` (of ``lmq``, or of every LMQ) not yet acked."""
        return sum(
            1
            for item in self.state.all_inflight()
            if item.key.group == group and (lmq is None or item.key.lmq == lmq)
        ) + sum(
            bin(bits).count("1")
            for name, g, _first, _count, _popped, _visible, bits in self.state.all_fresh()
            if g == group and (lmq is None or name == lmq)
        )

    def release_group(self, group: str) -> int:
        """Make every message ``group`` holds in flight visible again now (e.g. its
        consumers are gone after a restart). Returns how many."""
        return self.pop_consumer.release_group(group)

    def set_max_deliveries(self, group: str, limit: int | None) -> None:
        """Override ``max_deliveries`` for one pop group (0 = never dead-letter; None =
        the store's setting). In memory: a front end sets it at start."""
        self.pop_consumer.set_max_deliveries(group, limit)

    # -- housekeeping (see broker_core.cleanup and broker_core.recovery) ---------------

    def _lmq_count(self) -> int:
        """The number of LMQs, counted at most once a minute: counting is a scan of one
        key per LMQ, too slow to repeat on every /metrics scrape with millions."""
        now = time.monotonic()
        cached = self._lmq_count_cache
        if cached is None or now - cached[0] > 60.0:
            cached = self._lmq_count_cache = (now, self.index.count_lmqs())
        return cached[1]

    def stats(self) -> dict[str, int | float | str]:
        index_keys = self.index.db.property_int_value("rocksdb.estimate-num-keys") or 0
        return {
            "data_dir": str(self.data_dir),
            "durability": self.config.durability.value,
            "log_min_position": self.log.min_position,
            "log_end_position": self.log.end,
            "log_bytes": self.log.size_bytes,
            "segments": len(self.log.segments()),
            "lmqs": self._lmq_count(),
            "index_keys_estimate": int(index_keys),
            "index_disk_bytes": _du(self.data_dir / "index"),
            "state_disk_bytes": _du(self.data_dir / "state"),
            "cached_lmqs": len(self._cache),
        }


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total
