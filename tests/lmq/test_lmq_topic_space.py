"""lmq.topic_space: MQTT <-> AMQP names and RabbitMQ topic-exchange matching."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmq.topic_space import (
    AmqpTopicTrie,
    amqp_to_mqtt,
    binding_matches,
    mqtt_to_amqp,
    split_words,
)
from lmq.topic_trie import TopicTrie, filter_matches


def reference_binding_matches(binding_key: str, routing_key: str) -> bool:
    """Brute force, the way RabbitMQ's docs read: words, '*' one, '#' zero or more."""
    # RabbitMQ's split_topic_key: the empty key has no words at all.
    pattern = binding_key.split(".") if binding_key else []
    words = routing_key.split(".") if routing_key else []

    def match(p: int, w: int) -> bool:
        if p == len(pattern):
            return w == len(words)
        if pattern[p] == "#":
            return any(match(p + 1, k) for k in range(w, len(words) + 1))
        if w == len(words):
            return False
        return (pattern[p] == "*" or pattern[p] == words[w]) and match(p + 1, w + 1)

    return match(0, 0)


# ---------------------------------------------------------------- name mapping


@pytest.mark.parametrize(
    ("mqtt", "amqp"),
    [
        ("a/b/c", "a.b.c"),
        ("a/+/#", "a.*.#"),
        ("+", "*"),
        ("#", "#"),
        ("/a", ".a"),
        ("a//b", "a..b"),
        ("/", "."),
        ("$SYS/+", "$SYS.*"),
    ],
)
def test_mapping_as_rabbitmq_does_it(mqtt: str, amqp: str) -> None:
    assert mqtt_to_amqp(mqtt) == amqp
    assert amqp_to_mqtt(amqp) == mqtt


@pytest.mark.parametrize(
    ("mqtt", "amqp", "back"),
    [
        ("a.b/c", "a.b.c", "a/b/c"),  # a dot in MQTT becomes a level separator
        ("a*b", "a*b", "a+b"),  # '*' comes back as '+'
    ],
)
def test_what_does_not_round_trip(mqtt: str, amqp: str, back: str) -> None:
    assert mqtt_to_amqp(mqtt) == amqp
    assert amqp_to_mqtt(amqp) == back


def test_slashes_in_routing_keys_become_levels() -> None:
    assert amqp_to_mqtt("a/b.c") == "a/b/c"


def test_split_words() -> None:
    assert split_words("") == []
    assert split_words(".") == ["", ""]
    assert split_words("a.") == ["a", ""]
    assert split_words("a.b") == ["a", "b"]


# ------------------------------------------------- RabbitMQ's own routing test vectors

# rabbitmq-server deps/rabbit/test/routing_SUITE.erl, topic1/1: bindings t1..t26 and the
# queues each routing key must reach, before and after removing bindings 1, 5, 11, 19, 21.
RABBIT_BINDINGS = [
    "a.b.c", "a.*.c", "a.#.b", "a.b.b.c", "#", "#.#", "#.b", "*.*", "a.*", "*.b.c",
    "a.#", "a.#.#", "b.b.c", "a.b.b", "a.b", "b.c", "", "*.*.*", "vodka.martini", "a.b.c",
    "*.#", "#.*.#", "*.#.#", "#.#.#", "*", "#.b.#",
]  # fmt: skip
RABBIT_EXPECTED = {
    "a.b.c": [1, 2, 5, 6, 10, 11, 12, 18, 20, 21, 22, 23, 24, 26],
    "a.b": [3, 5, 6, 7, 8, 9, 11, 12, 15, 21, 22, 23, 24, 26],
    "a.b.b": [3, 5, 6, 7, 11, 12, 14, 18, 21, 22, 23, 24, 26],
    "": [5, 6, 17, 24],
    "b.c.c": [5, 6, 18, 21, 22, 23, 24, 26],
    "a.a.a.a.a": [5, 6, 11, 12, 21, 22, 23, 24],
    "vodka.gin": [5, 6, 8, 21, 22, 23, 24],
    "vodka.martini": [5, 6, 8, 19, 21, 22, 23, 24],
    "b.b.c": [5, 6, 10, 13, 18, 21, 22, 23, 24, 26],
    "nothing.here.at.all": [5, 6, 21, 22, 23, 24],
    "oneword": [5, 6, 21, 22, 23, 24, 25],
}
RABBIT_EXPECTED_AFTER_REMOVAL = {
    "a.b.c": [2, 6, 10, 12, 18, 20, 22, 23, 24, 26],
    "a.b": [3, 6, 7, 8, 9, 12, 15, 22, 23, 24, 26],
    "a.b.b": [3, 6, 7, 12, 14, 18, 22, 23, 24, 26],
    "": [6, 17, 24],
    "b.c.c": [6, 18, 22, 23, 24, 26],
    "a.a.a.a.a": [6, 12, 22, 23, 24],
    "vodka.gin": [6, 8, 22, 23, 24],
    "vodka.martini": [6, 8, 22, 23, 24],
    "b.b.c": [6, 10, 13, 18, 22, 23, 24, 26],
    "nothing.here.at.all": [6, 22, 23, 24],
    "oneword": [6, 22, 23, 24, 25],
}


