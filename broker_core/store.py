"""The message store: one commit log, atomic multi-dispatch into LMQs, pull and pop.

This module is the facade. It owns the store's life cycle (the directory lock, opening
with recovery, closing) and the read paths, and hands each job to the part that owns it:

- :mod:`broker_core.dispatch`: the write path (append, LMQ creation, undo);
- :mod:`broker_core.lmq_table`: each LMQ's dispatch state (meta LRU, ids, checkpoint);
- :mod:`broker_core.tail_cache`: the hot tail and the decoded-record cache;
- :mod:`broker_core.listeners`: callbacks when LMQs gain entries;
- :mod:`broker_core.recovery`, :mod:`broker_core.cleanup`, :mod:`broker_core.pop`:
  handed those pieces, never the store.

Parts a feature owns are typed public attributes, used directly (as RocketMQ's message
store exposes its timer store), not wrapped method by method: ``store.pop``
(:class:`~broker_core.pop.PopConsumer`), ``store.timers``, ``store.txns``,
``store.origins``.

Thread safety: every public method may be called from any thread. Appends, LMQ
creation, retention and removal serialise on the append lock; pop, ack and revive on
the pop lock (taken before the append lock when both are needed); pulls take no lock.
Listener callbacks run on the appending thread after the lock is released: they must
be quick and must not block (an asyncio front end uses ``call_soon_threadsafe``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from pathlib import Path

from broker_core import cleanup, recovery
from broker_core.clock import now_ms, tag_hash
from broker_core.commit_log import CommitLog, ScanStop
from broker_core.config import Durability, StoreConfig
from broker_core.consume_queue import ConsumeQueueIndex, LmqMeta
from broker_core.consumer_state import ConsumerState
from broker_core.dispatch import Dispatcher
from broker_core.errors import MessageTooLarge, StoreClosed, StoreError, UnknownLmq
from broker_core.group_commit import Flusher
from broker_core.key_index import KeyIndex
from broker_core.listeners import Listener, Listeners
from broker_core.lmq_table import LmqTable
from broker_core.locks import StoreLocks
from broker_core.origins import ORIGIN_PROPERTY, OriginTable, decode_origin, encode_origin
from broker_core.parts import StoreParts
from broker_core.pop import PopConsumer
from broker_core.reads import Reader
from broker_core.record import Message, Record, RecordType, peek_size
from broker_core.recovery import RecoveryReport
from broker_core.replication import Replica
from broker_core.results import AppendResult, LmqInfo, PullResult, StoredMessage
from broker_core.tail_cache import TailCache
from broker_core.timers import CANCELLED, PendingTimer, Timers, delay_level_ms
from broker_core.transactions import (
    ALREADY,
    Action,
    EndResult,
    Outcome,
    PendingTransaction,
    TransactionTable,
    TransactionWriter,
)

#: Record types that hold a message (a half message is delivered from its own record).
_MESSAGE_TYPES = (RecordType.MESSAGE, RecordType.TXN_HALF)

__all__ = [
    "AppendResult", "Listener", "LmqInfo", "MessageStore", "PullResult", "StoredMessage",
    "now_ms", "tag_hash",
]

log = logging.getLogger(__name__)


class MessageStore:
    """Open with :meth:`open`; close with :meth:`close` (or use as a context manager)."""

    def __init__(self, data_dir: Path, config: StoreConfig, *, read_only: bool = False) -> None:
        self.data_dir = data_dir
        self.config = config
        self.read_only = read_only
        self.locks = StoreLocks(read_only)
        self._lmq_count_cache: tuple[float, int] | None = None
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
                raise StoreError(  # a gateway (or a writing lmq command) holds it
                    f"data directory {data_dir} is in use by another process"
                    " (stop the gateway first)"
                ) from None
        self.log = CommitLog(data_dir / "commitlog", config.segment_bytes, read_only)
        self.index = ConsumeQueueIndex(data_dir / "index", read_only)
        self.state = ConsumerState(
            data_dir / "state", sync=config.durability == Durability.SYNC, read_only=read_only
        )
        self.lmq_table = LmqTable(self.index, config.lmq_cache_size, config.max_lmq_name_bytes)
        self.tail = TailCache()
        self.listeners = Listeners()
        self.keys = KeyIndex(self.index, tuple(config.key_index_properties))
        #: The origin marks of copied messages (the connector's high-water marks:
        #: ``origins.high_water``); written by :meth:`append_copies`/:meth:`advance_origin`.
        self.origins: OriginTable = OriginTable(self.index)
        self.dispatcher = Dispatcher(
            self.log, self.index, self.lmq_table, self.tail, self.listeners, config, self.keys,
            self.origins,
        )
        #: The transactions' half messages (``txns.pending``, ``txns.iter_pending()``,
        #: oldest first); written by :meth:`append_half`/:meth:`end_transaction`.
        self.txns: TransactionTable = TransactionTable(self.index, config)
        self.txn_writer = TransactionWriter(self.dispatcher, self.txns)
        self.reader = Reader(self.log, self.index, self.lmq_table, self.tail, config)
        #: The timer store of delayed messages (``timers.pending(topic)``, a counter);
        #: written by :meth:`append_delayed` and :meth:`fire_timers`.
        self.timers: Timers = Timers(
            self.log, self.index, self.lmq_table, self.keys, self.tail, config
        )
        self.flusher: Flusher | None = None
        #: What opening found and repaired (set by :meth:`open`).
        self.recovery: RecoveryReport | None = None
        #: Pop, ack, change of invisible time, revive and FIFO pop
        #: (:class:`~broker_core.pop.PopConsumer`; a slave of a broker group does not
        #: revive: its master's pop state arrives replicated).
        self.pop: PopConsumer = PopConsumer(
            self.state, self, self.append, self.locks, config,
            replica=lambda: self.log.fence is not None,
        )
        #: A broker group's replication of this store (broker_core.replication); its
        #: fence makes a slave refuse writes. Built by :meth:`open`.
        self.replica: Replica | None = None
        #: Set by a master in sync replication: a future done once replicas hold an
        #: append ending at the position given (gateway.replication); see acknowledged.
        self.ack_gate: Callable[[int], Future[int]] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls, data_dir: str | os.PathLike[str], config: StoreConfig | None = None
    ) -> MessageStore:
        """Open (creating if needed) and recover the store in ``data_dir``. The report of
        what recovery truncated and replayed is in ``store.recovery``."""
        store = cls(Path(data_dir), config or StoreConfig())
        try:
            store.recovery = recovery.recover(store._parts())
        except BaseException:
            store._close_files()
            raise
        try:
            store.replica = Replica(store._parts(), store.data_dir)
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
        store = cls(Path(data_dir), config or StoreConfig(), read_only=True)
        store.txns.load()
        store.origins.load()
        return store

    def _parts(self) -> StoreParts:
        return StoreParts(
            self.log, self.index, self.state, self.lmq_table, self.tail, self.locks,
            self.config, self.keys, self.timers, self.txns, self.origins,
        )

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self.locks.pop, self.locks.append:
            if self.locks.closed:
                return
            self.locks.closed = True
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

    @property
    def closed(self) -> bool:
        return self.locks.closed

    # -- appending ---------------------------------------------------------------------

    def append(self, message: Message, lmqs: Sequence[str], *, wait: bool = True) -> AppendResult:
        """Append one message and dispatch it to ``lmqs``. See :meth:`append_batch`."""
        return self.append_batch([(message, lmqs)], wait=wait)[0]

    def append_batch(
        self, items: Sequence[tuple[Message, Sequence[str]]], *, wait: bool = True
    ) -> list[AppendResult]:
        """Append messages, each dispatched atomically to its LMQs, in one log write and
        one index write (see :mod:`broker_core.dispatch`). With ``wait`` (the default) in
        sync durability this returns only after an fsync covers the batch; otherwise use
        :meth:`acknowledged` to learn when the batch may be acknowledged. Raises
        :class:`MessageTooLarge`, :class:`InvalidLmqName` or :class:`StorageFull` with
        nothing stored."""
        cfg = self.config
        max_body, max_fanout = cfg.max_message_bytes, cfg.max_fanout
        for message, lmqs in items:
            if len(message.body) > max_body or len(lmqs) > max_fanout:
                if len(message.body) > max_body:
                    raise MessageTooLarge(len(message.body), max_body)
                raise StoreError(
                    f"fan-out of {len(lmqs)} LMQs exceeds the maximum of {max_fanout}"
                )
        with self.locks.append:
            self.locks.check_open()
            results, touched = self.dispatcher.write_locked(items)
        self.listeners.notify_metas(touched)
        if wait and results and self.waits_for_ack:
            self.acknowledged(results[-1].end).result()
        return results

    def append_copies(
        self, items: Sequence[tuple[Message, Sequence[str]]], *, wait: bool = True
    ) -> list[AppendResult | None]:
        """:meth:`append_batch` for copies (:mod:`broker_core.origins`): a message whose
        origin offset is at or below its (cluster, queue, topic) high-water mark, or not
        above an earlier copy of the same batch, is a duplicate: not stored, None in the
        result. The check and the append are one critical section, so concurrent appends
        cannot both store a copy. Messages without an origin are stored as they are."""
        cfg = self.config
        for message, lmqs in items:
            if len(message.body) > cfg.max_message_bytes:
                raise MessageTooLarge(len(message.body), cfg.max_message_bytes)
            if len(lmqs) > cfg.max_fanout:
                raise StoreError(
                    f"fan-out of {len(lmqs)} LMQs exceeds the maximum of {cfg.max_fanout}"
                )
        origins = [
            decode_origin(m.properties[ORIGIN_PROPERTY])
            if m.properties and ORIGIN_PROPERTY in m.properties else None
            for m, _ in items
        ]
        with self.locks.append:
            self.locks.check_open()
            keep = self.origins.filter_locked([m.topic for m, _ in items], origins)
            kept = [item for item, k in zip(items, keep, strict=True) if k]
            results, touched = self.dispatcher.write_locked(kept) if kept else ([], [])
        self.listeners.notify_metas(touched)
        if wait and results and self.waits_for_ack:
            self.acknowledged(results[-1].end).result()
        stored = iter(results)
        return [next(stored) if k else None for k in keep]

    def advance_origin(
        self, cluster: str, queue: str, topic: str, offset: int, *, wait: bool = True
    ) -> tuple[int, int | None]:
        """Raise the high-water mark of (``cluster``, ``queue``, ``topic``) to ``offset``
        with an origin-advance record (never lowers it: then nothing is written). Returns
        the mark after, and the end position of the record written (None if none), for
        :meth:`acknowledged` when ``wait`` is False."""
        body = encode_origin(cluster, queue, offset)
        with self.locks.append:
            self.locks.check_open()
            mark = self.origins.marks.get((cluster, queue, topic))
            if mark is not None and mark[0] >= offset:
                return mark[0], None
            results, _ = self.dispatcher.write_locked(
                [(Message(topic=topic, body=body), ())], RecordType.ORIGIN_ADVANCE
            )
        end = results[0].end
        if wait and self.waits_for_ack:
            self.acknowledged(end).result()
        return offset, end

    def translate_origin(self, cluster: str, queue: str, lmq: str, committed: int) -> int | None:
        """The offset in ``lmq`` where a consumer of the copies of ``queue`` resumes, given
        the source group's committed next offset there (the first copy at or above it,
        or past the last copy; never below the LMQ's first offset); None if ``lmq`` holds
        no copy of ``queue``."""
        meta = self.lmq_table.meta_for_read(lmq)
        if meta is None:
            return None
        found = self.origins.translate(cluster, queue, meta.id, committed)
        return None if found is None else max(found, meta.min_offset)

    @property
    def waits_for_ack(self) -> bool:
        """Whether an append must wait for :meth:`acknowledged` before it is acknowledged
        (sync durability, or a master in sync replication); otherwise it may be
        acknowledged once the append returned."""
        return self.config.durability == Durability.SYNC or self.ack_gate is not None

    def acknowledged(self, position: int) -> Future[int]:
        """A future done once an append ending at ``position`` may be acknowledged under
        the configured durability (immediately in async mode, after the covering fsync in
        sync mode) and, on a master in sync replication, once the in-sync replicas hold
        it (:attr:`ack_gate`; it fails with :class:`NotMaster` when this member stops
        being the master first)."""
        if self.flusher is None:
            raise StoreClosed("the store is not open for writing")
        local = self.flusher.request(position)
        gate = self.ack_gate
        if gate is None:
            return local
        both: Future[int] = Future()
        remote = gate(position)

        def settle(_: Future[int]) -> None:
            # runs on the flusher's thread and the gate's: the first to settle wins
            try:
                for part in (local, remote):
                    if part.done() and part.exception() is not None:
                        both.set_exception(part.exception())  # type: ignore[arg-type]
                        return
                if local.done() and remote.done():
                    both.set_result(position)
            except InvalidStateError:
                pass

        local.add_done_callback(settle)
        remote.add_done_callback(settle)
        return both

    def create_lmq(self, name: str) -> LmqInfo:
        """Make sure an LMQ exists (e.g. on subscribe) and return its info. An empty LMQ
        is index metadata only; a rebuild of the index from the log forgets it, and the
        front end that owns it declares it again."""
        with self.locks.append:
            self.locks.check_open()
            return LmqInfo.of(self.dispatcher.create_lmq_locked(name))

    # -- timers (see broker_core.timers) -----------------------------------------------

    def append_delayed(
        self, message: Message, lmqs: Sequence[str], due_ms: int, *, wait: bool = True
    ) -> AppendResult:
        """Append one delayed message: stored now, dispatched to ``lmqs`` (all of them,
        atomically) once the wall clock reaches ``due_ms`` (epoch ms) and
        :meth:`fire_timers` runs. Its ``position`` names it for :meth:`cancel_timer`
        and :meth:`reschedule_timer`; ``offsets`` is empty (assigned at the fire). A due
        time already past fires at the next :meth:`fire_timers`. Raises
        :class:`~broker_core.timers.DelayTooLong` past ``max_timer_delay_ms``, and the
        errors of :meth:`append_batch`, with nothing stored."""
        return self.append_delayed_batch([(message, lmqs, due_ms)], wait=wait)[0]

    def append_delayed_batch(
        self, items: Sequence[tuple[Message, Sequence[str], int]], *, wait: bool = True
    ) -> list[AppendResult]:
        """:meth:`append_delayed` for several messages, in one log write and one index
        batch (all or none)."""
        cfg = self.config
        for message, lmqs, _ in items:
            if len(message.body) > cfg.max_message_bytes:
                raise MessageTooLarge(len(message.body), cfg.max_message_bytes)
            if len(lmqs) > cfg.max_fanout:
                raise StoreError(
                    f"fan-out of {len(lmqs)} LMQs exceeds the maximum of {cfg.max_fanout}"
                )
        with self.locks.append:
            self.locks.check_open()
            results = self.timers.append_locked(items, now_ms())
        if wait and results and self.waits_for_ack:
            self.acknowledged(results[-1].end).result()
        return results

    def delay_level_ms(self, level: int) -> int:
        """The delay of RocketMQ delay ``level`` in ms (``StoreConfig.delay_levels``;
        level 1 is the first, past the last is the last)."""
        return delay_level_ms(self.config.delay_levels, level)

    def delay_level_due(self, level: int, now: int | None = None) -> int:
        """The due time (epoch ms) of RocketMQ delay ``level`` from ``now``."""
        return (now_ms() if now is None else now) + self.delay_level_ms(level)

    def cancel_timer(self, position: int, *, wait: bool = True) -> bool:
        """Cancel the pending timer of the delayed record at ``position``: it is never
        dispatched. False if none is pending there (fired, cancelled, or not delayed)."""
        return self._change_timer(position, CANCELLED, wait)

    def reschedule_timer(self, position: int, due_ms: int, *, wait: bool = True) -> bool:
        """Move the pending timer of the record at ``position`` to ``due_ms``. False if
        none is pending there; :class:`~broker_core.timers.DelayTooLong` past the
        maximum delay."""
        return self._change_timer(position, due_ms, wait)

    def _change_timer(self, position: int, due_ms: int, wait: bool) -> bool:
        with self.locks.append:
            self.locks.check_open()
            changed = self.timers.change_locked(position, due_ms, now_ms())
            end = self.log.end
        if changed is not None and wait and self.waits_for_ack:
            self.acknowledged(end).result()
        return changed is not None

    def pending_timer(self, position: int) -> PendingTimer | None:
        """The pending timer of the delayed record at ``position``, or None. A timer
        retention relocated is found by its first position too (its ``position`` is
        then where its record is now)."""
        return self.timers.due_of(self.timers.resolve(position))

    def next_timer_due(self) -> int | None:
        """The earliest pending due time (epoch ms), or None: when to call
        :meth:`fire_timers` next. None on a slave of a broker group: its master fires."""
        if self.log.fence is not None:
            return None
        return self.timers.next_due()

    def fire_timers(self, now: int | None = None, max_count: int | None = None) -> int:
        """Dispatch every timer due by ``now`` (epoch ms, default the store clock), in
        due order, a page (``StoreConfig.timer_page``) per log write and index batch,
        the append lock released between pages; at most ``max_count`` if given. The
        gateway's housekeeping calls it (at :meth:`next_timer_due`). Returns how many
        fired; listeners of the LMQs are notified."""
        if self.log.fence is not None:
            return 0  # a slave: its master fires, and the fire records come replicated
        fired = 0
        page = self.config.timer_page
        at = now_ms() if now is None else now
        while max_count is None or fired < max_count:
            limit = page if max_count is None else min(page, max_count - fired)
            with self.locks.append:
                self.locks.check_open()
                count, touched = self.timers.fire_locked(at, limit)
                end = self.log.end
            if count == 0:
                break
            fired += count
            if self.config.durability == Durability.SYNC:
                self.acknowledged(end).result()
            self.listeners.notify_metas(touched)
            if count < limit:
                break
        return fired

    # -- transactions (see broker_core.transactions) ------------------------------------

    def append_half(
        self, message: Message, lmqs: Sequence[str], producer_group: str, *, wait: bool = True
    ) -> AppendResult:
        """Store a half message meant for ``lmqs``, not dispatched: no reader sees it
        until :meth:`end_transaction` commits it. Its id is ``result.position``. With
        ``wait``, returns once it is durable as :meth:`append` does."""
        cfg = self.config
        if len(message.body) > cfg.max_message_bytes:
            raise MessageTooLarge(len(message.body), cfg.max_message_bytes)
        if len(lmqs) > cfg.max_fanout:
            raise StoreError(f"fan-out of {len(lmqs)} LMQs exceeds the maximum of {cfg.max_fanout}")
        with self.locks.append:
            self.locks.check_open()
            result = self.txn_writer.write_half_locked(message, lmqs, producer_group)
        if wait and self.waits_for_ack:
            self.acknowledged(result.end).result()
        return result

    def end_transaction(self, position: int, commit: bool, *, wait: bool = True) -> EndResult:
        """Commit (dispatch the half message at ``position`` to all its LMQs at once, one
        control record) or roll it back. Idempotent: a half already ended is not touched
        again and the result says how it ended (``ALREADY_*``); ``UNKNOWN`` if there is
        no half message there. With ``wait``, returns only once the deciding control
        record is durable under the configured durability, the earlier one included."""
        with self.locks.append:
            self.locks.check_open()
            txn = self.txns.pending.get(position)
            if txn is None:
                ended = self.txns.ended(position)
                if ended is None:
                    return EndResult(Outcome.UNKNOWN)
                result = EndResult(ALREADY[ended[0]], ended[1])
                touched: list[LmqMeta] = []
            else:
                action = Action.COMMIT if commit else Action.ROLLBACK
                written, touched = self.txn_writer.write_controls_locked(
                    [(txn, action, txn.lmqs if commit else ())]
                )
                outcome = Outcome.COMMITTED if commit else Outcome.ROLLED_BACK
                result = EndResult(outcome, written[0][0].end)
        self.listeners.notify_metas(touched)
        if wait and self.waits_for_ack:
            self.acknowledged(result.control_end).result()
        return result

    def transaction_outcome(self, position: int) -> Outcome | None:
        """How the half message at ``position`` ended (an ``ALREADY_*`` outcome), or
        None if it is pending or unknown (its outcome is forgotten with its segment)."""
        ended = self.txns.ended(position)
        return None if ended is None else ALREADY[ended[0]]

    def transaction_checks_due(
        self, now: int | None = None, limit: int = 1000
    ) -> list[PendingTransaction]:
        """The half messages whose check-back is due at ``now`` (epoch ms), at most
        ``limit``, each with its check counted (a CHECK control record, written before
        this returns, so a restart does not reset the count): the caller asks a
        producer of ``txn.group`` about each. A half due after ``txn_max_checks``
        checks is not returned: it goes to ``txn_dead_letter_lmq`` (a log line and
        ``stats()["transactions_dead_lettered"]``). None on a slave of a broker group:
        its master checks, and its CHECK records arrive replicated."""
        if self.log.fence is not None:
            return []
        cfg = self.config
        at = now_ms() if now is None else now
        with self.locks.append:
            self.locks.check_open()
            due = self.txns.due(at, limit)
            if not due:
                return []
            ops = [
                (t, Action.DEAD_LETTER, (cfg.txn_dead_letter_lmq,))
                if t.checks >= cfg.txn_max_checks
                else (t, Action.CHECK, ())
                for t in due
            ]
            written, touched = self.txn_writer.write_controls_locked(ops)
            checked = []
            for (txn, action, _), (result, _half) in zip(ops, written, strict=True):
                if action == Action.CHECK:
                    checked.append(self.txns.pending[txn.position])
                else:
                    self.txns.dead_lettered += 1
                    log.warning(
                        "transaction half message at %d (producer group %r, topic %r) had"
                        " %d checks unanswered: dead-lettered to %r at offset %d",
                        txn.position, txn.group, txn.topic, txn.checks,
                        cfg.txn_dead_letter_lmq, result.offsets[0],
                    )
        self.listeners.notify_metas(touched)
        return checked

    # -- notification ------------------------------------------------------------------

    def add_listener(self, lmq: str, callback: Listener) -> Callable[[], None]:
        """Call ``callback(lmq, next_offset)`` whenever ``lmq`` gains entries (or, for pop
        groups, messages become visible again). Returns a function that removes it."""
        return self.listeners.add(lmq, callback)

    def has_listeners(self, lmq: str) -> bool:
        return self.listeners.has(lmq)

    def notify(self, lmq: str) -> None:
        if self.listeners.has(lmq):
            meta = self.lmq_table.meta_for_read(lmq)
            self.listeners.call(lmq, meta.next_offset if meta else 0)

    # -- reading (see broker_core.reads) -----------------------------------------------

    def lmq(self, name: str) -> LmqInfo | None:
        meta = self.lmq_table.meta_for_read(name)
        return None if meta is None else LmqInfo.of(meta)

    def lmq_by_id(self, lmq_id: int) -> LmqInfo | None:
        meta = self.lmq_table.by_id(lmq_id)
        return None if meta is None else LmqInfo.of(meta)

    def lmqs(self, prefix: str = "", after: str = "") -> Iterator[LmqInfo]:
        """Every LMQ whose name starts with ``prefix``, in name order; with ``after``,
        only those named after it (a page of a listing starts there, not at the first)."""
        for meta in self.lmq_table.iter(prefix, after):
            yield LmqInfo.of(meta)

    def lmq_names(self, prefix: str = "", after: str = "") -> Iterator[str]:
        """The names :meth:`lmqs` gives, from the name index alone (no metadata read per
        LMQ): to filter a million names, then :meth:`lmq` the few that match."""
        return self.index.iter_names(prefix, after)

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
        return self.reader.pull(lmq, offset, max_count, max_bytes, tag)

    def pull_plain(
        self, lmq: str, offset: int, max_count: int = 32, max_bytes: int = 4 * 1024 * 1024
    ) -> PullResult:
        """:meth:`pull` (no tag filter) for a reader that passes messages on as they are
        stored (an MQTT subscriber): a *plain* record read from the log comes as a
        :class:`~broker_core.record.PlainMessage` (checked, not decoded in full), any
        other as a :class:`StoredMessage`. See :meth:`broker_core.reads.Reader.pull_plain`."""
        return self.reader.pull_plain(lmq, offset, max_count, max_bytes)

    def pull_raw(
        self, lmq: str, offset: int, max_count: int = 32, max_bytes: int = 4 * 1024 * 1024
    ) -> PullResult:
        """:meth:`pull` (no tag filter) for a reader that re-encodes messages into
        another layout (RocketMQ's stored messages): a message record read from the log
        comes as a :class:`~broker_core.record.RawMessage` (checked, its fields left as
        stored bytes), any other as a :class:`StoredMessage`, as do hot-tail records.
        See :meth:`broker_core.reads.Reader.pull_raw`."""
        return self.reader.pull_raw(lmq, offset, max_count, max_bytes)

    def read_at(self, lmq: str, offset: int) -> StoredMessage | None:
        return self.reader.read_at(lmq, offset)

    @property
    def corrupt_reads(self) -> int:
        """Records whose CRC failed on read and were skipped (``on_corrupt = "skip"``)."""
        return self.reader.corrupt_reads

    @property
    def log_start(self) -> int:
        """The log position of the oldest record still held."""
        return self.log.min_position

    @property
    def log_end(self) -> int:
        """The log position the next append starts at."""
        return self.log.end

    @property
    def log_bytes(self) -> int:
        """Bytes the log's segments hold."""
        return self.log.size_bytes

    def records_from(self, position: int) -> Iterator[Record]:
        """The valid records from ``position`` (or the log start, if later) to the end
        of the log, in order; stops at the first invalid one. For a front end that
        recovers its own state from the records it wrote."""
        for item in self.log.scan(max(position, self.log.min_position)):
            if isinstance(item, ScanStop):
                return
            yield item

    # -- lookups by key and by position (see broker_core.key_index) -------------------

    def find_by_key(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[Record]:
        """The newest ``max_num`` records (oldest first) whose key properties
        (``StoreConfig.key_index_properties``) name ``key``, on ``topic`` or a topic
        below it (``orders`` finds ``orders/eu/42``: keys are indexed under a topic's
        first level), stored in ``[begin_ms, end_ms]``. Records retention removed are
        not returned."""
        positions = self.keys.find(
            topic, key, max_num, begin_ms, end_ms, min_position=self.log.min_position,
            segment_bases=self.log.segment_bases(),
        )
        records = []
        for position in positions:
            record = self.record_at(position)
            if record is not None:
                records.append(record)
        return records

    def record_at(self, position: int) -> Record | None:
        """The message record that starts at log ``position`` (RocketMQ's offsetMsgId
        names one), or None if no valid message record starts there (removed by
        retention, past the end, inside a record, damaged, or a control record). A
        transaction's half message is a message record: a committed one is delivered
        from it, and a check-back shows it."""
        log_ = self.log
        if not log_.min_position <= position < log_.end:
            return None
        try:
            size = peek_size(log_.read_raw(position, 8))
            if position + size > log_.end:
                return None
            record = log_.read(position, size)
        except (StoreError, ValueError):
            return None
        return record if record.type in _MESSAGE_TYPES else None

    # -- consumer offsets --------------------------------------------------------------

    def get_offset(self, group: str, lmq: str) -> int | None:
        """The committed next offset of ``group`` (a consumer group or a session) on
        ``lmq``, or None if it never committed one."""
        return self.state.get_offset(lmq, group)

    def commit_offset(self, group: str, lmq: str, offset: int) -> None:
        """Commit ``group``'s next offset on ``lmq``. Also marks the LMQ as in use for
        the idle TTL."""
        self.commit_offsets(group, {lmq: offset})

    def commit_offsets(self, group: str, offsets: Mapping[str, int]) -> None:
        """Commit ``group``'s next offset on each LMQ of ``offsets`` in ONE state write
        batch: after a crash either every one of them is committed or none is. Checks
        all of them before writing anything (read-only store, unknown LMQ, negative
        offset: the same errors as :meth:`commit_offset`, and nothing is written).
        Marks each LMQ as in use for the idle TTL."""
        if self.read_only:
            raise StoreError("the store was opened read-only")
        metas = []
        for lmq, offset in offsets.items():
            meta = self.lmq_table.meta_for_read(lmq)
            if meta is None:
                raise UnknownLmq(f"no LMQ named {lmq!r}")
            if offset < 0:
                raise ValueError("an offset cannot be negative")
            metas.append(meta)
        if not metas:
            return
        batch = self.state.new_batch()
        for lmq, offset in offsets.items():
            batch.set_offset(lmq, group, offset)
        self.state.write(batch)
        now = now_ms()
        stale = [meta for meta in metas if now - meta.touched_ms >= 60_000]
        if stale:
            with self.locks.append:
                for meta in stale:
                    self.dispatcher.touch_locked(meta, now)

    def delete_offsets(self, group: str, lmqs: Iterable[str]) -> None:
        """Forget ``group``'s offsets on ``lmqs`` (a session or consumer group ended)."""
        if self.read_only or self.locks.closed:
            raise StoreError("the store is closed or read-only")
        batch = self.state.new_batch()
        for lmq in lmqs:
            batch.delete_offset(lmq, group)
        if not batch.empty:
            self.state.write(batch)

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
        """Put (value) or delete (None) several metadata keys in one atomic write. Also
        on a slave of a broker group (front ends keep keys they generate at start): its
        master's metadata replaces them as the replicated state arrives."""
        if self.read_only or self.locks.closed:
            raise StoreError("the store is closed or read-only")
        batch = self.state.new_batch()
        for key, value in changes.items():
            if value is None:
                batch.delete_meta(key)
            else:
                batch.put_meta(key, value)
        self.state.write(batch, replicated=self.log.fence is not None)

    # -- housekeeping (see broker_core.cleanup and broker_core.recovery) ---------------

    def apply_retention(self, now_ms: int | None = None) -> cleanup.RetentionReport:
        """Remove old segments by ``retention_ms``/``retention_bytes``, trim the index."""
        return cleanup.retain(self._parts(), now_ms)

    def remove_lmqs(
        self, names: Iterable[str], progress: Callable[[int], None] | None = None
    ) -> cleanup.RemovalReport:
        """Remove LMQs: their entries, metadata, offsets and pop state (unknown names are
        ignored); ``progress(n)`` after each chunk of ``n``."""
        return cleanup.remove(
            self._parts(), self.dispatcher, self.pop, self.lmq, names, progress
        )

    def idle_lmqs(
        self, idle_ms: int, now_ms: int | None = None, prefix: str = ""
    ) -> list[LmqInfo]:
        """LMQs with no write and no offset commit for ``idle_ms`` and nobody listening."""
        return cleanup.idle(self.lmqs(prefix), self.listeners, idle_ms, now_ms)

    def rebuild_index(self) -> RecoveryReport:
        """Drop the index and rebuild it from the log (``lmq store rebuild-index``)."""
        return recovery.rebuild(self._parts())

    def verify(
        self, check_index: bool = True, max_problems: int = 100,
        report: recovery.VerifyReport | None = None,
    ) -> recovery.VerifyReport:
        """Check every record of the log and, with ``check_index``, the index (into
        ``report`` when given: its counts grow as the check goes, for a progress view)."""
        return recovery.verify_log(self.log, self.index, check_index, max_problems, report)

    def _lmq_count(self) -> int:
        """The number of LMQs, counted at most once a minute: counting is a scan of one
        key per LMQ, too slow to repeat on every /metrics scrape with millions."""
        now = time.monotonic()
        cached = self._lmq_count_cache
        if cached is None or now - cached[0] > 60.0:
            cached = self._lmq_count_cache = (now, self.index.count_lmqs())
        return cached[1]

    def stats(self) -> dict[str, int | float | str]:
        return {
            "data_dir": str(self.data_dir),
            "durability": self.config.durability.value,
            "log_min_position": self.log.min_position,
            "log_end_position": self.log.end,
            "log_bytes": self.log.size_bytes,
            "segments": len(self.log.segments()),
            "lmqs": self._lmq_count(),
            "index_keys_estimate": self.index.estimated_keys(),
            "index_disk_bytes": _du(self.data_dir / "index"),
            "state_disk_bytes": _du(self.data_dir / "state"),
            "cached_lmqs": len(self.lmq_table.cache),
            "timers_pending": self.timers.pending(None),
            "transactions_pending": len(self.txns.pending),
            "transactions_dead_lettered": self.txns.dead_lettered,
            **self._fifo_stats(),
        }

    def _fifo_stats(self) -> dict[str, int]:
        """Blocked FIFO message groups, the messages waiting behind them, and the age
        (ms) of the oldest block (0 if none)."""
        blocked = self.pop.blocked_groups()
        oldest = min((b.since_ms for b in blocked), default=0)
        return {
            "fifo_blocked_groups": len(blocked),
            "fifo_blocked_waiting": sum(b.waiting for b in blocked),
            "fifo_oldest_blocked_ms": max(0, now_ms() - oldest) if oldest else 0,
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
