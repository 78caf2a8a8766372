"""The store's side of a broker group (docs/replication.md): the epoch history kept
with the log, the write fence of a member that is not the master, the records a master
serves to its slaves, and a slave's apply and truncation.

- **Epoch history** (``<data-dir>/epochs``): ``(epoch, start)`` entries, one per master
  epoch this log holds records of (RocketMQ's EpochFile). A text file, rewritten whole
  by a rename (``LMQ-EPOCHS 1`` and then one ``epoch start`` line per entry); entries
  starting past the log's end are dropped when it is loaded (a log cut by a crash).
- **Fence.** On a slave (and a master that lost its lease) :attr:`CommitLog.fence` is
  set: every write of the store's own paths raises :class:`NotMaster` before anything is
  written; only :meth:`Replica.apply` writes, with ``replicated=True``.
- **Serving** (:meth:`Replica.chunk`): the bytes of whole records from a position, never
  across the start of another epoch, so a slave knows which epoch wrote each chunk.
- **Apply** (:meth:`Replica.apply`): a slave checks every record (magic, size, CRC32C,
  its stored position equal to where it lands), writes them at the same positions, and
  dispatches them with recovery's replay (``broker_core.recovery.replay_records``):
  the same keys a replay after a crash makes, so every derived index is the master's.
- **Consumer state** (offsets, pop and FIFO state, front-end metadata: everything of
  ``state/``, which the log cannot rebuild) is shipped beside the log: a master's
  :class:`~broker_core.consumer_state.ConsumerState` hands every written batch's
  changes to a tap (:meth:`Replica.ship_state`); a slave applies them
  (:meth:`Replica.apply_state`), after a snapshot when it joins. The fence covers the
  state too: a slave's own paths write none of it.
- **Truncate** (:meth:`Replica.truncate`): a returning member cuts its log where the
  master's history says they part; the index is rebuilt from the log when it had
  dispatched past the cut.

Thread safety: every method takes the store's append lock (truncate both locks).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from broker_core import cleanup, recovery
from broker_core.commit_log import fsync_dir
from broker_core.consumer_state import PUT, StateOp
from broker_core.errors import CorruptRecord, InsufficientData, NotMaster, StoreError
from broker_core.parts import StoreParts
from broker_core.record import decode_record, peek_size

__all__ = ["PUT", "Epoch", "Replica", "StateOp", "load_epochs", "save_epochs"]

log = logging.getLogger(__name__)

EPOCHS_FILE = "epochs"
_HEADER = "LMQ-EPOCHS 1"


class Epoch(NamedTuple):
    epoch: int
    start: int


def load_epochs(data_dir: Path, log_end: int) -> list[Epoch]:
    """The epoch history of the store in ``data_dir`` (empty when it has none)."""
    path = data_dir / EPOCHS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if not lines or lines[0] != _HEADER:
        raise StoreError(f"{path}: not an epoch history (first line {lines[:1]})")
    out: list[Epoch] = []
    for n, line in enumerate(lines[1:], 2):
        try:
            epoch, start = (int(x) for x in line.split())
        except ValueError:
            raise StoreError(f"{path}: line {n}: expected 'epoch start', got {line!r}") from None
        if out and (epoch <= out[-1].epoch or start < out[-1].start):
            raise StoreError(f"{path}: line {n}: entries out of order")
        out.append(Epoch(epoch, start))
    return [e for e in out if e.start <= log_end]


def save_epochs(data_dir: Path, entries: list[Epoch]) -> None:
    path = data_dir / EPOCHS_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join([_HEADER, *(f"{e.epoch} {e.start}" for e in entries)]) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(data_dir)


class Replica:
    """The replication operations of one open store (``store.replica``), handed the
    store's parts (as recovery and cleanup are) and its directory."""

    def __init__(self, parts: StoreParts, data_dir: Path) -> None:
        self._parts = parts
        self.data_dir = data_dir
        self.epochs: list[Epoch] = load_epochs(data_dir, parts.log.end)

    # -- role ----------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The newest epoch this log knows (0: none)."""
        return self.epochs[-1].epoch if self.epochs else 0

    @property
    def fenced(self) -> NotMaster | None:
        return self._parts.log.fence

    def fence(self, reason: str, master: str = "") -> None:
        """Refuse the store's own writes from now on (a slave; a master that lost its
        lease). Takes the append lock, so no write is half way when it returns."""
        with self._parts.locks.pop, self._parts.locks.append:
            fence = NotMaster(reason, master)
            self._parts.log.fence = fence
            self._parts.state.fence = fence
            self._parts.state.tap = None

    @property
    def refusal(self) -> StoreError | None:
        return self._parts.log.refusal

    def refuse_writes(self, refusal: StoreError | None) -> None:
        """A master: refuse the store's own writes with ``refusal`` (its in-sync set is
        smaller than its minimum), nothing written; None: take them again."""
        self._parts.log.refusal = refusal

    def become_master(self, epoch: int) -> None:
        """Write as the master of ``epoch`` from the log's end: the entry is saved (with
        an fsync) before the fence is lifted. ``epoch`` must be newer than every epoch
        this log holds."""
        parts = self._parts
        with parts.locks.append:
            parts.locks.check_open()
            if epoch < self.epoch:
                raise StoreError(f"epoch {epoch} is older than this log's epoch {self.epoch}")
            if epoch > self.epoch:
                self.epochs.append(Epoch(epoch, parts.log.end))
                save_epochs(self.data_dir, self.epochs)
            parts.log.fence = None
            parts.state.fence = None
        log.info("replication: master of epoch %d from position %d", epoch, parts.log.end)

    def ship_state(self, tap: Callable[[list[StateOp]], None] | None) -> None:
        """A master: call ``tap`` with every change of the consumer state, in write order
        (None: stop)."""
        with self._parts.locks.pop, self._parts.locks.append:
            self._parts.state.tap = tap

    def on_log_write(self, callback: Callable[[], None] | None) -> None:
        """A master: ``callback`` after every write to the log (under the append lock;
        quick, non-blocking), so slave sessions wake instead of polling."""
        self._parts.log.on_write = callback

    def state_snapshot(self) -> list[tuple[bytes, bytes]]:
        return self._parts.state.snapshot()

    def apply_state(self, ops: list[StateOp], wipe: bool) -> None:
        """A slave: apply consumer-state changes its master shipped (``wipe``: the first
        chunk of a snapshot, every key removed first)."""
        self._parts.state.apply_replicated(ops, wipe)

    # -- serving -------------------------------------------------------------------------

    def epoch_at(self, position: int) -> tuple[int, int | None]:
        """The epoch that wrote ``position`` and where the next epoch starts (None if
        it is the last)."""
        current, limit = 0, None
        for entry in self.epochs:
            if entry.start <= position:
                current = entry.epoch
            elif entry.start > position:
                limit = entry.start
                break
        return current, limit

    def chunk(self, position: int, max_bytes: int) -> tuple[int, bytes]:
        """``(epoch, bytes)``: whole records from ``position`` (a record boundary), at
        most ``max_bytes`` (at least one record), never past the start of the next
        epoch. Empty at the log's end."""
        clog = self._parts.log
        epoch, limit = self.epoch_at(position)
        end = clog.end if limit is None else min(limit, clog.end)
        if position >= end:
            return epoch, b""
        want = min(end - position, max_bytes)
        data = clog.read_raw(position, want)
        cut = 0
        while cut < len(data):
            try:
                size = peek_size(memoryview(data)[cut:])
            except InsufficientData:
                break
            if cut + size > len(data):
                break
            cut += size
        if cut == 0:  # one record larger than max_bytes
            size = peek_size(data)
            return epoch, clog.read_raw(position, size)
        return epoch, data[:cut]

    # -- slave ---------------------------------------------------------------------------

    def apply(self, position: int, data_epoch: int, data: bytes) -> int:
        """Append records a master sent, at ``position`` (which must be this log's end),
        written by the master of ``data_epoch``; every record is checked first and
        nothing is written if one fails. Returns the new log end."""
        parts = self._parts
        with parts.locks.append:
            parts.locks.check_open()
            clog = parts.log
            if position != clog.end:
                raise StoreError(
                    f"replicated records for position {position}, but this log ends at {clog.end}"
                )
            if data_epoch < self.epoch:
                raise StoreError(
                    f"replicated records of epoch {data_epoch}, older than this log's"
                    f" epoch {self.epoch}"
                )
            records = []
            off = 0
            view = memoryview(data)
            while off < len(data):
                try:
                    record = decode_record(view[off:], expected_position=position + off)
                except InsufficientData:
                    raise CorruptRecord(
                        f"replicated chunk ends inside a record at {position + off}"
                    ) from None
                records.append(record)
                off += record.size
            if not records:
                return clog.end
            if data_epoch > self.epoch:
                self.epochs.append(Epoch(data_epoch, position))
                save_epochs(self.data_dir, self.epochs)
            # roll where the master rolled: before a record that does not fit in the
            # active segment with the records of this chunk not yet written to it
            start = 0
            for i, record in enumerate(records):
                pending = record.position - records[start].position
                if not clog.fits(pending + record.size) and clog.active_size + pending:
                    if pending:  # what fits in this segment first
                        first = records[start].position - position
                        clog.write(view[first : record.position - position], replicated=True)
                    clog.roll()
                    start = i
            first = records[start].position - position
            clog.write(view[first:], replicated=True)
            recovery.replay_records(parts, records, clog.end)
            return clog.end

    def trim_to(self, log_start: int) -> int:
        """A slave: remove the segments that end at or before ``log_start``, the master's
        log start after its retention, and trim the index as retention does (never the
        active segment). With the master's ``segment_bytes`` the slave's segments are
        the master's and its log start becomes the master's; with other sizes it keeps
        the segment holding ``log_start``. Returns the segments removed."""
        parts = self._parts
        clog = parts.log
        with parts.locks.append:
            parts.locks.check_open()
            segments = clog.segments()
            keep_from = segments[-1]
            for seg in segments[:-1]:
                if seg.end > log_start:
                    keep_from = seg
                    break
            dropped = clog.drop_before(keep_from)
        if parts.lmqs.cleaned_to < clog.min_position:
            cleanup.trim_index(parts, clog.min_position)
        if dropped:
            log.info(
                "replication: removed %d segment(s) below the master's log start %d",
                len(dropped),
                log_start,
            )
        return len(dropped)

    def start_at(self, position: int) -> None:
        """An empty log starts at ``position`` instead of 0: a new slave of a master
        whose retention removed the log's beginning. Refused unless this log is empty."""
        parts = self._parts
        with parts.locks.pop, parts.locks.append:
            parts.locks.check_open()
            clog = parts.log
            if clog.end != clog.min_position or clog.end != 0:
                raise StoreError(
                    f"only an empty log can start elsewhere (this one holds"
                    f" [{clog.min_position}, {clog.end}))"
                )
            if position == 0:
                return
            clog.reset_to(position)
            parts.lmqs.cleaned_to = max(parts.lmqs.cleaned_to, position)
            batch = parts.index.new_batch()
            batch.put_checkpoint(parts.lmqs.checkpoint(position))
            batch.commit()
        log.info("replication: this empty log starts at %d, the master's log start", position)

    def truncate(self, position: int) -> int:
        """Cut the log at ``position`` (where the master says this member's log parts
        from its own) and drop the epochs past it; rebuild the index if it had
        dispatched past the cut. Returns the bytes cut."""
        parts = self._parts
        with parts.locks.pop, parts.locks.append:
            parts.locks.check_open()
            clog = parts.log
            if position >= clog.end:
                return 0
            cut = clog.end - position
            log.warning(
                "replication: cutting %d bytes of this log at %d (written in an epoch the"
                " master does not hold)",
                cut,
                position,
            )
            parts.tail.clear_records()
            parts.tail.clear_hot()
            clog.truncate(position)
            self.epochs = [e for e in self.epochs if e.start <= position]
            save_epochs(self.data_dir, self.epochs)
            cp = parts.index.checkpoint()
            rebuild = cp is not None and cp.dispatched_to > position
        if rebuild:
            recovery.rebuild(parts)
        return cut
