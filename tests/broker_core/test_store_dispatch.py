from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from broker_core import (
    InvalidLmqName,
    Message,
    MessageStore,
    MessageTooLarge,
    StoreConfig,
    StoreError,
    UnknownLmq,
)

from .conftest import SMALL


def msg(i: int, **kw) -> Message:
    return Message(topic=f"t/{i}", body=f"m{i}".encode(), **kw)


def test_append_assigns_dense_offsets_per_lmq(store):
    r0 = store.append(msg(0), ["a", "b"])
    r1 = store.append(msg(1), ["b", "c"])
    r2 = store.append(msg(2), ["a"])
    assert (r0.offsets, r1.offsets, r2.offsets) == ((0, 0), (1, 0), (1,))
    assert r1.position == r0.end and r2.position == r1.end
    assert [m.offset for m in store.pull("b", 0).messages] == [0, 1]
    assert [m.body for m in store.pull("a", 0).messages] == [b"m0", b"m2"]


def test_one_record_many_lmqs(store):
    r = store.append(msg(0), ["x", "y", "z"])
    bodies = {name: store.pull(name, 0).messages for name in "xyz"}
    for _name, got in bodies.items():
        assert len(got) == 1 and got[0].record.position == r.position
        assert got[0].record.dispatch == (("x", 0), ("y", 0), ("z", 0))
    assert store.log.end == r.end  # written once


def test_duplicate_targets_are_dispatched_once(store):
    r = store.append(msg(0), ["a", "a", "b"])
    assert r.offsets == (0, 0)
    assert store.lmq("a").messages == 1


def test_fanout_of_ten_thousand_lmqs(tmp_path: Path):
    cfg = StoreConfig(segment_bytes=8 << 20, max_message_bytes=1 << 20, lmq_cache_size=1000)
    with MessageStore.open(tmp_path, cfg) as s:
        names = [f"dev/{i}/in" for i in range(10_000)]
        r = s.append(Message(topic="broadcast", body=b"hi"), names)
        assert r.offsets == (0,) * 10_000
        r2 = s.append(Message(topic="broadcast", body=b"again"), names)
        assert r2.offsets == (1,) * 10_000
        for name in random.Random(1).sample(names, 50):
            got = s.pull(name, 0).messages
            assert [m.body for m in got] == [b"hi", b"again"]
        assert len(s.lmq_table.cache) <= 1000  # the cache is bounded, RocksDB holds the rest


def test_pull_limits_and_offsets(store):
    for i in range(20):
        store.append(msg(i), ["q"], wait=False)
    res = store.pull("q", 5, max_count=4)
    assert [m.offset for m in res.messages] == [5, 6, 7, 8]
    assert (res.next_offset, res.min_offset, res.max_offset) == (9, 0, 20)
    assert store.pull("q", 20).messages == [] and store.pull("q", 20).next_offset == 20
    one = store.pull("q", 0, max_count=10, max_bytes=1)
    assert len(one.messages) == 1 and one.next_offset == 1  # at least one message


def test_pull_with_tag_filter(store):
    for i in range(10):
        store.append(msg(i, tag="even" if i % 2 == 0 else "odd"), ["q"])
    res = store.pull("q", 0, max_count=3, tag="odd")
    assert [m.offset for m in res.messages] == [1, 3, 5]
    assert res.next_offset == 6


def test_unknown_lmq(store):
    with pytest.raises(UnknownLmq):
        store.pull("nope", 0)
    assert store.lmq("nope") is None


def test_create_lmq_then_pull_empty(store):
    info = store.create_lmq("sub/+")
    assert (info.min_offset, info.max_offset, info.messages) == (0, 0, 0)
    assert store.pull("sub/+", 0).messages == []
    store.append(msg(1), ["sub/+"])
    assert store.lmq("sub/+").id == info.id


