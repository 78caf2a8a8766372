"""Data cleaning (RIP-28): retention of the log, trimming the index, removing LMQs.

- **Retention** removes whole segments, oldest first: those whose last write (file mtime,
  as RocketMQ does) is older than ``retention_ms``, and more while the log is larger than
  ``retention_bytes``. The active segment is never removed. Then the index is trimmed:
  every LMQ drops its entries below the new log start and its ``min_offset`` moves up.
  Its ``next_offset`` never moves: cleaning never resets a live LMQ's offsets.
- **LMQ removal** (``remove_lmqs``; the idle TTL and ``lmq topics clean`` use it) first
  appends an LMQ-removal control record to the log, so a replay removes the same LMQs at
  the same point, then range-deletes the LMQ's index entries and metadata and its
  consumer offsets, retry and in-flight pop records.

Crash safety: segments are unlinked before the index is trimmed; a crash in between
leaves the checkpoint's ``cleaned_to`` behind the log start, and recovery finishes the
trim. A crash after the removal record and before the deletes is finished by recovery,
which replays the record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.consume_queue import Checkpoint, LmqMeta
from broker_core.record import Message, RecordType

if TYPE_CHECKING:
    from broker_core.store import LmqInfo, MessageStore

_TRIM_CHUNK = 512
_REMOVE_CHUNK = 256


@dataclass(slots=True)
class RetentionReport:
    segments_removed: int = 0
    bytes_removed: int = 0
    log_min_position: int = 0
    entries_removed: int = 0


def apply_retention(store: MessageStore, now_ms: int | None = None) -> RetentionReport:
    cfg = store.config
    now = time.time() * 1000 if now_ms is None else now_ms
    report = RetentionReport()
    with store._lock:
        store._check_open()
        log = store.log
        segments = log.segments()
        total = log.size_bytes
        keep_from = segments[-1]
        for seg in segments[:-1]:
            mtime_ms = os.stat(seg.path).st_mtime * 1000
            too_old = cfg.retention_ms > 0 and mtime_ms < now - cfg.retention_ms
            too_big = cfg.retention_bytes > 0 and total > cfg.retention_bytes
            if not (too_old or too_big):
                keep_from = seg
                break
            total -= seg.size
        dropped = log.drop_before(keep_from)
        report.segments_removed = len(dropped)
        report.bytes_removed = sum(s.size for s in dropped)
        report.log_min_position = log.min_position
    if store._cleaned_to < store.log.min_position:
        report.entries_removed = trim_index(store, store.log.min_position)
    return report


def trim_index(store: MessageStore, log_min: int) -> int:
    """Drop every index entry below ``log_min``; returns how many were dropped."""
    removed = 0
    candidates: list[int] = []
    for meta in _iter_all_meta(store):
        if meta.next_offset > meta.min_offset and meta.min_position < log_min:
            candidates.append(meta.id)
    for start in range(0, len(candidates), _TRIM_CHUNK):
        with store._lock:
            batch = store.index.new_batch()
            for lmq_id in candidates[start : start + _TRIM_CHUNK]:
                stored = store.index.meta(lmq_id)
                if stored is None:
                    continue
                meta = store._cache.get(stored.name) or stored
                new_min, new_pos, freed, count = meta.next_offset, log_min, 0, 0
                for entry in store.index.entries(meta.id, meta.min_offset, meta.next_offset):
                    if entry.position >= log_min:
                        new_min, new_pos = entry.offset, entry.position
                        break
                    freed += entry.body_size
                    count += 1
                if new_min == meta.min_offset:
                    continue
                batch.delete_entries(meta.id, meta.min_offset, new_min)
                meta.min_offset = new_min
                meta.min_position = new_pos
                meta.bytes = max(0, meta.bytes - freed)
                batch.put_meta(meta)
                removed += count
            batch.commit()
    with store._lock:
        store._cleaned_to = log_min
        batch = store.index.new_batch()
        batch.put_checkpoint(Checkpoint(store.log.end, store._next_id, log_min))
        batch.commit()
    return removed


def _iter_all_meta(store: MessageStore) -> Iterable[LmqMeta]:
    from rocksdict import ReadOptions

    opts = ReadOptions()
    opts.set_iterate_upper_bound(b"N")
    for key, value in store.index.db.items(from_key=b"M", read_opt=opts):
        yield LmqMeta.decode(int.from_bytes(key[1:9], "big"), value)


@dataclass(slots=True)
class RemovalReport:
    lmqs: int = 0
    entries: int = 0
    bytes: int = 0
    offsets: int = 0
    names: list[str] = field(default_factory=list)


def remove_lmqs(
    store: MessageStore,
    names: Iterable[str],
    progress: Callable[[int], None] | None = None,
) -> RemovalReport:
    """Remove LMQs: their entries, metadata, consumer offsets and pop state. Unknown
    names are ignored. ``progress(n)`` is called after each chunk of ``n`` removals."""
    report = RemovalReport()
    chunk: list[str] = []

    def run() -> None:
        infos = [i for i in (store.lmq(n) for n in chunk) if i is not None]
        if infos:
            _remove_chunk(store, infos, report)
        if progress is not None:
            progress(len(chunk))
        chunk.clear()

    for name in names:
        chunk.append(name)
        if len(chunk) >= _REMOVE_CHUNK:
            run()
    if chunk:
        run()
    return report


def _remove_chunk(store: MessageStore, infos: list[LmqInfo], report: RemovalReport) -> None:
    names = [i.name for i in infos]
    with store._pop_lock:
        with store._lock:
            store._check_open()
            offsets = sum(1 for n in names for _ in store.state.offsets_of_lmq(n))
            store._write_locked([(Message(topic="", body=b""), names)], RecordType.LMQ_REMOVAL)
        doomed = set(names)
        batch = store.state.new_batch()
        for name in names:
            batch.delete_lmq(name)
        for item in store.state.all_inflight():
            if item.key.lmq in doomed:
                batch.delete_inflight(item.key)
                store.pop_consumer.forget(item.key)
        store.state.write(batch)
    report.lmqs += len(infos)
    report.entries += sum(i.messages for i in infos)
    report.bytes += sum(i.bytes for i in infos)
    report.offsets += offsets
    report.names.extend(names)


def idle_lmqs(
    store: MessageStore, idle_ms: int, now_ms: int | None = None, prefix: str = ""
) -> list[LmqInfo]:
    """LMQs with no write and no offset commit for ``idle_ms`` and nobody listening."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - idle_ms
    return [
        info
        for info in store.lmqs(prefix)
        if max(info.last_write_ms, info.touched_ms, info.created_ms) < cutoff
        and not store.has_listeners(info.name)
    ]


def expire_idle_lmqs(store: MessageStore, now_ms: int | None = None) -> RemovalReport:
    """The idle TTL (``lmq_ttl_ms``): remove every LMQ idle for longer."""
    if store.config.lmq_ttl_ms <= 0:
        return RemovalReport()
    doomed = idle_lmqs(store, store.config.lmq_ttl_ms, now_ms)
    return remove_lmqs(store, [i.name for i in doomed])
