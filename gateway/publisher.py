"""Batching appends from the event loop into the store.

Front ends call :meth:`Publisher.submit` once per message; everything submitted during
one turn of the event loop is appended with one ``append_batch`` (one log write, one
RocksDB write) at the end of that turn. The returned future completes when the message
may be acknowledged to its publisher: at once in async durability, after the covering
fsync (group commit, on the store's flusher thread) in sync durability, and on a master
in sync replication once the in-sync replicas hold it (``store.waits_for_ack``).
The appends that must be one unit of their own (an all-or-nothing batch, delayed
messages, a half message, copies, a transaction's end) are :meth:`append_batch`,
:meth:`append_delayed`, :meth:`append_half`, :meth:`append_copies`,
:meth:`end_transaction` and :meth:`cancel_timer`: appended at once (after what this
turn queued, so the order of submission holds), counted in ``pending`` and awaited
under the configured durability here, the one place that waits for it.
:meth:`submit_callback` is the same with a plain callback instead of a future (no
future and no extra loop callback per message: MQTT QoS 1 / 2 publishes use it), and
:meth:`submit_nowait` has nothing to call back (QoS 0).

``pending`` counts submitted messages not yet acknowledged. Back-pressure: while the
store lags (:attr:`lagging`: too many pending, or a full disk) front ends pause
reading their publishers and ``await publisher.caught_up.wait()`` (an
``asyncio.Event``, set whenever the store is not lagging) to resume them; nobody
polls.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Sequence
from typing import TypeVar

from broker_core import (
    AppendResult,
    EndResult,
    Message,
    MessageStore,
    MessageTooLarge,
    StorageFull,
)

log = logging.getLogger(__name__)

#: Called with the append's result, or with None and the exception that failed it.
Done = Callable[[AppendResult | None, BaseException | None], None]

_T = TypeVar("_T")

#: More unacknowledged messages than this and the store is "lagging".
LAG_LIMIT = 50_000
#: After a full disk, this much free space lets publishers go on.
FREE_TO_RESUME = 16 * 1024 * 1024


class Publisher:
    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self._items: list[tuple[Message, Sequence[str]]] = []
        # per item: a future, a Done callback, or None (nobody waits)
        self._futures: list[asyncio.Future[AppendResult] | Done | None] = []
        self._scheduled = False
        self._max_body = store.config.max_message_bytes
        self.pending = 0
        self.appended = 0
        self.failed = 0
        #: The last append failed for a full disk (see lagging).
        self.disk_full = False
        self._disk_checked = 0.0
        self._disk_timer: asyncio.TimerHandle | None = None
        #: Set while the store is not lagging: paused publishers await it.
        self.caught_up = asyncio.Event()
        self.caught_up.set()
        #: Delayed messages of this loop turn (:func:`submit_delayed`), and what arms the
        #: gateway's timer firing after they are appended (set by the gateway).
        self._delayed = _Delayed()
        self.on_delayed: Callable[[int], None] | None = None

    @property
    def lagging(self) -> bool:
        """The store cannot keep up, or its disk is full: front ends slow publishers
        down (MQTT pauses reading; AMQP sends connection.blocked) until
        :attr:`caught_up` is set."""
        if self.disk_full:
            self._check_disk()
            self._update_caught_up()
        return self.pending > LAG_LIMIT or self.disk_full

    def _update_caught_up(self) -> None:
        """Keep :attr:`caught_up` equal to ``not lagging``; called wherever ``pending``
        or ``disk_full`` changes. While the disk is full, free space is checked once a
        second (no append may come to end the condition)."""
        if self.pending > LAG_LIMIT or self.disk_full:
            if self.caught_up.is_set():
                self.caught_up.clear()
            if self.disk_full and self._disk_timer is None:
                self._disk_timer = self.loop.call_later(1.0, self._disk_tick)
        elif not self.caught_up.is_set():
            self.caught_up.set()

    def _disk_tick(self) -> None:
        self._disk_timer = None
        if self.disk_full:
            self._check_disk()
        self._update_caught_up()

    def _check_disk(self) -> None:
        """After a full disk: free space again (checked at most once a second) ends the
        condition; so does the next append that succeeds."""
        now = self.loop.time()
        if now - self._disk_checked < 1.0:
            return
        self._disk_checked = now
        try:
            free = shutil.disk_usage(self.store.data_dir).free
        except OSError:
            return
        if free >= FREE_TO_RESUME:
            self.disk_full = False

    def submit(self, message: Message, lmqs: Sequence[str]) -> asyncio.Future[AppendResult]:
        """Append ``message`` to ``lmqs`` with this loop turn's batch; the future
        completes with the result when the message may be acknowledged, or with the
        exception that failed it (:class:`MessageTooLarge` at once)."""
        fut: asyncio.Future[AppendResult] = self.loop.create_future()
        self._enqueue(message, lmqs, fut)
        return fut

    def submit_callback(self, message: Message, lmqs: Sequence[str], done: Done) -> None:
        """:meth:`submit` with ``done(result, None)`` / ``done(None, exc)`` called on the
        event loop when the message may be acknowledged (or has failed), instead of a
        future. ``done`` may run inside this call (a message that is too large)."""
        self._enqueue(message, lmqs, done)

    def submit_nowait(self, message: Message, lmqs: Sequence[str]) -> bool:
        """:meth:`submit` for a message nobody waits on (MQTT QoS 0): no future, no
        callback. Returns False (nothing queued) if the message is too large; a failed
        append is counted in ``failed`` and logged."""
        return self._enqueue(message, lmqs, None)

    def _enqueue(self, message: Message, lmqs: Sequence[str],
                 waiter: asyncio.Future[AppendResult] | Done | None) -> bool:
        """Queue one message for the end of this loop turn; False (``waiter`` settled
        with :class:`MessageTooLarge`, or ``failed`` counted) if it is too large."""
        size = len(message.body)
        if size > self._max_body:
            if waiter is None:
                self.failed += 1
            else:
                _settle(waiter, None, MessageTooLarge(size, self._max_body))
            return False
        self._items.append((message, lmqs))
        self._futures.append(waiter)
        self.pending += 1
        if self.pending == LAG_LIMIT + 1:
            self._update_caught_up()
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)
        return True

    # -- appends of their own ----------------------------------------------------------

    async def _append_now(self, count: int, append: Callable[[], _T],
                          end: Callable[[_T], int]) -> _T:
        """Run ``append`` (a store append with ``wait=False``) now, after this turn's
        queued messages; its ``count`` messages are pending until ``end(result)`` (the
        log end to wait for; 0: nothing to wait for) is acknowledged."""
        if self._items:
            self._flush()
        self.pending += count
        self._update_caught_up()
        try:
            try:
                result = append()
            except Exception as exc:
                if isinstance(exc, StorageFull):
                    self.disk_full = True
                    self._disk_checked = self.loop.time()
                self.failed += count
                raise
            self.appended += count
            if count:
                self.disk_full = False
            position = end(result)
            if position and self.store.waits_for_ack:
                await asyncio.wrap_future(self.store.acknowledged(position), loop=self.loop)
            return result
        finally:
            self.pending -= count
            self._update_caught_up()

    async def append_batch(
        self, items: Sequence[tuple[Message, Sequence[str]]]
    ) -> list[AppendResult]:
        """Append ``items`` as one unit (one log write: all stored, or none and the
        exception); returns once they may be acknowledged."""
        return await self._append_now(
            len(items), lambda: self.store.append_batch(items, wait=False),
            lambda results: results[-1].end if results else 0)

    async def append_delayed(
        self, items: Sequence[tuple[Message, Sequence[str], int]]
    ) -> list[AppendResult]:
        """Store delayed messages ``(message, lmqs, due_ms)`` as the store's timers, as one
        unit; arms the gateway's timer firing (:attr:`on_delayed`) at the earliest due
        time once appended; returns once they may be acknowledged."""
        def append() -> list[AppendResult]:
            results = self.store.append_delayed_batch(items, wait=False)
            if self.on_delayed is not None and items:
                self.on_delayed(min(due for _, _, due in items))
            return results

        return await self._append_now(
            len(items), append, lambda results: results[-1].end if results else 0)

    async def append_half(
        self, message: Message, lmqs: Sequence[str], producer_group: str
    ) -> AppendResult:
        """Store a half message (delivered when its transaction commits); returns once
        it may be acknowledged."""
        return await self._append_now(
            1, lambda: self.store.append_half(message, lmqs, producer_group, wait=False),
            lambda result: result.end)

    async def append_copies(
        self, items: Sequence[tuple[Message, Sequence[str]]]
    ) -> list[AppendResult | None]:
        """The store's idempotent append of copies (None for a duplicate), as one unit."""
        def end(results: list[AppendResult | None]) -> int:
            stored = [r for r in results if r is not None]
            return stored[-1].end if stored else 0

        return await self._append_now(
            len(items), lambda: self.store.append_copies(items, wait=False), end)

    async def end_transaction(self, position: int, commit: bool) -> EndResult:
        """Commit or roll back the half message at ``position``; returns once the
        deciding control record may be acknowledged."""
        return await self._append_now(
            0, lambda: self.store.end_transaction(position, commit, wait=False),
            lambda result: result.control_end)

    async def cancel_timer(self, position: int) -> bool:
        """Cancel the pending timer (delayed message) at ``position``; whether there was
        one; returns once the cancellation may be relied on."""
        store = self.store
        return await self._append_now(
            0, lambda: store.cancel_timer(position, wait=False),
            lambda cancelled: store.log_end if cancelled else 0)

    def submit_delayed(self, message: Message, lmqs: Sequence[str], due_ms: int,
                       done: Done) -> None:
        """A delayed message: see :func:`submit_delayed`."""
        submit_delayed(self, message, lmqs, due_ms, done)

    def flush(self) -> None:
        """Append what is queued now (also called at the end of each loop turn)."""
        if self._items:
            self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        items, futures = self._items, self._futures
        if not items:
            return
        self._items, self._futures = [], []
        try:
            results = self.store.append_batch(items, wait=False)
        except Exception as exc:
            if isinstance(exc, StorageFull):
                self.disk_full = True
                self._disk_checked = self.loop.time()
            self.failed += len(items)
            self.pending -= len(items)
            self._update_caught_up()
            log.warning("append failed: %s", exc, extra={"messages": len(items)})
            for fut in futures:
                _settle(fut, None, exc)
            return
        self.appended += len(items)
        self.disk_full = False
        if not self.store.waits_for_ack:
            self.pending -= len(items)
            self._update_caught_up()
            for fut, result in zip(futures, results, strict=True):
                if fut is not None:
                    _settle(fut, result, None)
            return
        durable = asyncio.wrap_future(self.store.acknowledged(results[-1].end), loop=self.loop)

        def done(f: asyncio.Future[int]) -> None:
            self.pending -= len(futures)
            self._update_caught_up()
            exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
            for fut, result in zip(futures, results, strict=True):
                if fut is not None:
                    _settle(fut, None if exc is not None else result, exc)

        durable.add_done_callback(done)


