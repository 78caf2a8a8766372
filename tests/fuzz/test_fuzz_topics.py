"""Fuzzing the topic and filter parsers and the two tries against brute-force references.

Contracts checked (lmq/names.py, lmq/topic_trie.py, lmq/topic_space.py):

* ``validate_topic_name``, ``validate_topic_filter``, ``parse_shared_subscription`` and
  ``validate_lmq_name`` raise only :class:`InvalidTopic` on any ``str`` (lone surrogates,
  U+0000, control characters, huge strings included) and ``TypeError`` on anything else;
  they return their argument, with a one-line message on failure; and their verdicts
  equal an independent re-statement of MQTT 4.7 written here.
* :class:`TopicTrie` (MQTT 4.7, the ``$`` rule, ``+`` on empty levels, ``#`` matching
  the parent level, topics deeper than the recursion cut-over) and
  :class:`AmqpTopicTrie` (RabbitMQ topic exchange: ``*``, ``#`` anywhere, empty words,
  the empty routing key) give exactly what a brute-force matcher gives, through random
  adds and removes; ``filter_matches`` and ``binding_matches`` too.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmq.names import (
    InvalidTopic,
    SharedSubscription,
    parse_shared_subscription,
    validate_lmq_name,
    validate_topic_filter,
    validate_topic_name,
)
from lmq.topic_space import AmqpTopicTrie, binding_matches
from lmq.topic_trie import TopicTrie, filter_matches

from ._support import corpus, examples

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
MANY = settings(max_examples=examples(800), deadline=None, suppress_health_check=HEALTH)
FAST = settings(max_examples=examples(200), deadline=None, suppress_health_check=HEALTH)

# Any code point, surrogates included: the validators must refuse those, not crash.
any_text = st.text(st.characters(), max_size=30)
# The characters that matter to the parsers, over-represented.
special = st.sampled_from(["/", "+", "#", "$", "share", "$share/", "\x00", "\ud800", "\x7f",
                           "\ufffe", "a", "", "é", "*", "."])
structured_text = st.lists(special | st.text(max_size=3), max_size=10).map("".join)
texts = any_text | structured_text

# -- references -----------------------------------------------------------------------------


def ref_string_ok(text: str, max_bytes: int = 65535) -> bool:
    if not text or "\x00" in text:
        return False
    try:
        return len(text.encode("utf-8")) <= max_bytes
    except UnicodeEncodeError:
        return False


def ref_name_ok(text: str) -> bool:
    return ref_string_ok(text) and "+" not in text and "#" not in text


def ref_filter_ok(text: str) -> bool:
    if not ref_string_ok(text):
        return False
    levels = text.split("/")
    for i, level in enumerate(levels):
        if level in ("+", "#"):
            if level == "#" and i != len(levels) - 1:
                return False
        elif "+" in level or "#" in level:
            return False
    return True


def ref_shared(text: str) -> SharedSubscription | None | str:
    """The parse, None (not shared) or "invalid"."""
    if not text.startswith("$share/"):
        return None
    if not ref_string_ok(text):
        return "invalid"
    rest = text[len("$share/"):]
    if "/" not in rest:
        return "invalid"
    group, inner = rest.split("/", 1)
    if not group or "+" in group or "#" in group or not inner or not ref_filter_ok(inner):
        return "invalid"
    return SharedSubscription(group, inner)


def ref_mqtt_match(topic_filter: str, topic: str) -> bool:
    """MQTT 4.7 by recursion over the levels, straight from the spec's wording."""
    f, t = topic_filter.split("/"), topic.split("/")
    if topic.startswith("$") and f[0] in ("+", "#"):
        return False

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(f):
            return j == len(t)
        if f[i] == "#":  # the last level: the parent and any number of levels below
            return True
        if j == len(t):
            return False
        return (f[i] == "+" or f[i] == t[j]) and match(i + 1, j + 1)

    return match(0, 0)


