"""Pop consumption: receipts, ack, invisibility, revive, dead letters, restarts."""

from __future__ import annotations

import pytest

from broker_core import Message, MessageStore, StoreConfig, UnknownReceipt
from broker_core.store import now_ms

from .conftest import SMALL


def fill(s: MessageStore, n: int, lmq: str = "q") -> None:
    s.append_batch([(Message(topic="t", body=b"m%d" % i), [lmq]) for i in range(n)])


def test_competing_consumers_split_the_queue(store):
    fill(store, 10)
    a = store.pop.pop("g", "q", 4, 30_000)
    b = store.pop.pop("g", "q", 4, 30_000)
    c = store.pop.pop("g", "q", 4, 30_000)
    offsets = [p.message.offset for p in a + b + c]
    assert offsets == list(range(10))
    assert all(p.deliveries == 1 for p in a + b + c)
    assert store.get_offset("g", "q") == 10
    # another group gets everything again
    assert len(store.pop.pop("other", "q", 100, 30_000)) == 10


def test_ack_is_final_and_twice_is_an_error(store):
    fill(store, 2)
    popped = store.pop.pop("g", "q", 2, 1)
    store.pop.ack(popped[0].receipt)
    with pytest.raises(UnknownReceipt):
        store.pop.ack(popped[0].receipt)
    with pytest.raises(UnknownReceipt):
        store.pop.ack("not-a-receipt")
    assert store.pop.revive(now_ms() + 10) == 1  # only the unacked one comes back
    again = store.pop.pop("g", "q", 10, 30_000)
    assert [(p.message.offset, p.deliveries) for p in again] == [(1, 2)]


def test_unacked_comes_back_before_new_messages(store):
    fill(store, 3)
    first = store.pop.pop("g", "q", 1, 1)
    store.pop.revive(now_ms() + 5)
    fill(store, 1)
    got = store.pop.pop("g", "q", 2, 30_000)
    assert [(p.message.offset, p.deliveries) for p in got] == [(0, 2), (1, 1)]
    assert first[0].message.offset == 0


def test_change_invisible_time(store):
    fill(store, 1)
    (p,) = store.pop.pop("g", "q", 1, 1)
    new = store.pop.change_invisible_time(p.receipt, 60_000)
    with pytest.raises(UnknownReceipt):
        store.pop.ack(p.receipt)  # the old receipt is void
    assert store.pop.revive(now_ms() + 1000) == 0  # not due any more
    store.pop.ack(new)
    assert store.pop.revive(now_ms() + 120_000) == 0


def test_dead_letter_after_max_deliveries(tmp_path):
    cfg = StoreConfig(segment_bytes=SMALL.segment_bytes, max_message_bytes=1024, max_deliveries=3)
    with MessageStore.open(tmp_path, cfg) as s:
        s.append(Message(topic="t", body=b"poison", properties={"k": b"v"}), ["q"])
        for attempt in range(1, 4):
            (p,) = s.pop.pop("g", "q", 1, 1)
            assert p.deliveries == attempt
            s.pop.revive(now_ms() + 10)
        assert s.pop.pop("g", "q", 1, 1) == []
        dlq = s.pull("%DLQ%g", 0).messages
        assert len(dlq) == 1 and dlq[0].body == b"poison"
        props = dlq[0].record.properties
        assert props["k"] == b"v" and props["DLQ_ORIGIN_LMQ"] == b"q"
        assert props["DLQ_DELIVERIES"] == b"3"


def test_pop_state_survives_restart(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 5)
        popped = s.pop.pop("g", "q", 3, 5_000)
        s.pop.ack(popped[1].receipt)
        keep = s.pop.pop("g", "q", 1, 3_600_000)[0]
        assert keep.message.offset == 3
    with MessageStore.open(tmp_path, SMALL) as s:
        s.pop.revive(now_ms() + 10_000)
        got = s.pop.pop("g", "q", 10, 30_000)
        # offsets 0 and 2 came back; 1 was acked; 3 is still invisible; 4 is new
        assert sorted((p.message.offset, p.deliveries) for p in got) == [(0, 2), (2, 2), (4, 1)]
        s.pop.ack(keep.receipt)


def test_revive_wakes_listeners(store):
    fill(store, 1)
    store.pop.pop("g", "q", 1, 1)
    seen = []
    store.add_listener("q", lambda name, nxt: seen.append(name))
    store.pop.revive(now_ms() + 5)
    assert seen == ["q"]


