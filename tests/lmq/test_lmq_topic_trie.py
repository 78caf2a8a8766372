"""lmq.topic_trie: MQTT 4.7 matching, bookkeeping, pruning, and a brute-force reference."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lmq.names import InvalidTopic
from lmq.topic_trie import _MAX_RECURSION, TopicTrie, _Node, filter_matches


def reference_matches(topic_filter: str, topic: str) -> bool:
    """Brute force, independent of the trie: the filter as a regular expression."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False  # MQTT 4.7.2
    if topic_filter == "#":
        return True
    pattern = ""
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if level == "#":  # last level, after a '/': that '/' and anything after are optional
            pattern += "(/.*)?"
            break
        if index:
            pattern += "/"
        pattern += "[^/]*" if level == "+" else re.escape(level)
    return re.fullmatch(pattern, topic, flags=re.DOTALL) is not None


def trie_of(*filters: str) -> TopicTrie[str]:
    trie: TopicTrie[str] = TopicTrie()
    for topic_filter in filters:
        trie.add(topic_filter, topic_filter)
    return trie


# (filter, topic, matches?) from the examples of MQTT 4.7.1.2, 4.7.1.3 and 4.7.2.
SPEC_CASES = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "sport/tennis", True),
    ("#", "/", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+", "finance", True),
    ("+/#", "a", True),
    ("a/+/#", "a", False),
    ("a//b", "a//b", True),
    ("a//b", "a/b", False),
    ("a/+/b", "a//b", True),
    ("ACCOUNTS", "Accounts", False),
    ("#", "$SYS/monitor/Clients", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("+", "$", False),
    ("#", "$", False),
    ("$", "$", True),
    ("a/$x", "a/$x", True),
    ("a/+", "a/$x", True),  # the $ rule is about the first level only
    ("a/#", "a/$x/y", True),
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), SPEC_CASES)
def test_spec_examples(topic_filter: str, topic: str, expected: bool) -> None:
    assert reference_matches(topic_filter, topic) is expected
    assert filter_matches(topic_filter, topic) is expected
    assert (topic_filter in trie_of(topic_filter).matches(topic)) is expected


def test_matches_collects_from_every_branch() -> None:
    trie = trie_of("a/b/c", "a/+/c", "a/#", "#", "+/+/+", "a/b", "a/b/c/d", "+/b/#", "b/#")
    assert trie.matches("a/b/c") == {"a/b/c", "a/+/c", "a/#", "#", "+/+/+", "+/b/#"}
    assert trie.matches("a") == {"a/#", "#"}
    assert trie.matches("x") == {"#"}
    assert trie.matches("$SYS/b/c") == set()


def test_add_validates_the_filter() -> None:
    trie: TopicTrie[int] = TopicTrie()
    with pytest.raises(InvalidTopic, match="'#' must be the last level in filter 'a/#/b'"):
        trie.add("a/#/b", 1)
    with pytest.raises(InvalidTopic):
        trie.add("", 1)
    assert len(trie) == 0 and trie._root.kids is None


def test_values_must_be_hashable() -> None:
    trie: TopicTrie[object] = TopicTrie()
    with pytest.raises(TypeError):
        trie.add("a", [1])
    with pytest.raises(TypeError):
        trie.add("a", {1})
    assert "a" not in trie


