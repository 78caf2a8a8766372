"""Transactional messages: half messages, their end (commit / rollback) and check-backs.

The log is the single truth; everything here is derived from two record types
(:mod:`broker_core.record`) and rebuilt by replaying them (:mod:`broker_core.recovery`):

- ``TXN_HALF`` (5): the half message, written once, laid out as a message record. Its
  dispatch list names the LMQs it is meant for, every offset 0: no offset is assigned and
  no index entry made, so no reader can find it. The producer group is its
  :data:`GROUP_PROPERTY` property (RocketMQ's ``PGROUP``; set by the store).
- ``TXN_CONTROL`` (6): a small control record about one half message. Its body is
  :data:`CONTROL` = ``half position u64 | half size u32 | half body size u32 |
  half tag hash u64 | action u8`` and its topic is the half's. Actions:

  - ``COMMIT`` (1): its dispatch list holds the (LMQ, offset) pairs assigned at commit;
    every one of those index entries points at the HALF record's position (readers read
    the original record, type ``TXN_HALF``), all in one WriteBatch: atomic.
  - ``ROLLBACK`` (2): empty dispatch list; the outcome only.
  - ``CHECK`` (3): a check-back was handed out; counts it and moves the next check.
  - ``DEAD_LETTER`` (4): the last check went unanswered; the dispatch list holds the one
    (dead-letter LMQ, offset) pair, the entry again pointing at the half record.

RocksDB keys, in the index database beside the consume queues (written in the same
WriteBatch as the checkpoint covering the record, so they are exactly "everything before
``dispatched_to``"; integers big-endian)::

    pending  b"X" | half position u64 -> PENDING | group | topic | lmq names
    ended    b"Y" | half position u64 -> action u8 | control record end u64

An ended key is what makes ending idempotent after the pending key is gone; the trim of
retention drops those below the log start (one range delete, as the key index does).

Check schedule: the first check is due ``txn_first_check_ms`` after the half was stored,
or after the message's own ``CHECK_IMMUNITY_TIME_IN_SECONDS`` if that is longer; each
check (a CHECK record, stored before the check is handed out, so a restart never resets
the count) moves the next one ``txn_check_interval_ms`` on. A half due with
``txn_max_checks`` checks made is dead-lettered instead of checked again.

Thread safety: the table is changed with the store's append lock held; reads of the
pending dict from other threads see a consistent snapshot per entry.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import cast

from rocksdict import ReadOptions
from sortedcontainers import SortedList

from broker_core import rocks
from broker_core.clock import now_ms, tag_hash
from broker_core.config import StoreConfig
from broker_core.consume_queue import ConsumeQueueIndex, IndexBatch, LmqMeta
from broker_core.dispatch import Dispatcher
from broker_core.errors import StoreError
from broker_core.lmq_table import Pending
from broker_core.record import Message, Record, RecordType, decode_record, encode_record
from broker_core.results import AppendResult

log = logging.getLogger(__name__)

#: The half message's property naming its producer group (RocketMQ's name).
GROUP_PROPERTY = "PGROUP"
#: A message property: seconds before the first check-back (RocketMQ's name).
IMMUNITY_PROPERTY = "CHECK_IMMUNITY_TIME_IN_SECONDS"

CONTROL = struct.Struct(">QIIQB")
_PENDING = struct.Struct(">QQQQIIQIHHI")
_ENDED = struct.Struct(">BQ")
_U16 = struct.Struct(">H")
_POS = struct.Struct(">Q")
_PENDING_PREFIX = b"X"
_ENDED_PREFIX = b"Y"


class Action(enum.IntEnum):
    COMMIT = 1
    ROLLBACK = 2
    CHECK = 3
    DEAD_LETTER = 4


class Outcome(enum.StrEnum):
    """What :meth:`MessageStore.end_transaction` did."""

    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    ALREADY_COMMITTED = "already_committed"
    ALREADY_ROLLED_BACK = "already_rolled_back"
    #: The last check went unanswered; the message is in the dead-letter LMQ.
    ALREADY_DEAD_LETTERED = "already_dead_lettered"
    #: No half message at that position (never, or its segment is gone).
    UNKNOWN = "unknown"


#: The outcome a repeated end reports, by how the half ended.
ALREADY = {
    Action.COMMIT: Outcome.ALREADY_COMMITTED,
    Action.ROLLBACK: Outcome.ALREADY_ROLLED_BACK,
    Action.DEAD_LETTER: Outcome.ALREADY_DEAD_LETTERED,
}


@dataclass(frozen=True, slots=True)
class PendingTransaction:
    """A half message not yet ended. Times are epoch ms."""

    position: int
    size: int
    body_size: int
    tag_hash: int
    store_ms: int
    born_ms: int
    group: str
    topic: str
    lmqs: tuple[str, ...]
    checks: int
    next_check_ms: int
    #: Position of the last control record applied (replay skips older ones).
    applied_to: int

    def age_ms(self, now: int | None = None) -> int:
        return max(0, (now_ms() if now is None else now) - self.store_ms)

    def encode(self) -> bytes:
        group = self.group.encode()
        topic = self.topic.encode()
        names = b"".join(_U16.pack(len(n)) + n for n in (x.encode() for x in self.lmqs))
        return (
            _PENDING.pack(
                self.store_ms, self.born_ms, self.next_check_ms, self.applied_to,
                self.size, self.body_size, self.tag_hash, self.checks,
                len(group), len(topic), len(self.lmqs),
            )
            + group + topic + names
        )

    @classmethod
    def decode(cls, position: int, raw: bytes) -> PendingTransaction:
        (store_ms, born_ms, next_check, applied, size, body, thash, checks, glen, tlen,
         count) = _PENDING.unpack_from(raw, 0)
        at = _PENDING.size
        group = raw[at : at + glen].decode()
        at += glen
        topic = raw[at : at + tlen].decode()
        at += tlen
        names = []
        for _ in range(count):
            (n,) = _U16.unpack_from(raw, at)
            names.append(raw[at + 2 : at + 2 + n].decode())
            at += 2 + n
        return cls(position, size, body, thash, store_ms, born_ms, group, topic,
                   tuple(names), checks, next_check, applied)


@dataclass(frozen=True, slots=True)
class EndResult:
    outcome: Outcome
    #: The end of the control record that decided it (0 for UNKNOWN).
    control_end: int = 0


def first_check_ms(record: Record, config: StoreConfig) -> int:
    """When the first check of the half ``record`` is due."""
    delay = config.txn_first_check_ms
    raw = record.properties.get(IMMUNITY_PROPERTY)
    if raw:
        try:
            delay = max(delay, int(raw.decode()) * 1000)
        except (UnicodeDecodeError, ValueError):
            pass  # not a number: the default applies, as RocketMQ does
    return record.store_ms + delay


class TransactionTable:
    """The pending half messages (memory, loaded from the ``X`` keys) and the ended ones
    (the ``Y`` keys, read on demand)."""

    def __init__(self, index: ConsumeQueueIndex, config: StoreConfig) -> None:
        self.index = index
        self.config = config
        self.pending: dict[int, PendingTransaction] = {}
        #: (next_check_ms, position) of every pending half.
        self.schedule: SortedList = SortedList()
        #: Half messages dead-lettered by this process (a metric).
        self.dead_lettered = 0

    # -- state -------------------------------------------------------------------------

    def clear(self) -> None:
        self.pending.clear()
        self.schedule.clear()

    def load(self) -> None:
        """Read the pending keys (after the index was opened or reset)."""
        self.clear()
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_ENDED_PREFIX)
        for key, value in rocks.items(self.index.db, _PENDING_PREFIX, opts):
            (position,) = _POS.unpack_from(key, 1)
            self._put(PendingTransaction.decode(position, value))

    def _put(self, txn: PendingTransaction) -> None:
        old = self.pending.get(txn.position)
        if old is not None:
            self.schedule.discard((old.next_check_ms, old.position))
        self.pending[txn.position] = txn
        self.schedule.add((txn.next_check_ms, txn.position))

    def _drop(self, position: int) -> PendingTransaction | None:
        old = self.pending.pop(position, None)
        if old is not None:
            self.schedule.discard((old.next_check_ms, old.position))
        return old

    def ended(self, position: int) -> tuple[Action, int] | None:
        """(action, control record end) of an ended half, or None."""
        raw = cast(bytes | None, self.index.db.get(_ENDED_PREFIX + _POS.pack(position)))
        if raw is None:
            return None
        action, end = _ENDED.unpack(raw)
        return Action(action), end

    def oldest_pending(self) -> int | None:
        """The lowest log position of a pending half (retention keeps its segment)."""
        return min(self.pending) if self.pending else None

    def due(self, now: int, limit: int) -> list[PendingTransaction]:
        out: list[PendingTransaction] = []
        for next_check, position in self.schedule:
            if next_check > now or len(out) >= limit:
                break
            out.append(self.pending[position])
        return out

    def iter_pending(self) -> Iterator[PendingTransaction]:
        """Pending halves, oldest first (a copy taken at once: any thread may call it
        while an append changes the dict)."""
        snapshot = self.pending.copy()
        for position in sorted(snapshot):
            yield snapshot[position]

    def trim(self, log_min: int) -> None:
        """Forget the outcomes of halves below ``log_min`` (their segments are gone)."""
        batch = self.index.new_batch()
        batch.wb.delete_range(_ENDED_PREFIX + _POS.pack(0), _ENDED_PREFIX + _POS.pack(log_min))
        batch.commit()

    # -- applying records (live and replayed alike) ------------------------------------

    def apply(self, record: Record, batch: IndexBatch) -> PendingTransaction | None:
        """Apply a ``TXN_HALF`` or ``TXN_CONTROL`` record to the table and put its keys
        in ``batch``. For a control record that dispatches (commit, dead letter) of a
        half still pending, returns the half: the caller puts the index entries of the
        record's dispatch list, pointing at it. Idempotent: a control record at or
        before the half's ``applied_to``, or about a half not pending, changes nothing."""
        if record.type == RecordType.TXN_HALF:
            if record.position in self.pending:
                return None
            group = record.properties.get(GROUP_PROPERTY, b"").decode("utf-8", "replace")
            txn = PendingTransaction(
                record.position, record.size, len(record.body), tag_hash(record.tag),
                record.store_ms, record.born_ms, group, record.topic,
                tuple(name for name, _ in record.dispatch), 0,
                first_check_ms(record, self.config), record.position,
            )
            self._put(txn)
            batch.put_raw(_PENDING_PREFIX + _POS.pack(txn.position), txn.encode())
            return None
        half_pos, _size, _body, _thash, action = CONTROL.unpack(record.body)
        found = self.pending.get(half_pos)
        if found is None or record.position <= found.applied_to:
            return None
        txn = found
        key = _POS.pack(half_pos)
        if action == Action.CHECK:
            txn = replace(
                txn, checks=txn.checks + 1,
                next_check_ms=record.store_ms + self.config.txn_check_interval_ms,
                applied_to=record.position,
            )
            self._put(txn)
            batch.put_raw(_PENDING_PREFIX + key, txn.encode())
            return None
        self._drop(half_pos)
        batch.wb.delete(_PENDING_PREFIX + key)
        batch.put_raw(_ENDED_PREFIX + key, _ENDED.pack(action, record.next_position))
        return txn if action in (Action.COMMIT, Action.DEAD_LETTER) else None