def ref_amqp_match(binding: str, key: str) -> bool:
    """RabbitMQ topic matching by recursion; "" has no words."""
    b = binding.split(".") if binding else []
    w = key.split(".") if key else []

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(b):
            return j == len(w)
        if b[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(w) + 1))
        if j == len(w):
            return False
        return (b[i] == "*" or b[i] == w[j]) and match(i + 1, j + 1)

    return match(0, 0)


# -- the validators -------------------------------------------------------------------------


def outcome(fn: Any, *args: Any, **kw: Any) -> tuple[bool, Any]:
    try:
        result = fn(*args, **kw)
    except InvalidTopic as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 600, message
        return False, None
    return True, result


@MANY
@given(texts, st.booleans())
def test_validators_agree_with_the_spec(text: str, strict: bool) -> None:
    check_validators(text, strict)


def check_validators(text: str, strict: bool) -> None:
    ok, result = outcome(validate_topic_name, text, strict=strict)
    if not strict:
        assert ok == ref_name_ok(text), text
    elif ok:
        assert ref_name_ok(text)
    assert not ok or result is text
    ok, result = outcome(validate_topic_filter, text, strict=strict)
    if not strict:
        assert ok == ref_filter_ok(text), text
    elif ok:
        assert ref_filter_ok(text)
    assert not ok or result is text
    ok, result = outcome(parse_shared_subscription, text, strict=strict)
    expected = ref_shared(text)
    if not strict:
        assert (result if ok else "invalid") == expected, text
    elif ok:  # strict mode may refuse more, never accept more
        assert result == expected, text
    for limit in (1, 4, 4096):
        ok, result = outcome(validate_lmq_name, text, limit)
        assert ok == ref_string_ok(text, limit)


@FAST
@given(st.integers(65530, 65540), st.sampled_from(["a", "é", "/", "+", "€"]))
def test_length_limits_count_utf8_bytes(size: int, char: str) -> None:
    text = (char * size)[: size // len(char.encode())]
    ok, _ = outcome(validate_topic_filter, text)
    assert ok == ref_filter_ok(text)
    ok, _ = outcome(validate_topic_name, text)
    assert ok == ref_name_ok(text)


@pytest.mark.parametrize("value", [None, 1, b"a/b", ["a"], 1.5])
def test_non_str_is_a_type_error(value: Any) -> None:
    for fn in (validate_topic_name, validate_topic_filter, parse_shared_subscription,
               validate_lmq_name):
        with pytest.raises(TypeError):
            fn(value)


# -- the tries ------------------------------------------------------------------------------

# Small alphabets so that filters and topics collide; empty levels and '$' included.
mqtt_level = st.sampled_from(["", "a", "b", "$SYS", "$", "ü", "a b", "+x", "x#"])
mqtt_topic = st.lists(mqtt_level.filter(lambda x: "+" not in x and "#" not in x),
                      min_size=1, max_size=5).map("/".join).filter(bool)


@st.composite
def mqtt_filter(draw: st.DrawFn) -> str:
    levels = draw(st.lists(mqtt_level | st.just("+"), min_size=1, max_size=5))
    levels = [lv if "+" not in lv[1:] and "#" not in lv else "+" for lv in levels]
    if draw(st.booleans()):
        levels.append("#")
    text = "/".join(levels)
    return text if ref_filter_ok(text) else "#"


@FAST
@given(st.lists(st.tuples(st.booleans(), mqtt_filter(), st.integers(0, 3)), max_size=30),
       st.lists(mqtt_topic, min_size=1, max_size=8))
def test_topic_trie_agrees_with_brute_force(ops: list[Any], topics: list[str]) -> None:
    trie: TopicTrie[int] = TopicTrie()
    model: set[tuple[str, int]] = set()
    for add, topic_filter, value in ops:
        if add:
            assert trie.add(topic_filter, value) == ((topic_filter, value) not in model)
            model.add((topic_filter, value))
        else:
            assert trie.remove(topic_filter, value) == ((topic_filter, value) in model)
            model.discard((topic_filter, value))
    assert len(trie) == len({f for f, _ in model})
    assert set(trie.filters()) == {f for f, _ in model}
    for topic in topics:
        expected = {v for f, v in model if ref_mqtt_match(f, topic)}
        assert trie.matches(topic) == expected, topic
        for f, _ in model:
            assert filter_matches(f, topic) == ref_mqtt_match(f, topic), (f, topic)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=HEALTH)