def test_bookkeeping() -> None:
    trie: TopicTrie[object] = TopicTrie()
    assert trie.add("a/+", 1) is True
    assert trie.add("a/+", 1) is False
    assert trie.add("a/+", 2) is True
    assert trie.add("a/+", None) is True  # None is a value like any other
    assert trie.add("a", 3) is True
    assert len(trie) == 2
    assert "a/+" in trie and "a" in trie
    assert "a/b" not in trie and "" not in trie and 5 not in trie
    assert "a/#/b" not in trie  # lookups of invalid filters are simply absent
    assert trie.values_for("a/+") == frozenset({1, 2, None})
    assert trie.values_for("a") == frozenset({3})
    assert trie.values_for("zzz") == frozenset()
    assert sorted(trie.filters()) == ["a", "a/+"]
    assert trie.matches("a/x") == {1, 2, None}

    assert trie.remove("a/+", 7) is False
    assert trie.remove("a/b", 1) is False
    assert trie.remove("a/+/c", 1) is False
    assert trie.remove("a/+", 1) is True
    assert trie.remove("a/+", 1) is False
    assert trie.remove("a/+", None) is True
    assert trie.values_for("a/+") == frozenset({2})
    assert len(trie) == 2
    assert trie.remove("a/+", 2) is True
    assert len(trie) == 1 and "a/+" not in trie
    assert sorted(trie.filters()) == ["a"]
    trie.clear()
    assert len(trie) == 0 and list(trie.filters()) == []


def test_equal_values_are_one_value() -> None:
    trie: TopicTrie[object] = TopicTrie()
    trie.add("a", 1)
    assert trie.add("a", 1.0) is False  # 1 == 1.0, as in a set
    assert trie.remove("a", 1.0) is True
    assert "a" not in trie


def test_a_last_remaining_value_is_stored_inline_again() -> None:
    trie: TopicTrie[int] = TopicTrie()
    for value in (1, 2, 3):
        trie.add("x", value)
    node = trie._find("x")
    assert node is not None and node.vals == {1, 2, 3}
    trie.remove("x", 1)
    trie.remove("x", 3)
    assert node.vals == 2  # not {2}: a one-element set costs 216 bytes


def test_remove_prunes_every_empty_node() -> None:
    trie = trie_of("a/b/c/d", "a/b/x", "a/b", "q")
    trie.remove("a/b/c/d", "a/b/c/d")
    b = trie._find("a/b")
    # c/d is gone, and the lone remaining child is held directly again, not in a dict
    assert b is not None and type(b.kids) is _Node and b.kids.key == "x"
    trie.remove("a/b", "a/b")
    assert trie._find("a/b") is b  # still leads to a/b/x
    trie.remove("a/b/x", "a/b/x")
    assert trie._find("a") is None
    assert type(trie._root.kids) is _Node and trie._root.kids.key == "q"
    trie.remove("q", "q")
    assert trie._root.kids is None and len(trie) == 0


def test_child_dicts_shrink_after_mass_removal() -> None:
    trie: TopicTrie[int] = TopicTrie()
    for i in range(5000):
        trie.add(f"p/{i}", i)
    for i in range(5000 - 8):
        trie.remove(f"p/{i}", i)
    node = trie._find("p")
    assert node is not None and isinstance(node.kids, dict) and len(node.kids) == 8
    fresh = {str(i): None for i in range(8)}
    assert sys.getsizeof(node.kids) <= 4 * sys.getsizeof(dict(fresh))
    assert trie.matches("p/4999") == {4999}
    for i in range(5000 - 8, 5000):
        trie.remove(f"p/{i}", i)
    assert trie._root.kids is None


def test_churn_does_not_grow_the_trie() -> None:
    trie: TopicTrie[int] = TopicTrie()
    trie.add("keep/me", 0)
    for i in range(2000):
        trie.add(f"dev/{i}/state", i)
        trie.add(f"dev/{i}/+", i)
        trie.remove(f"dev/{i}/state", i)
        trie.remove(f"dev/{i}/+", i)
    assert list(trie.filters()) == ["keep/me"]
    assert trie._root.kids is trie._find("keep")


def test_deep_topics_take_the_iterative_path() -> None:
    depth = _MAX_RECURSION * 4
    filters = ["/".join(["a"] * depth), "/".join(["+"] * depth), "a/#", "/".join(["a"] * 50) + "/#"]
    trie = trie_of(*filters)
    topic = "/".join(["a"] * depth)
    assert trie.matches(topic) == set(filters)
    assert trie.matches("/".join(["a"] * (depth + 1))) == {"a/#", filters[3]}
    assert trie.matches("/" * (depth - 1)) == {filters[1]}
    deep_sys = "$" + "/a" * (depth - 1)
    assert trie.matches(deep_sys) == set()
    assert all(filter_matches(f, topic) for f in filters)


