"""Data cleaning (RIP-28): retention of the log, trimming the index, removing LMQs.

- **Retention** removes whole segments, oldest first: those whose last write (file mtime,
  as RocketMQ does) is older than ``retention_ms``, and more while the log is larger than
  ``retention_bytes``. The active segment is never removed. Then the index is trimmed:
  every LMQ drops its entries below the new log start and its ``min_offset`` moves up,
  and the key index drops the keys of the removed records. A segment holding a pending
  half message (:mod:`broker_core.transactions`) is never removed, nor any after it.
  One that only pending timers hold is freed by relocating their records to the log's
  end (:meth:`broker_core.timers.Timers.relocate_locked`, a page per pass), fsynced
  before the segment goes.
  Its ``next_offset`` never moves: cleaning never resets a live LMQ's offsets.
- **LMQ removal** (``MessageStore.remove_lmqs``; the idle TTL and ``lmq topics clean`` use it) first
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

from broker_core import clock
from broker_core.dispatch import Dispatcher
from broker_core.listeners import Listeners
from broker_core.lmq_table import LmqTable
from broker_core.parts import StoreParts
from broker_core.pop import PopConsumer
from broker_core.record import Message, RecordType
from broker_core.results import LmqInfo

_TRIM_CHUNK = 512
_REMOVE_CHUNK = 256


@dataclass(slots=True)
class RetentionReport:
    segments_removed: int = 0
    bytes_removed: int = 0
    log_min_position: int = 0
    entries_removed: int = 0
    timers_relocated: int = 0


def retain(parts: StoreParts, now_ms: int | None = None) -> RetentionReport:
    """Remove whole segments by age and size, then trim the index to the new log start."""
    cfg = parts.config
    now = time.time() * 1000 if now_ms is None else now_ms
    report = RetentionReport()
    log = parts.log
    with parts.locks.append:
        parts.locks.check_open()
        segments = log.segments()
        total = log.size_bytes
        keep_from = segments[-1]
        # never a segment holding a pending timer's record, or one fired within
        # retention_ms (broker_core.timers); a pending half message pins its segment
        # (and so every later one): its commit dispatches that record
        # (broker_core.transactions)
        timers = parts.timers
        held = timers.pending_floor()
        other = _lowest(timers.fired_floor(int(now)), parts.txns.oldest_pending())
        relocations = 0
        for seg in segments[:-1]:
            mtime_ms = os.stat(seg.path).st_mtime * 1000
            too_old = cfg.retention_ms > 0 and mtime_ms < now - cfg.retention_ms
            too_big = cfg.retention_bytes > 0 and total > cfg.retention_bytes
            if not (too_old or too_big) or (other is not None and seg.end > other):
                keep_from = seg
                break
            if held is not None and seg.end > held:
                # Retention pressure and only pending timers hold the segment: move
                # their records to the log's end (a page per pass, timers.relocate_locked)
                room = cfg.timer_page - relocations
                if room > 0:
                    relocations += timers.relocate_locked(seg.end, room, clock.now_ms())
                    held = timers.pending_floor()
                if held is not None and seg.end > held:
                    keep_from = seg
                    break
            total -= seg.size
        if relocations:
            # the copies are on disk before the segments holding the originals go
            log.sync()
        report.timers_relocated = relocations
        dropped = log.drop_before(keep_from)
        report.segments_removed = len(dropped)
        report.bytes_removed = sum(s.size for s in dropped)
        report.log_min_position = log.min_position
    if parts.lmqs.cleaned_to < log.min_position:
        report.entries_removed = trim_index(parts, log.min_position)
    return report


def _lowest(*floors: int | None) -> int | None:
    present = [f for f in floors if f is not None]
    return min(present) if present else None


def trim_index(parts: StoreParts, log_min: int) -> int:
    """Drop every index entry below ``log_min``; returns how many were dropped."""
    index, lmqs, lock = parts.index, parts.lmqs, parts.locks.append
    removed = 0
    candidates: list[int] = []
    for meta in index.iter_all_meta():
        if meta.next_offset > meta.min_offset and meta.min_position < log_min:
            candidates.append(meta.id)
    for start in range(0, len(candidates), _TRIM_CHUNK):
        with lock:
            batch = index.new_batch()
            for lmq_id in candidates[start : start + _TRIM_CHUNK]:
                stored = index.meta(lmq_id)
                if stored is None:
                    continue
                meta = lmqs.current(stored)
                new_min, new_pos, freed, count = meta.next_offset, log_min, 0, 0
                for entry in index.entries(meta.id, meta.min_offset, meta.next_offset):
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
    # the key index's entries of the removed records, before the checkpoint says done
    parts.keys.trim(log_min)
    parts.txns.trim(log_min)  # outcomes of the half messages removed
    parts.origins.trim(_min_offset_of(lmqs))  # translation keys of removed copies
    with lock:
        lmqs.cleaned_to = log_min
        batch = index.new_batch()
        batch.put_checkpoint(lmqs.checkpoint(parts.log.end))
        batch.commit()
    return removed


def _min_offset_of(lmqs: LmqTable) -> Callable[[int], int | None]:
    def min_offset(lmq_id: int) -> int | None:
        meta = lmqs.by_id(lmq_id)
        return None if meta is None else meta.min_offset

    return min_offset


@dataclass(slots=True)
class RemovalReport:
    lmqs: int = 0
    entries: int = 0
    bytes: int = 0
    offsets: int = 0
    names: list[str] = field(default_factory=list)


def remove(
    parts: StoreParts,
    dispatcher: Dispatcher,
    pop: PopConsumer,
    lookup: Callable[[str], LmqInfo | None],
    names: Iterable[str],
    progress: Callable[[int], None] | None = None,
) -> RemovalReport:
    """Remove LMQs (:meth:`MessageStore.remove_lmqs`): their entries, metadata, consumer
    offsets and pop state, on the parts of an open store. ``lookup`` is the store's LMQ
    lookup (unknown names are skipped); ``pop`` forgets removed in-flight records;
    ``progress(n)`` is called after each chunk of ``n`` removals."""
    report = RemovalReport()
    chunk: list[str] = []

    def run() -> None:
        infos = [i for i in (lookup(n) for n in chunk) if i is not None]
        if infos:
            _remove_chunk(parts, dispatcher, pop, infos, report)
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


def _remove_chunk(
    parts: StoreParts,
    dispatcher: Dispatcher,
    pop: PopConsumer,
    infos: list[LmqInfo],
    report: RemovalReport,
) -> None:
    names = [i.name for i in infos]
    state = parts.state
    with parts.locks.pop:
        with parts.locks.append:
            parts.locks.check_open()
            offsets = sum(1 for n in names for _ in state.offsets_of_lmq(n))
            dispatcher.write_locked([(Message(topic="", body=b""), names)], RecordType.LMQ_REMOVAL)
        doomed = set(names)
        batch = state.new_batch()
        for name in names:
            batch.delete_lmq(name)
        for item in state.all_inflight():
            if item.key.lmq in doomed:
                batch.delete_inflight(item.key)
                pop.forget(item.key)
        state.write(batch)
        pop.forget_lmqs(names)
    report.lmqs += len(infos)
    report.entries += sum(i.messages for i in infos)
    report.bytes += sum(i.bytes for i in infos)
    report.offsets += offsets
    report.names.extend(names)


def idle(
    infos: Iterable[LmqInfo], listeners: Listeners, idle_ms: int, now_ms: int | None = None
) -> list[LmqInfo]:
    """Those of ``infos`` with no write and no offset commit for ``idle_ms`` and nobody
    listening (:meth:`MessageStore.idle_lmqs`)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - idle_ms
    return [
        info
        for info in infos
        if max(info.last_write_ms, info.touched_ms, info.created_ms) < cutoff
        and not listeners.has(info.name)
    ]