def test_message_too_large_is_refused_and_nothing_written(store):
    end = store.log.end
    with pytest.raises(MessageTooLarge) as exc:
        store.append(Message(topic="t", body=b"x" * (SMALL.max_message_bytes + 1)), ["a"])
    assert exc.value.limit == SMALL.max_message_bytes
    assert store.log.end == end and store.lmq("a") is None


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 5000])
def test_invalid_lmq_names(store, bad):
    with pytest.raises(InvalidLmqName):
        store.append(msg(0), ["ok", bad])
    # the failed batch left nothing behind: not the record, not the other LMQ
    assert store.lmq("ok") is None
    assert store.log.end == 0
    assert store.append(msg(1), ["ok"]).offsets == (0,)


def test_segments_roll_and_reads_cross_them(store):
    body = b"z" * 10_000
    for i in range(100):
        store.append(Message(topic="t", body=body + bytes([i])), ["q"], wait=False)
    assert len(store.log.segments()) > 2
    got = store.pull("q", 0, max_count=100, max_bytes=1 << 30).messages
    assert [m.body[-1] for m in got] == list(range(100))


def test_listener_is_woken_with_next_offset(store):
    seen = []
    remove = store.add_listener("q", lambda name, nxt: seen.append((name, nxt)))
    store.append(msg(0), ["q", "other"])
    store.append_batch([(msg(1), ["q"]), (msg(2), ["q"])])
    remove()
    store.append(msg(3), ["q"])
    assert seen == [("q", 1), ("q", 3)]


def test_consumer_offsets(store):
    store.append(msg(0), ["q"])
    assert store.get_offset("g", "q") is None
    store.commit_offset("g", "q", 1)
    store.commit_offset("h", "q", 0)
    assert store.get_offset("g", "q") == 1
    assert sorted(store.offsets("q")) == [("q", "g", 1), ("q", "h", 0)]
    with pytest.raises(UnknownLmq):
        store.commit_offset("g", "missing", 0)


def test_closed_store_refuses(tmp_path):
    s = MessageStore.open(tmp_path, SMALL)
    s.close()
    with pytest.raises(StoreError):
        s.append(msg(0), ["q"])


def test_second_process_is_refused(tmp_path):
    with MessageStore.open(tmp_path, SMALL):
        with pytest.raises(StoreError, match="in use"):
            MessageStore(tmp_path, SMALL)


def test_concurrent_appends_keep_offsets_dense(tmp_path):
    """Threads append to overlapping LMQ sets; every LMQ ends up with offsets 0..n-1,
    each pointing at a record whose dispatch list names that very (LMQ, offset)."""
    cfg = StoreConfig(segment_bytes=512 * 1024, max_message_bytes=64 * 1024)
    names = [f"q{i}" for i in range(6)]
    per_thread = 400
    with MessageStore.open(tmp_path, cfg) as s:

        def worker(seed: int) -> None:
            rnd = random.Random(seed)
            for i in range(per_thread):
                targets = rnd.sample(names, rnd.randint(1, 4))
                if rnd.random() < 0.3:
                    s.append_batch([(msg(i), targets), (msg(i + 1), targets[:1])], wait=False)
                else:
                    s.append(msg(i), targets, wait=False)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = 0
        for name in names:
            info = s.lmq(name)
            got = s.pull(name, 0, max_count=10_000, max_bytes=1 << 30).messages
            assert [m.offset for m in got] == list(range(info.max_offset))
            positions = [m.record.position for m in got]
            assert positions == sorted(positions)  # offsets follow log order
            for m in got:
                assert (name, m.offset) in m.record.dispatch
            total += len(got)
        assert total > 0


