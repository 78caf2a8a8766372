"""Topic ACL rules: parsing, substitution, covers/intersects, first-match decisions."""

from __future__ import annotations

import pytest

from gateway.auth.acl import (
    GRANTED,
    REFUSED,
    Access,
    AclRule,
    InvalidRule,
    covers,
    decide,
    decide_subscription,
    intersects,
    substitute,
)


def rules(*lines: str) -> list[AclRule]:
    return [AclRule.parse(line) for line in lines]


def pub(rule_list, topic, client_id="c1", username="alice"):
    return decide(rule_list, topic, subscribe=False, client_id=client_id, username=username)


def sub(rule_list, topic_filter, client_id="c1", username="alice"):
    return decide(rule_list, topic_filter, subscribe=True, client_id=client_id, username=username)


def subd(rule_list, topic_filter, client_id="c1", username="alice"):
    return decide_subscription(rule_list, topic_filter, client_id=client_id, username=username)


def test_parse_and_str():
    rule = AclRule.parse("both  home/%u/#")
    assert rule == AclRule(Access.BOTH, "home/%u/#") and str(rule) == "both home/%u/#"
    assert rule.to_json() == {"access": "both", "filter": "home/%u/#"}


@pytest.mark.parametrize(
    "text", ["read a/b", "publish", "publish a/#/b", "deny a/b+", "subscribe a/\0", "both "]
)
def test_parse_rejects(text):
    with pytest.raises(InvalidRule):
        AclRule.parse(text)


@pytest.mark.parametrize(
    "outer, inner, expected",
    [
        ("#", "a/b", True),
        ("#", "#", True),
        ("a/#", "a", True),  # a/# matches its parent level
        ("a/#", "a/+/c", True),
        ("a/#", "a/#", True),
        ("a/+", "a/b", True),
        ("a/+", "a/+", True),
        ("a/+", "a/#", False),
        ("a/+", "a/b/c", False),
        ("a/b", "a/+", False),
        ("a/+/#", "a/#", False),  # a/# matches "a", which a/+/# does not
        ("+/b", "a/b", True),
        ("#", "$SYS/x", False),  # [MQTT-4.7.2-1]
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/broker/+", True),
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
        ("+/#", "#", True),  # the parent of "#" is the empty name, which is no topic
        ("/+/#", "/#", True),  # likewise: the parent of "/#" is ""
    ],
)
def test_covers(outer, inner, expected):
    assert covers(outer, inner) is expected


