"""How the message types compose in the store (docs/storage.md, "How the message types
compose"): a delayed or transactional message of a FIFO group takes its place in its
group when it is dispatched, never holding the group while it waits; a batch keeps each
group's order; a delayed batch fires in batch order."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig

KEY = "__SHARDINGKEY"
NOW = 10_000_000_000
CONFIG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)


def msg(group: str, body: str) -> Message:
    return Message(topic="t", body=body.encode(), properties={KEY: group.encode()})


def fifo(s: MessageStore, now: int = NOW) -> list[str]:
    """Pop everything the FIFO pop gives now, acking each: the order a consumer that
    acks at once sees."""
    seen: list[str] = []
    while True:
        got = s.pop.pop_fifo("g", "q", 16, 30_000, KEY, now=now)
        if not got:
            return seen
        for p in got:
            seen.append(p.message.record.body.decode())
            s.pop.ack(p.receipt)


@pytest.fixture
def store(tmp_path: Path):
    s = MessageStore.open(tmp_path / "data", CONFIG)
    yield s
    s.close()


def test_a_delayed_message_joins_its_group_when_it_fires(store):
    due = NOW + 60_000
    store.append_delayed(msg("a", "a:delayed"), ["q"], due)
    store.append(msg("a", "a:0"), ["q"])
    store.append(msg("a", "a:1"), ["q"])
    # the pending timer does not hold the group: its later messages flow
    assert fifo(store) == ["a:0", "a:1"]
    assert store.fire_timers(now=due) == 1
    store.append(msg("a", "a:2"), ["q"])
    assert fifo(store, due) == ["a:delayed", "a:2"]


def test_a_fired_message_waits_behind_its_groups_unacked_head(store):
    due = NOW + 1_000
    store.append(msg("a", "a:0"), ["q"])
    store.append_delayed(msg("a", "a:delayed"), ["q"], due)
    head = store.pop.pop_fifo("g", "q", 16, 30_000, KEY, now=NOW)
    assert [p.message.record.body for p in head] == [b"a:0"]
    store.fire_timers(now=due)
    # fired, but its group's head is not acked yet: nothing for the group
    assert store.pop.pop_fifo("g", "q", 16, 30_000, KEY, now=due) == []
    store.pop.ack(head[0].receipt)
    assert fifo(store, due) == ["a:delayed"]


def test_a_committed_half_joins_its_group_at_the_commit(store):
    half = store.append_half(msg("a", "a:half"), ["q"], "pg")
    rolled = store.append_half(msg("a", "a:rolled-back"), ["q"], "pg")
    store.append(msg("a", "a:0"), ["q"])
    assert fifo(store) == ["a:0"]  # the open transactions do not hold the group
    store.end_transaction(rolled.position, commit=False)
    store.end_transaction(half.position, commit=True)
    store.end_transaction(half.position, commit=True)  # a repeated commit: nothing more
    store.append(msg("a", "a:1"), ["q"])
    assert fifo(store) == ["a:half", "a:1"]


def test_a_batch_keeps_each_groups_order(store):
    store.append_batch([(msg(g, f"{g}:{i}"), ["q"])
                        for i, g in enumerate(["a", "b", "a", "c", "b", "a"])])
    seen = fifo(store)
    assert sorted(seen) == sorted(["a:0", "b:1", "a:2", "c:3", "b:4", "a:5"])
    for group in "abc":
        mine = [x for x in seen if x.startswith(group)]
        assert mine == sorted(mine, key=lambda x: int(x.split(":")[1]))


def test_a_delayed_batch_due_at_once_fires_in_batch_order(store):
    due = NOW + 5_000
    results = store.append_delayed_batch(
        [(msg("a", f"a:{i}"), ["q"], due) for i in range(5)]
        + [(msg("b", "b:later"), ["q"], due + 1_000)])
    assert len({r.position for r in results}) == 6  # each its own record
    assert store.fire_timers(now=due) == 5
    assert fifo(store, due) == [f"a:{i}" for i in range(5)]
    assert store.fire_timers(now=due + 1_000) == 1
    assert fifo(store, due + 1_000) == ["b:later"]
