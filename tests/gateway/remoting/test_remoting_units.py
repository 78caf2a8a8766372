"""The remoting front end's bookkeeping on its own, with a test clock: client expiry
and group-change notifications (ConsumerManager), lock expiry and release (LockManager),
TAG expressions."""

from __future__ import annotations

from typing import Any

from gateway.remoting.consumers import (
    CLIENT_EXPIRY_S,
    ConsumerData,
    ConsumerManager,
    Subscription,
    parse_heartbeat,
)
from gateway.remoting.locks import LockManager
from gateway.remoting.pull import parse_tag_expression


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def heartbeat(client: str, group: str, topic: str = "t", expression: str = "*") -> dict[str, Any]:
    return {"clientID": client, "producerDataSet": [{"groupName": "P"}], "consumerDataSet": [{
        "groupName": group, "subscriptionDataSet": [
            {"topic": topic, "subString": expression, "subVersion": 1}]}]}


def test_consumer_manager_membership_expiry_and_notifications() -> None:
    clock = Clock()
    changes: list[tuple[str, list[Any]]] = []
    mgr = ConsumerManager(lambda g, chans: changes.append((g, chans)), clock)
    a, b = object(), object()
    mgr.heartbeat(a, *parse_heartbeat(heartbeat("A", "G")))
    assert changes == [("G", [a])]
    mgr.heartbeat(b, *parse_heartbeat(heartbeat("B", "G", expression="x || y")))
    assert changes[-1] == ("G", [a, b]) and mgr.consumer_ids("G") == ["A", "B"]
    assert mgr.producer_groups == {"P": {"A": None, "B": None}}
    # the same heartbeat again: no change
    clock.now += 60
    mgr.heartbeat(b, *parse_heartbeat(heartbeat("B", "G", expression="x || y")))
    assert len(changes) == 2
    # a changed subscription is a change
    mgr.heartbeat(b, *parse_heartbeat(heartbeat("B", "G", expression="z")))
    assert len(changes) == 3 and mgr.subscription("G", "t") == Subscription("t", "z", version=1)
    # A is silent past the expiry, B is not
    clock.now += CLIENT_EXPIRY_S - 30
    assert mgr.expire() == ["A"]
    assert mgr.consumer_ids("G") == ["B"] and changes[-1] == ("G", [b])
    assert "A" not in mgr.producer_groups["P"]
    # B's connection closes
    assert mgr.channel_closed(b) == ["B"]
    assert mgr.consumer_ids("G") == [] and mgr.clients == {} and mgr.producer_groups == {}
    assert changes[-1] == ("G", [])


def test_unregister_one_group_only() -> None:
    mgr = ConsumerManager(lambda g, c: None, Clock())
    ch = object()
    client, producers, consumers = parse_heartbeat(heartbeat("A", "G1"))
    consumers["G2"] = ConsumerData("G2")
    mgr.heartbeat(ch, client, producers, consumers)
    mgr.unregister("A", consumer_group="G1")
    assert mgr.consumer_ids("G1") == [] and mgr.consumer_ids("G2") == ["A"]
    mgr.unregister("A")
    assert mgr.clients == {}


def test_lock_manager() -> None:
    clock = Clock()
    locks = LockManager(60.0, clock)
    assert locks.lock("G", "A", [("t", 0), ("t", 1)]) == [("t", 0), ("t", 1)]
    assert locks.lock("G", "B", [("t", 1), ("t", 2)]) == [("t", 2)]
    clock.now += 59
    assert locks.lock("G", "A", [("t", 0)]) == [("t", 0)]  # renewed
    clock.now += 2  # queue 1 (not renewed) expired, queue 0 not
    assert locks.holder("G", ("t", 1)) is None and locks.holder("G", ("t", 0)) == "A"
    assert locks.lock("G", "B", [("t", 0), ("t", 1)]) == [("t", 1)]
    locks.release_client("A")
    assert locks.lock("G", "B", [("t", 0)]) == [("t", 0)]
    clock.now += 61
    locks.sweep()
    assert locks.count() == 0


def test_tag_expressions() -> None:
    assert parse_tag_expression("*") is None and parse_tag_expression(" ") is None
    assert parse_tag_expression("TagA || TagB ||") == frozenset({"TagA", "TagB"})
    assert parse_tag_expression("TagA") == frozenset({"TagA"})
