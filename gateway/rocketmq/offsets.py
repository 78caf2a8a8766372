"""Queue offsets every RocketMQ front end reads the same way: a group's committed offset
on a queue LMQ (with remoting's rule for a group that never committed one), and the
offset of a store time.
"""

from __future__ import annotations

from broker_core import MessageStore
from lmq.rocketmq import TopicConfig, queue_lmq

__all__ = ["committed_offset", "offset_at_time", "reset_targets"]


def committed_offset(store: MessageStore, group: str, lmq: str) -> int | None:
    """``group``'s committed offset on ``lmq``; for a group that never committed one, 0
    when the queue still starts at 0 (nothing was ever cleaned from it, as RocketMQ's
    broker answers while the queue's first message is still held), else None (the
    client falls back to its consume-from-where policy)."""
    offset = store.get_offset(group, lmq)
    if offset is not None:
        return offset
    info = store.lmq(lmq)
    if info is None or info.min_offset == 0:
        return 0
    return None


def offset_at_time(store: MessageStore, lmq: str, timestamp: int) -> int:
    """The offset of the first message of ``lmq`` stored at or after ``timestamp`` (ms),
    the queue's max offset when every message is older, its min offset when every one
    is newer (RocketMQ's ``getOffsetInQueueByTime`` with ``BoundaryType.LOWER``).
    A binary search over the queue: store times grow with offsets, since offsets are
    assigned under the append lock in log order."""
    info = store.lmq(lmq)
    if info is None:
        return 0
    lo, hi = info.min_offset, info.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        message = store.read_at(lmq, mid)
        if message is None:  # cleaned meanwhile: search above it
            lo = mid + 1
        elif message.record.store_ms < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo


def reset_targets(store: MessageStore, config: TopicConfig, position: str | None,
                  timestamp_ms: int | None, queues: int | None = None) -> dict[str, int]:
    """The next offset on every queue LMQ of the topic for a reset of a group: its
    ``earliest`` held message, its ``latest`` (nothing left to read), or the first
    message stored at or after ``timestamp_ms`` (a worker thread: a time is a binary
    search per queue). ``queues``: how many queues from 0 (default the topic's queue
    count; the JSON API's seek gives its read queues)."""
    offsets: dict[str, int] = {}
    for q in range(config.queue_count if queues is None else queues):
        lmq = queue_lmq(config.name, q)
        info = store.lmq(lmq)
        if info is None:
            continue
        if position == "earliest":
            offsets[lmq] = info.min_offset
        elif position == "latest":
            offsets[lmq] = info.max_offset
        elif timestamp_ms is not None:
            offsets[lmq] = offset_at_time(store, lmq, timestamp_ms)
        else:
            raise ValueError("give position (earliest or latest) or timestamp_ms")
    return offsets