def test_release_group_and_counts(store):
    fill(store, 4)
    store.pop.pop("g", "q", 3, 60_000)
    store.pop.pop("other", "q", 1, 60_000)
    assert store.pop.inflight_count("g", "q") == 3 and store.pop.inflight_count("g") == 3
    assert store.pop.release_group("g") == 3
    assert store.pop.inflight_count("g") == 0 and store.pop.count_retries("g", "q") == 3
    assert store.pop.inflight_count("other") == 1  # other groups keep theirs
    again = store.pop.pop("g", "q", 10, 60_000)
    assert [(p.message.offset, p.deliveries) for p in again] == [(0, 2), (1, 2), (2, 2), (3, 1)]


def test_group_without_delivery_limit(tmp_path):
    cfg = StoreConfig(segment_bytes=SMALL.segment_bytes, max_message_bytes=1024, max_deliveries=2)
    with MessageStore.open(tmp_path, cfg) as s:
        s.pop.set_max_deliveries("forever", 0)
        s.append(Message(topic="t", body=b"m"), ["q"])
        for attempt in range(1, 6):
            (p,) = s.pop.pop("forever", "q", 1, 1)
            assert p.deliveries == attempt
            s.pop.revive(now_ms() + 10)
        assert s.lmq("%DLQ%forever") is None


def test_due_times_are_tracked_in_memory(store):
    fill(store, 3)
    assert store.pop.next_revive_at() is None
    popped = store.pop.pop("g", "q", 3, 60_000)
    due = store.pop.next_revive_at()
    assert due is not None and due > now_ms() + 50_000
    store.pop.ack(popped[0].receipt)
    store.pop.change_invisible_time(popped[1].receipt, 0)
    assert store.pop.next_revive_at() <= now_ms()
    assert store.pop.revive() == 1  # only the one made visible
    assert store.pop.next_revive_at() > now_ms() + 50_000  # popped[2] remains
    store.remove_lmqs(["q"])
    assert store.pop.next_revive_at() is None


def test_ack_many_in_one_write(store):
    fill(store, 4)
    popped = store.pop.pop("g", "q", 4, 1)
    store.pop.ack_many([p.receipt for p in popped[:3]] + ["garbage", popped[0].receipt])
    assert store.pop.inflight_count("g") == 1
    assert store.pop.revive(now_ms() + 10) == 1  # only the unacked one comes back


def test_pop_time_given_by_the_caller(store):
    """A front end popping several LMQs for one request gives them one pop time: every
    message popped is invisible until that time plus the invisible time."""
    fill(store, 2, "q1")
    fill(store, 2, "q2")
    at = now_ms() - 5_000
    popped = store.pop.pop("g", "q1", 2, 30_000, now=at)
    popped += store.pop.pop("g", "q2", 2, 30_000, now=at)
    assert len(popped) == 4
    assert store.pop.next_revive_at() == at + 30_000
    assert store.pop.revive(at + 29_999) == 0
    assert store.pop.revive(at + 30_000) == 4


def test_inflight_messages_listed_by_offset_read_only(store):
    fill(store, 6)
    fill(store, 2, "other")
    t = now_ms()
    popped = store.pop.pop("g", "q", 4, 60_000, now=t)
    store.pop.pop("g", "other", 2, 60_000, now=t)  # another LMQ: not listed
    store.pop.pop("h", "q", 1, 60_000, now=t)  # another group: not listed
    store.pop.ack(popped[1].receipt)
    store.pop.change_invisible_time(popped[2].receipt, 120_000)
    store.pop.requeue_many([popped[3].receipt])
    (again,) = store.pop.pop("g", "q", 1, 60_000, now=t)  # offset 3, its second delivery
    listed = store.pop.inflight_messages("g", "q")
    assert [(i.key.offset, i.deliveries) for i in listed] == [(0, 1), (2, 1), (3, 2)]
    assert listed[0].key.visible_at == t + 60_000 and listed[0].popped_ms == t
    assert listed[1].key.visible_at >= t + 120_000  # its invisible time was changed
    # paged by offset
    assert [i.key.offset for i in store.pop.inflight_messages("g", "q", limit=2)] == [0, 2]
    assert [i.key.offset for i in store.pop.inflight_messages("g", "q", after=2)] == [3]
    assert store.pop.inflight_messages("g", "nothing") == []
    # reading changed nothing: the same in flight, the next pop gets the next message
    assert store.pop.inflight_count("g", "q") == 3
    assert [p.message.offset for p in store.pop.pop("g", "q", 10, 60_000)] == [4, 5]
    store.pop.ack(again.receipt)
    assert [i.key.offset for i in store.pop.inflight_messages("g", "q")] == [0, 2, 4, 5]
