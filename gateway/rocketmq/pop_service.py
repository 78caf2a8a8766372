"""Pop consumption for the RocketMQ front ends (remoting's POP_MESSAGE family, gRPC's
ReceiveMessage family), on the store's pop (:mod:`broker_core.pop`): popping one queue
or all of a topic's queues, long polling, ack, batch ack, change of invisible time,
peek, notification, and dead letters.

Model
-----
- The store's pop group is the RocketMQ consumer group itself, so a group's pop
  progress is its committed offset on each queue LMQ (QUERY_CONSUMER_OFFSET and
  ``lmq groups show`` see it, as RocketMQ's pop moves the consumer offset).
- A message whose invisible time runs out comes back in place (the store's retry
  records, popped before new messages) with one more delivery; its
  ``reconsumeTimes`` is the record's own count (send-back copies carry one) plus the
  deliveries before this one. RocketMQ moves it to a pop retry topic instead; the
  receipt format is the same either way.
- Sources of one pop: the topic's queue (or every read queue, from a rotating start
  so each queue gets its turn first) and RocketMQ 5's pop retry topic
  ``%RETRY%<group>_<topic>`` when it exists, read first with RocketMQ's
  ``popFromRetryProbability`` (20 %) and otherwise when the normal queues had too few.
- Dead letters: the store never dead-letters these groups (``max_deliveries`` 0); a
  message popped with ``reconsumeTimes`` above the group's ``retry_max_times`` is
  appended to ``%DLQ%<group>`` and acked instead of being returned (RocketMQ 5's
  ``maxAttempts = retryMaxTimes + 1``). Append first, ack after: a crash in between
  dead-letters it twice, never loses it.
- FIFO (``fifo=True``: a group consuming in order, on a FIFO topic): the topic's queues
  are popped with the store's FIFO pop (:mod:`broker_core.fifo`), the message group
  being ``__SHARDINGKEY``: a group's next message only once the previous one was acked
  (or dead-lettered), other groups flowing; an unacked one comes back first for its
  group after the store's backoff. RocketMQ 5 locks the whole queue instead. The pop
  retry topic is popped as usual.
- Long polling: an empty pop with ``pollTime`` waits on the store's listeners of its
  sources (appends, and messages becoming visible again), never on a polling loop.
  Messages become visible again when the store revives them: one ``loop.call_at``
  timer armed for ``store.pop.next_revive_at()``.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from broker_core import AppendResult, Message, MessageStore, Record, StoredMessage, UnknownLmq
from broker_core.errors import UnknownReceipt
from gateway.rocketmq.pop_receipts import (
    REVIVE_QID,
    ExtraInfo,
    pop_retry_topic,
    store_receipt,
    visible_at,
)
from gateway.rocketmq.records import RECONSUME, record_reconsume_times, with_rocketmq_properties
from lmq.rocketmq import dlq_topic, queue_lmq
from protocol.remoting.pop import NORMAL_TOPIC as MARK_NORMAL
from protocol.remoting.pop import RETRY_TOPIC_V1 as MARK_RETRY

__all__ = ["OffsetOutOfRange", "PollingFull", "PopItem", "PopResult", "PopService", "Source"]

log = logging.getLogger(__name__)

#: RocketMQ's ``popFromRetryProbability``: percent of pops that read the retry topic first.
RETRY_FIRST_PERCENT = 20
#: RocketMQ's ``maxPopPollingSize`` (suspended pops per queue) and total.
MAX_POLLING_PER_KEY = 1024
MAX_POLLING_TOTAL = 100_000
#: Pops of filtered-out messages in a row before an empty answer (the client pops again).
FILTER_ROUNDS = 16
#: The property holding a RocketMQ message's group (gRPC ``message_group``, remoting's
#: sharding key): the unit of order of a FIFO pop.
MESSAGE_GROUP = "__SHARDINGKEY"

Submit = Callable[[Message, Sequence[str]], Awaitable[AppendResult]]


class OffsetOutOfRange(LookupError):
    """An ack or change of invisible time for an offset the queue does not hold
    (NO_MESSAGE)."""


class PollingFull(Exception):
    """Too many suspended pops (POLLING_FULL)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One queue a pop reads: its LMQ, the RocketMQ topic and queue id it shows, and the
    ExtraInfo topic mark (0 normal, 1 pop retry topic)."""

    lmq: str
    topic: str
    queue_id: int
    mark: str


@dataclass(slots=True)
class PopItem:
    message: StoredMessage
    source: Source
    reconsume_times: int
    extra_info: str = ""


@dataclass(slots=True)
class PopResult:
    pop_time: int
    invisible_time: int
    items: list[PopItem] = field(default_factory=list)
    rest_num: int = 0
    start_offset_info: str = ""
    msg_offset_info: str = ""


class PopService:
    """``max_times(group)``: the group's ``retry_max_times``; ``queue_count(topic)``:
    the topic's read queues (None: no such topic); ``ensure_topic(name)`` before a
    dead-letter topic is written; ``submit``: appends (``Publisher.submit``);
    ``clock``: wall-clock ms."""

    def __init__(
        self,
        store: MessageStore,
        loop: asyncio.AbstractEventLoop,
        submit: Submit,
        *,
        queue_count: Callable[[str], int | None],
        max_times: Callable[[str], int] = lambda _g: 16,
        ensure_topic: Callable[[str], object] | None = None,
        broker_name: str = "lmq-gateway",
        clock: Callable[[], int] | None = None,
    ) -> None:
        from broker_core.clock import now_ms

        self.store = store
        self.loop = loop
        self.submit = submit
        self.queue_count = queue_count
        self.max_times = max_times
        self.ensure_topic = ensure_topic
        self.broker_name = broker_name
        self.clock = clock or now_ms
        self._groups: set[str] = set()
        self._rotation: dict[tuple[str, str], int] = {}
        self._random = random.Random()
        self._revive_timer: asyncio.TimerHandle | None = None
        self._revive_at: int | None = None
        #: Suspended pops and notifications per (group, topic, queue id).
        self.polling: Counter[tuple[str, str, int]] = Counter()
        self.dead_lettered = 0

    # -- groups and sources -------------------------------------------------------------

    def adopt(self, group: str) -> None:
        """The store must never dead-letter this group itself (see the module doc).
        Call for every known group at start, and on first use of a new one."""
        if group not in self._groups:
            self.store.pop.set_max_deliveries(group, 0)
            self._groups.add(group)

    def sources(self, group: str, topic: str, queue_id: int) -> tuple[list[Source], Source | None]:
        """(the topic's queues to read, in this pop's order; the pop retry topic's queue
        if it exists). Raises :class:`ValueError` for a queue id the topic lacks."""
        count = self.queue_count(topic)
        if count is None:
            raise UnknownLmq(f"topic {topic!r} does not exist")
        if queue_id >= count or queue_id < -1:
            raise ValueError(f"queueId {queue_id} is illegal, topic {topic!r} has {count}")
        if queue_id >= 0:
            normal = [Source(queue_lmq(topic, queue_id), topic, queue_id, MARK_NORMAL)]
        else:
            key = (group, topic)
            start = self._rotation.get(key, 0) % count
            self._rotation[key] = start + 1
            normal = [
                Source(queue_lmq(topic, q), topic, q, MARK_NORMAL)
                for q in (*range(start, count), *range(start))
            ]
        retry_topic = pop_retry_topic(topic, group)
        retry_lmq = queue_lmq(retry_topic, 0)
        retry = (
            Source(retry_lmq, retry_topic, 0, MARK_RETRY)
            if self.store.lmq(retry_lmq) is not None else None
        )
        return normal, retry

    # -- pop ------------------------------------------------------------------------

    def pop_now(
        self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int,
        fifo: bool = False,
    ) -> PopResult:
        """One pop without waiting (may be empty); ``fifo``: the topic's queues in
        message group order (see the module docstring)."""
        self.adopt(group)
        normal, retry = self.sources(group, topic, queue_id)
        order = list(normal)
        if retry is not None:
            if self._random.randrange(100) < RETRY_FIRST_PERCENT:
                order.insert(0, retry)
            else:
                order.append(retry)
        pop_time = self.clock()
        result = PopResult(pop_time, invisible_ms)
        store = self.store
        for src in order:
            want = max_nums - len(result.items)
            if want <= 0:
                break
            if fifo and src is not retry:
                popped_now = store.pop.pop_fifo(
                    group, src.lmq, want, invisible_ms, MESSAGE_GROUP, pop_time)
            else:
                popped_now = store.pop.pop(group, src.lmq, want, invisible_ms, pop_time)
            for popped in popped_now:
                base = record_reconsume_times(popped.message.record)
                result.items.append(
                    PopItem(popped.message, src, base + popped.deliveries - 1)
                )
        if result.items:
            self.arm_revive()
        for src in order:
            info = store.lmq(src.lmq)
            if info is not None:
                done = store.get_offset(group, src.lmq) or info.min_offset
                result.rest_num += max(0, info.max_offset - done)
        self._receipts(group, result)
        return result

    def _receipts(self, group: str, result: PopResult) -> None:
        """ExtraInfo for each item, and the header's offset infos (see pop_receipts)."""
        by_queue: dict[tuple[str, int], list[int]] = {}
        for item in result.items:
            key = (item.source.mark, item.source.queue_id)
            by_queue.setdefault(key, []).append(item.message.offset)
        starts = {key: min(offsets) for key, offsets in by_queue.items()}
        for item in result.items:
            src = item.source
            item.extra_info = str(ExtraInfo(
                starts[(src.mark, src.queue_id)], result.pop_time, result.invisible_time,
                REVIVE_QID, src.mark, self.broker_name, src.queue_id, item.message.offset,
            ))
        result.start_offset_info = ";".join(
            f"{mark} {qid} {starts[(mark, qid)]}" for mark, qid in by_queue
        )
        result.msg_offset_info = ";".join(
            f"{mark} {qid} {','.join(map(str, offsets))}"
            for (mark, qid), offsets in by_queue.items()
        )

    async def pop(
        self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int,
        poll_ms: int, accept: Callable[[Record], bool] | None = None, fifo: bool = False,
    ) -> PopResult:
        """Pop, and when nothing is there wait up to ``poll_ms`` for something to pop.
        Messages past the group's retry limit are dead-lettered, not returned; messages
        ``accept`` refuses (a tag filter) are acked at once, as RocketMQ's pop moves
        past messages its filter does not match."""
        deadline = self.loop.time() + max(0, poll_ms) / 1000
        while True:
            result = await self._pop_live(
                group, topic, queue_id, max_nums, invisible_ms, accept, fifo)
            if result.items or poll_ms <= 0:
                return result
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return result
            woke = await self.wait_for_messages(group, topic, queue_id, remaining, fifo)
            if not woke:
                return await self._pop_live(
                    group, topic, queue_id, max_nums, invisible_ms, accept, fifo)

    async def _pop_live(
        self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int,
        accept: Callable[[Record], bool] | None, fifo: bool = False,
    ) -> PopResult:
        limit = self.max_times(group)
        for _ in range(FILTER_ROUNDS):
            result = self.pop_now(group, topic, queue_id, max_nums, invisible_ms, fifo)
            if not result.items:
                return result
            keep = []
            for item in result.items:
                if accept is not None and not accept(item.message.record):
                    self._ack_popped(group, item)
                elif item.reconsume_times > limit:
                    await self._dead_letter(group, item)
                else:
                    keep.append(item)
            if len(keep) != len(result.items):
                result.items = keep
                self._receipts(group, result)
            if keep:
                return result
        return result

    async def _dead_letter(self, group: str, item: PopItem) -> None:
        rec = item.message.record
        props = with_rocketmq_properties(rec, {"RETRY_TOPIC": item.source.topic})
        props[RECONSUME] = str(item.reconsume_times).encode()
        topic = dlq_topic(group)
        if self.ensure_topic is not None:
            self.ensure_topic(topic)
        await self.submit(
            Message(topic=rec.topic, body=rec.body, properties=props, origin=rec.origin,
                    tag=rec.tag, qos=rec.qos, protocol=rec.protocol, born_ms=rec.born_ms),
            [queue_lmq(topic, 0)],
        )
        self.dead_lettered += 1
        self._ack_popped(group, item)

    def _ack_popped(self, group: str, item: PopItem) -> None:
        if not item.extra_info:
            return
        visible = visible_at(ExtraInfo.parse(item.extra_info))
        try:
            self.store.pop.ack(store_receipt(group, item.source.topic, item.source.queue_id,
                                         item.message.offset, visible))
        except UnknownReceipt:
            pass

    # -- settling ---------------------------------------------------------------------

    def _check_queue(self, topic: str, queue_id: int, offset: int) -> str:
        """The queue's LMQ, after RocketMQ's checks of an ack: the queue exists
        (:class:`UnknownLmq`, :class:`ValueError`) and ``offset`` is within it
        (:class:`OffsetOutOfRange`)."""
        count = self.queue_count(topic)
        if count is None:
            raise UnknownLmq(f"topic[{topic}] not exist")
        if not 0 <= queue_id < count:
            raise ValueError(f"queueId[{queue_id}] is illegal, topic:[{topic}] has {count}")
        lmq = queue_lmq(topic, queue_id)
        info = self.store.lmq(lmq)
        low, high = (info.min_offset, info.max_offset) if info is not None else (0, 0)
        if not low <= offset <= high:
            raise OffsetOutOfRange(
                f"offset is illegal, key:{topic}@{queue_id}, offset:{offset},"
                f" min:{low}, max:{high}"
            )
        return lmq

    def ack(self, group: str, topic: str, queue_id: int, offset: int, extra_info: str) -> bool:
        """Ack one popped message. Returns whether it was in flight: an ack of a
        receipt no longer in flight (acked already, or its invisible time ran out and
        the message was or will be delivered again) succeeds and changes nothing, as in
        RocketMQ. Raises :class:`~protocol.remoting.HeaderError` (an unreadable
        receipt), :class:`UnknownLmq`, :class:`ValueError`, :class:`OffsetOutOfRange`."""
        info = ExtraInfo.parse(extra_info)
        self._check_queue(topic, queue_id, offset)
        try:
            self.store.pop.ack(store_receipt(group, topic, queue_id, offset, visible_at(info)))
        except UnknownReceipt:
            return False
        return True

    def ack_each(
        self, group: str, acks: Sequence[tuple[str, int, int, int]]
    ) -> list[Exception | None]:
        """Ack several popped messages, each ``(topic, queue_id, offset, visible_at)``
        of a receipt already parsed, in one store write. Per entry, None or what
        :meth:`ack` would have raised for it (:class:`UnknownLmq`, :class:`ValueError`,
        :class:`OffsetOutOfRange`); as there, a receipt no longer in flight succeeds
        and changes nothing (gRPC's AckMessage: one write per request, not per entry)."""
        results: list[Exception | None] = []
        receipts = []
        bounds: dict[tuple[str, int], tuple[int, int]] = {}  # a queue checked once
        for topic, queue_id, offset, visible in acks:
            known = bounds.get((topic, queue_id))
            if known is None or not known[0] <= offset <= known[1]:
                try:
                    self._check_queue(topic, queue_id, offset)
                except (UnknownLmq, ValueError, OffsetOutOfRange) as exc:
                    results.append(exc)
                    continue
                info = self.store.lmq(queue_lmq(topic, queue_id))
                if info is not None:
                    bounds[(topic, queue_id)] = (info.min_offset, info.max_offset)
            receipts.append(store_receipt(group, topic, queue_id, offset, visible))
            results.append(None)
        if receipts:
            self.store.pop.ack_many(receipts)
        return results

    def requeue(self, group: str, items: Sequence[PopItem]) -> int:
        """Make popped messages visible again now (a receive that could not hand them
        to its consumer: the proxy's nack); receipts no longer in flight are ignored.
        Returns how many came back."""
        receipts = [
            store_receipt(group, item.source.topic, item.source.queue_id,
                          item.message.offset, visible_at(ExtraInfo.parse(item.extra_info)))
            for item in items if item.extra_info
        ]
        return self.store.pop.requeue_many(receipts) if receipts else 0

    def batch_ack(
        self, group: str, topic: str, queue_id: int, visible_at: int, offsets: Sequence[int]
    ) -> None:
        """Ack ``offsets`` of one queue popped with one visible time (BATCH_ACK_MESSAGE:
        one store write; receipts no longer in flight are ignored)."""
        self._check_queue(topic, queue_id, min(offsets, default=0))
        self.store.pop.ack_many(
            [store_receipt(group, topic, queue_id, o, visible_at) for o in offsets]
        )

    def change_invisible_time(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str,
        invisible_ms: int,
    ) -> tuple[int, int]:
        """Give a popped message a new invisible time from now; returns the new
        ``(popTime, invisibleTime)`` (``popTime + invisibleTime`` is its new visible
        time, which is what its new receipt needs). Raises :class:`UnknownReceipt`
        when the receipt is no longer in flight, and what :meth:`ack` raises."""
        info = ExtraInfo.parse(extra_info)
        self._check_queue(topic, queue_id, offset)
        new = self.store.pop.change_invisible_time(
            store_receipt(group, topic, queue_id, offset, visible_at(info)), invisible_ms
        )
        self.arm_revive()
        return self.store.pop.receipt_visible_at(new) - invisible_ms, invisible_ms

    def peek(self, group: str, topic: str, queue_id: int, max_nums: int) -> PopResult:
        """The messages a pop would return next (new ones from the group's offset),
        without popping them: no receipt, nothing changes."""
        normal, retry = self.sources(group, topic, queue_id)
        result = PopResult(self.clock(), 0)
        store = self.store
        for src in ([retry] if retry else []) + normal:
            info = store.lmq(src.lmq)
            if info is None:
                continue
            offset = store.get_offset(group, src.lmq)
            start = info.min_offset if offset is None else offset
            result.rest_num += max(0, info.max_offset - start)
            want = max_nums - len(result.items)
            if want > 0:
                for msg in store.pull(src.lmq, start, want).messages:
                    base = record_reconsume_times(msg.record)
                    result.items.append(PopItem(msg, src, base))
        result.rest_num -= len(result.items)
        return result

    # -- waiting ------------------------------------------------------------------------

    async def wait_for_messages(
        self, group: str, topic: str, queue_id: int, timeout_s: float, fifo: bool = False,
    ) -> bool:
        """Wait until one of the pop's sources may have something (an append, or a
        message visible again), at most ``timeout_s``. Returns whether it woke early.
        Raises :class:`PollingFull`."""
        key = (group, topic, queue_id)
        if self.polling[key] >= MAX_POLLING_PER_KEY or self.polling.total() >= MAX_POLLING_TOTAL:
            raise PollingFull(f"too many suspended pops of {group}/{topic}/{queue_id}")
        normal, retry = self.sources(group, topic, queue_id)
        event = asyncio.Event()
        loop = self.loop

        def woken(_lmq: str, _next: int) -> None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass

        self.arm_revive()  # messages in flight since before a restart wake it too
        removers = [self.store.add_listener(src.lmq, woken) for src in normal]
        if retry is not None:
            removers.append(self.store.add_listener(retry.lmq, woken))
        self.polling[key] += 1
        try:
            if self.has_messages(group, normal + ([retry] if retry else []), fifo):
                return True
            try:
                async with asyncio.timeout(timeout_s):
                    await event.wait()
            except TimeoutError:
                return False
            return True
        finally:
            for remove in removers:
                remove()
            self.polling[key] -= 1
            if self.polling[key] <= 0:
                del self.polling[key]

    def has_messages(self, group: str, sources: Sequence[Source], fifo: bool = False) -> bool:
        """Whether a pop of ``sources`` by ``group`` would find something now (new
        messages past the group's offset, or messages back from being in flight; for a
        FIFO pop, a message group's head ready again)."""
        store = self.store
        for src in sources:
            info = store.lmq(src.lmq)
            if info is None:
                continue
            offset = store.get_offset(group, src.lmq)
            if (info.min_offset if offset is None else offset) < info.max_offset:
                return True
            if store.pop.count_retries(group, src.lmq) > 0:
                return True
            if fifo and store.pop.fifo_ready(group, src.lmq):
                return True
        return False

    def arm_revive(self) -> None:
        """Keep one timer at the store's next revive time (messages become visible
        again; the revive notifies the listeners the waiting pops hold)."""
        due = self.store.pop.next_revive_at()
        if due is None:
            return
        if self._revive_timer is not None and self._revive_at is not None \
                and self._revive_at <= due:
            return
        if self._revive_timer is not None:
            self._revive_timer.cancel()
        wait_s = max(0.0, (due - self.clock()) / 1000)
        self._revive_at = due
        self._revive_timer = self.loop.call_at(self.loop.time() + wait_s, self._revive)

    def _revive(self) -> None:
        self._revive_timer = None
        self._revive_at = None
        try:
            self.store.pop.revive()
        except Exception:
            log.exception("pop revive failed")
        self.arm_revive()

    def stop(self) -> None:
        if self._revive_timer is not None:
            self._revive_timer.cancel()
            self._revive_timer = None

