"""One topic space for MQTT and AMQP: name mapping and AMQP topic-exchange matching.

Mapping, as RabbitMQ's MQTT plugin does it (``rabbit_mqtt_util``):

* ``mqtt_to_amqp(topic)``: ``/`` -> ``.`` and ``+`` -> ``*``; ``#`` stays ``#``.
  ``a/b/c`` -> ``a.b.c``, ``a/+/#`` -> ``a.*.#``.
* ``amqp_to_mqtt(key)``: ``*`` -> ``+`` then ``.`` -> ``/``.

For topics and filters that contain no ``.`` and no ``*`` the two are inverse, and an
MQTT filter matches an MQTT topic exactly when the mapped binding key matches the mapped
routing key (the tests check this), except for the ``$`` rule below. What does not map:

* Dots in MQTT topics become level separators: ``a.b/c`` and ``a/b.c`` both map to
  ``a.b.c`` and come back as ``a/b/c``; ``a.b/c`` is one level deeper to an AMQP binding.
* Slashes in routing keys become MQTT level separators: routing key ``a/b.c`` comes back
  as MQTT topic ``a/b/c`` (three levels, where AMQP saw two words).
* ``*`` in an MQTT topic or filter turns into ``+`` on the way back, so ``a*b`` returns
  as ``a+b``, which is not a valid MQTT name. Likewise a routing key containing ``+``
  or ``#`` (``a.#``, ``x+y``) is not a valid MQTT topic name after mapping; callers must
  validate mapped names with :mod:`lmq.names` before delivering them over MQTT.
* AMQP has no ``$``-topic rule: binding ``#`` or ``*.x`` matches ``$SYS.x``, while MQTT
  filters ``#`` and ``+/x`` do not match ``$SYS/x``.
* The empty routing key ``""`` has zero words (RabbitMQ's ``split_topic_key``), so
  bindings ``""``, ``#`` and ``#.#`` match it and ``*`` does not. MQTT has no empty
  topic name, so nothing maps to it.

:class:`AmqpTopicTrie` holds binding keys and matches routing keys with RabbitMQ's
topic-exchange semantics: words are split on ``.``; ``*`` matches exactly one word (which
may be empty: ``a.*`` matches ``a.``); ``#`` matches zero or more words and may appear
anywhere, any number of times (``#.b.#``); ``*`` and ``#`` are wildcards only as whole
words (``a*`` is a literal word). The expected results of RabbitMQ's own routing test
suite are checked in ``tests/lmq/test_lmq_topic_space.py``. Binding keys are not
validated: AMQP accepts any short string (the codec enforces its 255-byte limit).

Matching cost: ``#`` tries every split point, but each (node, position) pair is visited
at most once, so a match is O(trie nodes visited x words), never exponential in the
number of ``#``. With 100,000 bindings (mapped from the MQTT benchmark filters) a match
takes ~2.6 µs (``bench/topic_trie.py``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

# The trie internals are shared within the package on purpose: one node layout.
from lmq.topic_trie import _collect, _Node, _PatternTrie

V = TypeVar("V", bound=Hashable)

__all__ = [
    "AmqpTopicTrie",
    "amqp_to_mqtt",
    "binding_matches",
    "mqtt_to_amqp",
    "split_words",
]


def mqtt_to_amqp(topic: str) -> str:
    """MQTT topic name or filter -> AMQP routing or binding key (no validation)."""
    return topic.replace("/", ".").replace("+", "*")


def amqp_to_mqtt(key: str) -> str:
    """AMQP routing or binding key -> MQTT topic name or filter (no validation)."""
    return key.replace("*", "+").replace(".", "/")


def split_words(key: str) -> list[str]:
    """Words of a routing or binding key: ``""`` has none, ``"a."`` has ``a`` and ``""``."""
    return key.split(".") if key else []


def binding_matches(binding_key: str, routing_key: str) -> bool:
    """Whether one binding key matches one routing key (same rules as the trie)."""
    words = split_words(routing_key)
    # Positions in ``words`` that the binding's prefix seen so far can end at.
    reachable = {0}
    for pattern in split_words(binding_key):
        if pattern == "#":
            reachable = set(range(min(reachable), len(words) + 1))
        else:
            reachable = {
                p + 1
                for p in reachable
                if p < len(words) and (pattern == "*" or pattern == words[p])
            }
            if not reachable:
                return False
    return len(words) in reachable


class AmqpTopicTrie(_PatternTrie[V]):
    """AMQP binding keys -> values; ``matches(routing_key)`` as a topic exchange does.

    Same interface as :class:`lmq.topic_trie.TopicTrie` (add, remove, matches,
    values_for, filters, ``in``, ``len``), with ``.`` for ``/``, ``*`` for ``+``.
    """

    __slots__ = ()
    separator = "."

    def _split(self, pattern: str) -> list[str]:
        return split_words(pattern)

    def matches(self, routing_key: str) -> set[V]:
        """The values of every binding key that matches ``routing_key``."""
        out: set[V] = set()
        words = split_words(routing_key)
        end = len(words)
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        pop = stack.pop
        push = stack.append
        # (node, position) pairs already queued for a '#' node; see the module docstring.
        seen: set[tuple[_Node, int]] = set()
        hash_node: _Node | None
        while stack:
            node, i = pop()
            if i == end:
                _collect(node.vals, out)
            kids = node.kids
            if kids is None:
                continue
            if type(kids) is _Node:
                key = kids.key
                if key != "#":
                    if i < end and (key == words[i] or key == "*"):
                        push((kids, i + 1))
                    continue
                hash_node = kids
            else:
                if i < end:
                    child = kids.get(words[i])  # type: ignore[union-attr]
                    if child is not None:
                        push((child, i + 1))
                    child = kids.get("*")  # type: ignore[union-attr]
                    if child is not None:
                        push((child, i + 1))
                hash_node = kids.get("#")  # type: ignore[union-attr]
                if hash_node is None:
                    continue
            # '#' swallows words i..j-1 for every j; the ranges queued for one node all
            # run to the end, so the first position already seen ends the loop.
            for j in range(i, end + 1):
                state = (hash_node, j)
                if state in seen:
                    break
                seen.add(state)
                push(state)
        return out
