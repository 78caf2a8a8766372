"""Listeners: callbacks run when an LMQ gains entries (or pop messages come back).

Callbacks run on the appending thread after the append lock is released: they must be
quick and must not block (an asyncio front end uses ``call_soon_threadsafe``). A failing
callback is logged and does not stop the others. Adding and removing take a small lock;
notifying reads the table without it (a dict lookup is atomic under the GIL, and a
callback list is copied before it is iterated when it holds more than one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from broker_core.consume_queue import LmqMeta

log = logging.getLogger(__name__)

Listener = Callable[[str, int], None]


class Listeners:
    __slots__ = ("by_lmq", "_lock")

    def __init__(self) -> None:
        #: LMQ name -> its callbacks. Read directly by the dispatcher's hot path (an LMQ
        #: somebody listens to gets its records into the hot tail).
        self.by_lmq: dict[str, list[Listener]] = {}
        self._lock = threading.Lock()

    def add(self, lmq: str, callback: Listener) -> Callable[[], None]:
        """Register ``callback``; returns a function that removes it."""
        with self._lock:
            self.by_lmq.setdefault(lmq, []).append(callback)

        def remove() -> None:
            with self._lock:
                callbacks = self.by_lmq.get(lmq)
                if callbacks and callback in callbacks:
                    callbacks.remove(callback)
                    if not callbacks:
                        del self.by_lmq[lmq]

        return remove

    def has(self, lmq: str) -> bool:
        return lmq in self.by_lmq

    def notify_metas(self, metas: Iterable[LmqMeta]) -> None:
        """Tell the listeners of each LMQ of an append batch its new next offset."""
        listeners = self.by_lmq
        if not listeners:
            return
        get = listeners.get
        for meta in metas:
            callbacks = get(meta.name)
            if callbacks:
                if len(callbacks) == 1:  # the common case, without a copy of the list
                    try:
                        callbacks[0](meta.name, meta.next_offset)
                    except Exception:
                        log.exception("LMQ listener for %r failed", meta.name)
                else:
                    self.call(meta.name, meta.next_offset)

    def call(self, name: str, next_offset: int) -> None:
        """Run every callback of ``name`` (if any) with ``next_offset``."""
        callbacks = self.by_lmq.get(name)
        if not callbacks:
            return
        for cb in list(callbacks):
            try:
                cb(name, next_offset)
            except Exception:
                log.exception("LMQ listener for %r failed", name)
