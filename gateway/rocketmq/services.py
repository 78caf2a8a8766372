"""The gateway's one set of RocketMQ services, shared by every RocketMQ front end
(remoting, gRPC and the HTTP APIs): the producer (every send and end of transaction,
:mod:`gateway.rocketmq.producer`), the persistent schedule, pop and send-back, the
timers and the transaction check-backs.

One instance per gateway, built by :class:`gateway.server.Gateway` with the topic and
group registries and owned by the :class:`~gateway.context.GatewayContext`
(``ctx.rocketmq``). Sharing matters for pop: a remoting POP_MESSAGE and a gRPC
ReceiveMessage of one group pop the same queues, so they must see the same in-flight
(invisible) messages, the same revive timer and the same long-polling waiters; two
services over one store would each arm their own revive timer and keep their own count
of suspended pops.

Started before any front end (:meth:`start`: delays scheduled by an earlier run are
moved without waiting for a request; every known group is adopted for pop) and stopped
after the last one (:meth:`stop`), before the store closes.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker_core import MessageStore
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.pop_service import PopService
from gateway.rocketmq.producer import ProducerService
from gateway.rocketmq.schedule import SCHEDULE_TOPIC, ScheduleService
from gateway.rocketmq.sendback import DEFAULT_MAX_RECONSUME_TIMES, SendBackService
from gateway.rocketmq.timer_service import TimerFiring
from gateway.rocketmq.topics import TopicRegistry
from gateway.rocketmq.transaction_checks import TransactionChecks
from lmq.rocketmq import BROKER_NAME, TopicConfig

if TYPE_CHECKING:
    from gateway.publisher import Publisher
    from gateway.security import Security
    from gateway.topic_space import TopicSpace

__all__ = ["RocketMQServices"]


class RocketMQServices:
    """``producer``, ``schedule``, ``pop``, ``sendback``, ``timers`` and ``transactions``
    over one store, publisher and topic space and the gateway's topic and group
    registries."""

    def __init__(
        self,
        store: MessageStore,
        loop: asyncio.AbstractEventLoop,
        publisher: Publisher,
        topics: TopicRegistry,
        groups: GroupRegistry,
        topic_space: TopicSpace,
        security: Security,
    ) -> None:
        submit = publisher.submit
        self.store = store
        self.publisher = publisher
        self.topic_space = topic_space
        #: Every send and end of transaction of every RocketMQ door.
        self.producer = ProducerService(store, publisher, topics, topic_space, security)
        self.topics = topics
        self.groups = groups
        # the queues SCHEDULE_TOPIC_XXXX was registered with: as many levels as an
        # earlier configuration had, whose messages are moved even if it had more
        held = topics.get(SCHEDULE_TOPIC)
        self.schedule = ScheduleService(
            store, submit, loop, held_levels=0 if held is None else held.queue_count
        )
        self.pop = PopService(
            store, loop, submit, queue_count=self.queue_count, max_times=self.max_times,
            ensure_topic=topics.ensure, broker_name=BROKER_NAME,
        )
        self.sendback = SendBackService(
            store, self.schedule, submit, ensure_topic=topics.ensure, max_times=self.max_times
        )
        #: The store's durable timers (delayed messages), fired at their due times.
        self.timers = TimerFiring(store, loop)
        #: Transaction check-backs: one loop, each front end registers its way to
        #: producers (:mod:`gateway.rocketmq.transaction_checks`).
        self.transactions = TransactionChecks(store)
        self._loop = loop

    def queue_count(self, topic: str) -> int | None:
        """The topic's read queues; None when there is no such topic."""
        config = self.topics.get(topic)
        return None if config is None else config.read_queues

    def max_times(self, group: str) -> int:
        """The group's ``retry_max_times`` (RocketMQ's default for an unknown group)."""
        config = self.groups.get(group)
        return DEFAULT_MAX_RECONSUME_TIMES if config is None else config.retry_max_times

    def ensure_schedule_topic(self) -> None:
        """Register ``SCHEDULE_TOPIC_XXXX`` with one queue per delay level, once something
        is scheduled: a topic like any other to the registry, listed by ``lmq topics``,
        its queues never removed as idle (RocketMQ's broker lists it among its topics
        too). A gateway that never schedules has no such topic."""
        levels = self.schedule.max_level
        config = self.topics.get(SCHEDULE_TOPIC)
        if config is None or config.queue_count < levels:
            self.topics.create(
                TopicConfig(SCHEDULE_TOPIC, read_queues=levels, write_queues=levels))

    def start(self) -> None:
        """Start the schedule (moves delays left by an earlier run) and adopt every known
        group for pop (see :meth:`PopService.adopt`)."""
        if any(self.store.lmq(lv.lmq) is not None for lv in self.schedule.levels):
            self.ensure_schedule_topic()
        self.schedule.start()
        for name in self.groups.names():
            self.pop.adopt(name)
        self.pop.arm_revive()
        self.timers.start()
        self.transactions.start(self._loop)

    def stop(self) -> None:
        self.schedule.stop()
        self.pop.stop()
        self.timers.stop()
        self.transactions.stop()
