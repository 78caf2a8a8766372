"""The commit log: segmented, append-only files holding every record once.

On disk::

    <data-dir>/commitlog/
        00000000000000000000.log     base position 0
        00000000000268435387.log     base position = where the previous segment ended

A log position is a byte position in the whole log. Each segment is named by the
position of its first byte, zero-padded to 20 digits so ``ls`` sorts them. Segments are
contiguous: a segment's base is exactly where the previous one ends, and a record never
spans two segments (a record that does not fit rolls a new segment; there is no padding).
The file length of a segment is its content: nothing is preallocated, so any bytes past
the last valid record are a torn write, cut off by :meth:`CommitLog.truncate`.

Damage in the middle of the log (a flipped bit, a lost page) is told apart from a torn
tail by what follows it: :meth:`CommitLog.find_next_record` looks for the next position
where a record's magic, CRC32C and stored position all agree. A torn tail has none after
it; damage has. ``scan(skip_damage=True)`` resynchronises there, so a caller (recovery,
``verify``) can report the damaged bytes and go on. Every record is self-checking, so a
resynchronisation never lands on bytes that merely look like a record.

Thread safety: :meth:`CommitLog.write` and the methods that change the set of segments
(:meth:`truncate`, :meth:`drop_before`) are called by one writer at a time (the store's
append lock). :meth:`read` and :meth:`scan` may run concurrently with the writer from
any thread; a read of a segment removed concurrently by retention raises
:class:`SegmentGone`. :meth:`sync` may run concurrently with :meth:`write`.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core.errors import (
    CorruptRecord,
    InsufficientData,
    NotMaster,
    StorageFull,
    StoreError,
)
from broker_core.record import Record, decode_record, find_record, peek_size

SEGMENT_SUFFIX = ".log"
_SCAN_CHUNK = 4 * 1024 * 1024
#: A full disk (ENOSPC), a quota (EDQUOT) or a file-size limit (EFBIG, RLIMIT_FSIZE).
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class SegmentGone(StoreError):
    """The segment holding a position was removed (retention) or never existed."""


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


def fsync_dir(path: Path) -> None:
    """Make a file creation, rename or removal in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """One segment file. ``size`` is the number of valid bytes, the file's length."""

    __slots__ = ("base", "path", "size", "fd", "dirty", "closed")

    def __init__(self, base: int, path: Path, size: int, fd: int) -> None:
        self.base = base
        self.path = path
        self.size = size
        self.fd = fd
        self.dirty = False
        self.closed = False

    @property
    def end(self) -> int:
        return self.base + self.size

    def read(self, position: int, length: int) -> bytes:
        try:
            return os.pread(self.fd, length, position - self.base)
        except OSError as exc:
            if self.closed:
                raise SegmentGone(f"segment {self.path.name} was removed") from None
            raise StoreError(f"reading {self.path}: {exc}") from exc

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Why and where a scan of the log stopped before its end, or, with ``skip_damage``,
    where it found damage and where it resumed."""

    position: int
    reason: str
    torn: bool  # True: an incomplete record at the very end (a torn write), not damage
    #: With ``scan(skip_damage=True)``: the next valid record, where the scan goes on
    #: (``None``: nothing valid follows, so the scan ends here).
    resume: int | None = None

    @property
    def skipped(self) -> int:
        """Bytes from the damage to the record the scan resumed at (0 if it did not)."""
        return 0 if self.resume is None else self.resume - self.position


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, read_only: bool = False) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[Segment] = []
        #: Set on a member that is not its group's master (broker_core.replication): then
        #: only the replication stream writes (``write(..., replicated=True)``), so no
        #: path of the store can put a record of its own into a slave's log.
        self.fence: NotMaster | None = None
        #: Set on a master whose in-sync set is smaller than its minimum (sync
        #: replication, ``replication_min_insync``): its own writes are refused, nothing
        #: written, until the set is large enough again.
        self.refusal: StoreError | None = None
        #: Called after every successful write (a master's replication wakes its slave
        #: sessions); under the append lock: it must be quick and must not block.
        self.on_write: Callable[[], None] | None = None
        self._sync_lock = threading.Lock()
        #: The segment the last read_raw was in (any thread may replace it).
        self._last_read: Segment | None = None
        names = sorted(p for p in directory.iterdir() if p.suffix == SEGMENT_SUFFIX)
        for path in names:
            try:
                base = int(path.stem)
            except ValueError:
                continue
            fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)
            self._segments.append(Segment(base, path, os.fstat(fd).st_size, fd))
        if not self._segments and not read_only:
            self._segments.append(self._create(0))

    # -- layout ------------------------------------------------------------------------

    @property
    def min_position(self) -> int:
        return self._segments[0].base

    @property
    def end(self) -> int:
        """The position the next record will be written at."""
        return self._segments[-1].end

    @property
    def size_bytes(self) -> int:
        return self.end - self.min_position

    def segments(self) -> list[Segment]:
        return list(self._segments)

    def gaps(self) -> list[tuple[int, int]]:
        """(end of one segment, base of the next) wherever they are not contiguous."""
        segs = self._segments
        return [(a.end, b.base) for a, b in zip(segs, segs[1:], strict=False) if a.end != b.base]

    def _segment_for(self, position: int) -> Segment:
        segs = self._segments
        lo, hi = 0, len(segs) - 1
        while lo < hi:  # last segment with base <= position
            mid = (lo + hi + 1) // 2
            if segs[mid].base <= position:
                lo = mid
            else:
                hi = mid - 1
        seg = segs[lo]
        if not seg.base <= position < seg.end:
            raise SegmentGone(f"no segment holds position {position}")
        return seg

    def _create(self, base: int) -> Segment:
        path = self.directory / segment_name(base)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fsync_dir(self.directory)
        return Segment(base, path, 0, fd)

    # -- writing (one writer at a time) ------------------------------------------------

    @property
    def active_size(self) -> int:
        return self._segments[-1].size

    @property
    def active_base(self) -> int:
        """The base position of the active (last) segment."""
        return self._segments[-1].base

    def segment_base(self, position: int) -> int:
        """The base position of the segment holding ``position`` (SegmentGone if none)."""
        return self._segment_for(position).base

    def segment_bases(self) -> list[int]:
        """The base positions of the segments, ascending."""
        return [seg.base for seg in self._segments]

    def fits(self, size: int) -> bool:
        """Whether a record of ``size`` bytes fits in the active segment."""
        return self._segments[-1].size + size <= self.segment_bytes

    def roll(self) -> None:
        """Start a new segment at the current end. The old one is marked for fsync."""
        active = self._segments[-1]
        if active.size == 0:
            return
        self._segments.append(self._create(active.end))

    def write(self, data: bytes | bytearray | memoryview, *, replicated: bool = False) -> int:
        """Write ``data`` (whole records, already encoded for positions from ``end``) to
        the active segment and return the position it starts at. The caller checked with
        :meth:`fits` and rolled when needed. Raises the :attr:`fence` (nothing written)
        on a member that is not the master, and the :attr:`refusal` on a master whose
        in-sync set is too small, unless ``replicated``."""
        if not replicated:
            if self.fence is not None:
                raise self.fence
            if self.refusal is not None:
                raise self.refusal
        seg = self._segments[-1]
        start = seg.end
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(seg.fd, view[written:], seg.size + written)
        except OSError as exc:
            # Undo the partial write so the file ends at a record boundary again.
            os.ftruncate(seg.fd, seg.size)
            if exc.errno in _FULL_ERRNOS:
                raise StorageFull(f"no space left writing {seg.path}: {exc.strerror}") from exc
            raise StoreError(f"writing {seg.path}: {exc}") from exc
        seg.size += written
        seg.dirty = True
        if self.on_write is not None:
            self.on_write()
        return start

    def truncate(self, position: int) -> int:
        """Cut the log at ``position`` (a record boundary), removing later segments.
        Returns the number of bytes removed."""
        removed = 0
        while len(self._segments) > 1 and self._segments[-1].base >= position:
            seg = self._segments.pop()
            removed += seg.size
            seg.close()
            seg.path.unlink()
        seg = self._segments[-1]
        if position < seg.base:
            raise StoreError(f"cannot truncate below the log start {seg.base}")
        if position < seg.end:
            removed += seg.end - position
            os.ftruncate(seg.fd, position - seg.base)
            os.fsync(seg.fd)
            seg.size = position - seg.base
        fsync_dir(self.directory)
        return removed

    def drop_before(self, keep_from: Segment) -> list[Segment]:
        """Remove every segment older than ``keep_from``; returns the removed segments."""
        idx = self._segments.index(keep_from)
        dropped, self._segments = self._segments[:idx], self._segments[idx:]
        for seg in dropped:
            seg.close()
            seg.path.unlink()
        if dropped:
            fsync_dir(self.directory)
        return dropped

    def reset_to(self, base: int) -> None:
        """Remove every segment and start an empty log at ``base`` (used when the whole
        log is older than retention and the active segment is empty)."""
        for seg in self._segments:
            seg.close()
            seg.path.unlink()
        self._segments = [self._create(base)]

    # -- durability --------------------------------------------------------------------

    def sync(self) -> int:
        """fsync every segment written since the last sync; return the position now
        durable. Safe to call from a flusher thread while the writer appends."""
        with self._sync_lock:
            end = self.end
            for seg in list(self._segments):
                if seg.dirty and not seg.closed:
                    seg.dirty = False
                    try:
                        os.fsync(seg.fd)
                    except OSError:
                        if not seg.closed:
                            seg.dirty = True
                            raise
            return end

    # -- reading (any thread) ----------------------------------------------------------

    def read(self, position: int, size: int) -> Record:
        seg = self._segment_for(position)
        data = seg.read(position, size)
        if len(data) < size:
            raise CorruptRecord(f"short read at {position}: {len(data)} of {size} bytes")
        return decode_record(data, expected_position=position)

    def read_raw(self, position: int, size: int) -> bytes:
        """Bytes ``[position, position + size)``, across segment boundaries if needed."""
        seg = self._last_read
        if seg is None or seg.closed or not seg.base <= position < seg.end:
            # readers mostly stay in one segment: skip the search then
            seg = self._last_read = self._segment_for(position)
        if position + size <= seg.end:
            return seg.read(position, size)
        parts = []
        while size > 0:
            seg = self._segment_for(position)
            part = seg.read(position, min(size, seg.end - position))
            parts.append(part)
            position += len(part)
            size -= len(part)
        return b"".join(parts)

    def read_each(self, positions: list[int], sizes: list[int]) -> list[bytes | None]:
        """The bytes of each span ``[positions[i], positions[i] + sizes[i])``, each within
        one segment (as a record is); None for a span whose segment was removed
        (retention). For a pull
        of records scattered over the log (a backlog of interleaved LMQs): one call for
        all of them, ``os.pread`` called directly, the segment of one span tried first
        for the next. A span past its segment's end comes back short."""
        out: list[bytes | None] = []
        append = out.append
        pread = os.pread
        seg = self._last_read
        for position, size in zip(positions, sizes, strict=True):
            if seg is None or seg.closed or not seg.base <= position < seg.base + seg.size:
                try:
                    seg = self._segment_for(position)
                except SegmentGone:
                    append(None)
                    seg = None
                    continue
            try:
                append(pread(seg.fd, size, position - seg.base))
            except OSError as exc:
                if not seg.closed:
                    raise StoreError(f"reading {seg.path}: {exc}") from exc
                append(None)  # removed meanwhile
                seg = None
        if seg is not None:
            self._last_read = seg
        return out

    def locate(self, position: int) -> str:
        """Where ``position`` is, for messages: the segment file and the byte in it."""
        for seg in reversed(self._segments):
            if seg.base <= position:
                return f"segment {seg.path.name}, byte {position - seg.base}"
        return f"log position {position} (before the first segment)"

    def scan(
        self, start: int | None = None, end: int | None = None, *, skip_damage: bool = False
    ) -> Iterator[Record | ScanStop]:
        """Yield every record from ``start`` (a record boundary; default the log start)
        up to ``end`` (default the log end), then a :class:`ScanStop` if the walk could
        not reach ``end``. Reads segments in large chunks.

        With ``skip_damage``, a stop followed by a valid record is yielded with
        ``resume`` set and the walk goes on from there; only a stop with nothing valid
        after it (a torn tail) ends the walk."""
        position = self.min_position if start is None else start
        stop_at = self.end if end is None else end
        while True:
            stop = None
            for item in self._scan_from(position, stop_at):
                if isinstance(item, ScanStop):
                    stop = item
                    break
                yield item
            if stop is None:
                return
            resume = self.find_next_record(stop.position, stop_at) if skip_damage else None
            if resume is None:
                yield stop
                return
            yield ScanStop(stop.position, stop.reason, False, resume)
            position = resume

    def _scan_from(self, position: int, stop_at: int) -> Iterator[Record | ScanStop]:
        for seg in self.segments():
            if seg.end <= position or seg.base >= stop_at:
                continue
            if position < seg.base:
                yield ScanStop(position, f"gap in the log before segment {seg.path.name}", False)
                return
            while position < min(seg.end, stop_at):
                chunk_end = min(seg.end, position + _SCAN_CHUNK)
                data = memoryview(seg.read(position, chunk_end - position))
                off = 0
                while off < len(data):
                    try:
                        size = peek_size(data[off:])
                        if off + size > len(data) and position + off + size <= seg.end:
                            break  # the record continues past this chunk: read it whole
                        record = decode_record(data[off:], expected_position=position + off)
                    except InsufficientData:
                        if position + off + 8 <= seg.end and off + 8 <= len(data):
                            # the size field is there but the bytes after it are not
                            yield ScanStop(position + off, "incomplete record at the end", True)
                        else:
                            yield ScanStop(position + off, "incomplete record header", True)
                        return
                    except CorruptRecord as exc:
                        yield ScanStop(position + off, str(exc), False)
                        return
                    yield record
                    off += record.size
                if off == 0:
                    # one record larger than the chunk: read exactly that record
                    try:
                        size = peek_size(data)
                        record = decode_record(seg.read(position, size), expected_position=position)
                    except InsufficientData:
                        yield ScanStop(position, "incomplete record at the end", True)
                        return
                    except CorruptRecord as exc:
                        yield ScanStop(position, str(exc), False)
                        return
                    yield record
                    off = record.size
                position += off
        if position < stop_at:
            yield ScanStop(position, "log ends early", True)

    def find_next_record(self, position: int, end: int | None = None) -> int | None:
        """The first position after ``position`` (and before ``end``, default the log
        end) where a valid record starts: its magic, CRC32C and stored position agree.
        ``None`` if there is none, i.e. whatever is at ``position`` is a torn tail."""
        stop_at = self.end if end is None else end
        for seg in self.segments():
            lo = max(position + 1, seg.base)
            hi = min(seg.end, stop_at)
            if lo < hi:
                found = self._find_in_segment(seg, lo, hi)
                if found is not None:
                    return found
        return None

    @staticmethod
    def _find_in_segment(seg: Segment, lo: int, hi: int) -> int | None:
        """The first valid record starting in ``[lo, hi)`` of ``seg`` and ending in it:
        :func:`~broker_core.record.find_record` over a read-only map of the file (the
        page cache pages it in as the search goes; nothing is copied whole)."""
        try:
            data = mmap.mmap(seg.fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            if seg.closed:
                raise SegmentGone(f"segment {seg.path.name} was removed") from None
            raise StoreError(f"reading {seg.path}: {exc}") from exc
        with data:
            found = find_record(data, seg.base, lo - seg.base, hi - seg.base,
                                min(seg.size, len(data)))
        return None if found is None else seg.base + found

    def close(self) -> None:
        for seg in self._segments:
            seg.close()