class _Delayed:
    """Delayed messages submitted this loop turn (:meth:`Publisher.submit_delayed`)."""

    __slots__ = ("items", "waiters", "scheduled")

    def __init__(self) -> None:
        self.items: list[tuple[Message, Sequence[str], int]] = []
        self.waiters: list[Done] = []
        self.scheduled = False


def submit_delayed(publisher: Publisher, message: Message, lmqs: Sequence[str],
                   due_ms: int, done: Done) -> None:
    """Append a delayed message (the store's durable timers: stored now, dispatched to
    ``lmqs`` at ``due_ms``, epoch ms) with this loop turn's other delayed messages in
    one ``append_delayed_batch``; ``done(result, exc)`` once it may be acknowledged
    (durable under the configured durability, as :meth:`Publisher.submit_callback`).
    After each append ``publisher.on_delayed(earliest due)`` arms the gateway's timer
    firing (set by the gateway; the arm must follow the append, or a firing that ran
    between would not see the timer). Counted in ``pending`` like any submit, so a
    lagging store pauses delayed publishers too."""
    size = len(message.body)
    if size > publisher._max_body:
        _settle(done, None, MessageTooLarge(size, publisher._max_body))
        return
    batch = publisher._delayed
    batch.items.append((message, lmqs, due_ms))
    batch.waiters.append(done)
    publisher.pending += 1
    if publisher.pending == LAG_LIMIT + 1:
        publisher._update_caught_up()
    if not batch.scheduled:
        batch.scheduled = True
        publisher.loop.call_soon(_flush_delayed, publisher)


