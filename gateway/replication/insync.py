"""The in-sync set of a master and the sync acknowledgement (docs/replication.md).

Per slave session the master knows the slave's acknowledged log end. The **in-sync
set** is the slaves that count: a slave joins once it has acknowledged everything the
master had when it sent the acknowledged chunk (it was caught up), and leaves when it
disconnects or stays behind for ``max_lag`` seconds. With a controller (etcd) each
change is written there by compare-and-swap; while a change is in flight the master
waits for the members of BOTH sets (RocketMQ's fix for apache/rocketmq#5663): a joining
slave is waited for before the controller can name it in-sync, and a leaving one until
the controller no longer does, so the controller never names a member that lacks an
acknowledged record.

In ``sync`` mode :meth:`InSync.wait` is the store's ``ack_gate``: the future completes
once every required member acknowledged the position (the master's own durability is
the store's flusher) and the set, the master included, has at least ``min_insync``
members (RocketMQ's minInSyncReplicas): a write waits up to ``hold_s`` for that, then
fails with :class:`~broker_core.errors.InSyncTooSmall` (:meth:`expire`).

Thread safety: :meth:`wait` may be called from any thread (the store's flusher
completes the other half); everything else runs on the event loop.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from broker_core.errors import InSyncTooSmall


class InSync:
    def __init__(
        self,
        on_wait: Callable[[], None] | None = None,
        min_insync: int = 1,
        hold_s: float = 15.0,
    ) -> None:
        self._lock = threading.Lock()
        #: The members (the master included) the set needs for an acknowledgement.
        self.min_insync = min_insync
        #: How long a write waits for the set to be large enough.
        self.hold_s = hold_s
        #: Acknowledged log end per connected slave.
        self.acked: dict[str, int] = {}
        #: When each slave was last caught up (monotonic seconds).
        self.caught_up_at: dict[str, float] = {}
        #: The set as the controller has it (or, without one, as applied).
        self.members: frozenset[str] = frozenset()
        #: A change written to the controller but not yet confirmed.
        self.proposed: frozenset[str] | None = None
        self._waiters: list[tuple[int, int, Future[int]]] = []
        #: When each waiter began (by its sequence number), for :meth:`expire`.
        self._since: dict[int, float] = {}
        self._seq = itertools.count()
        self._error: BaseException | None = None
        #: Called (from any thread) when a wait starts: the senders wake up.
        self._on_wait = on_wait

    @property
    def required(self) -> frozenset[str]:
        """The slaves an acknowledgement waits for: both sets while a change is open."""
        return self.members | (self.proposed or frozenset())

    def confirmed(self, master_end: int) -> int:
        """The log end every required member holds (RocketMQ's confirmOffset)."""
        with self._lock:
            return self._confirmed_locked(master_end)

    def _confirmed_locked(self, master_end: int) -> int:
        return min((self.acked.get(m, 0) for m in self.required), default=master_end)

    def _large_enough_locked(self) -> bool:
        return 1 + len(self.members) >= self.min_insync

    def _done_locked(self, position: int) -> bool:
        return self._large_enough_locked() and self._confirmed_locked(position) >= position

    # -- the store's ack gate ------------------------------------------------------------

    def wait(self, position: int) -> Future[int]:
        fut: Future[int] = Future()
        with self._lock:
            if self._error is not None:
                fut.set_exception(self._error)
                return fut
            if self._done_locked(position):
                fut.set_result(position)
                return fut
            seq = next(self._seq)
            self._since[seq] = time.monotonic()
            heapq.heappush(self._waiters, (position, seq, fut))
        if self._on_wait is not None:
            self._on_wait()
        return fut

    def _release(self) -> None:
        done = []
        with self._lock:
            while self._waiters:
                position = self._waiters[0][0]
                if not self._done_locked(position):
                    break
                done.append(heapq.heappop(self._waiters))
                self._since.pop(done[-1][1], None)
        for position, _, fut in done:
            if not fut.done():
                fut.set_result(position)

    def too_small(self) -> str | None:
        """Why writes are refused now: the set, the master included, has fewer than
        ``min_insync`` members (None: it has enough)."""
        with self._lock:
            if self._large_enough_locked():
                return None
            size = 1 + len(self.members)
        return (
            f"the in-sync set has {size} member(s), fewer than replication_min_insync"
            f" {self.min_insync}"
        )

    def expire(self) -> None:
        """Fail the writes that waited ``hold_s`` for a set of ``min_insync`` members
        (called periodically); nothing to do while the set is large enough."""
        now = time.monotonic()
        failed = []
        with self._lock:
            if self._large_enough_locked() or not self._waiters:
                return
            keep = []
            for waiter in self._waiters:
                if now - self._since.get(waiter[1], now) >= self.hold_s:
                    failed.append(waiter)
                    self._since.pop(waiter[1], None)
                else:
                    keep.append(waiter)
            heapq.heapify(keep)
            self._waiters = keep
            size = 1 + len(self.members)
        exc = InSyncTooSmall(
            f"the in-sync set has {size} member(s), fewer than replication_min_insync"
            f" {self.min_insync}, for {self.hold_s:g} s"
        )
        for _, _, fut in failed:
            if not fut.done():
                fut.set_exception(exc)

    def fail_all(self, exc: BaseException) -> None:
        """Stop acknowledging: every waiting append and every later one fails with
        ``exc`` (this member is no longer the master) until :meth:`reset`."""
        with self._lock:
            self._error = exc
            waiters, self._waiters = self._waiters, []
            self._since.clear()
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    def reset(self, members: frozenset[str] = frozenset()) -> None:
        """A new mastership: no error, the controller's set, no acknowledgements yet."""
        with self._lock:
            self._error = None
            self.acked.clear()
            self.caught_up_at.clear()
            self.members = members
            self.proposed = None

    # -- slave sessions (event loop) -----------------------------------------------------

    def ack(self, member: str, position: int, master_end_sent: int) -> None:
        """``member`` holds everything before ``position``; it was caught up if that
        covers the master's end as of the chunk it acknowledges."""
        with self._lock:
            self.acked[member] = max(self.acked.get(member, 0), position)
            if position >= master_end_sent:
                self.caught_up_at[member] = time.monotonic()
        self._release()

    def gone(self, member: str) -> None:
        with self._lock:
            self.acked.pop(member, None)
            self.caught_up_at.pop(member, None)

    def wanted(self, max_lag: float) -> frozenset[str]:
        """The set as it should be now: the members caught up within ``max_lag``."""
        now = time.monotonic()
        with self._lock:
            return frozenset(
                m for m, at in self.caught_up_at.items() if m in self.acked and now - at <= max_lag
            )

    def propose(self, members: frozenset[str]) -> None:
        with self._lock:
            self.proposed = members

    def settle(self, members: frozenset[str] | None) -> None:
        """The controller confirmed ``members`` (None: the change failed; the set stays)."""
        with self._lock:
            if members is not None:
                self.members = members
            self.proposed = None
        self._release()
