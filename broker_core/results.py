"""What the store hands back: append results, stored messages, pull results, LMQ info.

Plain values with no behaviour beyond properties, shared by the facade
(:mod:`broker_core.store`), pop (:mod:`broker_core.pop`) and cleanup, so none of them
imports another for its types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from broker_core.consume_queue import LmqMeta
from broker_core.record import Record


class AppendResult(NamedTuple):
    """Where an appended message went: its log position and its offset in each LMQ (in
    the order the LMQs were given). A NamedTuple: one is built per message."""

    position: int
    size: int
    store_ms: int
    offsets: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(slots=True, eq=True)
class StoredMessage:
    """A message read from one LMQ, at one offset. Treat it as immutable (not ``frozen``
    only because that makes one per delivery slower to build)."""

    lmq: str
    offset: int
    record: Record

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def body(self) -> bytes:
        return self.record.body


@dataclass(frozen=True, slots=True)
class PullResult:
    #: From ``pull_plain`` some may be :class:`~broker_core.record.PlainMessage`
    #: (see :meth:`~broker_core.store.MessageStore.pull_plain`).
    messages: list[StoredMessage]
    #: The offset to pull from next time.
    next_offset: int
    #: The LMQ's lowest held offset and its next (max, exclusive) offset at read time.
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class LmqInfo:
    id: int
    name: str
    min_offset: int
    max_offset: int
    messages: int
    bytes: int
    created_ms: int
    last_write_ms: int
    touched_ms: int

    @classmethod
    def of(cls, meta: LmqMeta) -> LmqInfo:
        return cls(
            meta.id,
            meta.name,
            meta.min_offset,
            meta.next_offset,
            meta.count,
            meta.bytes,
            meta.created_ms,
            meta.last_write_ms,
            meta.touched_ms,
        )


@dataclass(slots=True)  # not frozen: built once per delivery, frozen init is slower
class PoppedMessage:
    """A message a pop gave (:mod:`broker_core.pop`), with its receipt handle."""

    message: StoredMessage
    receipt: str
    #: 1 on the first delivery, then one more each time it comes back unacked.
    deliveries: int
