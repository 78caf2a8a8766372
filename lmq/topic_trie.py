"""A trie of MQTT topic filters: which filters (and so which LMQs) match a topic.

Every distinct subscription filter is one LMQ (see docs/DESIGN.md), and a PUBLISH is
dispatched to the LMQ of every filter that matches its topic. :class:`TopicTrie` maps
filters to sets of values (an LMQ id, a session, ...) and answers
``matches(topic) -> set of values`` with the MQTT 4.7 rules:

* a plain level matches the identical level (case-sensitive, empty levels included);
* ``+`` matches exactly one level, which may be empty (``a/+`` matches ``a/``);
* ``#`` is last and matches zero or more levels, so ``a/#`` matches ``a`` too, and
  ``#`` alone matches every topic;
* a filter whose first level is ``+`` or ``#`` does not match a topic starting with
  ``$`` (4.7.2): ``#`` does not see ``$SYS/uptime``, ``$SYS/#`` does.

Layout. One ``_Node`` (``__slots__``: ``key``, ``kids``, ``vals``; 56 bytes) per
distinct filter prefix; ``key`` is the node's own level. ``kids`` is ``None`` (a leaf),
the only child node itself (by far the most common case in long, distinct filters: no
container at all, where a one-entry dict costs 184 bytes), or a dict level -> node for
two or more children. ``vals`` is ``_NOTHING``, the single value itself, or a ``set``
of two or more values; values must be hashable, so a stored value is never a ``set``.
Invariants kept by every method:

* a node with no values and no children is not in the tree (``remove`` prunes upwards);
* a dict of children has at least two entries, a value set at least two values;
* ``len(trie)`` is the number of filters holding at least one value.

CPython dicts never shrink when entries are deleted, so a child dict that has lost most
of its entries is rebuilt (checked at power-of-two sizes, amortised O(1)).

Figures (CPython 3.11, x86-64, ``bench/topic_trie.py``):

* Memory for 1,000,000 distinct 3-level filters with one value each (one shared value
  object, so only the trie is counted): 249 bytes per filter by tracemalloc (283 by
  RSS growth) for ``site{i % 1000}/dev{i}/temp``; 366 (416 RSS) when no level is shared
  (``a{i}/b{i}/c{i}``, three nodes and three level strings per filter). About 55 bytes
  of each filter are the level string that makes it distinct, which no layout saves.
* Matching with 100,000 filters (70% exact, the rest ``+`` and ``#`` in various
  places), 3-5 level topics: ~2.1 µs per ``matches`` call (~2.3 µs when every topic
  hits, 1.45 values per match), i.e. 430-470k matches per second on one core; best of
  5 runs, since a shared machine adds noise. Recursion is ~35% faster than a stack.

Not thread-safe: the gateway owns one trie per event loop and mutates it from there.
Topics passed to ``matches`` must be valid topic names (the protocol layer validates
them once per PUBLISH); filters passed to ``add`` are validated here.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from lmq.names import validate_topic_filter

__all__ = ["TopicTrie", "filter_matches"]

V = TypeVar("V", bound=Hashable)

# A node holds no value. A module-level sentinel, not None: None is a legal value.
_NOTHING: object = object()

# Child dicts are compacted when they use more than this many times the memory a
# freshly built dict of the same length needs.
_SLACK = 4


class _Node:
    __slots__ = ("key", "kids", "vals")

    def __init__(self, key: str) -> None:
        self.key = key  # this node's level; the same str object as its parent's dict key
        self.kids: _Node | dict[str, _Node] | None = None
        self.vals: object = _NOTHING


def _child(node: _Node, level: str) -> _Node | None:
    kids = node.kids
    if kids is None:
        return None
    if type(kids) is _Node:
        return kids if kids.key == level else None
    return kids.get(level)  # type: ignore[union-attr]


def _child_or_new(node: _Node, level: str) -> _Node:
    kids = node.kids
    if kids is None:
        child = node.kids = _Node(level)
        return child
    if type(kids) is _Node:
        if kids.key == level:
            return kids
        child = _Node(level)
        node.kids = {kids.key: kids, level: child}
        return child
    found: _Node | None = kids.get(level)  # type: ignore[union-attr]
    if found is not None:
        return found
    child = kids[level] = _Node(level)  # type: ignore[index]
    return child


@functools.cache
def _compact_dict_bytes(length: int) -> int:
    return sys.getsizeof(dict({str(i): None for i in range(length)}))


def _unlink(parent: _Node, level: str) -> None:
    kids = parent.kids
    if type(kids) is _Node:
        parent.kids = None
        return
    assert isinstance(kids, dict)
    del kids[level]
    length = len(kids)
    if length == 1:
        parent.kids = next(iter(kids.values()))
    elif (
        length >= 8
        and length & (length - 1) == 0
        and sys.getsizeof(kids) > _SLACK * _compact_dict_bytes(length)
    ):
        parent.kids = dict(kids)


def _collect(vals: object, out: set) -> None:
    if vals is _NOTHING:
        return
    if type(vals) is set:
        out.update(vals)
    else:
        out.add(vals)


class _PatternTrie(Generic[V]):
    """Storage shared by the MQTT and AMQP tries; subclasses define split and match."""

    __slots__ = ("_root", "_count")

    #: Joins levels back into a pattern in ``filters()``.
    separator = "/"

    def __init__(self) -> None:
        self._root = _Node("")
        self._count = 0

    def _split(self, pattern: str) -> list[str]:
        return pattern.split(self.separator)

    def _validate(self, pattern: str) -> None:
        """Raise if ``pattern`` may not be added; the default accepts anything."""

    def add(self, pattern: str, value: V) -> bool:
        """Associate ``value`` with ``pattern``; True if the pair was not there yet."""
        self._validate(pattern)
        hash(value)  # fail now, not when a second value turns vals into a set
        node = self._root
        for level in self._split(pattern):
            node = _child_or_new(node, level)
        vals = node.vals
        if vals is _NOTHING:
            node.vals = value
            self._count += 1
            return True
        if type(vals) is set:
            if value in vals:
                return False
            vals.add(value)
            return True
        if vals == value:
            return False
        node.vals = {vals, value}
        return True

    def remove(self, pattern: str, value: V) -> bool:
        """Drop ``value`` from ``pattern``; False if it was not there.

        When the last value goes, the pattern's now useless nodes are unlinked.
        """
        path: list[tuple[_Node, str]] = []
        node = self._root
        for level in self._split(pattern):
            child = _child(node, level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        vals = node.vals
        if type(vals) is set:
            if value not in vals:
                return False
            vals.discard(value)
            if len(vals) == 1:
                node.vals = vals.pop()
            return True
        if vals is _NOTHING or not vals == value:
            return False
        node.vals = _NOTHING
        self._count -= 1
        while node.kids is None and node.vals is _NOTHING and path:
            parent, level = path.pop()
            _unlink(parent, level)
            node = parent
        return True

    def _find(self, pattern: str) -> _Node | None:
        node: _Node | None = self._root
        for level in self._split(pattern):
            node = _child(node, level)  # type: ignore[arg-type]
            if node is None:
                return None
        return node

    def values_for(self, pattern: str) -> frozenset[V]:
        """The values stored under exactly ``pattern`` (no wildcard matching)."""
        node = self._find(pattern) if isinstance(pattern, str) else None
        if node is None or node.vals is _NOTHING:
            return frozenset()
        if type(node.vals) is set:
            return frozenset(node.vals)
        return frozenset((node.vals,))  # type: ignore[arg-type]

    def __contains__(self, pattern: object) -> bool:
        if not isinstance(pattern, str):
            return False
        node = self._find(pattern)
        return node is not None and node.vals is not _NOTHING

    def __len__(self) -> int:
        return self._count

    def filters(self) -> Iterator[str]:
        """Every pattern holding a value, in no particular order.

        A generator: do not add or remove while iterating (take ``list()`` first).
        """
        join = self.separator.join
        stack: list[tuple[_Node, tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, path = stack.pop()
            if node.vals is not _NOTHING:
                yield join(path)
            kids = node.kids
            if kids is None:
                continue
            for child in (kids,) if type(kids) is _Node else kids.values():  # type: ignore[union-attr]
                stack.append((child, (*path, child.key)))

    def clear(self) -> None:
        self._root = _Node("")
        self._count = 0


class TopicTrie(_PatternTrie[V]):
    """MQTT topic filters -> values; ``matches(topic)`` applies MQTT 4.7 matching."""

    __slots__ = ()
    separator = "/"

    def _validate(self, pattern: str) -> None:
        validate_topic_filter(pattern)

    def matches(self, topic: str) -> set[V]:
        """The values of every filter that matches ``topic`` (a valid topic name)."""
        out: set[V] = set()
        levels = topic.split("/")
        end = len(levels)
        node: _Node | None = self._root
        start = 0
        if topic.startswith("$"):
            # 4.7.2: wildcards in the first level do not match $-topics, so only the
            # exact first level is followed; below it the usual rules apply.
            node = _child(self._root, levels[0])
            start = 1
        if node is None:
            return out
        if end <= _MAX_RECURSION:
            _walk(node, levels, start, end, out)
        else:
            _walk_deep(node, levels, start, end, out)
        return out


# Recursion (one call per topic level) is ~35% faster than an explicit stack; topics
# deeper than this (up to 32768 levels fit in 65535 bytes) take the stack version.
_MAX_RECURSION = 128


def _collect_hash_child(kids: _Node | dict[str, _Node], out: set) -> None:
    if type(kids) is _Node:
        if kids.key == "#":
            _collect(kids.vals, out)
    else:
        child = kids.get("#")  # type: ignore[union-attr]
        if child is not None:
            _collect(child.vals, out)


def _walk(node: _Node, levels: list[str], i: int, end: int, out: set) -> None:
    """Collect into ``out`` what filters below ``node`` match ``levels[i:]``."""
    kids = node.kids
    if i == end:
        _collect(node.vals, out)
        if kids is not None:
            _collect_hash_child(kids, out)  # "a/#" also matches "a"
        return
    if kids is None:
        return
    if type(kids) is _Node:
        key = kids.key
        if key == levels[i] or key == "+":
            _walk(kids, levels, i + 1, end, out)
        elif key == "#":
            _collect(kids.vals, out)
        return
    child = kids.get(levels[i])  # type: ignore[union-attr]
    if child is not None:
        _walk(child, levels, i + 1, end, out)
    child = kids.get("+")  # type: ignore[union-attr]
    if child is not None:
        _walk(child, levels, i + 1, end, out)
    child = kids.get("#")  # type: ignore[union-attr]
    if child is not None:
        _collect(child.vals, out)


def _walk_deep(node: _Node, levels: list[str], i: int, end: int, out: set) -> None:
    """``_walk`` with an explicit stack, for topics too deep to recurse on."""
    stack = [(node, i)]
    while stack:
        node, i = stack.pop()
        kids = node.kids
        if i == end:
            _collect(node.vals, out)
            if kids is not None:
                _collect_hash_child(kids, out)
            continue
        if kids is None:
            continue
        if type(kids) is _Node:
            key = kids.key
            if key == levels[i] or key == "+":
                stack.append((kids, i + 1))
            elif key == "#":
                _collect(kids.vals, out)
            continue
        for key in (levels[i], "+"):
            child = kids.get(key)  # type: ignore[union-attr]
            if child is not None:
                stack.append((child, i + 1))
        child = kids.get("#")  # type: ignore[union-attr]
        if child is not None:
            _collect(child.vals, out)


def filter_matches(topic_filter: str, topic: str) -> bool:
    """Whether one valid filter matches one valid topic name (same rules as the trie).

    For a single check, such as retained messages against a new subscription.
    """
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    levels = topic.split("/")
    patterns = topic_filter.split("/")
    for i, pattern in enumerate(patterns):
        if pattern == "#":
            return True
        if i >= len(levels) or (pattern != "+" and pattern != levels[i]):
            return False
    return len(patterns) == len(levels)
