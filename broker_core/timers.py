"""Durable timers: delayed messages written once, indexed by due time, fired by the log.

Theory of operation. A delayed message is ONE record, appended at publish and not
dispatched (type 1 with the delayed flag 0x08; its dispatch list names the LMQs it will
go to, each with its due time in ms where an offset would be). A timer index in the
index RocksDB points at it. When it is due, the store appends a small *fire* record
(type 3) whose dispatch list assigns the LMQ offsets, and whose index entries point at
the ORIGINAL record's position: consumers read the message as it was published. A
cancel or reschedule is a *change* record (type 4). Every index change below is made in
the same WriteBatch as the index checkpoint ("dispatched up to"), so the timer index is
derived data like the consume queues: replaying the log from the checkpoint reproduces
it exactly (a delayed record adds a timer, a fire or cancel removes it, a reschedule
moves it). The log is the firing cursor: a timer whose fire record is in the log is
gone from the index, in the same atomic batch; one whose fire record is not is still
pending and fires again. So after kill -9 no timer is lost, none fires twice (a second
fire needs the timer key the first fire deleted) and none fires early (firing needs
``due_ms <= now``; nothing is dispatched before that).

Keys in the index RocksDB (integers big-endian; prefixes unused by the consume queues
``E M N C`` and the key index ``B``)::

    timer    b"T" | due_ms u64 | position u64  ->  record_size u32   (due order)
    pending  b"P" | position u64               ->  due_ms u64 | record_size u32 | topic
    count    b"Q" | topic (UTF-8)              ->  pending timers of the topic u64
    fired    b"F" | position u64               ->  fire_ms u64      (retention hold)
    forward  b"W" | origin position u64        ->  position u64     (a relocated timer)
    origin   b"V" | position u64               ->  origin position u64 (W's reverse)

Control record bodies (the record's topic and tag are the delayed message's)::

    fire   (3): position u64 | record_size u32 | body_size u32 | due_ms u64
                dispatch list: the LMQs and the offsets the message got in them
    change (4): position u64 | record_size u32 | old_due_ms u64 | new_due_ms u64
                new_due_ms = 2**64 - 1: cancelled. Empty dispatch list.
    relocate (4): the change body (new_due_ms = 2**64 - 1) | new_position u64 |
                origin u64 (44 bytes instead of 28: the body size tells them apart)

Retention (:func:`broker_core.cleanup.retain`) never removes a segment at or past
:meth:`Timers.retention_floor`: the lowest pending timer's record, and the lowest
record fired less than ``retention_ms`` ago (a message delayed 40 days is 40 days old
when it fires; its consumers get ``retention_ms`` from the fire, as for a new message).

Relocation (:meth:`Timers.relocate_locked`): retention is by whole segment, so one
timer 40 days out would keep every segment from its own on for 40 days. When retention
would remove a segment that only pending timers hold, it moves them: each pinning
delayed record is appended again (the same message: topic, tag, properties, body, store
and born times, LMQs; its list carries the CURRENT due time, which a reschedule may have
moved; its keys are indexed at the new position, so a lookup by id finds it), followed
by a relocate record, in ONE log write and ONE index batch: the old timer goes, the new
one comes, and ``W``/``V`` forward the ORIGIN position (the one a front end handed out at
publish, e.g. gRPC's ``lmq:<position>`` recall handle) to the current one. Forwards are
flattened (a copy relocated again re-points its origin's ``W``; at most one hop) and
deleted when the timer fires or is cancelled. Like every other key here they are derived
from the log: replay and rebuild put and delete them at the same records.

Thread safety: the ``*_locked`` methods run under the store's append lock; the queries
(:meth:`pending`, :meth:`next_due`, :meth:`due_of`) take none.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_core import rocks
from broker_core.clock import tag_hash
from broker_core.commit_log import CommitLog
from broker_core.config import StoreConfig, parse_duration_ms
from broker_core.consume_queue import ENTRY, ConsumeQueueIndex, IndexBatch, LmqMeta
from broker_core.errors import CorruptRecord, MessageTooLarge, StoreError
from broker_core.key_index import KeyIndex
from broker_core.lmq_table import LmqTable, Pending
from broker_core.record import (
    FLAG_DELAYED,
    Message,
    Record,
    RecordType,
    dispatch_name,
    encode_dispatch_wire,
    encode_record_with_tail,
)
from broker_core.results import AppendResult
from broker_core.tail_cache import TailCache
from broker_core.timer_records import (
    CHANGE_BODY,
    COUNT,
    FIRE_BODY,
    FIRE_FIXED,
    RELOCATE_TAIL,
    fire_fields,
    fire_record,
)

log = logging.getLogger(__name__)

CANCELLED = (1 << 64) - 1
_U64 = struct.Struct(">Q")
_TIMER_KEY = struct.Struct(">cQQ")
_POS_KEY = struct.Struct(">cQ")
_PENDING = struct.Struct(">QI")
_SIZE = struct.Struct(">I")
_OFFSET = struct.Struct(">Q")
_EMPTY_DISPATCH = struct.pack(">I", 0)


class DelayTooLong(StoreError):
    """A due time past ``StoreConfig.max_timer_delay_ms`` from now."""


def delay_level_ms(levels: Sequence[str], level: int) -> int:
    """The delay of RocketMQ delay ``level`` (1 = the first) in ms; a level past the
    last is the last (as RocketMQ has it); below 1 is a ValueError."""
    if level < 1:
        raise ValueError(f"delay level must be at least 1, not {level}")
    return parse_duration_ms(levels[min(level, len(levels)) - 1])


def _timer_key(due_ms: int, position: int) -> bytes:
    return _TIMER_KEY.pack(b"T", due_ms, position)


def _pos_key(prefix: bytes, position: int) -> bytes:
    return _POS_KEY.pack(prefix, position)


@dataclass(frozen=True, slots=True)
class PendingTimer:
    position: int
    due_ms: int
    record_size: int
    topic: str


@dataclass(slots=True)
class _Writer:
    """Buffers records for the log, rolling to a new segment when one does not fit."""

    log: CommitLog
    segment_bytes: int
    buf: bytearray = field(default_factory=bytearray)

    @property
    def position(self) -> int:
        return self.log.end + len(self.buf)

    def room(self, size: int) -> None:
        if size > self.segment_bytes:
            raise MessageTooLarge(size, self.segment_bytes)
        if not self.log.fits(len(self.buf) + size):
            self.flush()
            if not self.log.fits(size):
                self.log.roll()

    def flush(self) -> None:
        if self.buf:
            self.log.write(self.buf)
            self.buf = bytearray()


class Timers:
    """The timer index of one store (see the module docstring)."""

    def __init__(
        self,
        log: CommitLog,
        index: ConsumeQueueIndex,
        lmqs: LmqTable,
        keys: KeyIndex,
        tail: TailCache,
        config: StoreConfig,
    ) -> None:
        self.log = log
        self.index = index
        self.lmqs = lmqs
        self.keys = keys
        self.tail = tail
        self.config = config
        #: topic -> pending timers; every topic's count is one key (b"Q"), loaded here.
        self.counts: dict[str, int] = {}
        self._dirty: set[str] = set()
        #: Replay: position -> pending (True) or not, for records of the batch being
        #: replayed (its puts are not readable until it commits).
        self._overlay: dict[int, bool] = {}
        #: Replay: position -> origin (None: no forward), for the batch being replayed.
        self._origins: dict[int, int | None] = {}
        #: Where a scan for due timers starts: no pending timer key sorts below it
        #: (fires move it up past what they deleted, every add moves it down).
        self._seek = b"T"
        self.load()

    # -- counters ----------------------------------------------------------------------

    def load(self) -> None:
        """(Re)read the per-topic counters from the index (open, failed batch, reset)."""
        self.counts.clear()
        self._dirty.clear()
        self._overlay.clear()
        self._origins.clear()
        self._seek = b"T"
        for key, value in rocks.items(self.index.db, b"Q"):
            if not key.startswith(b"Q"):
                break
            self.counts[key[1:].decode()] = _U64.unpack(value)[0]

    def _count(self, topic: str, delta: int) -> None:
        self.counts[topic] = self.counts.get(topic, 0) + delta
        self._dirty.add(topic)

    def flush_counts(self, batch: IndexBatch) -> None:
        """Put the changed counters into ``batch`` (absolute values, so a batch replayed
        twice cannot count twice)."""
        for topic in self._dirty:
            key = b"Q" + topic.encode()
            count = self.counts.get(topic, 0)
            if count > 0:
                batch.wb.put(key, _U64.pack(count))
            else:
                self.counts.pop(topic, None)
                batch.wb.delete(key)
        self._dirty.clear()
        self._overlay.clear()
        self._origins.clear()

    def pending(self, topic: str | None = None) -> int:
        """Pending timers of ``topic`` (all topics if None): a counter, not a scan."""
        if topic is None:
            return sum(self.counts.values())
        return self.counts.get(topic, 0)

    # -- queries -----------------------------------------------------------------------

    def due_of(self, position: int) -> PendingTimer | None:
        """The pending timer of the delayed record at ``position``, or None."""
        raw = self.index.db.get(_pos_key(b"P", position))
        if raw is None:
            return None
        due, size = _PENDING.unpack_from(raw, 0)
        return PendingTimer(position, due, size, raw[_PENDING.size :].decode())

    def resolve(self, position: int) -> int:
        """Where the timer a front end knows by ``position`` (the position its publish
        returned) is now: the forward of a relocated timer, else ``position``."""
        raw = self.index.db.get(_pos_key(b"W", position))
        return position if raw is None else int(_U64.unpack(raw)[0])

    def next_due(self) -> int | None:
        """The earliest pending due time (ms), or None."""
        for key in rocks.keys(self.index.db, self._seek):
            if key.startswith(b"T"):
                return int(_TIMER_KEY.unpack(key)[1])
            break
        return None

    def due(self, now: int, limit: int) -> list[tuple[int, int, int]]:
        """Up to ``limit`` (due_ms, position, record_size) with ``due_ms <= now``, in
        due order; reads one page of the index, never everything due. It seeks from
        ``_seek``, not over the deletes fired timers leave at the start of the range
        (until RocksDB compacts them away, a seek would step over each)."""
        out: list[tuple[int, int, int]] = []
        for key, value in rocks.items(self.index.db, self._seek):
            if not key.startswith(b"T") or len(out) >= limit:
                break
            _, due, position = _TIMER_KEY.unpack(key)
            if due > now:
                break
            out.append((due, position, _SIZE.unpack(value)[0]))
        return out

    def retention_floor(self, now: int) -> int | None:
        """The lowest log position retention must keep (None: no hold): the lowest
        pending timer's record (:meth:`pending_floor`) and the lowest record fired
        within ``retention_ms`` (:meth:`fired_floor`)."""
        floors = [f for f in (self.pending_floor(), self.fired_floor(now)) if f is not None]
        return min(floors) if floors else None

    def pending_floor(self) -> int | None:
        """The lowest position with a pending timer: one seek."""
        for key in rocks.keys(self.index.db, b"P"):
            if key.startswith(b"P"):
                return int(_POS_KEY.unpack(key)[1])
            break
        return None

    def fired_floor(self, now: int) -> int | None:
        """The lowest record fired less than ``retention_ms`` ago. Fired holds that ran
        out are deleted here, lowest first (a conservative floor: one young hold keeps
        the holds above it until it runs out)."""
        retention = self.config.retention_ms
        if retention <= 0:
            return None
        db = self.index.db
        floor: int | None = None
        expired: list[bytes] = []
        for key, value in rocks.items(db, b"F"):
            if not key.startswith(b"F"):
                break
            if _U64.unpack(value)[0] >= now - retention:
                floor = _POS_KEY.unpack(key)[1]
                break
            expired.append(key)
        if expired:
            batch = self.index.new_batch()
            batch.wb.delete_range(expired[0], expired[-1] + b"\x00")
            batch.commit()
        return floor

    # -- writing (append lock held) ----------------------------------------------------

    def check_due(self, due_ms: int, now: int) -> None:
        if due_ms < 0 or due_ms >= CANCELLED:
            raise ValueError(f"due time {due_ms} out of range")
        limit = self.config.max_timer_delay_ms
        if due_ms - now > limit:
            raise DelayTooLong(
                f"due time {due_ms} is {due_ms - now} ms away; the maximum delay is"
                f" {limit} ms (StoreConfig.max_timer_delay_ms)"
            )

    def append_locked(
        self, items: Sequence[tuple[Message, Sequence[str], int]], now: int
    ) -> list[AppendResult]:
        """Append delayed messages (message, target LMQs, due ms): one record each, not
        dispatched, their timers in the index, in one log write and one index batch."""
        for _, targets, due in items:
            self.check_due(due, now)
            if not targets:
                raise StoreError("a delayed message needs at least one target LMQ")
        start = self.log.end
        writer = _Writer(self.log, self.config.segment_bytes)
        batch = self.index.new_batch()
        put = batch.raw_putter()
        results: list[AppendResult] = []
        try:
            for message, targets, due in items:
                wires = [dispatch_name(self.lmqs.validate_name(n)) for n in dict.fromkeys(targets)]
                tail = encode_dispatch_wire(wires, [due] * len(wires))
                record = encode_record_with_tail(
                    writer.position, now, message, tail, RecordType.MESSAGE, FLAG_DELAYED
                )
                writer.room(len(record))
                pos = writer.position
                if pos != _U64.unpack_from(record, 16)[0]:  # rolled: encode at the new place
                    record = encode_record_with_tail(
                        pos, now, message, tail, RecordType.MESSAGE, FLAG_DELAYED
                    )
                writer.buf += record
                props = message.properties
                if props and self.keys.properties and not self.keys.names.isdisjoint(props):
                    self.keys.put(put, message.topic, props, pos, now, self.log.active_base)
                self._add(batch, pos, due, len(record), message.topic)
                results.append(AppendResult(pos, len(record), now, ()))
            writer.flush()
            self._commit(batch)
        except BaseException:
            self._undo(start)
            raise
        return results

    def change_locked(self, position: int, new_due: int, now: int) -> PendingTimer | None:
        """Cancel (``new_due`` = :data:`CANCELLED`) or reschedule the pending timer of
        the record at ``position``: a change record, then the index. Returns the timer
        as it was, or None (and writes nothing) if none is pending there.
        ``position`` may be a relocated timer's first position (:meth:`resolve`)."""
        position = self.resolve(position)
        timer = self.due_of(position)
        if timer is None:
            return None
        if new_due != CANCELLED:
            self.check_due(new_due, now)
        start = self.log.end
        writer = _Writer(self.log, self.config.segment_bytes)
        batch = self.index.new_batch()
        try:
            body = CHANGE_BODY.pack(position, timer.record_size, timer.due_ms, new_due)
            self._control(writer, now, Message(timer.topic, body), _EMPTY_DISPATCH,
                          RecordType.TIMER_CHANGE)
            self._remove(batch, position, timer.due_ms, timer.topic)
            if new_due != CANCELLED:
                self._add(batch, position, new_due, timer.record_size, timer.topic)
            else:
                self._forget_forward(batch, position, self._origin_live(position))
            writer.flush()
            self._commit(batch)
        except BaseException:
            self._undo(start)
            raise
        return timer

    def fire_locked(self, now: int, limit: int) -> tuple[int, list[LmqMeta]]:
        """Fire up to ``limit`` timers due by ``now``, in due order: one fire record
        each, in one log write and one index batch. Returns how many fired and the LMQs
        that gained entries (for the listeners).

        The hot loop of a burst (a million due at once). Per timer it reads the delayed
        record's bytes (one ``read_each`` for the page), checks them as every reader
        does (magic, size, CRC32C, position) and cuts out only what a fire needs
        (topic, tag, body size, the LMQ names), not the properties or the body
        (:mod:`broker_core.timer_records`); the fire record is encoded directly (the same
        bytes :func:`encode_record_with_tail` makes); topic, tag, tag hash and LMQ
        names are decoded once per page; the per-topic counters change once per page."""
        due = self.due(now, limit)
        if not due:
            return 0, []
        lmqs = self.lmqs
        cache = lmqs.cache
        start = self.log.end
        pending = Pending(start=start, next_id=lmqs.next_id)
        touched = pending.metas
        writer = _Writer(self.log, self.config.segment_bytes)
        batch = self.index.new_batch()
        put = batch.raw_putter()
        delete = batch.wb.delete
        forwards = self._any_forward()  # one seek a page; relocated timers are rare
        raws = self.log.read_each([p for _, p, _ in due], [z for _, _, z in due])
        strings: dict[bytes, str] = {}  # topics
        wire_names: dict[bytes, str] = {}  # LMQ names by their wire form
        hashes: dict[bytes, int] = {}
        fired: dict[str, int] = {}
        fired_at = _U64.pack(now)
        try:
            for (due_ms, position, size), raw in zip(due, raws, strict=True):
                if forwards:
                    self._forget_forward(batch, position, self._origin_live(position))
                try:
                    if raw is None:
                        raise StoreError(f"the record at {position} is gone")
                    topic_b, tag_b, body_size, wires = fire_fields(raw, position)
                    topic = strings.get(topic_b)
                    if topic is None:
                        topic = strings[topic_b] = topic_b.decode()
                    thash = hashes.get(tag_b)
                    if thash is None:
                        thash = hashes[tag_b] = tag_hash(tag_b.decode()) if tag_b else 0
                    names = [wire_names.get(w) or wire_names.setdefault(w, w[2:].decode())
                             for w in wires]
                except (CorruptRecord, StoreError, UnicodeDecodeError) as exc:
                    # Never loop on a record that cannot be read: cancel its timer, in
                    # the log like any cancel, and say so.
                    log.error("timer of the record at %d cancelled: %s", position, exc)
                    body = CHANGE_BODY.pack(position, size, due_ms, CANCELLED)
                    topic = self._topic_of(position)
                    self._control(writer, now, Message(topic, body), _EMPTY_DISPATCH,
                                  RecordType.TIMER_CHANGE)
                    self._remove(batch, position, due_ms, topic)
                    continue
                entry = ENTRY.pack(position, size, body_size, thash, now)
                parts = [COUNT.pack(len(names))]
                for name in names:
                    meta = cache.get(name)
                    if meta is None:
                        meta = lmqs.meta_for_write(name, now, batch, pending)
                    offset = meta.next_offset
                    packed = _OFFSET.pack(offset)
                    parts.append(meta.wire)
                    parts.append(packed)
                    put(meta.key_prefix + packed, entry)
                    if offset == meta.min_offset:
                        meta.min_position = position
                    meta.next_offset = offset + 1
                    meta.bytes += body_size
                    touched[meta.id] = meta
                tail = b"".join(parts)
                writer.room(FIRE_FIXED + len(topic_b) + len(tag_b) + len(tail))
                writer.buf += fire_record(
                    writer.position, now, topic_b, tag_b,
                    FIRE_BODY.pack(position, size, body_size, due_ms), tail,
                )
                delete(_TIMER_KEY.pack(b"T", due_ms, position))
                pos_key = _POS_KEY.pack(b"P", position)
                delete(pos_key)
                fired[topic] = fired.get(topic, 0) + 1
                put(b"F" + pos_key[1:], fired_at)
            for topic, count in fired.items():
                self._count(topic, -count)
            writer.flush()
            for meta in touched.values():
                meta.last_write_ms = now
                if meta.name in cache:
                    cache.move_to_end(meta.name)
                batch.put_meta(meta)
            self._commit(batch)
        except BaseException:
            lmqs.undo(pending)
            self._undo(start)
            raise
        lmqs.trim()
        # every timer up to the last one fired is gone (fired, or cancelled if unreadable)
        self._seek = max(self._seek, _timer_key(*due[-1][:2]) + b"\x00")
        return len(due), list(touched.values())

    def relocate_locked(self, before: int, limit: int, now: int) -> int:
        """Relocate up to ``limit`` pending timers whose records lie below ``before``
        (lowest position first; see the module docstring): for each, a copy of the
        delayed record at the log's end and a relocate record, all in one log write and
        one index batch. Returns how many moved. Reads only the ``P`` keys below
        ``before``: nothing when nothing pins. A record that cannot be read stays (its
        timer is cancelled when it comes due, :meth:`fire_locked`) and is logged."""
        todo: list[PendingTimer] = []
        end_key = _pos_key(b"P", before)
        for key, value in rocks.items(self.index.db, b"P"):
            if not key.startswith(b"P") or key >= end_key or len(todo) >= limit:
                break
            due, size = _PENDING.unpack_from(value, 0)
            todo.append(PendingTimer(_POS_KEY.unpack(key)[1], due, size,
                                     value[_PENDING.size:].decode()))
        if not todo:
            return 0
        start = self.log.end
        writer = _Writer(self.log, self.config.segment_bytes)
        batch = self.index.new_batch()
        put = batch.raw_putter()
        moved = 0
        try:
            for timer in todo:
                old = timer.position
                try:
                    record = self.log.read(old, timer.record_size)
                except (CorruptRecord, StoreError) as exc:
                    log.error("pending timer of the record at %d not relocated: %s", old, exc)
                    continue
                # the copy's list carries the CURRENT due time (a reschedule moved it
                # since), so a replay of the copy alone adds the timer as it is now
                message = Message(
                    record.topic, record.body, record.properties or None, record.origin,
                    record.tag, record.qos, record.retain, record.protocol, record.born_ms,
                )
                wires = [dispatch_name(name.encode()) for name, _ in record.dispatch]
                tail = encode_dispatch_wire(wires, [timer.due_ms] * len(wires))
                new = self._copy(writer, record.store_ms, message, tail)
                size = writer.position - new
                if record.properties and self.keys.properties and (
                    not self.keys.names.isdisjoint(record.properties)
                ):  # the same key puts a replay of the copy makes
                    self.keys.put(put, record.topic, record.properties, new,
                                  record.store_ms, self.log.active_base)
                origin = self._origin_live(old)
                body = CHANGE_BODY.pack(old, timer.record_size, timer.due_ms, CANCELLED)
                body += RELOCATE_TAIL.pack(new, origin)
                self._control(writer, now, Message(timer.topic, body), _EMPTY_DISPATCH,
                              RecordType.TIMER_CHANGE)
                self._remove(batch, old, timer.due_ms, timer.topic)
                self._add(batch, new, timer.due_ms, size, timer.topic)
                self._forward(batch, old, new, origin)
                moved += 1
            writer.flush()
            self._commit(batch)
        except BaseException:
            self._undo(start)
            raise
        return moved

    # -- forwards of relocated timers (W, V) -------------------------------------------

    def _any_forward(self) -> bool:
        for key in rocks.keys(self.index.db, b"V"):
            return key.startswith(b"V")
        return False

    def _origin_live(self, position: int) -> int:
        raw = self.index.db.get(_pos_key(b"V", position))
        return position if raw is None else int(_U64.unpack(raw)[0])

    def _origin_replay(self, position: int) -> int:
        if position in self._origins:
            known = self._origins[position]
            return position if known is None else known
        return self._origin_live(position)

    def _forward(self, batch: IndexBatch, old: int, new: int, origin: int) -> None:
        """The timer known as ``origin`` moved from ``old`` to ``new``."""
        if origin != old:
            batch.wb.delete(_pos_key(b"V", old))
        batch.wb.put(_pos_key(b"W", origin), _U64.pack(new))
        batch.wb.put(_pos_key(b"V", new), _U64.pack(origin))
        self._origins[old] = None
        self._origins[new] = origin

    def _forget_forward(self, batch: IndexBatch, position: int, origin: int) -> None:
        """The timer at ``position`` fired or was cancelled: its forward goes."""
        if origin != position:
            batch.wb.delete(_pos_key(b"W", origin))
            batch.wb.delete(_pos_key(b"V", position))
            self._origins[position] = None

    def _topic_of(self, position: int) -> str:
        timer = self.due_of(position)
        return timer.topic if timer is not None else ""

    def _control(
        self, writer: _Writer, now: int, message: Message, tail: bytes, rtype: RecordType,
        flags: int = 0,
    ) -> int:
        record = encode_record_with_tail(writer.position, now, message, tail, rtype, flags)
        writer.room(len(record))
        pos = writer.position
        if pos != _U64.unpack_from(record, 16)[0]:
            record = encode_record_with_tail(pos, now, message, tail, rtype, flags)
        writer.buf += record
        return pos

    def _copy(self, writer: _Writer, store_ms: int, message: Message, tail: bytes) -> int:
        """A relocated delayed record (its original store time kept)."""
        return self._control(writer, store_ms, message, tail, RecordType.MESSAGE, FLAG_DELAYED)

    def _add(self, batch: IndexBatch, position: int, due: int, size: int, topic: str) -> None:
        key = _timer_key(due, position)
        if key < self._seek:
            self._seek = key
        batch.wb.put(key, _SIZE.pack(size))
        batch.wb.put(_pos_key(b"P", position), _PENDING.pack(due, size) + topic.encode())
        self._count(topic, 1)

    def _remove(self, batch: IndexBatch, position: int, due: int, topic: str) -> None:
        batch.wb.delete(_timer_key(due, position))
        batch.wb.delete(_pos_key(b"P", position))
        self._count(topic, -1)

    def _commit(self, batch: IndexBatch) -> None:
        self.flush_counts(batch)
        batch.put_checkpoint(self.lmqs.checkpoint(self.log.end))
        batch.commit()

    def _undo(self, start: int) -> None:
        """A failed write: cut its records off the log, reread the counters."""
        self.tail.clear_records()
        if self.log.end > start:
            try:
                self.log.truncate(start)
            except OSError:
                log.exception("could not cut a failed timer batch off the log")
        self.load()

    # -- replay (broker_core.recovery) -------------------------------------------------

    def _is_pending(self, position: int) -> bool:
        known = self._overlay.get(position)
        if known is not None:
            return known
        return self.index.db.get(_pos_key(b"P", position)) is not None

    def replay(self, batch: IndexBatch, record: Record) -> None:
        """The timer-index changes of one replayed record (a delayed message, a fire or
        a change), exactly those its live write made. Idempotent: a timer already
        pending is not added (or counted) again, one already gone not removed again."""
        if record.type == RecordType.MESSAGE:
            if record.dispatch and not self._is_pending(record.position):
                due = record.dispatch[0][1]
                self._add(batch, record.position, due, record.size, record.topic)
                self._overlay[record.position] = True
            return
        new_due = CANCELLED
        if record.type == RecordType.TIMER_FIRE:
            position, _size, _body, due = FIRE_BODY.unpack_from(record.body, 0)
            batch.wb.put(_pos_key(b"F", position), _U64.pack(record.store_ms))
        else:
            position, size, due, new_due = CHANGE_BODY.unpack_from(record.body, 0)
        if self._is_pending(position):
            self._remove(batch, position, due, record.topic)
            self._overlay[position] = False
        if len(record.body) == CHANGE_BODY.size + RELOCATE_TAIL.size:
            # a relocation: the copy (the record before this one) added the new timer
            new, origin = RELOCATE_TAIL.unpack_from(record.body, CHANGE_BODY.size)
            self._forward(batch, position, new, origin)
        elif new_due != CANCELLED:
            self._add(batch, position, new_due, size, record.topic)
            self._overlay[position] = True
        else:  # fired or cancelled: a forward to it goes (as the live write did)
            self._forget_forward(batch, position, self._origin_replay(position))


def fire_entry_fields(record: Record) -> tuple[int, int, int, int]:
    """What the index entries of a fire record point at: the delayed record's position,
    size, body size and tag hash (the entries' store time is the fire record's)."""
    position, size, body_size, _ = FIRE_BODY.unpack_from(record.body, 0)
    return position, size, body_size, tag_hash(record.tag) if record.tag else 0
