"""The persistent schedule: messages held back for a fixed delay level, then moved to
their real LMQs (RocketMQ 4's ``ScheduleMessageService`` on LMQs).

Layout
------
The levels are the store's (``StoreConfig.delay_levels``, RocketMQ's
``messageDelayLevel``: the same delays as a DELAY send's timer).
Delay level ``n`` (1-based) is queue ``n - 1`` of RocketMQ's ``SCHEDULE_TOPIC_XXXX``,
the LMQ ``rmq:SCHEDULE_TOPIC_XXXX:<n-1>`` (:func:`level_lmq`). :meth:`ScheduleService.schedule`
appends a copy of the message there whose properties name where it goes:

- ``REAL_TOPIC`` / ``REAL_QID``: the RocketMQ topic and queue of the first target when
  it is a RocketMQ queue LMQ (as RocketMQ's ``HookUtils`` sets them; kept on delivery,
  as RocketMQ keeps them);
- ``__LMQ_TARGETS``: every target LMQ, as a JSON list (removed on delivery), so the
  same service serves a send-back (one retry queue) and a DELAY send fanned out to MQTT
  and AMQP subscribers of the one topic space;
- ``DELAY``: the level (removed on delivery, as RocketMQ clears it).

Each level is one FIFO queue, so its messages are due in the order they were stored:
a message is due at its ``store_ms`` plus the level's delay, and only the head of a
level can be the next one due there. The service's progress is one committed store
offset per level (group :data:`SCHEDULE_GROUP` on the level's LMQ), durable like any
consumer offset.

Delivery is at least once: a due message is appended to its targets first and the
level's offset committed after the append is acknowledged. A crash in between delivers
it again after the restart (a duplicate, never a loss); a crash before the append
leaves the offset where it was. Nothing acknowledged by :meth:`schedule` is lost: it
is a store append acknowledged under the store's durability.

Timers, not polling: the service keeps at most one ``loop.call_at`` timer per level,
armed for the due time of that level's head. A level with nothing pending has no timer;
the store's append listener on the level's LMQ wakes it when something is scheduled.
After a move the level re-arms for its new head. Time is read from an injectable clock
(wall-clock milliseconds, the store's ``store_ms`` scale), so tests move time forward
without sleeping and call :meth:`ScheduleService.rearm`.

Event-loop thread only (the store listener hands over with ``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from broker_core import AppendResult, Message, MessageStore, StoredMessage
from broker_core.clock import now_ms
from lmq.rocketmq import parse_queue_lmq, queue_lmq

__all__ = [
    "PROP_DELAY",
    "PROP_REAL_QID",
    "PROP_REAL_TOPIC",
    "PROP_TARGETS",
    "SCHEDULE_GROUP",
    "SCHEDULE_TOPIC",
    "ScheduleService",
    "level_lmq",
]

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: The store consumer group whose offsets on the level LMQs are the service's progress.
SCHEDULE_GROUP = "rmq-schedule"

PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_DELAY = "DELAY"
PROP_TARGETS = "__LMQ_TARGETS"

#: Due messages moved per append batch (one log write, one offset commit).
MOVE_BATCH = 32

#: Appends a message to LMQs; the awaitable completes when the append may be
#: acknowledged (``Publisher.submit`` in the gateway).
Submit = Callable[[Message, Sequence[str]], Awaitable[AppendResult]]


def level_lmq(level: int) -> str:
    """The LMQ that holds delay level ``level`` (1-based)."""
    return queue_lmq(SCHEDULE_TOPIC, level - 1)


def scheduled_copy(message: Message, lmqs: Sequence[str], level: int) -> Message:
    """What the level's LMQ stores for ``message`` bound for ``lmqs``."""
    props = dict(message.properties or {})
    props[PROP_TARGETS] = json.dumps(list(lmqs)).encode()
    props[PROP_DELAY] = str(level).encode()
    first = parse_queue_lmq(lmqs[0]) if lmqs else None
    if first is not None:
        props[PROP_REAL_TOPIC] = first[0].encode()
        props[PROP_REAL_QID] = str(first[1]).encode()
    return Message(
        topic=message.topic, body=message.body, properties=props, origin=message.origin,
        tag=message.tag, qos=message.qos, retain=False, protocol=message.protocol,
        born_ms=message.born_ms,
    )


