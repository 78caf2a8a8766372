"""The ACL's per-topic meaning, checked against a brute-force reference.

The reference enumerates every topic name over a small alphabet (every level name the
rules and filters use, one name none of them uses, the empty level, a ``$`` name, the
client identifier and the username) up to one level deeper than any filter, and applies
the definition of gateway/auth/acl.py literally: topic T is allowed iff the first
concerned rule whose filter matches T allows it. With that alphabet and depth every
distinction a filter can make shows up, so "every topic" over the enumeration stands
for every topic.
"""

from __future__ import annotations

import functools
import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.auth.acl import (
    Access,
    AclRule,
    covers,
    decide,
    decide_subscription,
    intersects,
    substitute,
)

MAX_LEVELS = 3
_NAMES = ["a", "b", "", "$s"]
_OTHER = "z"  # a level name no rule or filter uses
CLIENT_IDS = ["c", "a", "", "a/b", "+"]
USERNAMES = ["u", "a", None]


def ref_match(topic_filter: str, topic: str) -> bool:
    f, t = topic_filter.split("/"), topic.split("/")
    if f[0] in ("+", "#") and t[0].startswith("$"):
        return False

    def walk(i: int, j: int) -> bool:
        if i == len(f):
            return j == len(t)
        if f[i] == "#":
            return True  # also matches the parent level (j == len(t))
        if j == len(t):
            return False
        return (f[i] == "+" or f[i] == t[j]) and walk(i + 1, j + 1)

    return walk(0, 0)


@functools.cache
def universe(client_id: str, username: str | None) -> list[str]:
    names = {*_NAMES, _OTHER, client_id}
    if username is not None:
        names.add(username)
    names = {n for n in names if "/" not in n and "+" not in n and "#" not in n}
    topics = []
    for depth in range(1, MAX_LEVELS + 2):
        for levels in itertools.product(sorted(names), repeat=depth):
            topic = "/".join(levels)
            if topic:
                topics.append(topic)
    return topics


def concerned(rules: list[AclRule], subscribe: bool) -> list[AclRule]:
    skip = Access.PUBLISH if subscribe else Access.SUBSCRIBE
    return [r for r in rules if r.access is not skip]


def ref_rule_matches(rule: AclRule, topic: str, client_id: str, username: str | None) -> bool:
    expanded = substitute(rule.filter, client_id=client_id, username=username)
    if expanded is None:
        return rule.access is Access.DENY  # unfillable: a deny matches everything
    return ref_match(expanded, topic)


def ref_allowed(rules, topic, client_id, username, *, subscribe: bool) -> bool:
    for rule in concerned(rules, subscribe):
        if ref_rule_matches(rule, topic, client_id, username):
            return rule.access is not Access.DENY
    return False


def ref_granted(rules, topics_of_f, client_id, username) -> bool:
    """F is granted iff an allowing rule covers F and no deny before it covers F."""
    for rule in concerned(rules, subscribe=True):
        if all(ref_rule_matches(rule, t, client_id, username) for t in topics_of_f):
            return rule.access is not Access.DENY
    return False


def rules(lines: list[str]) -> list[AclRule]:
    return [AclRule.parse(line) for line in lines]


level = st.sampled_from([*_NAMES, "+", "%c", "%u"])
filters = st.builds(
    lambda levels, tail: "/".join(levels + tail),
    st.lists(level, min_size=0, max_size=MAX_LEVELS),
    st.sampled_from([[], ["#"]]),
).filter(lambda f: f != "" and len(f.split("/")) <= MAX_LEVELS)
requested_filters = filters.filter(lambda f: "%" not in f)
acl_rules = st.lists(
    st.builds(AclRule, st.sampled_from(list(Access)), filters), min_size=0, max_size=5
)


@settings(max_examples=500, deadline=None)
@given(
    rules=acl_rules,
    requested=requested_filters,
    client_id=st.sampled_from(CLIENT_IDS),
    username=st.sampled_from(USERNAMES),
)
# an allow that only intersects F shadows a later deny; "+/#" covers "#"
@example(rules(["subscribe a/b", "deny a/#", "subscribe #"]), "+/+", "c", "u")
@example(rules(["deny b/b/a", "subscribe +/#"]), "#", "c", "u")
@example(rules(["deny %c/a", "subscribe #"]), "#", "a/b", "u")
def test_subscription_decision_matches_the_per_topic_definition(
    rules, requested, client_id, username
):
    topics_of_f = [t for t in universe(client_id, username) if ref_match(requested, t)]
    assert topics_of_f  # every filter over the alphabet matches some enumerated topic
    decision = decide_subscription(rules, requested, client_id=client_id, username=username)
    granted = decision is not None and decision.granted
    assert granted == ref_granted(rules, topics_of_f, client_id, username)
    if not granted:
        assert decision is None or decision.deny is None
        return
    deny = decision.deny
    delivered = {t for t in topics_of_f if deny is None or not deny(t)}
    expected = {
        t for t in topics_of_f if ref_allowed(rules, t, client_id, username, subscribe=True)
    }
    assert delivered == expected
    if all(
        not ref_rule_matches(r, t, client_id, username)
        for r in rules
        if r.access is Access.DENY
        for t in topics_of_f
    ):
        assert deny is None  # no deny overlaps F: nothing to filter, nothing to pay


@settings(max_examples=200, deadline=None)
@given(
    rules=acl_rules,
    client_id=st.sampled_from(CLIENT_IDS),
    username=st.sampled_from(USERNAMES),
)
def test_publish_decision_matches_the_per_topic_definition(rules, client_id, username):
    for topic in universe(client_id, username):
        verdict = decide(rules, topic, subscribe=False, client_id=client_id, username=username)
        assert (verdict is True) == ref_allowed(rules, topic, client_id, username, subscribe=False)


@settings(max_examples=300, deadline=None)
@given(one=requested_filters, other=requested_filters)
def test_covers_and_intersects_match_enumeration(one, other):
    topics = universe("c", "u")
    a = {t for t in topics if ref_match(one, t)}
    b = {t for t in topics if ref_match(other, t)}
    assert covers(one, other) == (b <= a)
    assert intersects(one, other) == bool(a & b)
