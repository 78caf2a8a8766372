"""The producer service: every RocketMQ send, whichever door it came through.

RocketMQ's proxy has one ``MessagingProcessor`` behind its remoting and gRPC
"activities": they convert a request into messages and call
``ProducerProcessor.sendMessage``, which validates once, selects the queue through a
selector the caller gives, and sends. This is that service for the gateway's RocketMQ
doors (remoting, gRPC, the JSON API, the Aliyun MQ HTTP API, RIP-17), on
``ctx.rocketmq.producer``. A door converts; the service decides:

1. **resolve** (:meth:`ProducerService.resolve`) the topic for a principal: a valid
   name (:class:`InvalidTopic`), not a system topic (:class:`SystemTopic`), existing or
   auto-created (:class:`TopicNotFound`), writable (:class:`NotWritable`), and the
   publish ACL on the topic's MQTT name ``T`` (:class:`Forbidden`; consuming needs
   ``subscribe`` on ``T/#``, docs/rocketmq.md). The one subject convention: the door's
   principal and client id (``""`` when the door has none).
2. **check** each message's type against the topic's (:meth:`ProducerService.check_type`,
   :class:`TypeMismatch`; a MIXED topic accepts every type): the type itself comes from
   the door (RocketMQ properties: :func:`lmq.rocketmq.message_type_of`; gRPC: the
   declared type).
3. **select** the queue (:class:`ClientQueue`, :class:`ShardingKey`, :data:`ROUND_ROBIN`)
   and **route** it (:meth:`ProducerService.lmqs`): the queue's LMQ plus what the one
   topic space routes the MQTT name ``T`` + ``mqttSecondTopic`` to (MQTT subscribers,
   AMQP queues bound to ``amq.topic``).
4. **send** through :class:`~gateway.publisher.Publisher` (plain: this loop turn's
   batch; a batch, delayed messages, a half message: one append of their own, all or
   nothing), so every append is counted for back-pressure (:attr:`lagging`) and
   acknowledged under the configured durability in one place. Store errors
   (``MessageTooLarge``, ``DelayTooLong``, ``StorageFull``, ``StoreError``) pass through
   as the store raises them.

End of a transaction (:meth:`ProducerService.end_transaction`) is here too: the ACL on
the half's topic, the producer group check, the idempotent end and its typed outcomes;
and the recall of a pending delayed message (:meth:`ProducerService.recall`).

Each door maps :class:`ProducerError` subclasses once to its own codes. Event-loop
thread only.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker_core import Outcome
from lmq.rocketmq import (
    InvalidName,
    MessageType,
    Perm,
    TopicConfig,
    is_system_topic,
    queue_lmq,
    split_mqtt_topic,
)

if TYPE_CHECKING:
    from broker_core import AppendResult, EndResult, Message, MessageStore, Record
    from gateway.auth.authenticator import Principal
    from gateway.publisher import Done, Publisher
    from gateway.rocketmq.topics import TopicRegistry
    from gateway.security import Security
    from gateway.topic_space import TopicSpace

__all__ = [
    "ROUND_ROBIN",
    "BadQueue",
    "ClientQueue",
    "Forbidden",
    "IllegalMessage",
    "InvalidTopic",
    "NotPending",
    "NotWritable",
    "ProducerError",
    "ProducerService",
    "QueueSelector",
    "RoundRobin",
    "ShardingKey",
    "SystemTopic",
    "TopicNotFound",
    "TransactionConflict",
    "TransactionNotFound",
    "TypeMismatch",
    "WrongProducerGroup",
    "client_queue",
]

_WRITE = int(Perm.WRITE)


# -- errors ---------------------------------------------------------------------------


class ProducerError(Exception):
    """A send (or an end of transaction) refused, nothing stored. ``str(exc)`` says why
    in words a client can act on; each door maps the class to its own code."""


class InvalidTopic(ProducerError):
    """A name RocketMQ would refuse as a topic."""


class SystemTopic(ProducerError):
    """A RocketMQ system topic (``TBW102``, ``rmq_sys_*``, ...): never sent to."""


class TopicNotFound(ProducerError):
    """No such topic, and it may not be created."""


class NotWritable(ProducerError):
    """The topic's permission has no WRITE bit."""


