"""The read paths: pull (through the hot tail, the index and the decoded-record cache),
``pull_plain`` for backlogs, ``pull_raw`` for re-encoding readers, and point reads.

A pull first looks for the LMQ's meta (the LMQ table), then for its first record in the
hot tail (a reader at the tail is served from memory); otherwise it reads the index
entries and then the records, coalescing adjacent ones into one log read. A record whose
CRC fails on read is handled by ``on_corrupt`` in one place (:meth:`Reader._corrupt`):
``"skip"`` reports, counts and steps over it, anything else raises.

Thread safety: no lock. The index and the log are safe for concurrent readers, and the
caches are dicts read atomically under the GIL.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

from broker_core.clock import tag_hash
from broker_core.commit_log import CommitLog, SegmentGone
from broker_core.config import StoreConfig
from broker_core.consume_queue import ConsumeQueueIndex, IndexEntry
from broker_core.errors import CorruptRecord, UnknownLmq
from broker_core.lmq_table import LmqTable
from broker_core.record import (
    Record,
    decode_plain,
    decode_raw,
    decode_record,
)
from broker_core.results import PullResult, StoredMessage
from broker_core.tail_cache import TailCache

log = logging.getLogger(__name__)

#: :meth:`Reader.pull_raw` reads the records of one pull with one read of the log span
#: that holds them when the span is at most this many times their bytes...
SPAN_FACTOR = 16
#: ... and at most this long; otherwise one ``pread`` per record.
SPAN_MAX = 1 << 20


class Reader:
    __slots__ = ("log", "index", "lmqs", "tail", "config", "corrupt_reads")

    def __init__(
        self,
        log: CommitLog,
        index: ConsumeQueueIndex,
        lmqs: LmqTable,
        tail: TailCache,
        config: StoreConfig,
    ) -> None:
        self.log = log
        self.index = index
        self.lmqs = lmqs
        self.tail = tail
        self.config = config
        #: Records whose CRC failed on read and were skipped (``on_corrupt = "skip"``).
        self.corrupt_reads = 0

    def _corrupt(self, exc: CorruptRecord, position: int) -> None:
        """A record failed its checks on read: raise, or (``on_corrupt = "skip"``)
        report and count it; the caller then steps over it and never serves it."""
        if self.config.on_corrupt != "skip":
            raise exc
        self.corrupt_reads += 1
        log.error("corrupt record skipped: %s", exc, extra={"position": position})

    def pull(
        self, lmq: str, offset: int, max_count: int, max_bytes: int, tag: str | None
    ) -> PullResult:
        """See :meth:`broker_core.store.MessageStore.pull`."""
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

    def pull_plain(self, lmq: str, offset: int, max_count: int, max_bytes: int) -> PullResult:
        """:meth:`pull` (no tag filter) for a reader that passes messages on as they are
        stored (an MQTT subscriber): a *plain* record read from the log comes as a
        :class:`~broker_core.record.PlainMessage` (see
        :func:`~broker_core.record.decode_plain`: checked, not decoded in full), any
        other as a :class:`StoredMessage`, as do records found in the hot tail. Meant
        for backlogs, where each record is read once: the decoded-record cache is
        neither consulted nor filled. Corrupt records are handled as by :meth:`pull`."""
        return self._pull_undecoded(
            lmq, offset, max_count, max_bytes, decode_plain, self.log.read_each)

    def pull_raw(self, lmq: str, offset: int, max_count: int, max_bytes: int) -> PullResult:
        """:meth:`pull` (no tag filter) for a reader that re-encodes records into another
        layout (RocketMQ's stored messages): a message record read from the log comes as
        a :class:`~broker_core.record.RawMessage` (see
        :func:`~broker_core.record.decode_raw`: checked, its fields left as bytes), any
        other as a :class:`StoredMessage`, as do records found in the hot tail. Like
        :meth:`pull_plain` it neither consults nor fills the decoded-record cache.

        The records are read with one read of the log span that holds them all when they
        are close together (an LMQ among a few busy ones, e.g. one queue of a topic of 8:
        one read of 8x the bytes costs less than a ``pread`` per record), else one
        ``pread`` each. Corrupt records are handled as by :meth:`pull`."""
        return self._pull_undecoded(
            lmq, offset, max_count, max_bytes, decode_raw, self._read_spans)

    def _pull_undecoded(
        self, lmq: str, offset: int, max_count: int, max_bytes: int,
        decode: Callable[[bytes, int, int], Any],
        read: Callable[[list[int], list[int]], list[bytes | None]],
    ) -> PullResult:
        """The one loop of :meth:`pull_plain` and :meth:`pull_raw`: the records ``read``
        from the log, each ``decode``d (a plain or raw message; None: a record of
        another kind, decoded in full as a :class:`StoredMessage`), within
        ``max_bytes`` of bodies. Corrupt records are handled as by :meth:`pull`."""
        lmq_id, start, min_offset, max_offset, done = self._pull_start(
            lmq, offset, max_count, max_bytes, True)
        if done is not None:
            return done
        offsets, positions, sizes, bodies = self.index.spans(lmq_id, start, max_offset, max_count)
        if not offsets:
            return PullResult([], start, min_offset, max_offset)
        next_offset = offsets[-1] + 1
        raws = read(positions, sizes)
        messages: list[Any] = []
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
                plain = decode(raw, position, offsets[i])
                if plain is None:
                    record = decode_record(raw, position)
            except CorruptRecord as exc:
                self._corrupt(exc, position)
                continue
            budget -= body_size
            append(plain if plain is not None else StoredMessage(lmq, offsets[i], record))
        # PullResult.messages is declared as StoredMessage: the callers of pull_plain and
        # pull_raw know (by calling them) that plain or raw messages may be among them.
        return PullResult(cast(list[StoredMessage], messages), next_offset, min_offset,
                          max_offset)

    def _read_spans(self, positions: list[int], sizes: list[int]) -> list[bytes | None]:
        """The bytes of each record ``[positions[i], positions[i] + sizes[i])``: cut from
        one read of the whole span when it is at most ``SPAN_FACTOR`` times the records'
        bytes (and ``SPAN_MAX``), else :meth:`CommitLog.read_each`. None for a record
        whose segment was removed (retention)."""
        first = positions[0]
        span = positions[-1] + sizes[-1] - first
        # An LMQ's records are in log order (offsets are given in append order); checked
        # all the same, since a slice cut from the wrong place would read as damage.
        if (len(positions) > 1 and 0 < span <= SPAN_MAX and span <= SPAN_FACTOR * sum(sizes)
                and min(positions) == first and max(positions) == positions[-1]):
            try:
                raw = self.log.read_raw(first, span)
            except SegmentGone:
                raw = b""
            if len(raw) == span:
                return [
                    raw[p - first : p - first + n]
                    for p, n in zip(positions, sizes, strict=True)
                ]
        return self.log.read_each(positions, sizes)

    def _pull_start(
        self, lmq: str, offset: int, max_count: int, max_bytes: int, hot: bool
    ) -> tuple[int, int, int, int, PullResult | None]:
        """The start of :meth:`pull` and :meth:`pull_plain`: (LMQ id, first offset to
        read, the LMQ's min and max offsets, the result if the pull is answered
        already: nothing to read, or served from the hot tail when ``hot``)."""
        meta = self.lmqs.cache.get(lmq)
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
            first = self.tail.get(lmq_id, start)
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
        young = self.tail.young
        old = self.tail.old
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
        Recently read records come from the decoded-record cache: many subscribers at
        the tail of one LMQ (or of LMQs sharing records) decode each record once."""
        out: list[Record | None] = []
        tail = self.tail
        cache = tail.records
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
                    self._corrupt(exc, entry.position)
                    out.append(None)
                    off += entry.record_size
                    continue
                out.append(record)
                tail.put_record(entry.position, record)
                off += entry.record_size
            i = j
        tail.trim_records()
        return out

    def read_at(self, lmq: str, offset: int) -> StoredMessage | None:
        meta = self.lmqs.meta_for_read(lmq)
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
