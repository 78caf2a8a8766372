"""Pop consumption with memory in-flight groups (``set_memory_inflight``, the AMQP
queues): every test of test_pop again with every group in that mode, then what is
particular to it: one compact record per pop, restarts (an acked message never comes
back, every unacked one does, once, with its delivery counted), requeue in bulk, LMQs
removed under in-flight messages."""

from __future__ import annotations

import pytest

from broker_core import Message, MessageStore, UnknownReceipt
from broker_core.pop import PopConsumer
from broker_core.store import now_ms

from . import test_pop as base
from .conftest import SMALL


class _Every(set):
    def __contains__(self, item: object) -> bool:
        return True


@pytest.fixture(autouse=True)
def memory_inflight(monkeypatch):
    init = PopConsumer.__init__

    def patched(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        self._memory_groups = _Every()

    monkeypatch.setattr(PopConsumer, "__init__", patched)


for _name in dir(base):
    if _name.startswith("test_"):
        globals()[_name] = getattr(base, _name)

fill = base.fill


def state_keys(s: MessageStore, tag: bytes) -> list[bytes]:
    return [k for k in s.state.db.keys(from_key=tag) if k[:1] == tag]


def test_one_fresh_record_per_pop(store):
    fill(store, 100)
    popped = store.pop.pop("g", "q", 64, 60_000)
    assert len(popped) == 64 and all(p.receipt.startswith("~") for p in popped)
    assert state_keys(store, b"P") == [] and len(state_keys(store, b"F")) == 1
    store.pop.ack_many([p.receipt for p in popped[:10]])
    assert store.pop.inflight_count("g", "q") == 54
    store.pop.ack_many([p.receipt for p in popped[10:]])
    assert state_keys(store, b"F") == [] and store.pop.inflight_count("g") == 0


def test_restart_redelivers_exactly_the_unsettled(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.pop.set_memory_inflight("g")
        fill(s, 12)
        a = s.pop.pop("g", "q", 6, 3_600_000)
        b = s.pop.pop("g", "q", 4, 3_600_000)
        s.pop.ack_many([a[0].receipt, a[1].receipt, a[4].receipt, b[3].receipt])
        s.pop.ack(a[2].receipt)
        moved = s.pop.change_invisible_time(b[0].receipt, 3_600_000)  # now durable
        s.pop.requeue_many([b[1].receipt])  # offset 7 is a retry again
        (again,) = s.pop.pop("g", "q", 1, 3_600_000)
        assert (again.message.offset, again.deliveries) == (7, 2)
        s.pop.ack(again.receipt)
        assert s.pop.inflight_count("g", "q") == 4  # offsets 3, 5, 6 (durable), 8
        assert moved
        # no close hook matters: every state change was written when it was made
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.pop.release_group("g") == 4
        got = s.pop.pop("g", "q", 100, 60_000)
        assert sorted((p.message.offset, p.deliveries) for p in got) == [
            (3, 2), (5, 2), (6, 2), (8, 2), (10, 1), (11, 1)]


def test_requeue_many_mixes_fresh_and_durable(store):
    store.pop.set_memory_inflight("g")
    fill(store, 4)
    popped = store.pop.pop("g", "q", 4, 60_000)
    durable = store.pop.change_invisible_time(popped[0].receipt, 60_000)
    seen = []
    store.add_listener("q", lambda name, nxt: seen.append(name))
    assert store.pop.requeue_many([durable, popped[2].receipt, "junk", popped[2].receipt]) == 2
    assert seen == ["q"]
    got = store.pop.pop("g", "q", 10, 60_000)
    assert [(p.message.offset, p.deliveries) for p in got] == [(0, 2), (2, 2)]
    with pytest.raises(UnknownReceipt):
        store.pop.ack(popped[2].receipt)


def test_removed_lmq_forgets_fresh_state(store):
    store.pop.set_memory_inflight("g")
    fill(store, 3)
    old = store.pop.pop("g", "q", 3, 60_000)
    store.remove_lmqs(["q"])
    assert state_keys(store, b"F") == []
    fill(store, 3)  # the same name again: a new LMQ
    store.pop.ack_many([p.receipt for p in old])  # ignored, and writes nothing back
    assert state_keys(store, b"F") == []
    with pytest.raises(UnknownReceipt):
        store.pop.ack(old[0].receipt)
    new = store.pop.pop("g", "q", 10, 60_000)
    assert [p.deliveries for p in new] == [1, 1, 1]
    assert store.pop.release_group("g") == 3


def test_fresh_deliveries_time_out(store):
    store.pop.set_memory_inflight("g")
    fill(store, 3)
    popped = store.pop.pop("g", "q", 3, 1_000)
    store.pop.ack(popped[1].receipt)
    assert store.pop.next_revive_at() <= now_ms() + 1_000
    assert store.pop.revive(now_ms() + 2_000) == 2
    assert store.pop.next_revive_at() is None
    got = store.pop.pop("g", "q", 10, 60_000)
    assert [(p.message.offset, p.deliveries) for p in got] == [(0, 2), (2, 2)]


def test_holes_in_a_pop(store):
    store.pop.set_memory_inflight("g")
    store.append_batch([(Message(topic="t", body=b"x"), ["q"]) for _ in range(3)])
    popped = store.pop.pop("g", "q", 3, 60_000)
    store.pop.ack(popped[0].receipt)
    assert store.pop.release_group("g") == 2


def test_pop_state_survives_restart(tmp_path):  # replaces test_pop's: receipts die
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 5)
        popped = s.pop.pop("g", "q", 3, 5_000)
        s.pop.ack(popped[1].receipt)
        keep = s.pop.pop("g", "q", 1, 3_600_000)[0]
        assert keep.message.offset == 3
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.pop.next_revive_at() is not None
        s.pop.revive(now_ms() + 10_000)
        got = s.pop.pop("g", "q", 10, 30_000)
        # offsets 0 and 2 came back; 1 was acked; 3 is still invisible; 4 is new
        assert sorted((p.message.offset, p.deliveries) for p in got) == [(0, 2), (2, 2), (4, 1)]
        with pytest.raises(UnknownReceipt):
            s.pop.ack(keep.receipt)  # a receipt of the previous run
        assert s.pop.inflight_count("g", "q") == 4
        assert s.pop.release_group("g") == 4  # what a front end does at start


def test_ack_many_groups_receipts_like_single_lookups(store):
    """ack_many reads a run of one table's receipts by their shared prefix: interleaved
    LMQs and pops, duplicates, durable receipts, and receipts that share the prefix but
    are not offsets (or are not in flight) settle exactly what one ack each would."""
    fill(store, 20)
    fill(store, 10, lmq="q2")
    a = store.pop.pop("g", "q", 8, 60_000)
    b = store.pop.pop("g", "q", 8, 60_000)
    c = store.pop.pop("g", "q2", 6, 60_000)
    moved = store.pop.change_invisible_time(a[7].receipt, 60_000)  # a durable receipt
    prefix = a[0].receipt.rsplit(".", 1)[0] + "."
    receipts = [a[0].receipt, c[1].receipt, a[1].receipt, b[2].receipt, a[0].receipt,
                prefix + "x", prefix + "99", prefix + "3.5", moved, "~garbage", "nope",
                b[7].receipt, c[5].receipt, a[3].receipt]
    store.pop.ack_many(receipts)
    left = sorted((p.message.lmq, p.message.offset) for p in (*a[:7], *b, *c)
                  if p.receipt not in receipts)
    assert store.pop.inflight_count("g") == len(left)
    with pytest.raises(UnknownReceipt):
        store.pop.ack(a[1].receipt)
    with pytest.raises(UnknownReceipt):
        store.pop.ack(moved)
    for p in (*a[:7], *b, *c):
        if (p.message.lmq, p.message.offset) in left:
            store.pop.ack(p.receipt)
    assert store.pop.inflight_count("g") == 0
    assert state_keys(store, b"F") == [] and state_keys(store, b"P") == []