@pytest.mark.parametrize(
    "one, other, expected",
    [
        ("secret/#", "#", True),
        ("secret/#", "+/x", True),
        ("secret/#", "public/#", False),
        ("a/+/c", "a/b/+", True),
        ("a/b", "a/b/c", False),
        ("a/#", "a", True),
        ("a/b/#", "a", False),
        ("#", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("+", "$x", False),
        ("a/+", "a/b/c", False),
        ("/#", "+", False),  # only the empty name "" would match both
        ("/#", "/", True),
    ],
)
def test_intersects(one, other, expected):
    assert intersects(one, other) is expected
    assert intersects(other, one) is expected


def test_substitute():
    assert substitute("d/%c/%u", client_id="c1", username="bob") == "d/c1/bob"
    assert substitute("plain/#", client_id="", username=None) == "plain/#"
    assert substitute("d/%u", client_id="c", username=None) is None  # anonymous
    assert substitute("d/%c", client_id="", username="bob") is None
    for sneaky in ("#", "+", "a/b"):
        assert substitute("d/%c/x", client_id=sneaky, username="bob") is None


def test_first_match_wins_and_default_is_no_decision():
    acl = rules("deny a/secret", "both a/#")
    assert pub(acl, "a/public") is True
    assert pub(acl, "a/secret") is False
    assert pub(acl, "b/x") is None
    assert pub(rules("both a/#", "deny a/secret"), "a/secret") is True  # order matters


def test_rules_only_apply_to_their_operation():
    acl = rules("subscribe a/#", "publish a/b")
    assert pub(acl, "a/b") is True  # the subscribe rule is not consulted for publishing
    assert pub(acl, "a/c") is None
    assert sub(acl, "a/+") is True
    acl = rules("publish x/#")
    assert sub(acl, "x/#") is None


def test_wildcard_subscription_needs_a_covering_rule():
    acl = rules("subscribe a/b", "subscribe a/+/c")
    assert sub(acl, "a/b") is True
    assert sub(acl, "a/+") is None  # a/b does not cover a/+
    assert sub(acl, "a/x/c") is True
    assert sub(acl, "a/#") is None
    assert sub(rules("subscribe a/b", "subscribe a/#"), "a/+") is True  # search goes on


def test_deny_overlapping_a_subscription_filters_its_delivery():
    # "allow # except secret/#": the subscription is granted, the denied topics are
    # filtered out at delivery; a deny that covers the filter still refuses it.
    acl = rules("deny secret/#", "subscribe #")
    for wide in ("#", "+/x"):
        decision = subd(acl, wide)
        assert decision.granted and decision.deny is not None
        assert decision.deny("secret/x") and not decision.deny("public/x")
    assert sub(acl, "#") is True
    assert subd(acl, "public/#") == GRANTED  # no overlap: no delivery filter
    for covered in ("secret/#", "secret/x", "secret/+/y"):
        assert subd(acl, covered) == REFUSED
    assert subd(acl, "secret") == REFUSED  # secret/# matches its parent level


def test_delivery_filter_keeps_first_match_order():
    # an allow before a deny shadows it for the topics it matches
    acl = rules("subscribe a/b", "deny a/#", "subscribe #")
    decision = subd(acl, "+/+")
    assert decision.granted
    assert [decision.deny(t) for t in ("a/b", "a/c", "c/d")] == [False, True, False]
    assert subd(acl, "a/+") == REFUSED  # the deny covers it
    assert subd(acl, "a/b") == GRANTED  # decided by the first rule, nothing to filter
    # allows after the last deny filter nothing, and are left out
    decision = subd(rules("deny a/x", "subscribe a/y", "subscribe #"), "a/+")
    assert decision.deny is not None and str(decision.deny) == "deny a/x"
    # rules after the deciding allow do not matter
    assert subd(rules("subscribe #", "deny secret/#"), "#") == GRANTED


def test_unfillable_deny_refuses_every_subscription():
    acl = rules("deny devices/%c/admin", "subscribe #")
    assert subd(acl, "public/#", client_id="a/b") == REFUSED
    decision = subd(acl, "devices/#", client_id="c1")
    assert decision.deny("devices/c1/admin") and not decision.deny("devices/c2/admin")


def test_client_id_substitution_keeps_clients_apart():
    acl = rules("both devices/%c/#")
    assert pub(acl, "devices/c1/temp", client_id="c1") is True
    assert pub(acl, "devices/c2/temp", client_id="c1") is None  # another client's topic
    assert sub(acl, "devices/c1/#", client_id="c1") is True
    assert sub(acl, "devices/+/temp", client_id="c1") is None
    assert sub(acl, "devices/#", client_id="#") is None  # '#' as client id widens nothing
    assert pub(acl, "devices/x/y/z", client_id="x/y") is None  # '/' would nest levels


def test_username_substitution_and_anonymous():
    acl = rules("both home/%u/#")
    assert pub(acl, "home/alice/lamp") is True
    assert pub(acl, "home/bob/lamp") is None
    assert pub(acl, "home/alice/lamp", username=None) is None


def test_deny_with_unfillable_placeholder_applies():
    acl = rules("deny devices/%c/admin", "both devices/#")
    assert pub(acl, "devices/c1/admin", client_id="c1") is False
    assert pub(acl, "devices/c1/data", client_id="c1") is True
    assert pub(acl, "devices/c2/admin", client_id="c1") is True
    assert pub(acl, "devices/q/data", client_id="a+b") is False  # cannot fill: deny applies


def test_sys_topics_need_rules_that_name_them():
    assert pub(rules("both #"), "$SYS/broker/uptime") is None
    assert sub(rules("subscribe #"), "$SYS/#") is None
    assert sub(rules("subscribe +/broker/#"), "$SYS/broker/#") is None
    assert sub(rules("subscribe $SYS/#"), "$SYS/broker/+") is True
