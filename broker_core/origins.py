"""Origins: where a copy came from, per-origin high-water marks and offset translation.

A *copy* (issue 19's connector) is a message whose properties hold
:data:`ORIGIN_PROPERTY` = ``cluster NUL queue NUL offset`` (UTF-8, offset decimal): the
source cluster's id, the source queue and the record's offset in it. The store keeps,
per (origin cluster, origin queue, topic), the highest origin offset stored: the
*high-water mark* (HWM). The store neither knows nor cares which protocol set the
property; only the RocketMQ remoting send sets it (from the ``__LMQ_ORIGIN_*`` wire
properties), the MQTT and AMQP front ends cannot (their user properties and headers are
stored inside their own property values).

Layout, in the index RocksDB (:mod:`broker_core.consume_queue` owns the other prefixes;
``s16`` is a u16 length then UTF-8 bytes; integers big-endian)::

    b"G" | s16 cluster | s16 queue | s16 topic            -> offset u64 | position u64
    b"J" | s16 cluster | s16 queue | lmq_id u64 | offset u64 -> lmq offset u64

``G`` is the HWM and the log position of the record that set it; ``J`` is one entry per
(copy, LMQ it went to) for :meth:`OriginTable.translate`. Both go into the SAME index
WriteBatch as the record's consume-queue entries and the checkpoint (as the key index's
``B`` keys do), so after a kill -9 a copy and its HWM are both there or both not, and
recovery's replay after the checkpoint puts them again (max: idempotent).

- **Duplicates.** :meth:`OriginTable.filter_locked`, called under the append lock before
  the dispatcher writes, drops every copy whose offset is at or below the HWM (or below
  an earlier copy of the same batch): copies of one origin queue arrive in order, and an
  offset never stored but not above the HWM is a gap the source filtered.
- **Advance.** An origin-advance record (:attr:`RecordType.ORIGIN_ADVANCE`: topic, no
  dispatch list, body = the origin value) only raises the HWM; replayed like the others.
- **Rebuild.** ``G`` survives an index rebuild: the marks are held in memory, and after
  the index is dropped those whose record is still at or before the log end are written
  back before the log is replayed (max with what the log holds). So a mark whose copies
  retention removed is not lost; a mark set by a record past the end of a log that lost
  its tail (an index ahead of the log) is dropped, and the log's replay sets it to what
  the log still holds. ``J`` is derived: the rebuild puts it for the records the log
  still has.
- **Retention.** ``J`` entries of removed records stay until the LMQ is removed or the
  index rebuilt (about 40 bytes per copy); :meth:`translate` clamps to the LMQ's first
  offset, so they do no harm. (Not trimmed by retention: not done.)

Thread safety: ``filter_locked``, ``stage`` and ``commit`` run under the append lock;
``high_water`` reads a dict (atomic under the GIL).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence

from rocksdict import ReadOptions

from broker_core import rocks
from broker_core.consume_queue import ConsumeQueueIndex

#: The store property that makes a message a copy.
ORIGIN_PROPERTY = "lmq.origin"

_HWM = b"G"
_XLATE = b"J"
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_MARK = struct.Struct(">QQ")

#: (origin cluster, origin queue, topic)
MarkKey = tuple[str, str, str]
#: A ``put(key, value)`` of an index WriteBatch.
Putter = Callable[[bytes, bytes], None]


def encode_origin(cluster: str, queue: str, offset: int) -> bytes:
    if "\x00" in cluster or "\x00" in queue:
        raise ValueError("an origin cluster or queue must not contain U+0000")
    if offset < 0:
        raise ValueError("an origin offset must not be negative")
    return f"{cluster}\x00{queue}\x00{offset}".encode()


def decode_origin(value: bytes) -> tuple[str, str, int] | None:
    """(cluster, queue, offset), or None if ``value`` is not a well-formed origin (such a
    message is stored as a plain message)."""
    parts = value.split(b"\x00")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    try:
        return parts[0].decode(), parts[1].decode(), int(parts[2])
    except UnicodeDecodeError:
        return None


def _s16(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def _mark_key(key: MarkKey) -> bytes:
    return _HWM + _s16(key[0]) + _s16(key[1]) + _s16(key[2])


def _read_s16(raw: bytes, at: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(raw, at)
    return raw[at + 2 : at + 2 + n].decode(), at + 2 + n


def _prefix_end(prefix: bytes) -> bytes:
    raw = bytearray(prefix)
    while raw and raw[-1] == 0xFF:
        raw.pop()
    raw[-1] += 1
    return bytes(raw)


class OriginTable:
    """The HWMs in memory (``marks``) and the writer and reader of ``G``/``J``."""

    __slots__ = ("index", "marks", "_staged")

    def __init__(self, index: ConsumeQueueIndex) -> None:
        self.index = index
        #: (cluster, queue, topic) -> (offset, position of the record that set it)
        self.marks: dict[MarkKey, tuple[int, int]] = {}
        #: marks of the batch being written, applied by :meth:`commit`
        self._staged: dict[MarkKey, tuple[int, int]] = {}

    def load(self) -> None:
        """Read every ``G`` key (at open, after recovery)."""
        marks: dict[MarkKey, tuple[int, int]] = {}
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_prefix_end(_HWM))
        for key, value in rocks.items(self.index.db, _HWM, opts):
            cluster, at = _read_s16(key, 1)
            queue, at = _read_s16(key, at)
            topic, _ = _read_s16(key, at)
            marks[(cluster, queue, topic)] = _MARK.unpack(value)
        self.marks = marks

    # -- reads ---------------------------------------------------------------------------

    def high_water(self, cluster: str, topic: str, queues: Iterable[str]) -> dict[str, int]:
        marks = self.marks
        out: dict[str, int] = {}
        for queue in queues:
            mark = marks.get((cluster, queue, topic))
            if mark is not None:
                out[queue] = mark[0]
        return out

    def translate(self, cluster: str, queue: str, lmq_id: int, committed: int) -> int | None:
        """The offset in LMQ ``lmq_id`` of the first copy of ``queue`` whose origin offset
        is at or above ``committed``; past the last copy if none is; None if the LMQ holds
        no copy of ``queue`` (the caller clamps to the LMQ's first offset)."""
        prefix = _XLATE + _s16(cluster) + _s16(queue) + _U64.pack(lmq_id)
        it = self.index.db.iter(ReadOptions())
        # keys are checked against the prefix (the iterator's bounds are not relied on:
        # rocksdict's seek_to_last ignored the upper bound)
        it.seek(prefix + _U64.pack(max(committed, 0)))
        if it.valid() and bytes(it.key()).startswith(prefix):
            return int(_U64.unpack(it.value())[0])
        it.seek_for_prev(_prefix_end(prefix))
        if it.valid() and bytes(it.key()).startswith(prefix):
            return int(_U64.unpack(it.value())[0]) + 1
        return None

    # -- writes (append lock held) -------------------------------------------------------

    def filter_locked(
        self, topic_of: Sequence[str], origins: Sequence[tuple[str, str, int] | None]
    ) -> list[bool]:
        """Per message (its topic, its decoded origin or None), whether to store it: a
        copy at or below its HWM, or not above an earlier copy of the same batch, is a
        duplicate."""
        marks = self.marks
        seen: dict[MarkKey, int] = {}
        keep: list[bool] = []
        for topic, origin in zip(topic_of, origins, strict=True):
            if origin is None:
                keep.append(True)
                continue
            cluster, queue, offset = origin
            key = (cluster, queue, topic)
            high = seen.get(key)
            if high is None:
                mark = marks.get(key)
                high = -1 if mark is None else mark[0]
            if offset <= high:
                keep.append(False)
                continue
            seen[key] = offset
            keep.append(True)
        return keep

    def stage(
        self,
        put: Putter,
        topic: str,
        origin_value: bytes,
        position: int,
        entries: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Put a copy's (or an advance's) ``G`` key, and one ``J`` key per (lmq_id, lmq
        offset) in ``entries``, into the batch ``put`` writes to; the in-memory mark
        moves at :meth:`commit`. Never lowers a mark."""
        origin = decode_origin(origin_value)
        if origin is None:
            return
        cluster, queue, offset = origin
        key = (cluster, queue, topic)
        staged = self._staged
        current = staged.get(key) or self.marks.get(key)
        if current is None or offset > current[0]:
            staged[key] = (offset, position)
            put(_mark_key(key), _MARK.pack(offset, position))
        if entries:
            head = _XLATE + _s16(cluster) + _s16(queue)
            packed = _U64.pack(offset)
            for lmq_id, lmq_offset in entries:
                put(head + _U64.pack(lmq_id) + packed, _U64.pack(lmq_offset))

    def commit(self) -> None:
        """The batch holding the staged marks is committed: they are the marks now."""
        if self._staged:
            self.marks.update(self._staged)
            self._staged = {}

    def discard(self) -> None:
        """The batch failed: forget its staged marks."""
        self._staged = {}

    def restore_after_reset(self, put: Putter, log_end: int) -> int:
        """The index was dropped (a rebuild): put back the marks whose record is before
        ``log_end`` (module doc, "Rebuild"), forget the others; returns how many were
        kept."""
        kept = {k: v for k, v in self.marks.items() if v[1] < log_end}
        for key, (offset, position) in kept.items():
            put(_mark_key(key), _MARK.pack(offset, position))
        self.marks = kept
        self._staged = {}
        return len(kept)


def origin_of(properties: Mapping[str, bytes] | None) -> bytes | None:
    """The origin value of a message's properties, if it is a copy."""
    if not properties:
        return None
    return properties.get(ORIGIN_PROPERTY)