def test_filters_lists_exactly_the_filters_with_values() -> None:
    filters = {"a", "a/b", "/", "//", "+/+", "#", "a/#", "$SYS/#", "a//b"}
    trie = trie_of(*filters)
    assert set(trie.filters()) == filters
    assert len(trie) == len(filters)


# -- properties -------------------------------------------------------------------------

topic_levels = st.sampled_from(["", "a", "b", "$x", "$"])
filter_levels = st.sampled_from(["", "a", "b", "$x", "+"])


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(filter_levels, max_size=4))
    if draw(st.booleans()) or not "/".join(levels):
        levels.append("#")
    return "/".join(levels)


topics = st.lists(topic_levels, min_size=1, max_size=5).map("/".join).filter(bool)


@given(st.lists(topic_filters(), max_size=30), st.lists(topics, min_size=1, max_size=10))
def test_trie_agrees_with_brute_force(filters: list[str], topic_list: list[str]) -> None:
    trie: TopicTrie[int] = TopicTrie()
    for index, topic_filter in enumerate(filters):
        trie.add(topic_filter, index)
    for topic in topic_list:
        expected = {i for i, f in enumerate(filters) if reference_matches(f, topic)}
        assert trie.matches(topic) == expected
        for topic_filter in filters:
            assert filter_matches(topic_filter, topic) == reference_matches(topic_filter, topic)


class TrieAgainstModel(RuleBasedStateMachine):
    """Random add/remove sequences against a plain dict of sets."""

    def __init__(self) -> None:
        super().__init__()
        self.trie: TopicTrie[int] = TopicTrie()
        self.model: dict[str, set[int]] = {}

    @rule(topic_filter=topic_filters(), value=st.integers(0, 3))
    def add(self, topic_filter: str, value: int) -> None:
        new = value not in self.model.get(topic_filter, set())
        assert self.trie.add(topic_filter, value) is new
        self.model.setdefault(topic_filter, set()).add(value)

    @rule(topic_filter=topic_filters(), value=st.integers(0, 3))
    def remove_any(self, topic_filter: str, value: int) -> None:
        present = value in self.model.get(topic_filter, set())
        assert self.trie.remove(topic_filter, value) is present
        self._model_remove(topic_filter, value)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_existing(self, data: st.DataObject) -> None:
        topic_filter = data.draw(st.sampled_from(sorted(self.model)))
        value = data.draw(st.sampled_from(sorted(self.model[topic_filter])))
        assert self.trie.remove(topic_filter, value) is True
        self._model_remove(topic_filter, value)

    def _model_remove(self, topic_filter: str, value: int) -> None:
        values = self.model.get(topic_filter)
        if values is not None:
            values.discard(value)
            if not values:
                del self.model[topic_filter]

    @rule(topic=topics)
    def match(self, topic: str) -> None:
        expected = set()
        for topic_filter, values in self.model.items():
            if reference_matches(topic_filter, topic):
                expected |= values
        assert self.trie.matches(topic) == expected

    @invariant()
    def same_contents(self) -> None:
        assert len(self.trie) == len(self.model)
        assert sorted(self.trie.filters()) == sorted(self.model)
        for topic_filter, values in self.model.items():
            assert topic_filter in self.trie
            assert self.trie.values_for(topic_filter) == values

    def teardown(self) -> None:
        for topic_filter, values in list(self.model.items()):
            for value in values:
                assert self.trie.remove(topic_filter, value)
        assert self.trie._root.kids is None and len(self.trie) == 0


TrieAgainstModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40)
test_trie_against_model = TrieAgainstModel.TestCase