@given(st.integers(100, 400), st.lists(mqtt_filter(), max_size=6), st.data())
def test_deep_topics_take_the_stack_walk(depth: int, filters: list[str], data: Any) -> None:
    """Topics deeper than 128 levels take ``_walk_deep``; same answers."""
    topic = "/".join(data.draw(st.lists(st.sampled_from(["a", "", "b"]), min_size=depth,
                                        max_size=depth)))
    prefix = topic.split("/")[: data.draw(st.integers(0, depth))]
    filters += ["/".join(prefix) + "/#", "/".join(["+"] * depth), "/".join(prefix) or "#",
                "#", topic]
    trie: TopicTrie[str] = TopicTrie()
    for f in filters:
        if ref_filter_ok(f):
            trie.add(f, f)
    expected = {f for f in trie.filters() if ref_mqtt_match(f, topic)}
    assert trie.matches(topic) == expected


amqp_word = st.sampled_from(["", "a", "b", "*", "#", "$SYS", "a*", "#b", "ü"])
amqp_key = st.lists(amqp_word.filter(lambda w: w not in ("*", "#")), max_size=5).map(".".join)
amqp_binding = st.lists(amqp_word, max_size=5).map(".".join)


@FAST
@given(st.lists(st.tuples(st.booleans(), amqp_binding, st.integers(0, 3)), max_size=30),
       st.lists(amqp_key | st.text(max_size=6), min_size=1, max_size=8))
def test_amqp_trie_agrees_with_brute_force(ops: list[Any], keys: list[str]) -> None:
    trie: AmqpTopicTrie[int] = AmqpTopicTrie()
    model: set[tuple[str, int]] = set()
    for add, binding, value in ops:
        if add:
            assert trie.add(binding, value) == ((binding, value) not in model)
            model.add((binding, value))
        else:
            assert trie.remove(binding, value) == ((binding, value) in model)
            model.discard((binding, value))
    assert len(trie) == len({b for b, _ in model})
    for key in keys:
        expected = {v for b, v in model if ref_amqp_match(b, key)}
        assert trie.matches(key) == expected, key
        for b, _ in model:
            assert binding_matches(b, key) == ref_amqp_match(b, key), (b, key)


@MANY
@given(texts, texts)
def test_single_matchers_on_arbitrary_text(pattern: str, subject: str) -> None:
    check_single_matchers(pattern, subject)


def check_single_matchers(pattern: str, subject: str) -> None:
    """No crash on any text; verdicts as the references (for valid MQTT input)."""
    assert binding_matches(pattern, subject) == ref_amqp_match(pattern, subject)
    if ref_filter_ok(pattern) and ref_name_ok(subject):
        assert filter_matches(pattern, subject) == ref_mqtt_match(pattern, subject)
        trie: TopicTrie[int] = TopicTrie()
        trie.add(pattern, 1)
        assert trie.matches(subject) == ({1} if ref_mqtt_match(pattern, subject) else set())


# -- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "data"), corpus("topics"))
def test_corpus(kind: str, data: bytes) -> None:
    # Corpus files hold UTF-8 with surrogatepass (so lone surrogates can be stored);
    # "pair" files hold a filter and a topic separated by a 0xFF byte (never in UTF-8).
    if kind == "text":
        for strict in (False, True):
            check_validators(data.decode("utf-8", "surrogatepass"), strict)
    elif kind == "pair":
        pattern, subject = (p.decode("utf-8", "surrogatepass") for p in data.split(b"\xff", 1))
        check_single_matchers(pattern, subject)
    else:  # pragma: no cover
        raise AssertionError(f"unknown corpus kind {kind!r}")
