"""One topic space for MQTT subscription filters, AMQP ``amq.topic`` bindings and
RocketMQ topics.

DESIGN.md: "MQTT topics and the amq.topic exchange share one topic space (``a/b/c`` <->
routing key ``a.b.c``, ``+`` <-> ``*``, ``#`` <-> ``#``), as RabbitMQ's MQTT plugin does.
An MQTT publish that also matches AMQP bindings is still one append."

This object answers "which LMQs does a message go to" for both front ends:

- ``route_mqtt(topic)``: the LMQ of every MQTT filter matching ``topic`` plus whatever
  the AMQP front end's ``amq.topic`` router returns for it (the router is given the MQTT
  topic and translates it with ``mqtt_to_amqp`` only when ``amq.topic`` has bindings);
- ``route_amq_topic(routing_key)``: the MQTT filter LMQs matching ``amqp_to_mqtt(key)``
  (the AMQP front end adds its own bound queues);
- ``route_rocketmq(topic, second)``: for a RocketMQ send, the MQTT filter LMQs and
  ``amq.topic`` queues matching the MQTT name ``join_mqtt_topic(topic, second)`` (the
  RocketMQ front end adds the queue LMQ it chose).

RocketMQ topics (given as a lookup, :meth:`TopicSpace.set_rocketmq_topics`): an MQTT
publish on ``T/rest`` (or on ``T``), and an AMQP publish to ``amq.topic`` whose routing
key maps to it, also goes to ONE queue of RocketMQ topic ``T`` when ``T`` is a RocketMQ
topic with write permission: ``rmq:T:q`` with ``q = crc32(full MQTT topic, UTF-8) %
write_queues`` (:func:`rocketmq_queue_for`), so every message of one device topic lands
in the same queue, in publish order. Retry and dead-letter topics (``%`` names) and
RocketMQ's system topics (``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_*``, ...: a RocketMQ send
to them is refused too) are never reached this way. An MQTT or AMQP publish never
creates a RocketMQ topic: a device fleet publishes to millions of first levels, and each
would become a topic of N LMQs; the operator creates the topics RocketMQ consumers read
(``lmq topics create``).
The record's ``topic`` stays the full MQTT name; a RocketMQ reader derives
``mqttSecondTopic`` from it.

MQTT filters are reference-counted: every subscription of every session that holds a
filter (online, or offline with a persistent session whose backlog must accumulate)
counts once; the filter leaves the trie when the last one goes. The LMQ itself stays
until cleanup removes it (idle TTL).

LMQ names are namespaced per protocol so that an MQTT filter can never collide with an
AMQP queue name: ``mqtt:<filter>`` and ``amqp:<vhost>:<queue>``.

Which MQTT filters match a topic is remembered per topic (at most
``ROUTE_CACHE_SIZE`` topics; the whole memo is dropped when a filter enters or leaves the
trie, or when it is full): a device fleet publishes to the same topics over and over, and
the trie walk is the costliest step of routing. The AMQP router is asked every time (its
bindings change without telling this object). The RocketMQ queue LMQ of a topic is part
of the memo: the owner of the RocketMQ topics calls :meth:`TopicSpace.rocketmq_topics_changed`
when one is created, changed or deleted, which drops the memo. With no RocketMQ topic,
routing costs what it did (a memo hit; a miss adds one dict lookup).
``route_mqtt`` returns the memo's tuple
itself when the router adds nothing: callers treat the result as read-only.

Event-loop thread only.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmq.rocketmq import LMQ_PREFIX as RMQ_PREFIX
from lmq.rocketmq import (
    Perm,
    TopicConfig,
    is_system_topic,
    join_mqtt_topic,
    parse_queue_lmq,
    queue_lmq,
)
from lmq.topic_space import amqp_to_mqtt
from lmq.topic_trie import TopicTrie

if TYPE_CHECKING:
    from gateway.queue_consumers import QueueConsumers

MQTT_PREFIX = "mqtt:"
ROUTE_CACHE_SIZE = 65536
AMQP_PREFIX = "amqp:"


#: The store group an MQTT shared subscription ``$share/<group>/<filter>`` pops the
#: filter's LMQ as (gateway.mqtt.delivery), and the JSON API's MQTT consume too.
MQTT_SHARE_PREFIX = "mqtt-share:"


def mqtt_lmq(topic_filter: str) -> str:
    """The LMQ of an MQTT subscription filter (also the LMQ a ``$share`` group pops)."""
    return MQTT_PREFIX + topic_filter


def amqp_queue_lmq(vhost: str, queue: str) -> str:
    return f"{AMQP_PREFIX}{vhost}:{queue}"


#: The configuration of a RocketMQ topic by name, or None (``TopicRegistry.get``).
RocketMQTopics = Callable[[str], TopicConfig | None]


def rocketmq_queue_for(config: TopicConfig, mqtt_topic: str) -> str:
    """The queue LMQ of ``config`` an MQTT or AMQP publish on ``mqtt_topic`` goes to:
    ``crc32(mqtt_topic) % write_queues``, stable across restarts and processes, so one
    MQTT topic always maps to one queue and keeps its order there."""
    return queue_lmq(config.name, zlib.crc32(mqtt_topic.encode()) % config.write_queues)


@dataclass(frozen=True, slots=True)
class ExchangeRoute:
    """Where an AMQP exchange routes a message (:meth:`TopicSpace.route_exchange`): the
    queue LMQs (exchange-to-exchange bindings and alternate exchanges followed, full
    ``reject-publish`` queues left out and counted in ``refused``), whether the
    exchange is an ``x-delayed-message`` one (its messages' delay is honoured), and
    whether the message passed through ``amq.topic`` of vhost ``/`` (then it belongs
    to the one topic space too: MQTT subscribers of ``amqp_to_mqtt(routing_key)``)."""

    lmqs: list[str]
    delayed: bool = False
    mqtt: bool = False
    refused: int = 0
    #: An internal exchange: AMQP refuses publishes to it (403), so does HTTP.
    internal: bool = False


#: ``(vhost, exchange, routing_key, headers) -> ExchangeRoute``, or None when the vhost
#: or the exchange does not exist.
ExchangeRouter = Callable[[str, str, str, "Mapping[str, Any] | None"], "ExchangeRoute | None"]


class TopicSpace:
    def __init__(self, rocketmq_topics: RocketMQTopics | None = None) -> None:
        self._filters: TopicTrie[str] = TopicTrie()
        self._refs: dict[str, int] = {}
        self._amq_topic: Callable[[str], list[str]] | None = None
        self._exchange_router: ExchangeRouter | None = None
        #: The AMQP front end's queue consumption for other front ends (the JSON API's
        #: AMQP queue receive; gateway.queue_consumers), None without one.
        self.queue_consumers: QueueConsumers | None = None
        self._routes: dict[str, tuple[str, ...]] = {}
        #: route_rocketmq's memo: MQTT name -> its filter LMQs without the RocketMQ
        #: queue, or None for a name that reaches nothing else. Cleared with _routes.
        self._rmq_routes: dict[str, tuple[str, ...] | None] = {}
        self._rocketmq = rocketmq_topics

    # -- MQTT filters --------------------------------------------------------------------

    def add_filter(self, topic_filter: str) -> str:
        """Count one more subscription on ``topic_filter``; returns its LMQ name."""
        count = self._refs.get(topic_filter, 0)
        if count == 0:
            self._filters.add(topic_filter, mqtt_lmq(topic_filter))
            self._clear_routes()
        self._refs[topic_filter] = count + 1
        return mqtt_lmq(topic_filter)

    def remove_filter(self, topic_filter: str) -> None:
        count = self._refs.get(topic_filter, 0)
        if count <= 1:
            self._refs.pop(topic_filter, None)
            self._filters.remove(topic_filter, mqtt_lmq(topic_filter))
            self._clear_routes()
        else:
            self._refs[topic_filter] = count - 1

    def _clear_routes(self) -> None:
        self._routes.clear()
        self._rmq_routes.clear()

    def filter_count(self) -> int:
        return len(self._refs)

    def subscriptions_on(self, topic_filter: str) -> int:
        return self._refs.get(topic_filter, 0)

    # -- AMQP -------------------------------------------------------------------------

    def set_amq_topic_router(self, router: Callable[[str], list[str]] | None) -> None:
        """The AMQP front end's answer to "which queue LMQs does ``amq.topic`` route this
        MQTT topic to" (its bindings, exchange-to-exchange bindings included, for the
        routing key ``mqtt_to_amqp(topic)``)."""
        self._amq_topic = router

    def set_exchange_router(self, router: ExchangeRouter | None) -> None:
        """The AMQP front end's routing of any exchange (for front ends that publish
        through AMQP exchanges without importing ``gateway.amqp``: the JSON API)."""
        self._exchange_router = router

    def route_exchange(self, vhost: str, exchange: str, routing_key: str,
                       headers: Mapping[str, Any] | None = None) -> ExchangeRoute | None:
        """Where ``exchange`` of ``vhost`` routes a message with ``routing_key`` and
        ``headers`` (the AMQP front end's answer), MQTT filter LMQs added when it passed
        through ``amq.topic``; None when there is no such exchange (or no AMQP front
        end). ``""`` is the default exchange (the queue named by the routing key)."""
        router = self._exchange_router
        if router is None:
            return None
        route = router(vhost, exchange, routing_key, headers)
        if route is not None and route.mqtt:
            extra = [lmq for lmq in self.route_amq_topic(routing_key) if lmq not in route.lmqs]
            route = ExchangeRoute(route.lmqs + extra, route.delayed, True, route.refused,
                                  route.internal)
        return route

    def set_queue_consumers(self, consumers: QueueConsumers | None) -> None:
        """The AMQP front end's remote consumers of its queues (for front ends that
        consume AMQP queues without importing ``gateway.amqp``: the JSON API)."""
        self.queue_consumers = consumers

    # -- RocketMQ -----------------------------------------------------------------------

    def set_rocketmq_topics(self, lookup: RocketMQTopics | None) -> None:
        """The RocketMQ topics MQTT and AMQP publishes reach (None: none)."""
        self._rocketmq = lookup
        self._clear_routes()

    def rocketmq_topics_changed(self, name: str = "") -> None:
        """A RocketMQ topic was created, changed or deleted: forget the memo (the
        signature fits ``TopicRegistry.add_listener``)."""
        self._clear_routes()

    def is_rocketmq_queue(self, lmq: str) -> bool:
        """Whether ``lmq`` is a queue of an existing RocketMQ topic (its lifetime is the
        topic's: housekeeping never removes it as idle)."""
        parsed = parse_queue_lmq(lmq)
        if parsed is None or self._rocketmq is None:
            return False
        config = self._rocketmq(parsed[0])
        return config is not None and parsed[1] < config.queue_count

    def rocketmq_queue(self, mqtt_topic: str) -> str | None:
        """The RocketMQ queue LMQ a publish on ``mqtt_topic`` also goes to, if any."""
        lookup = self._rocketmq
        if lookup is None:
            return None
        first = mqtt_topic.partition("/")[0]
        config = lookup(first)
        if config is None or not config.perm & Perm.WRITE or "%" in first or (
            is_system_topic(first)
        ):
            return None
        return rocketmq_queue_for(config, mqtt_topic)

    # -- routing ----------------------------------------------------------------------

    def mqtt_matches(self, topic: str) -> list[str]:
        """The LMQs of the MQTT filters matching ``topic`` (no RocketMQ queue)."""
        return list(self._filters.matches(topic))

    def _filter_lmqs(self, topic: str) -> tuple[str, ...]:
        """The memo: filter LMQs matching ``topic``, then its RocketMQ queue if any."""
        routes = self._routes
        lmqs = routes.get(topic)
        if lmqs is None:
            lmqs = tuple(self._filters.matches(topic))
            if self._rocketmq is not None:
                queue = self.rocketmq_queue(topic)
                if queue is not None:
                    lmqs = (*lmqs, queue)
            if len(routes) >= ROUTE_CACHE_SIZE:
                routes.clear()
            routes[topic] = lmqs
        return lmqs

    def route_mqtt(self, topic: str) -> Sequence[str]:
        """The LMQs an MQTT publish on ``topic`` goes to (read-only: see the module doc)."""
        routes = self._routes
        lmqs = routes.get(topic)
        if lmqs is None:
            lmqs = self._filter_lmqs(topic)
        router = self._amq_topic
        if router is not None:
            queues = router(topic)
            if queues:
                return [*lmqs, *queues]
        return lmqs

    def route_amq_topic(self, routing_key: str) -> list[str]:
        """MQTT filter LMQs for an AMQP publish to ``amq.topic``. A routing key that
        maps to an MQTT topic with wildcard characters reaches no MQTT subscriber."""
        topic = amqp_to_mqtt(routing_key)
        if not topic or "+" in topic or "#" in topic or "\x00" in topic:
            return []
        return list(self._filter_lmqs(topic))

    def route_rocketmq(self, topic: str, second: str = "") -> list[str]:
        """The MQTT filter LMQs and ``amq.topic`` queue LMQs a RocketMQ send to ``topic``
        with ``mqttSecondTopic`` ``second`` also goes to: those matching the MQTT name
        ``join_mqtt_topic(topic, second)``. Not the RocketMQ queue itself (the front end
        picks it). Retry and dead-letter topics, and a name that is not a valid MQTT
        topic name (wildcards, U+0000), reach nothing else."""
        if "%" in topic:
            return []
        name = join_mqtt_topic(topic, second) if second else topic
        memo = self._rmq_routes
        try:
            lmqs = memo[name]
        except KeyError:
            lmqs = memo[name] = self._rocketmq_filter_lmqs(name)
            if len(memo) > ROUTE_CACHE_SIZE:
                memo.clear()
                memo[name] = lmqs
        if lmqs is None:
            return []
        router = self._amq_topic
        if router is not None:
            queues = router(name)
            if queues:
                return [*lmqs, *queues]
        return list(lmqs)

    def _rocketmq_filter_lmqs(self, name: str) -> tuple[str, ...] | None:
        if "+" in name or "#" in name or "\x00" in name:
            return None
        lmqs = self._filter_lmqs(name)
        if lmqs and lmqs[-1].startswith(RMQ_PREFIX):
            lmqs = lmqs[:-1]
        return lmqs
