"""The store's two locks and its open/closed state, shared by the parts of the store.

Lock order is always the pop lock, then the append lock (pop's dead-lettering appends;
LMQ removal deletes pop state after appending its control record). Both are re-entrant:
a public method takes its lock and calls a locked twin that may call another public
method (tidwall/wal's lock-then-private-twin pattern).
"""

from __future__ import annotations

import threading

from broker_core.errors import StoreClosed, StoreError


class StoreLocks:
    """``append``: appends, LMQ creation, retention, removal. ``pop``: pop, ack, revive.
    ``closed`` is set once, under both locks, by the store's close."""

    __slots__ = ("append", "pop", "closed", "read_only")

    def __init__(self, read_only: bool = False) -> None:
        self.append = threading.RLock()
        self.pop = threading.RLock()
        self.closed = False
        self.read_only = read_only

    def check_open(self) -> None:
        """Raise unless the store is open for writing."""
        if self.closed:
            raise StoreClosed("the store is closed")
        if self.read_only:
            raise StoreError("the store was opened read-only")