class Forbidden(ProducerError):
    """The principal may not publish to the topic (the ACL)."""


class TypeMismatch(ProducerError):
    """The message's type is not one the topic accepts."""


class IllegalMessage(ProducerError):
    """A message the gateway cannot store as asked (a delayed transactional message, a
    batch of transactional messages, a bad delay)."""


class BadQueue(ProducerError):
    """A queue id at or above the topic's write queue count."""


class NotPending(ProducerError):
    """No pending delayed message to recall there."""


class TransactionNotFound(ProducerError):
    """No half message at that position (never sent, or its segment is gone)."""


class TransactionConflict(ProducerError):
    """The transaction ended the other way already."""

    def __init__(self, message: str, outcome: Outcome) -> None:
        super().__init__(message)
        self.outcome = outcome


class WrongProducerGroup(ProducerError):
    """An end of transaction from another producer group than the half's."""


# -- queue selectors --------------------------------------------------------------------


class QueueSelector(Protocol):
    """How a send picks its queue among the topic's write queues (RocketMQ's
    ``QueueSelector`` given to ``ProducerProcessor.sendMessage``)."""

    def select(self, config: TopicConfig) -> int: ...


class RoundRobin:
    """The next queue, one counter for the whole gateway."""

    __slots__ = ("_counter",)

    def __init__(self) -> None:
        self._counter = itertools.count()

    def select(self, config: TopicConfig) -> int:
        return next(self._counter) % config.write_queues


#: The gateway's one round robin.
ROUND_ROBIN = RoundRobin()


@dataclass(frozen=True, slots=True)
class ClientQueue:
    """The queue the client named (remoting's ``queueId``); negative: round robin; at
    or above the write queue count: :class:`BadQueue`."""

    queue_id: int

    def select(self, config: TopicConfig) -> int:
        return client_queue(config, self.queue_id)


def client_queue(config: TopicConfig, queue_id: int) -> int:
    """:class:`ClientQueue`'s choice without the object (a door's hot path)."""
    if 0 <= queue_id < config.write_queues:
        return queue_id
    if queue_id < 0:
        return ROUND_ROBIN.select(config)
    raise BadQueue(
        f"request queueId[{queue_id}] is illegal, topic {config.name} has"
        f" {config.write_queues} write queues")


@dataclass(frozen=True, slots=True)
class ShardingKey:
    """A message group's (sharding key's) queue: CRC32 of the key, so one group keeps one
    queue and its order; no key: round robin."""

    key: str

    def select(self, config: TopicConfig) -> int:
        if not self.key:
            return ROUND_ROBIN.select(config)
        return zlib.crc32(self.key.encode()) % config.write_queues


# -- the service ----------------------------------------------------------------------


