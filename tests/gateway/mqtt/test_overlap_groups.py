"""Which of a session's filters are merged: filters_overlap and groups (pure)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.mqtt import merge
from gateway.mqtt.merge import filters_overlap, groups


@pytest.mark.parametrize("a, b, overlap", [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/+", "a/b", True),
    ("a/+", "+/b", True),
    ("a/+", "a/b/c", False),
    ("a/#", "a", True),  # '#' also matches the parent level
    ("a/+", "a", False),
    ("a/#", "a/b/c", True),
    ("#", "x/y", True),
    ("+/+", "a/b/c", False),
    ("+/b/#", "a/+/c", True),
    ("#", "$SYS/x", False),  # no wildcard-led filter matches a '$' topic
    ("+/x", "$SYS/x", False),
    ("$SYS/#", "$SYS/x", True),
    ("a/b/", "a/b/+", True),  # an empty level is a level
])
def test_filters_overlap(a, b, overlap):
    assert filters_overlap(a, b) is overlap
    assert filters_overlap(b, a) is overlap


def _readers(*filters):
    return [SimpleNamespace(sub=SimpleNamespace(topic_filter=f)) for f in filters]


def test_groups_are_the_connected_parts():
    rs = _readers("a/x", "b/y", "c/#", "+/y", "d")
    parts = [[r.sub.topic_filter for r in p] for p in groups(rs)]
    # "+/y" joins "b/y" and "c/#" (c/y); "a/x" and "d" overlap nothing
    assert sorted(map(sorted, parts)) == [["+/y", "b/y", "c/#"], ["a/x"], ["d"]]


def test_many_subscriptions_are_merged_whole(monkeypatch):
    monkeypatch.setattr(merge, "MAX_GROUPED", 3)
    rs = _readers("a", "b", "c", "d")
    assert groups(rs) == [rs]