def test_front_end_metadata(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.update_meta({"mqtt/session/a": b"1", "mqtt/session/b": b"2", "amqp/q": b"3"})
        s.delete_meta("mqtt/session/a")
        assert s.get_meta("mqtt/session/b") == b"2"
    with MessageStore.open(tmp_path, SMALL) as s:
        assert list(s.iter_meta("mqtt/")) == [("mqtt/session/b", b"2")]


def test_tail_readers_get_the_same_records_from_memory(tmp_path):
    """A listened LMQ's tail is served from memory; what it serves equals the log."""
    with MessageStore.open(tmp_path, SMALL) as s:
        s.add_listener("hot", lambda *_: None)
        props = {"content_type": b"text/plain"}
        for i in range(10):
            s.append(Message(topic=f"t/{i}", body=b"b%d" % i, properties=props, origin="o",
                             qos=1, retain=i % 2 == 0), ["hot", "cold"])
        hot_id, cold_id = s.lmq("hot").id, s.lmq("cold").id
        assert (hot_id, 0) in s.tail.young and (cold_id, 0) not in s.tail.young
        from_memory = s.pull("hot", 3, max_count=5)
    with MessageStore.open(tmp_path, SMALL) as s:
        from_disk = s.pull("hot", 3, max_count=5)
    assert from_memory == from_disk
    assert [m.offset for m in from_memory.messages] == [3, 4, 5, 6, 7]


def test_hot_tail_is_bounded_and_serves_across_its_generations(tmp_path, monkeypatch):
    """The hot tail keeps the latest records in two generations: it stays bounded, a
    read reaching back into the older generation is served from memory, one past it
    from the log, and both equal what the log holds."""
    from broker_core import tail_cache

    monkeypatch.setattr(tail_cache, "HOT_GENERATION", 8)
    with MessageStore.open(tmp_path, SMALL) as s:
        s.add_listener("hot", lambda *_: None)
        for i in range(30):  # batches of 3: generations switch mid-stream
            s.append_batch([(Message(topic="t", body=b"m%d" % (3 * i + j)), ["hot", "x"])
                            for j in range(3)])
        lmq_id = s.lmq("hot").id
        held = sorted(o for (i, o) in [*s.tail.young, *s.tail.old] if i == lmq_id)
        assert 8 <= len(held) <= 2 * 8 + 3 and held == list(range(90 - len(held), 90))
        oldest = held[0]
        assert (lmq_id, oldest) in s.tail.old
        from_memory = [s.pull("hot", o, max_count=4) for o in (oldest, oldest - 2, 86)]
    with MessageStore.open(tmp_path, SMALL) as s:
        from_disk = [s.pull("hot", o, max_count=4) for o in (oldest, oldest - 2, 86)]
    assert from_memory == from_disk
    assert [m.body for m in from_memory[0].messages] == [b"m%d" % o for o in
                                                         range(oldest, oldest + 4)]


def test_a_failed_batch_leaves_nothing_in_the_hot_tail(store):
    """Records go into the hot tail as a batch is built; a batch that fails part way
    (here: its third message names an invalid LMQ) must not leave them there to be
    served at the offsets later messages take (here written while nobody listens, so
    they do not overwrite the hot tail's entries)."""
    stop_a = store.add_listener("a", lambda *_: None)
    stop_b = store.add_listener("b", lambda *_: None)
    store.append(msg(0), ["a", "b"])
    with pytest.raises(InvalidLmqName):
        store.append_batch([(msg(1), ["a", "b"]), (msg(2), ["a"]), (msg(3), ["a", ""])])
    stop_a()
    stop_b()
    store.append_batch([(msg(4), ["a", "b"]), (msg(5), ["a"])])
    got = store.pull("a", 0, max_count=10)
    assert [(m.offset, m.record.body) for m in got.messages] == [
        (0, msg(0).body), (1, msg(4).body), (2, msg(5).body)]
    assert [m.record.body for m in store.pull("b", 1).messages] == [msg(4).body]


def test_a_removed_then_recreated_lmq_is_not_served_old_tail_records(store):
    store.add_listener("again", lambda *_: None)
    store.append(Message(topic="t", body=b"old"), ["again"])
    store.remove_lmqs(["again"])
    store.append(Message(topic="t", body=b"new"), ["again"])
    assert [m.body for m in store.pull("again", 0).messages] == [b"new"]
