"""Opening a store after a clean stop or a crash, rebuilding the index, verifying.

Recovery runs in numbered passes:

1. **Segments.** The commit log's segments must be contiguous; a missing segment in the
   middle refuses the start (the data before and after it cannot be joined).
2. **Checkpoint.** The index's "dispatched up to" position says where replay starts. No
   index (lost or never written) or an index *ahead* of the log (the log lost its
   unsynced tail in a power loss) means a full rebuild: the index is dropped and the
   whole log replayed.
3. **Scan, skip or truncate.** Records from the checkpoint to the end are validated
   (magic, size, CRC32C, position). At an invalid one the scan looks for the next valid
   record (magic, CRC and stored position agreeing). If there is none, this is a torn
   tail: the log is cut there, later segments included, and the cut is reported. If
   there is one, this is damage, not a torn write, and ``StoreConfig.on_corrupt``
   decides: ``"refuse"`` fails the start with a :class:`StoreError` naming the segment,
   the position and the reason, leaving the log as it is; ``"skip"`` steps over the
   damaged bytes to that record, reports them (``RecoveryReport.skipped``) and logs them.
4. **Redispatch.** Valid records after the checkpoint are dispatched again, in batches
   that carry the checkpoint. Dispatch is idempotent: a replayed record produces the
   same keys and values it produced live, its key-index entries
   (:mod:`broker_core.key_index`) included.
5. **Trim.** If retention removed segments but the index was not yet trimmed to the new
   log start (a crash in between), the trim is finished.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from broker_core.cleanup import trim_index
from broker_core.clock import tag_hash
from broker_core.commit_log import CommitLog, ScanStop
from broker_core.consume_queue import Checkpoint, ConsumeQueueIndex, IndexBatch, LmqMeta
from broker_core.errors import StoreError
from broker_core.key_index import has_legacy_entries
from broker_core.lmq_table import Pending
from broker_core.origins import ORIGIN_PROPERTY
from broker_core.parts import StoreParts
from broker_core.record import Record, RecordType
from broker_core.timers import fire_entry_fields
from broker_core.transactions import control_half

log = logging.getLogger(__name__)

_REPLAY_BATCH = 2048


@dataclass(frozen=True, slots=True)
class SkippedRange:
    """Damaged bytes of the log that recovery (``on_corrupt = "skip"``) stepped over."""

    position: int  #: where the damage starts
    bytes: int  #: how many bytes up to the next valid record
    where: str  #: segment file and byte in it
    reason: str

    def describe(self) -> str:
        return (
            f"skipped {self.bytes} damaged bytes at {self.position} ({self.where}): {self.reason}"
        )


@dataclass(slots=True)
class RecoveryReport:
    replay_from: int = 0
    log_end: int = 0
    replayed_records: int = 0
    replayed_entries: int = 0
    truncated_bytes: int = 0
    truncated_at: int | None = None
    truncate_reason: str = ""
    index_rebuilt: bool = False
    rebuild_reason: str = ""
    trimmed_entries: int = 0
    #: Damage stepped over under ``on_corrupt = "skip"``, in log order.
    skipped: list[SkippedRange] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def skipped_bytes(self) -> int:
        return sum(r.bytes for r in self.skipped)

    def summary(self) -> str:
        parts = [f"replayed {self.replayed_records} records ({self.replayed_entries} entries)"]
        if self.index_rebuilt:
            parts.append(f"index rebuilt ({self.rebuild_reason})")
        if self.truncated_bytes:
            parts.append(
                f"truncated {self.truncated_bytes} bytes at {self.truncated_at}"
                f" ({self.truncate_reason})"
            )
        for skipped in self.skipped:
            parts.append(skipped.describe())
        if self.trimmed_entries:
            parts.append(f"trimmed {self.trimmed_entries} index entries below the log start")
        return "; ".join(parts) + f" in {self.seconds:.3f}s"


@dataclass(slots=True)
class _Replayer:
    """Dispatches replayed records into the index, in batches carrying the checkpoint."""

    parts: StoreParts
    remove_state: bool
    batch: IndexBatch | None = None
    dirty: dict[int, LmqMeta] = field(default_factory=dict)
    pending: int = 0
    records: int = 0
    entries: int = 0

    def replay(self, record: Record) -> None:
        parts = self.parts
        if self.batch is None:
            self.batch = parts.index.new_batch()
        batch = self.batch
        if record.type == RecordType.MESSAGE:
            thash = tag_hash(record.tag)
            body = len(record.body)
            if record.properties and parts.keys.properties:
                # the same puts the live append made (idempotent if they are there)
                parts.keys.put(
                    batch.put_raw, record.topic, record.properties, record.position,
                    record.store_ms, parts.log.segment_base(record.position),
                )
            if record.delayed:  # not dispatched: a timer (broker_core.timers)
                parts.timers.replay(batch, record)
            else:
                self._entries(
                    batch, record.dispatch, record.position, record.size, body, thash,
                    record.store_ms,
                )
                origin = record.properties.get(ORIGIN_PROPERTY) if record.properties else None
                if origin is not None:  # a copy: its mark and translation keys, as live
                    cache = parts.lmqs.cache
                    parts.origins.stage(
                        batch.put_raw, record.topic, origin, record.position,
                        [(cache[name].id, offset) for name, offset in record.dispatch
                         if name in cache],
                    )
        elif record.type == RecordType.ORIGIN_ADVANCE:
            parts.origins.stage(batch.put_raw, record.topic, record.body, record.position)
        elif record.type in (RecordType.TIMER_FIRE, RecordType.TIMER_CHANGE):
            # the timer index, and a fire's entries pointing at the delayed record
            parts.timers.replay(batch, record)
            if record.type == RecordType.TIMER_FIRE:
                self._entries(
                    batch, record.dispatch, *fire_entry_fields(record), record.store_ms
                )
        elif record.type == RecordType.LMQ_REMOVAL:
            for name, _ in record.dispatch:
                raw = name.encode()
                cached = parts.lmqs.forget(name)
                lmq_id = cached.id if cached else parts.index.lookup_id(raw)
                if lmq_id is not None:
                    meta = cached or parts.index.meta(lmq_id) or LmqMeta(lmq_id, name)
                    batch.delete_lmq(meta)  # applies after this batch's earlier puts
                    self.dirty.pop(lmq_id, None)
                if self.remove_state:
                    sbatch = parts.state.new_batch()
                    sbatch.delete_lmq(name)
                    parts.state.write(sbatch)
            # Commit now: a later record may create an LMQ of the same name afresh, and
            # its lookup must not find the one removed here.
            self.records += 1
            self.flush(record.next_position)
            return
        elif record.type in (RecordType.TXN_HALF, RecordType.TXN_CONTROL):
            # transactions: the table's keys go into this batch; a commit (or dead
            # letter) puts the entries of its dispatch list, pointing at the half record
            if record.type == RecordType.TXN_HALF and record.properties and (
                parts.keys.properties
            ):  # a half's keys, as the live append put them
                parts.keys.put(
                    batch.put_raw, record.topic, record.properties, record.position,
                    record.store_ms, parts.log.segment_base(record.position),
                )
            half = parts.txns.apply(record, batch)
            if half is not None:
                self._entries(
                    batch, record.dispatch, half.position, half.size, half.body_size,
                    half.tag_hash, record.store_ms,
                )
        self.records += 1
        self.pending += 1
        if self.pending >= _REPLAY_BATCH:
            self.flush(record.next_position)

    def _entries(
        self,
        batch: IndexBatch,
        dispatch: tuple[tuple[str, int], ...],
        position: int,
        size: int,
        body: int,
        thash: int,
        store_ms: int,
    ) -> None:
        """Put the index entries of one dispatch list, each pointing at the record at
        ``position`` (skipping those already in the index: replay is idempotent)."""
        parts = self.parts
        pending = Pending()
        for name, offset in dispatch:
            meta = parts.lmqs.meta_for_write(name, store_ms, batch, pending)
            if meta.next_offset > offset:
                continue  # already in the index (replay is idempotent)
            if meta.next_offset == meta.min_offset:
                meta.min_position = position
                meta.min_offset = offset  # an LMQ first seen mid-log starts here
            batch.put_entry(meta.id, offset, position, size, body, thash, store_ms)
            meta.next_offset = offset + 1
            meta.bytes += body
            meta.last_write_ms = max(meta.last_write_ms, store_ms)
            self.dirty[meta.id] = meta
            self.entries += 1

    def flush(self, dispatched_to: int) -> None:
        lmqs = self.parts.lmqs
        if self.batch is None:
            self.batch = self.parts.index.new_batch()
        for meta in self.dirty.values():
            self.batch.put_meta(meta)
        self.parts.timers.flush_counts(self.batch)
        self.parts.origins.write_marks(self.batch.put_raw)
        self.batch.put_checkpoint(lmqs.checkpoint(dispatched_to))
        try:
            self.batch.commit()
        except BaseException:
            self.parts.origins.discard()
            raise
        self.parts.origins.commit()
        self.batch = None
        self.dirty.clear()
        self.pending = 0
        lmqs.trim()


def recover(parts: StoreParts) -> RecoveryReport:
    """Bring the index up to the log (the passes of the module docstring) when a store
    is opened for writing; returns what was found and repaired."""
    started = time.perf_counter()
    report = RecoveryReport()
    clog = parts.log
    lmqs = parts.lmqs
    # Pass 1: segments.
    gaps = clog.gaps()
    if gaps:
        end, base = gaps[0]
        raise StoreError(
            f"commit log segment missing: one ends at {end} but the next starts at {base};"
            " restore the missing segment or move the later ones away"
        )
    # Pass 2: checkpoint. (The origins' marks are read first: a reset of the index
    # keeps them, broker_core.origins "Rebuild".)
    parts.origins.load()
    cp = parts.index.checkpoint()
    if cp is None:
        if clog.end > clog.min_position:
            _reset_index(parts, report, "no index checkpoint")
        cp = Checkpoint(clog.min_position, lmqs.next_id, clog.min_position)
    elif cp.dispatched_to > clog.end:
        _reset_index(parts, report, f"index ahead of the log ({cp.dispatched_to} > {clog.end})")
        cp = Checkpoint(clog.min_position, lmqs.next_id, clog.min_position)
    elif cp.dispatched_to < clog.min_position:
        _reset_index(parts, report, "index behind the log start")
        cp = Checkpoint(clog.min_position, lmqs.next_id, clog.min_position)
    elif has_legacy_entries(parts.index):
        _reset_index(parts, report, "key index in the layout before by-segment keys")
        cp = Checkpoint(clog.min_position, lmqs.next_id, clog.min_position)
    lmqs.cleaned_to = max(cp.cleaned_to, lmqs.cleaned_to)
    report.replay_from = cp.dispatched_to
    parts.txns.load()  # pending transactions as of the checkpoint; replay brings them on
    # Passes 3 and 4: scan, skip or truncate, redispatch.
    replayer = _Replayer(parts, remove_state=not report.index_rebuilt)
    position = cp.dispatched_to
    for item in clog.scan(cp.dispatched_to, skip_damage=True):
        if isinstance(item, ScanStop):
            if item.resume is None:  # nothing valid follows: a torn tail
                where = clog.locate(item.position)
                report.truncated_at = item.position
                report.truncate_reason = item.reason
                report.truncated_bytes = clog.truncate(item.position)
                if report.truncated_bytes:
                    log.warning(
                        "commit log: cut a torn tail of %d bytes at %d (%s): %s",
                        report.truncated_bytes,
                        item.position,
                        where,
                        item.reason,
                    )
                break
            _skip_or_refuse(parts, report, item)
            continue
        replayer.replay(item)
        position = item.next_position
    if replayer.pending or replayer.dirty or cp.dispatched_to != position:
        replayer.flush(position)
    report.replayed_records = replayer.records
    report.replayed_entries = replayer.entries
    report.log_end = clog.end
    # Pass 5: trim.
    if lmqs.cleaned_to < clog.min_position:
        report.trimmed_entries = trim_index(parts, clog.min_position)
    report.seconds = time.perf_counter() - started
    return report


def replay_records(parts: StoreParts, records: list[Record], end: int) -> int:
    """Dispatch ``records`` just written to the log (a slave's replicated chunk,
    :mod:`broker_core.replication`) as recovery's replay does, and move the checkpoint to
    ``end``; the caller holds the append lock. Returns the index entries made."""
    replayer = _Replayer(parts, remove_state=True)
    for record in records:
        replayer.replay(record)
    replayer.flush(end)
    return replayer.entries


def _skip_or_refuse(
    parts: StoreParts, report: RecoveryReport, stop: ScanStop, rebuilding: bool = False
) -> None:
    """Damage with a valid record (or, rebuilding, the log end) after it: record the skip
    under ``on_corrupt = "skip"``, otherwise refuse, saying what and what to do."""
    assert stop.resume is not None
    where = parts.log.locate(stop.position)
    skipped = SkippedRange(stop.position, stop.skipped, where, stop.reason)
    if parts.config.on_corrupt != "skip":
        damage = f"the commit log is damaged at {stop.position} ({where}): {stop.reason}"
        if rebuilding:
            raise StoreError(
                f"rebuilding the index: {damage}. The index was rebuilt up to there. Run"
                " `lmq store verify` to list the damage; to rebuild past it and lose the"
                ' messages in the damaged bytes, rebuild with on_corrupt = "skip".'
            )
        raise StoreError(
            f"opening the store: {damage}. Valid records follow {stop.skipped} bytes later"
            f" (at {stop.resume}), so this is not a torn write and was not cut off; the log"
            " is unchanged. Run `lmq store verify` to list the damage; to start anyway and"
            ' lose the messages in the damaged bytes, set on_corrupt = "skip" (the'
            " gateway's [store] on_corrupt)."
        )
    report.skipped.append(skipped)
    log.warning("commit log: %s; the records after it are kept", skipped.describe())


def _reset_index(parts: StoreParts, report: RecoveryReport, reason: str) -> None:
    parts.index.reset()
    batch = parts.index.new_batch()  # the marks the log may no longer hold, kept
    parts.origins.restore_after_reset(batch.put_raw, parts.log.end)
    batch.commit()
    parts.lmqs.reset(parts.log.min_position)
    parts.tail.clear_hot()  # keyed by LMQ ids, which the rebuild assigns anew
    parts.timers.load()  # the timer index went with the index; the replay refills it
    parts.txns.clear()  # its keys were in the index; the replay puts them back
    report.index_rebuilt = True
    report.rebuild_reason = reason


def rebuild(parts: StoreParts) -> RecoveryReport:
    """Drop the index and rebuild it from the log alone (:meth:`MessageStore.
    rebuild_index`, ``lmq store rebuild-index``), on the parts of an open store; takes
    both locks. Consumer offsets and pop state are kept: they are keyed by LMQ name."""
    started = time.perf_counter()
    report = RecoveryReport()
    clog = parts.log
    with parts.locks.pop, parts.locks.append:
        parts.locks.check_open()
        _reset_index(parts, report, "requested")
        replayer = _Replayer(parts, remove_state=False)
        position = clog.min_position
        report.replay_from = position
        for item in clog.scan(skip_damage=True):
            if isinstance(item, ScanStop):
                resume = clog.end if item.resume is None else item.resume
                if item.resume is None:
                    # Damage with nothing valid after it. Not cut off here: the records
                    # are old and acknowledged, and this is a repair command.
                    item = ScanStop(item.position, item.reason, False, resume)
                try:
                    _skip_or_refuse(parts, report, item, rebuilding=True)
                except StoreError:
                    replayer.flush(position)
                    raise
                position = resume
                continue
            replayer.replay(item)
            position = item.next_position
        replayer.flush(position)
        report.replayed_records = replayer.records
        report.replayed_entries = replayer.entries
        report.log_end = clog.end
    report.seconds = time.perf_counter() - started
    return report


@dataclass(slots=True)
class VerifyReport:
    records: int = 0
    bytes: int = 0
    entries_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_log(
    clog: CommitLog, index: ConsumeQueueIndex, check_index: bool = True, max_problems: int = 100,
    report: VerifyReport | None = None,
) -> VerifyReport:
    """Check every record of the log (magic, size, CRC, position) and, with
    ``check_index``, that each dispatch pair of a live LMQ is in the index at the same
    position. Two passes: the first also finds where each LMQ was last removed, so that
    records of an earlier incarnation of a name are not held against the current one.
    ``report``: fill this one (another thread may read its counts as they grow)."""
    report = report if report is not None else VerifyReport()

    def problem(text: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(text)

    removed_at: dict[str, int] = {}
    end = clog.min_position
    for item in clog.scan(skip_damage=True):
        if isinstance(item, ScanStop):
            where = clog.locate(item.position)
            if item.resume is None:
                problem(f"log stops at {item.position} ({where}): {item.reason}")
                break
            problem(
                f"damaged bytes at {item.position} ({where}): {item.reason};"
                f" {item.skipped} bytes up to the next valid record at {item.resume}"
            )
            continue
        report.records += 1
        report.bytes += item.size
        end = item.next_position
        if item.type == RecordType.LMQ_REMOVAL:
            for name, _ in item.dispatch:
                removed_at[name] = item.position
    cp = index.checkpoint()
    dispatched_to = cp.dispatched_to if cp else clog.min_position
    if dispatched_to > clog.end:
        problem(f"index checkpoint {dispatched_to} is past the log end {clog.end}")
    if not check_index:
        return report
    ids: dict[str, int | None] = {}
    for item in clog.scan(end=min(end, dispatched_to), skip_damage=True):
        if isinstance(item, ScanStop) or item.delayed:
            continue  # a delayed record's list names targets and due times, not entries
        if item.type == RecordType.MESSAGE:
            target = item.position
        elif item.type == RecordType.TIMER_FIRE:
            target = fire_entry_fields(item)[0]  # a fire's entries point at the delayed record
        elif item.type == RecordType.TXN_CONTROL and item.dispatch:
            target = control_half(item)  # a commit's entries point at its half record
        else:
            continue
        for name, offset in item.dispatch:
            if removed_at.get(name, -1) > item.position:
                continue  # an incarnation of this name that was removed since
            if name not in ids:
                if len(ids) > 100_000:
                    ids.clear()
                ids[name] = index.lookup_id(name.encode())
            lmq_id = ids[name]
            if lmq_id is None:
                problem(f"LMQ {name!r} of the record at {item.position} is not in the index")
                continue
            entry = index.entry(lmq_id, offset)
            report.entries_checked += 1
            if entry is None:
                meta = index.meta(lmq_id)
                if meta is not None and meta.min_offset <= offset < meta.next_offset:
                    problem(f"index entry missing: {name!r} offset {offset}")
            elif entry.position != target:
                problem(
                    f"index entry {name!r} offset {offset} points at {entry.position},"
                    f" the log has it at {target}"
                )
    return report