class ProducerService:
    """Resolve, check, route and send for every RocketMQ door (module doc)."""

    def __init__(
        self,
        store: MessageStore,
        publisher: Publisher,
        topics: TopicRegistry,
        topic_space: TopicSpace,
        security: Security,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.topics = topics
        self.topic_space = topic_space
        #: The gateway's logins (its authenticator appears when a users file does).
        self.security = security
        #: Topics checked writable (valid, not system, WRITE), until the registry changes.
        self._writable: dict[str, TopicConfig] = {}
        #: Per topic, its queue LMQ names (``queue_lmq`` once per queue, not per send).
        self._queue_lmqs: dict[str, list[str]] = {}
        topics.add_listener(self._topics_changed)

    def _topics_changed(self, _name: str) -> None:
        self._writable.clear()
        self._queue_lmqs.clear()

    # -- resolve --------------------------------------------------------------------

    def resolve(self, name: str, principal: Principal | None, client_id: str = "") -> TopicConfig:
        """The configuration of topic ``name`` if ``principal`` may send to it, creating
        the topic when allowed; a :class:`ProducerError` otherwise. ``principal`` None:
        no ACL (open mode, or the door authenticates otherwise)."""
        config = self._writable.get(name)
        if config is None:
            config = self._writable_topic(name)
        if self.security.authenticator is not None:  # (the send hot path: no call in open mode)
            self._check_publish(principal, client_id, name)
        return config

    def _check_publish(self, principal: Principal | None, client_id: str, topic: str) -> None:
        auth = self.security.authenticator
        if auth is not None and principal is not None and not auth.can_publish(
            principal, client_id, topic
        ):
            raise Forbidden(f"no permission to send to topic {topic}")

    def _writable_topic(self, name: str) -> TopicConfig:
        if not name:
            raise InvalidTopic("the topic name is empty")
        if is_system_topic(name):
            raise SystemTopic(f"the topic {name} is a system topic; sending is forbidden")
        try:
            config = self.topics.ensure(name)
        except InvalidName as exc:
            raise InvalidTopic(str(exc)) from None
        if config is None:
            raise TopicNotFound(f"topic[{name}] not exist, apply first please!")
        if not config.perm & _WRITE:
            raise NotWritable(f"the topic[{name}] sending message is forbidden")
        self._writable[name] = config
        return config

    # -- check and route --------------------------------------------------------------

    @staticmethod
    def check_type(config: TopicConfig, kind: MessageType) -> None:
        """:class:`TypeMismatch` unless the topic accepts messages of type ``kind``."""
        if not config.accepts(kind):
            raise TypeMismatch(
                f"the message type {kind.value} does not match the type"
                f" {config.message_type.value} of topic {config.name}")

    def queue_lmq(self, topic: str, queue_id: int) -> str:
        """``lmq.rocketmq.queue_lmq(topic, queue_id)``, remembered per topic."""
        names = self._queue_lmqs.get(topic)
        if names is None or queue_id >= len(names):
            config = self.topics.get(topic)
            count = max(queue_id + 1, config.write_queues if config else 0)
            names = self._queue_lmqs[topic] = [queue_lmq(topic, q) for q in range(count)]
        return names[queue_id]

    def lmqs(self, topic: str, queue_id: int, second: str = "") -> list[str]:
        """Where a message of ``topic`` in queue ``queue_id`` with ``mqttSecondTopic``
        ``second`` goes: the queue's LMQ, then the MQTT subscribers and AMQP queues of
        the MQTT name ``topic`` + ``second``."""
        return [self.queue_lmq(topic, queue_id), *self.topic_space.route_rocketmq(topic, second)]

    # -- send -------------------------------------------------------------------------

    @property
    def lagging(self) -> bool:
        """The store lags: a door slows its producer down (see ``Publisher.lagging``)."""
        return self.publisher.lagging

    def send_callback(self, message: Message, lmqs: Sequence[str], done: Done) -> None:
        """A plain message with this loop turn's batch; ``done(result, exc)`` once it may
        be acknowledged (the hot path of remoting's single sends)."""
        self.publisher.submit_callback(message, lmqs, done)

    async def send(self, message: Message, lmqs: Sequence[str]) -> AppendResult:
        """A plain message with this loop turn's batch, once it may be acknowledged."""
        return await self.publisher.submit(message, lmqs)

    async def send_batch(
        self, items: Sequence[tuple[Message, Sequence[str]]]
    ) -> list[AppendResult]:
        """Plain messages, all stored or none."""
        if len(items) == 1:
            return [await self.publisher.submit(*items[0])]
        return await self.publisher.append_batch(items)

    async def send_delayed(
        self, items: Sequence[tuple[Message, Sequence[str], int]]
    ) -> list[AppendResult]:
        """Delayed messages ``(message, lmqs, due_ms)``, all stored or none, dispatched at
        their due times (one due now or earlier fires at once). One message goes with
        this loop turn's other delayed messages (``Publisher.submit_delayed``)."""
        if len(items) != 1:
            return await self.publisher.append_delayed(items)
        future: asyncio.Future[AppendResult] = self.publisher.loop.create_future()

        def done(result: AppendResult | None, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None or result is None:
                future.set_exception(exc or RuntimeError("the delayed append failed"))
            else:
                future.set_result(result)

        self.publisher.submit_delayed(*items[0], done)
        return [await future]

    async def send_half(
        self, message: Message, lmqs: Sequence[str], producer_group: str
    ) -> AppendResult:
        """A transactional (half) message, delivered when its transaction commits."""
        return await self.publisher.append_half(message, lmqs, producer_group)

    async def send_copies(
        self, items: Sequence[tuple[Message, Sequence[str]]]
    ) -> list[AppendResult | None]:
        """Copies from another cluster (the connector), stored once each (None for a
        duplicate), all or none."""
        return await self.publisher.append_copies(items)

    async def recall(
        self, position: int, topic: str, principal: Principal | None, client_id: str = ""
    ) -> Record:
        """Cancel the pending delayed message stored at ``position`` (its first position
        if the timer was relocated) of ``topic``, durable before this returns; its
        record. :class:`NotPending` when there is no such message (delivered, recalled,
        never sent, or of another topic)."""
        self._check_publish(principal, client_id, topic)
        store = self.store
        pending = store.pending_timer(position)
        record = store.record_at(pending.position) if pending is not None else None
        if pending is None or record is None or pending.topic != topic:
            raise NotPending(
                f"no delayed message of topic {topic!r} is pending under that handle"
                " (delivered, recalled, or never sent)")
        if not await self.publisher.cancel_timer(position):
            raise NotPending("the delayed message was delivered meanwhile")
        return record

    # -- transactions -----------------------------------------------------------------

    async def end_transaction(
        self,
        position: int,
        commit: bool,
        principal: Principal | None,
        client_id: str = "",
        producer_group: str | None = None,
        topic: str | None = None,
    ) -> EndResult:
        """Commit or roll back the half message at ``position``, once the control record
        may be acknowledged. The principal needs the publish right on the half's topic;
        ``producer_group`` (when given) must be the half's; ``topic`` (when given: the
        topic the request names) must be the half's, and its ACL is checked even when
        the half has ended. Ending is idempotent: the
        same end again is its ``ALREADY_*`` outcome (a rollback of a half the checks
        dead-lettered too); the other end is :class:`TransactionConflict`; no half there
        is :class:`TransactionNotFound`."""
        pending = self.store.txns.pending.get(position)
        if pending is None and topic is not None:
            self._check_publish(principal, client_id, topic)
        if pending is not None:
            half_topic = split_mqtt_topic(pending.topic)[0]
            if topic is not None and half_topic != topic:
                raise TransactionNotFound(
                    f"the transaction at {position} is not one of topic {topic!r}")
            self._check_publish(principal, client_id, half_topic)
            if producer_group is not None and pending.group != producer_group:
                raise WrongProducerGroup(
                    f"The producer group wrong: the half message at {position} belongs to"
                    f" producer group {pending.group!r}, not {producer_group!r}")
        result = await self.publisher.end_transaction(position, commit)
        if result.outcome == Outcome.UNKNOWN:
            raise TransactionNotFound(
                f"no half message at {position} (never sent, or its log segment is gone)")
        if result.outcome not in _ENDED_OK[commit]:
            raise TransactionConflict(
                f"the transaction at {position} already ended: {result.outcome.value}",
                result.outcome)
        return result


_ENDED_OK = {
    True: (Outcome.COMMITTED, Outcome.ALREADY_COMMITTED),
    # a half the last check dead-lettered was never delivered: rolled back, as asked
    False: (Outcome.ROLLED_BACK, Outcome.ALREADY_ROLLED_BACK, Outcome.ALREADY_DEAD_LETTERED),
}