def released_copy(stored: StoredMessage) -> tuple[Message, list[str]]:
    """The message a due scheduled record becomes, and its target LMQs ([] if the
    record names none it can read: it is then skipped, and logged)."""
    rec = stored.record
    props = dict(rec.properties)
    raw = props.pop(PROP_TARGETS, b"[]")
    props.pop(PROP_DELAY, None)
    try:
        targets = json.loads(raw)
    except ValueError:
        targets = []
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        targets = []
    msg = Message(
        topic=rec.topic, body=rec.body, properties=props, origin=rec.origin, tag=rec.tag,
        qos=rec.qos, retain=False, protocol=rec.protocol, born_ms=rec.born_ms,
    )
    return msg, targets


@dataclass(slots=True)
class _Level:
    level: int
    lmq: str
    delay_ms: int
    timer: asyncio.TimerHandle | None = None
    moving: bool = False
    #: Woken while a move ran: look at the head again when it ends.
    dirty: bool = False


class ScheduleService:
    """One timer per delay level over the level LMQs of ``store``.

    ``submit`` appends (the gateway's ``Publisher.submit``); ``clock`` returns wall-clock
    milliseconds (``store_ms`` scale). Call :meth:`start` on the loop, :meth:`stop` at
    shutdown.
    """

    def __init__(
        self,
        store: MessageStore,
        submit: Submit,
        loop: asyncio.AbstractEventLoop,
        *,
        held_levels: int = 0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        # the store's delay levels (StoreConfig.delay_levels): a send-back waits as long
        # as a DELAY send of the same level does
        count = len(store.config.delay_levels)
        #: Levels a message can be scheduled at (a higher one is clamped to it).
        self.max_level = count
        # Levels an earlier configuration had beyond these (``held_levels``: the queues
        # of SCHEDULE_TOPIC_XXXX) are still moved, at the last level's delay, so a
        # shorter configuration strands nothing.
        self.store = store
        self.submit = submit
        self.loop = loop
        self.clock = clock
        self.levels = [
            _Level(n, level_lmq(n), store.delay_level_ms(n))
            for n in range(1, max(count, held_levels) + 1)
        ]
        self._removers: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.moved = 0
        self.skipped = 0
        self.started = False

    def clamp(self, level: int) -> int:
        """RocketMQ clamps levels above the highest to the highest."""
        return max(1, min(level, self.max_level))

    def delay_ms(self, level: int) -> int:
        return self.levels[self.clamp(level) - 1].delay_ms

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Listen to the level LMQs and arm a timer for every level with something
        pending (left by an earlier run too)."""
        if self.started:
            return
        self.started = True
        for lv in self.levels:
            # a level's LMQ is made by its first append (nothing is created for a
            # gateway that never schedules); listening needs no LMQ
            self._removers.append(
                self.store.add_listener(lv.lmq, self._listener(lv))
            )
            self._arm(lv)

    def stop(self) -> None:
        self.started = False
        for remove in self._removers:
            remove()
        self._removers.clear()
        for lv in self.levels:
            if lv.timer is not None:
                lv.timer.cancel()
                lv.timer = None
        for task in list(self._tasks):
            task.cancel()

    async def drain(self) -> None:
        """Wait for the moves under way (tests; shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _listener(self, lv: _Level) -> Callable[[str, int], None]:
        loop = self.loop

        def on_append(_lmq: str, _next: int) -> None:
            try:
                loop.call_soon_threadsafe(self._woken, lv)
            except RuntimeError:  # the loop is closed: nothing to wake
                pass

        return on_append

    def _woken(self, lv: _Level) -> None:
        if lv.moving:
            lv.dirty = True
        elif lv.timer is None:
            self._arm(lv)

    def rearm(self) -> None:
        """Look at every level's head again now (after the clock was moved)."""
        for lv in self.levels:
            if lv.timer is not None:
                lv.timer.cancel()
                lv.timer = None
            self._woken(lv)

    # -- scheduling -------------------------------------------------------------------

    def schedule(self, message: Message, lmqs: Sequence[str], level: int
                 ) -> Awaitable[AppendResult]:
        """Hold ``message`` back for delay level ``level`` (clamped to 1..max), then
        append it to ``lmqs``. The awaitable completes when the scheduled copy is stored
        as durably as any append (acknowledge the sender then)."""
        if not lmqs:
            raise ValueError("a scheduled message needs at least one target LMQ")
        level = self.clamp(level)
        return self.submit(scheduled_copy(message, lmqs, level), [level_lmq(level)])

    def offset(self, level: int) -> int:
        """The level's next offset to move (its committed progress)."""
        lv = self.levels[level - 1]
        committed = self.store.get_offset(SCHEDULE_GROUP, lv.lmq)
        info = self.store.lmq(lv.lmq)
        low = info.min_offset if info is not None else 0
        return low if committed is None else max(committed, low)

    def pending(self, level: int | None = None) -> int:
        """Messages scheduled and not yet moved (of one level, or of all)."""
        chosen = self.levels if level is None else [self.levels[level - 1]]
        total = 0
        for lv in chosen:
            info = self.store.lmq(lv.lmq)
            if info is not None:
                total += max(0, info.max_offset - self.offset(lv.level))
        return total

    def next_due(self, level: int) -> int | None:
        """When the head of ``level`` is due (ms), or None if nothing is pending."""
        lv = self.levels[level - 1]
        if self.store.lmq(lv.lmq) is None:
            return None
        head = self.store.pull(lv.lmq, self.offset(level), 1).messages
        return head[0].record.store_ms + lv.delay_ms if head else None

    def _arm(self, lv: _Level) -> None:
        if not self.started:
            return
        due = self.next_due(lv.level)
        if due is None:
            return
        wait_s = max(0.0, (due - self.clock()) / 1000)
        lv.timer = self.loop.call_at(self.loop.time() + wait_s, self._fire, lv)

    def _fire(self, lv: _Level) -> None:
        lv.timer = None
        if lv.moving or not self.started:
            return
        lv.moving = True
        task = self.loop.create_task(self._move(lv), name=f"schedule-level-{lv.level}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _move(self, lv: _Level) -> None:
        try:
            while await self._move_batch(lv):
                pass
        except asyncio.CancelledError:
            raise
        except Exception:
            # The offset was not committed: the same messages are moved on the next try.
            log.exception("moving due messages of delay level %d failed", lv.level)
            lv.moving = False
            if self.started:
                lv.timer = self.loop.call_later(1.0, self._fire, lv)
            return
        lv.moving = False
        lv.dirty = False
        self._arm(lv)

    async def _move_batch(self, lv: _Level) -> bool:
        """Move the level's due messages from its offset on (up to :data:`MOVE_BATCH`):
        append them to their targets, then commit the level's offset past them.
        Returns whether there may be more due now."""
        start = self.offset(lv.level)
        result = self.store.pull(lv.lmq, start, MOVE_BATCH)
        now = self.clock()
        waits: list[Awaitable[AppendResult]] = []
        next_offset = start
        for stored in result.messages:
            if stored.record.store_ms + lv.delay_ms > now:
                break
            msg, targets = released_copy(stored)
            if targets:
                waits.append(self.submit(msg, targets))
            else:
                self.skipped += 1
                log.warning(
                    "scheduled message at %s offset %d names no target; skipped",
                    lv.lmq, stored.offset,
                )
            next_offset = stored.offset + 1
        if next_offset == start:
            return False
        if waits:
            await asyncio.gather(*waits)
        self.commit(lv.lmq, next_offset)
        self.moved += len(waits)
        return next_offset < result.max_offset

    def commit(self, lmq: str, offset: int) -> None:
        """Commit a level's progress (after the moved messages were acknowledged)."""
        self.store.commit_offset(SCHEDULE_GROUP, lmq, offset)
