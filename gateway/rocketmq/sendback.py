"""CONSUMER_SEND_MSG_BACK: a push consumer gives a message it failed to consume back to
the broker, which redelivers it through ``%RETRY%<group>`` after a delay, or moves it
to ``%DLQ%<group>`` once it was consumed too often (RocketMQ's
``AbstractSendMessageProcessor.consumerSendMsgBack``).

What happens to the message at log position ``offset`` (the header's ``offset`` is the
commit-log offset of the pulled message, ``PHYSICALOFFSET`` in the stored layout):

- its reconsume count is what the stored layout gives a consumer (the record's
  ``rmq.reconsume``, :mod:`gateway.remoting.messages`; 0 when absent); the copy
  carries that count plus one;
- the copy's RocketMQ properties (``rmq.props``, built from the record's own when it
  came from MQTT or AMQP) get ``RETRY_TOPIC``, the message's RocketMQ topic, unless it
  is there already (a message sent back a second time keeps the first), and
  ``ORIGIN_MESSAGE_ID``, the message's offsetMsgId, unless there already;
- to ``%DLQ%<group>`` (queue 0, at once) when the count is at least the maximum
  (the header's ``maxReconsumeTimes``, else the group's ``retry_max_times``, 16) or
  the header's ``delayLevel`` is negative;
- else to ``%RETRY%<group>`` queue 0 through the persistent schedule
  (:mod:`gateway.rocketmq.schedule`) at delay level ``delayLevel``, or
  ``3 + reconsumeTimes`` when the header says 0 ("the broker decides"); levels above
  the highest are clamped, as RocketMQ clamps them.

The response is sent once the copy is stored (scheduled or dead-lettered) as durably as
any send; the original stays where it was (the consumer's offset moves past it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from broker_core import AppendResult, Message, MessageStore
from gateway.rocketmq.records import (
    RECONSUME,
    record_reconsume_times,
    with_rocketmq_properties,
)
from gateway.rocketmq.schedule import ScheduleService
from lmq.rocketmq import (
    dlq_topic,
    queue_lmq,
    retry_topic,
    split_mqtt_topic,
)
from protocol.remoting.messages import offset_msg_id

__all__ = [
    "PROP_ORIGIN_MESSAGE_ID",
    "PROP_RETRY_TOPIC",
    "SendBackOutcome",
    "SendBackService",
]

PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: RocketMQ's default ``retryMaxTimes`` of a subscription group.
DEFAULT_MAX_RECONSUME_TIMES = 16

Submit = Callable[[Message, Sequence[str]], Awaitable[AppendResult]]


class MessageNotFound(LookupError):
    """No message record starts at the given log position (or it was removed)."""


@dataclass(frozen=True, slots=True)
class SendBackOutcome:
    #: ``%RETRY%<group>`` or ``%DLQ%<group>``.
    topic: str
    dead_lettered: bool
    #: The delay level used (0 for the dead-letter queue).
    level: int
    #: The copy's reconsume count.
    reconsume_times: int


class SendBackService:
    """Send-back over the store, the schedule and an appender (``Publisher.submit``).

    ``ensure_topic(name)`` is called with the retry or dead-letter topic before it is
    written (the topic registry's ``ensure``: retry and dead-letter topics are created
    with one queue, as RocketMQ's broker does); ``max_times(group)`` is the group's
    ``retry_max_times``.
    """

    def __init__(
        self,
        store: MessageStore,
        schedule: ScheduleService,
        submit: Submit,
        *,
        ensure_topic: Callable[[str], object] | None = None,
        max_times: Callable[[str], int] | None = None,
    ) -> None:
        self.store = store
        self.schedule = schedule
        self.submit = submit
        self.ensure_topic = ensure_topic
        self.max_times = max_times
        self.retried = 0
        self.dead_lettered = 0

    async def send_back(
        self,
        group: str,
        position: int,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        store_host: tuple[str, int] = ("127.0.0.1", 0),
    ) -> SendBackOutcome:
        """Redeliver the message at log ``position`` for ``group`` (see the module
        docstring). Raises :class:`MessageNotFound`."""
        rec = self.store.record_at(position)
        if rec is None:
            raise MessageNotFound(f"look message by offset failed, {position}")
        times = record_reconsume_times(rec)
        if max_reconsume_times is None:
            limit = self.max_times(group) if self.max_times else DEFAULT_MAX_RECONSUME_TIMES
        else:
            limit = max_reconsume_times
        host, port = store_host
        props = with_rocketmq_properties(rec, {
            PROP_RETRY_TOPIC: split_mqtt_topic(rec.topic)[0],
            PROP_ORIGIN_MESSAGE_ID: offset_msg_id((host, port), rec.position),
        })
        props[RECONSUME] = str(times + 1).encode()
        copy = Message(
            topic=rec.topic, body=rec.body, properties=props, origin=rec.origin, tag=rec.tag,
            qos=rec.qos, retain=False, protocol=rec.protocol, born_ms=rec.born_ms,
        )
        if times >= limit or delay_level < 0:
            topic = dlq_topic(group)
            self._ensure(topic)
            await self.submit(copy, [queue_lmq(topic, 0)])
            self.dead_lettered += 1
            return SendBackOutcome(topic, True, 0, times + 1)
        topic = retry_topic(group)
        self._ensure(topic)
        level = self.schedule.clamp(delay_level if delay_level > 0 else 3 + times)
        await self.schedule.schedule(copy, [queue_lmq(topic, 0)], level)
        self.retried += 1
        return SendBackOutcome(topic, False, level, times + 1)

    def _ensure(self, topic: str) -> None:
        if self.ensure_topic is not None:
            self.ensure_topic(topic)
