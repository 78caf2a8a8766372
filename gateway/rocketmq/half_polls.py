"""Half messages due a check-back, for the HTTP producers that poll for them.

RocketMQ's remoting and gRPC producers have a connection the gateway pushes a
check-back to (:mod:`gateway.rocketmq.transaction_checks`); an HTTP producer has none:
it polls (the Aliyun MQ HTTP API's ``trans=pop``, the JSON API's check-back receive).
:class:`HalfPolls` is the check-back loop's way out to them: RocketMQ model state,
shared by both HTTP APIs, not part of either.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lmq.rocketmq import split_mqtt_topic

if TYPE_CHECKING:
    from broker_core import PendingTransaction, Record

__all__ = ["HalfPolls"]


@dataclass
class HalfPolls:
    """Half messages due a check, for ``trans=pop`` pollers of their topic.

    The gateway's one check-back loop (:mod:`gateway.rocketmq.transaction_checks`)
    offers each due half to the front ends in turn; :meth:`offer` takes it when an HTTP
    producer polled the half's topic within :attr:`poll_memory_s` (the HTTP producer
    has no connection to push to: it polls), queues it for the topic and wakes the
    pollers. A half handed out and not ended is due again after the store's check
    interval, and offered again then; the store counts every check and dead-letters
    a half after ``txn_max_checks``, as for the other front ends. The queue is this
    node's memory: a restart forgets what was queued and not yet polled, which the next
    check hands out again.
    """

    poll_memory_s: float = 60.0
    max_queued: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _polled: dict[str, float] = field(default_factory=dict)
    _queues: dict[str, collections.deque[PendingTransaction]] = field(default_factory=dict)
    _events: dict[str, asyncio.Event] = field(default_factory=dict)

    def polled(self, topic: str) -> None:
        self._polled[topic] = self.clock()

    def key(self, txn: PendingTransaction) -> str:
        """Who polls for ``txn``: its topic (the JSON API keys by producer group)."""
        return split_mqtt_topic(txn.topic)[0]

    def offer(self, txn: PendingTransaction, _record: Record) -> bool:
        topic = self.key(txn)
        seen = self._polled.get(topic)
        if seen is None or self.clock() - seen > self.poll_memory_s:
            return False
        queue = self._queues.setdefault(topic, collections.deque(maxlen=self.max_queued))
        queue.append(txn)
        event = self._events.get(topic)
        if event is not None:
            event.set()
        return True

    def take(self, topic: str, count: int) -> list[PendingTransaction]:
        queue = self._queues.get(topic)
        out: list[PendingTransaction] = []
        while queue and len(out) < count:
            out.append(queue.popleft())
        return out

    async def wait(self, topic: str, timeout_s: float) -> None:
        event = self._events.setdefault(topic, asyncio.Event())
        event.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
