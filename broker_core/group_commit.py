"""The flusher: fsyncs the commit log, one fsync shared by every writer waiting for it.

In ``sync`` durability an append is acknowledged only when :meth:`Flusher.request` for
its end position completes. Requests that arrive while an fsync runs wait for the next
one, so under load each fsync covers many appends (group commit). In ``async``
durability the flusher fsyncs every ``flush_interval_ms`` and requests complete at once:
the record was handed to the OS before the append returned, which survives a process
crash but not a power loss.

Thread safety: :meth:`request` may be called from any thread; futures are completed on
the flusher thread (asyncio callers wrap them with ``asyncio.wrap_future``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, sync: Callable[[], int], *, durable_on_write: bool, interval_s: float):
        self._sync = sync
        self._durable_on_write = durable_on_write
        self._interval = interval_s
        self._cond = threading.Condition()
        self._waiters: deque[tuple[int, Future[int]]] = deque()
        self._durable = 0
        self._closing = False
        self._error: BaseException | None = None
        self.fsyncs = 0
        self._thread = threading.Thread(target=self._run, name="lmq-flusher", daemon=True)
        self._thread.start()

    @property
    def durable_position(self) -> int:
        return self._durable

    def request(self, position: int) -> Future[int]:
        """A future completed once everything before ``position`` is acknowledgeable."""
        fut: Future[int] = Future()
        if self._durable_on_write or position <= self._durable:
            fut.set_result(position)
            return fut
        with self._cond:
            if self._error is not None:
                fut.set_exception(self._error)
                return fut
            self._waiters.append((position, fut))
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._durable_on_write:
                    self._cond.wait_for(lambda: self._closing, timeout=self._interval)
                else:
                    self._cond.wait_for(lambda: self._closing or bool(self._waiters))
                closing = self._closing
            try:
                durable = self._sync()
                self.fsyncs += 1
            except BaseException as exc:  # an fsync error fails every waiter, loudly
                log.exception("commit log fsync failed")
                with self._cond:
                    self._error = exc
                    waiters, self._waiters = list(self._waiters), deque()
                for _, fut in waiters:
                    fut.set_exception(exc)
                if closing:
                    return
                continue
            done = []
            with self._cond:
                self._durable = max(self._durable, durable)
                while self._waiters and self._waiters[0][0] <= self._durable:
                    done.append(self._waiters.popleft())
            for position, fut in done:
                fut.set_result(position)
            if closing:
                return

    def close(self) -> None:
        """Final fsync, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
