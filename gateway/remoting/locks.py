"""Queue locks for ordered consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

As RocketMQ's ``RebalanceLockManager``: one lock per (consumer group, topic, queue id),
held by one client id. Locking succeeds when the queue is unlocked, its lock expired, or
this client already holds it (which renews it); a lock not renewed within the expiry
(``rocketmq_lock_expiry``, RocketMQ's 60 s) is free for another client. Orderly
consumers renew theirs every 20 s. Unlocking frees only a lock the client holds.

Locks live in memory: after a restart every client locks again on its next rebalance,
as after a RocketMQ broker restart. Event-loop thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

QueueKey = tuple[str, int]  # (topic, queue id)


@dataclass(slots=True)
class _Lock:
    client_id: str
    renewed: float


class LockManager:
    def __init__(self, expiry_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry_s = expiry_s
        self._clock = clock
        #: group -> (topic, queue) -> lock
        self._locks: dict[str, dict[QueueKey, _Lock]] = {}

    def lock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Lock (or renew) every queue of ``queues`` that is free, expired or already
        this client's; returns those, in the order given."""
        now = self._clock()
        table = self._locks.setdefault(group, {})
        granted: list[QueueKey] = []
        for key in queues:
            held = table.get(key)
            if held is None or held.client_id == client_id or self._expired(held, now):
                table[key] = _Lock(client_id, now)
                granted.append(key)
        if not table:
            del self._locks[group]
        return granted

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        table = self._locks.get(group)
        if table is None:
            return
        for key in queues:
            held = table.get(key)
            if held is not None and held.client_id == client_id:
                del table[key]
        if not table:
            del self._locks[group]

    def holder(self, group: str, key: QueueKey) -> str | None:
        """The client id holding an unexpired lock on ``key``, if any."""
        held = self._locks.get(group, {}).get(key)
        if held is None or self._expired(held, self._clock()):
            return None
        return held.client_id

    def release_client(self, client_id: str) -> None:
        """A client is gone (unregistered, or its connection closed): its locks are
        free at once rather than at expiry."""
        for group in list(self._locks):
            table = self._locks[group]
            for key in [k for k, v in table.items() if v.client_id == client_id]:
                del table[key]
            if not table:
                del self._locks[group]

    def sweep(self) -> None:
        """Forget expired locks (memory only; an expired lock is already free)."""
        now = self._clock()
        for group in list(self._locks):
            table = self._locks[group]
            for key in [k for k, v in table.items() if self._expired(v, now)]:
                del table[key]
            if not table:
                del self._locks[group]

    def count(self) -> int:
        return sum(len(t) for t in self._locks.values())

    def _expired(self, lock: _Lock, now: float) -> bool:
        return now - lock.renewed > self.expiry_s
