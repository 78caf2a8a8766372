"""The key index (broker_core.key_index) and lookups by key and by log position:
``MessageStore.find_by_key`` and ``MessageStore.record_at``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig

from .conftest import SMALL
from .killed_writer import run_and_kill

WRITER = Path(__file__).with_name("key_index_writer.py")


def keyed(topic: str, body: bytes, keys: bytes | None = None, uniq: bytes | None = None,
          **extra: bytes) -> Message:
    props = dict(extra)
    if keys is not None:
        props["KEYS"] = keys
    if uniq is not None:
        props["UNIQ_KEY"] = uniq
    return Message(topic=topic, body=body, properties=props or None)


def index_keys(store: MessageStore, prefix: bytes) -> list[bytes]:
    return [k for k, _ in store.index.all_items() if k.startswith(prefix)]


def test_find_by_key_finds_keys_and_uniq_keys_under_the_first_level(store):
    a = store.append(keyed("orders/eu/42", b"a", b"order-1 cust-7", b"U1"), ["q1"])
    store.append(keyed("orders", b"b", b"order-2"), ["q1", "q2"])
    store.append(keyed("other", b"c", b"order-1"), ["q3"])
    store.append(Message(topic="orders/eu/42", body=b"plain"), ["q1"])
    assert [r.body for r in store.find_by_key("orders", "order-1")] == [b"a"]
    assert [r.body for r in store.find_by_key("orders", "cust-7")] == [b"a"]
    assert [r.body for r in store.find_by_key("orders", "U1")] == [b"a"]
    assert [r.body for r in store.find_by_key("orders/eu/42", "U1")] == [b"a"]
    assert [r.body for r in store.find_by_key("orders", "order-2")] == [b"b"]
    assert [r.body for r in store.find_by_key("other", "order-1")] == [b"c"]
    assert store.find_by_key("orders", "nope") == []
    assert store.find_by_key("order", "order-1") == []  # a level, not a string prefix
    record = store.find_by_key("orders", "U1")[0]
    assert record.position == a.position and record.topic == "orders/eu/42"
    assert record.properties["KEYS"] == b"order-1 cust-7"


def test_newest_max_num_oldest_first_and_time_range(store):
    results = [store.append(keyed("t", b"%d" % i, b"hot"), ["q"]) for i in range(10)]
    assert [r.body for r in store.find_by_key("t", "hot", max_num=3)] == [b"7", b"8", b"9"]
    assert len(store.find_by_key("t", "hot", max_num=100)) == 10
    assert store.find_by_key("t", "hot", max_num=0) == []
    stamp = results[0].store_ms
    assert len(store.find_by_key("t", "hot", 100, begin_ms=stamp, end_ms=stamp + 10**6)) == 10
    assert store.find_by_key("t", "hot", 100, begin_ms=stamp + 10**6) == []
    assert store.find_by_key("t", "hot", 100, end_ms=stamp - 1) == []


def test_repeated_and_empty_keys_are_indexed_once(store):
    store.append(keyed("t", b"x", b"  a a  b ", b"a"), ["q"])
    assert len(store.find_by_key("t", "a")) == 1 and len(store.find_by_key("t", "b")) == 1
    assert len(index_keys(store, b"B")) == 2


def test_messages_without_key_properties_write_no_key_entries(store):
    store.append(Message(topic="t", body=b"1"), ["q"])
    store.append(Message(topic="t", body=b"2", properties={"other": b"v"}), ["q", "r"])
    store.append_batch([(Message(topic="t", body=b"3"), ["q"])] * 3)
    assert index_keys(store, b"B") == []


def test_the_indexed_properties_are_a_setting(tmp_path):
    cfg = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024,
                      key_index_properties=("trace",))
    with MessageStore.open(tmp_path, cfg) as s:
        s.append(keyed("t", b"x", b"k1", trace=b"tr-9"), ["q"])
        assert s.find_by_key("t", "k1") == [] and len(s.find_by_key("t", "tr-9")) == 1
    off = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024,
                      key_index_properties=())
    with MessageStore.open(tmp_path / "off", off) as s:
        s.append(keyed("t", b"x", b"k1"), ["q"])
        assert s.find_by_key("t", "k1") == [] and index_keys(s, b"B") == []


def test_record_at_reads_the_record_at_a_position_and_nothing_else(store):
    first = store.append(keyed("t", b"one", b"k"), ["q"])
    second = store.append(Message(topic="t/x", body=b"two"), ["q", "r"])
    assert store.record_at(first.position).body == b"one"
    record = store.record_at(second.position)
    assert record.body == b"two" and record.dispatch == (("q", 1), ("r", 0))
    assert store.record_at(first.position + 1) is None  # inside a record
    assert store.record_at(second.end) is None  # the log end
    assert store.record_at(10**12) is None and store.record_at(-1) is None
    store.remove_lmqs(["r"])  # writes an LMQ-removal control record
    assert store.record_at(second.end) is None
    assert store.record_at(second.position).body == b"two"  # the log keeps it


def test_read_only_store_finds_keys(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(keyed("t", b"x", b"k1"), ["q"])
    ro = MessageStore.open_read_only(tmp_path, SMALL)
    try:
        assert [r.body for r in ro.find_by_key("t", "k1")] == [b"x"]
    finally:
        ro.close()


def test_retention_removes_the_keys_of_removed_records(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=1)
    with MessageStore.open(tmp_path, cfg) as s:
        for i in range(300):
            s.append(keyed("t", b"%03d" % i + b"x" * 500, b"k%d all" % i), ["q"])
        report = s.apply_retention()
        assert report.segments_removed > 0
        kept = [r.body[:3] for r in s.find_by_key("t", "all", max_num=1000)]
        assert kept and kept[-1] == b"299"
        first_kept = int(kept[0])
        assert s.find_by_key("t", f"k{first_kept - 1}") == []
        assert len(s.find_by_key("t", f"k{first_kept}")) == 1
        # the entries themselves are gone, not only filtered: 2 keys per kept record,
        # all in kept segments (the trim is a range delete below the new log start)
        entries = index_keys(s, b"B")
        assert len(entries) == 2 * len(kept)
        bases = set(s.log.segment_bases())
        assert {int.from_bytes(k[1:9], "big") for k in entries} <= bases


def test_keys_are_replayed_when_the_index_checkpoint_lags_the_log(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(keyed("t", b"early", b"e"), ["q"])
    shutil.copytree(tmp_path / "index", tmp_path / "index-old")
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(keyed("t", b"late", b"l"), ["q"])
        s.append(keyed("t", b"late2", b"l", b"U2"), ["q", "r"])
    # the index as it was before the last appends: recovery replays them
    shutil.rmtree(tmp_path / "index")
    shutil.move(tmp_path / "index-old", tmp_path / "index")
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.replayed_records == 2
        assert [r.body for r in s.find_by_key("t", "l")] == [b"late", b"late2"]
        assert [r.body for r in s.find_by_key("t", "U2")] == [b"late2"]
        assert [r.body for r in s.find_by_key("t", "e")] == [b"early"]


def test_rebuild_index_rebuilds_the_key_index(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        for i in range(20):
            s.append(keyed("t", b"%d" % i, b"k%d" % i, b"U%d" % i), ["q"])
        before = index_keys(s, b"B")
        report = s.rebuild_index()
        assert report.index_rebuilt
        assert index_keys(s, b"B") == before
        assert [r.body for r in s.find_by_key("t", "U7")] == [b"7"]
    shutil.rmtree(tmp_path / "index")  # lost: rebuilt at open
    with MessageStore.open(tmp_path, SMALL) as s:
        assert [r.body for r in s.find_by_key("t", "k19")] == [b"19"]


def test_keys_in_every_segment_are_found_newest_first(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096)
    with MessageStore.open(tmp_path, cfg) as s:
        for i in range(400):
            s.append(keyed("t", b"%03d" % i + b"x" * 500, b"k%d all" % i, b"U%d" % i), ["q"])
        assert len(s.log.segment_bases()) > 2
        assert [r.body[:3] for r in s.find_by_key("t", "all", max_num=5)] == [
            b"395", b"396", b"397", b"398", b"399"]
        assert len(s.find_by_key("t", "all", max_num=1000)) == 400
        for i in (0, 123, 399):
            assert [r.body[:3] for r in s.find_by_key("t", f"U{i}")] == [b"%03d" % i]


def test_a_store_with_the_old_key_layout_is_reindexed_at_open(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        first = s.append(keyed("t", b"a", b"k1", b"U1"), ["q"])
        # what the layout before wrote beside its K keys: a by-position entry
        batch = s.index.new_batch()
        batch.put_raw(b"k" + first.position.to_bytes(8, "big"), b"")
        batch.put_raw(b"K\x00\x01t\x00\x02k1" + first.position.to_bytes(8, "big"), b"")
        batch.commit()
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.index_rebuilt
        assert index_keys(s, b"k") == [] and index_keys(s, b"K") == []
        assert [r.body for r in s.find_by_key("t", "k1")] == [b"a"]
        assert [r.body for r in s.find_by_key("t", "U1")] == [b"a"]
        assert s.pull("q", 0, 10, 1 << 20).messages[0].record.body == b"a"


@pytest.mark.slow
def test_key_index_matches_the_log_after_sigkill(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from key_index_writer import LMQ
    finally:
        sys.path.pop(0)
    start = 0
    for round_ in range(3):
        lines = run_and_kill(WRITER, tmp_path, start, 0.5 + 0.2 * round_)
        acked = [int(ln.split()[1]) for ln in lines]
        assert acked, "the writer acknowledged nothing before the kill"
        with MessageStore.open(tmp_path) as store:
            info = store.lmq(LMQ)
            pulled = store.pull(LMQ, 0, max_count=info.messages + 1, max_bytes=1 << 30)
            stored = {int(m.record.body): m.record.position for m in pulled.messages}
            # every acknowledged message is stored and found by each of its keys
            for seq in acked:
                assert seq in stored
            for seq, position in stored.items():
                for key in (f"k{seq}", f"u{seq}"):
                    found = store.find_by_key("orders", key)
                    assert [r.position for r in found] == [position], (round_, key)
            # and no key points at a message the LMQ does not hold
            shared = store.find_by_key("orders", "shared", max_num=10**6)
            assert sorted(r.position for r in shared) == sorted(stored.values())
            start = max(stored) + 1
