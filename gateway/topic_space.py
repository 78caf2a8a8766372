"""One topic space for MQTT subscription filters and AMQP ``amq.topic`` bindings.

DESIGN.md: "MQTT topics and the amq.topic exchange share one topic space (``a/b/c`` <->
routing key ``a.b.c``, ``+`` <-> ``*``, ``#`` <-> ``#``), as RabbitMQ's MQTT plugin does.
An MQTT publish that also matches AMQP bindings is still one append."

This object answers "which LMQs does a message go to" for both front ends:

- ``route_mqtt(topic)``: the LMQ of every MQTT filter matching ``topic`` plus whatever
  the AMQP front end's ``amq.topic`` router returns for it (the router is given the MQTT
  topic and translates it with ``mqtt_to_amqp`` only when ``amq.topic`` has bindings);
- ``route_amq_topic(routing_key)``: the MQTT filter LMQs matching ``amqp_to_mqtt(key)``
  (the AMQP front end adds its own bound queues).

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
bindings change without telling this object). ``route_mqtt`` returns the memo's tuple
itself when the router adds nothing: callers treat the result as read-only.

Event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lmq.topic_space import amqp_to_mqtt
from lmq.topic_trie import TopicTrie

MQTT_PREFIX = "mqtt:"
ROUTE_CACHE_SIZE = 65536
AMQP_PREFIX = "amqp:"


def mqtt_lmq(topic_filter: str) -> str:
    """The LMQ of an MQTT subscription filter (also the LMQ a ``$share`` group pops)."""
    return MQTT_PREFIX + topic_filter


def amqp_queue_lmq(vhost: str, queue: str) -> str:
    return f"{AMQP_PREFIX}{vhost}:{queue}"


class TopicSpace:
    def __init__(self) -> None:
        self._filters: TopicTrie[str] = TopicTrie()
        self._refs: dict[str, int] = {}
        self._amq_topic: Callable[[str], list[str]] | None = None
        self._routes: dict[str, tuple[str, ...]] = {}

    # -- MQTT filters --------------------------------------------------------------------

    def add_filter(self, topic_filter: str) -> str:
        """Count one more subscription on ``topic_filter``; returns its LMQ name."""
        count = self._refs.get(topic_filter, 0)
        if count == 0:
            self._filters.add(topic_filter, mqtt_lmq(topic_filter))
            self._routes.clear()
        self._refs[topic_filter] = count + 1
        return mqtt_lmq(topic_filter)

    def remove_filter(self, topic_filter: str) -> None:
        count = self._refs.get(topic_filter, 0)
        if count <= 1:
            self._refs.pop(topic_filter, None)
            self._filters.remove(topic_filter, mqtt_lmq(topic_filter))
            self._routes.clear()
        else:
            self._refs[topic_filter] = count - 1

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

    # -- routing ----------------------------------------------------------------------

    def mqtt_matches(self, topic: str) -> list[str]:
        return list(self._filter_lmqs(topic))

    def _filter_lmqs(self, topic: str) -> tuple[str, ...]:
        routes = self._routes
        lmqs = routes.get(topic)
        if lmqs is None:
            lmqs = tuple(self._filters.matches(topic))
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