def _flush_delayed(publisher: Publisher) -> None:
    batch = publisher._delayed
    batch.scheduled = False
    items, waiters = batch.items, batch.waiters
    if not items:
        return
    batch.items, batch.waiters = [], []
    store = publisher.store

    def settle_all(results: list[AppendResult] | None, exc: BaseException | None) -> None:
        publisher.pending -= len(items)
        publisher._update_caught_up()
        for i, waiter in enumerate(waiters):
            _settle(waiter, None if results is None or exc is not None else results[i], exc)

    try:
        results = store.append_delayed_batch(items, wait=False)
    except Exception as exc:
        if isinstance(exc, StorageFull):
            publisher.disk_full = True
        publisher.failed += len(items)
        log.warning("delayed append failed: %s", exc, extra={"messages": len(items)})
        settle_all(None, exc)
        return
    publisher.appended += len(items)
    if publisher.on_delayed is not None:
        publisher.on_delayed(min(due for _, _, due in items))
    if not store.waits_for_ack:
        settle_all(results, None)
        return
    durable = asyncio.wrap_future(store.acknowledged(results[-1].end), loop=publisher.loop)

    def done(f: asyncio.Future[int]) -> None:
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        settle_all(results, exc)

    durable.add_done_callback(done)


def _settle(
    waiter: asyncio.Future[AppendResult] | Done | None,
    result: AppendResult | None,
    exc: BaseException | None,
) -> None:
    """Complete one submitted message's future or call its callback (a callback that
    raises is logged; the others still run)."""
    if waiter is None:
        return
    if isinstance(waiter, asyncio.Future):
        if not waiter.done():
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(result)  # type: ignore[arg-type]
        return
    try:
        waiter(result, exc)
    except Exception:
        log.exception("publish callback failed")