def test_rabbitmq_routing_suite() -> None:
    trie: AmqpTopicTrie[int] = AmqpTopicTrie()
    for queue, binding_key in enumerate(RABBIT_BINDINGS, start=1):
        trie.add(binding_key, queue)
    for routing_key, queues in RABBIT_EXPECTED.items():
        assert trie.matches(routing_key) == set(queues), routing_key
        for queue, binding_key in enumerate(RABBIT_BINDINGS, start=1):
            expected = queue in queues
            assert binding_matches(binding_key, routing_key) is expected
            assert reference_binding_matches(binding_key, routing_key) is expected
    for queue in (1, 5, 11, 19, 21):
        assert trie.remove(RABBIT_BINDINGS[queue - 1], queue)
    for routing_key, queues in RABBIT_EXPECTED_AFTER_REMOVAL.items():
        assert trie.matches(routing_key) == set(queues), routing_key
    for queue, binding_key in enumerate(RABBIT_BINDINGS, start=1):
        trie.remove(binding_key, queue)
    assert len(trie) == 0 and trie._root.kids is None and trie.matches("a.b.c") == set()


# -------------------------------------------------------------- AmqpTopicTrie basics


def test_amqp_trie_interface() -> None:
    trie: AmqpTopicTrie[str] = AmqpTopicTrie()
    for key in ("", "a.#", "a.*", "*", "a.", "#.#"):
        assert trie.add(key, key) is True
    assert trie.add("a.*", "a.*") is False
    assert len(trie) == 6
    assert "" in trie and "a." in trie and "a" not in trie
    assert set(trie.filters()) == {"", "a.#", "a.*", "*", "a.", "#.#"}
    assert trie.values_for("a.#") == frozenset({"a.#"})
    assert trie.matches("") == {"", "#.#"}
    assert trie.matches("a") == {"a.#", "*", "#.#"}
    assert trie.matches("a.") == {"a.#", "a.*", "a.", "#.#"}  # '*' matches the empty word
    assert trie.remove("", "") is True
    assert trie.remove("", "") is False
    assert "" not in trie and trie.matches("") == {"#.#"}


def test_amqp_wildcards_are_whole_words_only() -> None:
    trie: AmqpTopicTrie[str] = AmqpTopicTrie()
    trie.add("a*.b#", "literal")
    assert trie.matches("a*.b#") == {"literal"}
    assert trie.matches("ax.bx") == set()


def test_amqp_has_no_dollar_rule() -> None:
    trie: AmqpTopicTrie[str] = AmqpTopicTrie()
    trie.add("#", "all")
    trie.add("*.x", "star")
    assert trie.matches("$SYS.x") == {"all", "star"}


def test_many_hashes_are_not_exponential() -> None:
    trie: AmqpTopicTrie[str] = AmqpTopicTrie()
    binding = ".".join(["#"] * 30 + ["z"])
    trie.add(binding, "deep")
    key = ".".join(["w"] * 200)
    start = time.perf_counter()
    assert trie.matches(key) == set()
    assert trie.matches(key + ".z") == {"deep"}
    assert binding_matches(binding, key + ".z")
    assert time.perf_counter() - start < 1.0


# ------------------------------------------------------------------------ properties

binding_words = st.sampled_from(["", "a", "b", "*", "#"])
routing_words = st.sampled_from(["", "a", "b", "*", "#"])  # '*' and '#' are literal here
binding_keys = st.lists(binding_words, max_size=5).map(".".join)
routing_keys = st.lists(routing_words, max_size=6).map(".".join)


@given(st.lists(binding_keys, max_size=25), st.lists(routing_keys, min_size=1, max_size=10))
def test_amqp_trie_agrees_with_brute_force(bindings: list[str], keys: list[str]) -> None:
    trie: AmqpTopicTrie[int] = AmqpTopicTrie()
    for index, binding_key in enumerate(bindings):
        trie.add(binding_key, index)
    for routing_key in keys:
        expected = {i for i, b in enumerate(bindings) if reference_binding_matches(b, routing_key)}
        assert trie.matches(routing_key) == expected
        for binding_key in bindings:
            assert binding_matches(binding_key, routing_key) == (
                reference_binding_matches(binding_key, routing_key)
            )
    for index, binding_key in enumerate(bindings):
        trie.remove(binding_key, index)
    assert len(trie) == 0 and trie._root.kids is None


mqtt_levels = st.sampled_from(["", "a", "b", "c d"])


@st.composite
def mqtt_filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(mqtt_levels, st.just("+")), max_size=4))
    if draw(st.booleans()) or not "/".join(levels):
        levels.append("#")
    return "/".join(levels)


mqtt_topics = st.lists(mqtt_levels, min_size=1, max_size=5).map("/".join).filter(bool)


@given(mqtt_filters(), mqtt_topics)
def test_one_topic_space(topic_filter: str, topic: str) -> None:
    """Without '.', '*' and '$', MQTT and mapped AMQP matching agree and names round-trip."""
    assert amqp_to_mqtt(mqtt_to_amqp(topic)) == topic
    assert amqp_to_mqtt(mqtt_to_amqp(topic_filter)) == topic_filter
    expected = filter_matches(topic_filter, topic)
    assert binding_matches(mqtt_to_amqp(topic_filter), mqtt_to_amqp(topic)) == expected
    mqtt_trie: TopicTrie[int] = TopicTrie()
    amqp_trie: AmqpTopicTrie[int] = AmqpTopicTrie()
    mqtt_trie.add(topic_filter, 1)
    amqp_trie.add(mqtt_to_amqp(topic_filter), 1)
    assert bool(mqtt_trie.matches(topic)) == bool(amqp_trie.matches(mqtt_to_amqp(topic)))
    assert bool(mqtt_trie.matches(topic)) == expected