def control_half(record: Record) -> int:
    """The position of the half message a ``TXN_CONTROL`` record is about."""
    return int(CONTROL.unpack(record.body)[0])


def control_message(txn: PendingTransaction, action: Action) -> Message:
    body = CONTROL.pack(txn.position, txn.size, txn.body_size, txn.tag_hash, action)
    return Message(topic=txn.topic, body=body)


class TransactionWriter:
    """Appends half and control records with the dispatcher's parts. Every method is
    called with the store's append lock held."""

    def __init__(self, dispatcher: Dispatcher, table: TransactionTable) -> None:
        self.d = dispatcher
        self.table = table

    def write_half_locked(self, message: Message, lmqs: Sequence[str], group: str) -> AppendResult:
        d = self.d
        names = list(dict.fromkeys(lmqs))
        if not names:
            raise StoreError("a half message needs at least one LMQ")
        raws = [d.lmqs.validate_name(n) for n in names]
        props = dict(message.properties or {})
        props[GROUP_PROPERTY] = group.encode()
        message = replace(message, properties=props)
        results = self._append([(message, [(raw, 0) for raw in raws], RecordType.TXN_HALF, ())])
        return results[0][0][0]

    def write_controls_locked(
        self, ops: Sequence[tuple[PendingTransaction, Action, Sequence[str]]]
    ) -> tuple[list[tuple[AppendResult, PendingTransaction | None]], list[LmqMeta]]:
        """Append one control record per op (half, action, LMQs to dispatch it to) in one
        write and one WriteBatch; returns each result with the half it dispatched."""
        items: list[tuple[Message, list[tuple[bytes, int]], RecordType, tuple[str, ...]]] = []
        for txn, action, targets in ops:
            targets = list(dict.fromkeys(targets))
            items.append((control_message(txn, action), [], RecordType.TXN_CONTROL,
                          tuple(targets)))
        return self._append(items)

    def _append(
        self,
        items: Sequence[tuple[Message, list[tuple[bytes, int]], RecordType, tuple[str, ...]]],
    ) -> tuple[list[tuple[AppendResult, PendingTransaction | None]], list[LmqMeta]]:
        """Encode, write and apply records; the results and the LMQs touched.
        ``targets`` (control records only) are the LMQs given offsets now; their index
        entries point at the half record."""
        d, table = self.d, self.table
        log_, lmqs = d.log, d.lmqs
        now = now_ms()
        batch = d.index.new_batch()
        pending = Pending(start=log_.end, next_id=lmqs.next_id)
        touched = pending.metas
        seg_room = d.config.segment_bytes
        room = seg_room - log_.active_size
        buf = bytearray()
        pos = log_.end
        out: list[tuple[AppendResult, PendingTransaction | None]] = []
        hot_records: list[tuple[int, int, Record]] = []
        try:
            for message, dispatch, rtype, targets in items:
                metas = [lmqs.meta_for_write(n, now, batch, pending) for n in targets]
                pairs = [(m.name.encode(), m.next_offset) for m in metas]
                raw = encode_record(position=pos, store_ms=now, message=message,
                                    dispatch=dispatch or pairs, record_type=rtype)
                size = len(raw)
                if len(buf) + size > room:
                    buf, room = d.room_for(buf, size, seg_room)
                buf += raw
                record = decode_record(bytes(raw), pos)
                if rtype == RecordType.TXN_HALF:
                    self._index_keys(record, batch, now)
                half = table.apply(record, batch)
                offsets: tuple[int, ...] = ()
                if half is not None:
                    offsets = tuple(m.next_offset for m in metas)
                    self._dispatch(half, metas, batch, now, touched, hot_records, record)
                elif metas:
                    raise StoreError("a control record dispatched a half that is not pending")
                out.append((AppendResult(pos, size, now, offsets), half))
                pos += size
            if buf:
                log_.write(buf)
            for meta in touched.values():
                meta.last_write_ms = now
                batch.put_meta(meta)
            batch.put_checkpoint(lmqs.checkpoint(pos))
            batch.commit()
        except BaseException:
            d.undo(pending)
            table.load()  # the in-memory table back to the keys as they were
            raise
        lmqs.trim()
        for lmq_id, offset, hot in hot_records:
            d.tail.young[(lmq_id, offset)] = hot
        d.tail.rotate()
        return out, list(touched.values())

    def _index_keys(self, record: Record, batch: IndexBatch, now: int) -> None:
        """A half message's keys (``KEYS``, ``UNIQ_KEY``...) go into the key index as a
        message's do, so a committed one is found by key; readers skip the ones not
        committed (``MessageStore.transaction_outcome``). Replay puts the same keys."""
        keys = self.d.keys
        props = record.properties
        if props and keys.properties and not keys.names.isdisjoint(props):
            keys.put(batch.put_raw, record.topic, props, record.position, now,
                     self.d.log.active_base)

    def _dispatch(
        self,
        half: PendingTransaction,
        metas: list[LmqMeta],
        batch: IndexBatch,
        now: int,
        touched: dict[int, LmqMeta],
        hot_records: list[tuple[int, int, Record]],
        control: Record,
    ) -> None:
        """Index entries at the half's position in every LMQ of ``metas``: the commit."""
        listened = self.d.listeners.by_lmq
        shared: Record | None = None
        for meta in metas:
            offset = meta.next_offset
            batch.put_entry(meta.id, offset, half.position, half.size, half.body_size,
                            half.tag_hash, now)
            if listened and meta.name in listened:
                if shared is None:
                    shared = replace(
                        self.d.log.read(half.position, half.size), dispatch=control.dispatch
                    )
                hot_records.append((meta.id, offset, shared))
            if offset == meta.min_offset:
                meta.min_position = half.position
            meta.next_offset = offset + 1
            meta.bytes += half.body_size
            touched[meta.id] = meta
