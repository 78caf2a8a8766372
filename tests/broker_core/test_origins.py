"""Copies' origins (broker_core.origins): high-water marks, duplicates dropped at append
time, advance records, translation, and their survival across recovery and rebuilds."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Message, MessageStore, StoreConfig
from broker_core.origins import ORIGIN_PROPERTY, decode_origin, encode_origin
from broker_core.record import RecordType

from .conftest import SMALL
from .killed_writer import run_and_kill

WRITER = Path(__file__).with_name("origin_writer.py")


def copy(offset: int, queue: str = "src:0", cluster: str = "A", topic: str = "copy",
         body: bytes | None = None) -> Message:
    return Message(
        topic=topic,
        body=body if body is not None else b"%s/%s/%d" % (cluster.encode(), queue.encode(), offset),
        properties={ORIGIN_PROPERTY: encode_origin(cluster, queue, offset)},
    )


def bodies(store: MessageStore, lmq: str) -> list[bytes]:
    info = store.lmq(lmq)
    if info is None:
        return []
    pulled = store.pull(lmq, 0, max_count=info.max_offset + 1, max_bytes=1 << 30)
    return [m.record.body for m in pulled.messages]


def test_origin_value_round_trips_and_rejects_nul():
    assert decode_origin(encode_origin("gw-a", "orders:3", 42)) == ("gw-a", "orders:3", 42)
    assert decode_origin(b"a\x00b") is None and decode_origin(b"a\x00b\x00x") is None
    with pytest.raises(ValueError):
        encode_origin("a\x00", "q", 1)


def test_duplicates_are_dropped_and_the_high_water_mark_rises(store):
    r = store.append_copies([(copy(0), ["q"]), (copy(1), ["q"])])
    assert all(x is not None for x in r)
    assert store.origins.high_water("A", "copy", ["src:0", "src:1"]) == {"src:0": 1}
    again = store.append_copies([(copy(1), ["q"]), (copy(2), ["q"]), (copy(2), ["q"])])
    assert again[0] is None and again[1] is not None and again[2] is None
    # a gap (the source filtered offsets 3..9) is allowed; anything not above is a dup
    assert store.append_copies([(copy(10), ["q"])])[0] is not None
    assert store.append_copies([(copy(5), ["q"])]) == [None]
    assert bodies(store, "q") == [b"A/src:0/0", b"A/src:0/1", b"A/src:0/2", b"A/src:0/10"]
    assert store.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 10}


def test_marks_are_per_cluster_queue_and_topic(store):
    store.append_copies([(copy(5, cluster="A"), ["q"]), (copy(5, cluster="B"), ["q"]),
                         (copy(5, queue="src:1"), ["q"]), (copy(5, topic="other"), ["r"])])
    assert len(bodies(store, "q")) == 3 and len(bodies(store, "r")) == 1
    assert store.origins.high_water("B", "copy", ["src:0"]) == {"src:0": 5}
    assert store.origins.high_water("A", "nothing", ["src:0"]) == {}


def test_plain_messages_and_a_batch_of_all_duplicates(store):
    store.append_copies([(copy(3), ["q"])])
    plain = Message(topic="copy", body=b"plain")
    r = store.append_copies([(copy(3), ["q"]), (plain, ["q"]), (copy(2), ["q"])])
    assert r[0] is None and r[1] is not None and r[2] is None
    assert store.append_copies([(copy(1), ["q"])]) == [None]
    assert bodies(store, "q") == [b"A/src:0/3", b"plain"]


def test_advance_moves_the_mark_without_a_message_and_never_lowers_it(store):
    mark, end = store.advance_origin("A", "src:0", "copy", 100)
    assert mark == 100 and end is not None
    assert store.append_copies([(copy(100), ["q"])]) == [None]
    assert store.append_copies([(copy(101), ["q"])])[0] is not None
    assert store.advance_origin("A", "src:0", "copy", 50) == (101, None)
    assert store.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 101}
    assert bodies(store, "q") == [b"A/src:0/101"]
    types = [r.type for r in store.records_from(0)]
    assert types == [RecordType.ORIGIN_ADVANCE, RecordType.MESSAGE]


def test_marks_and_advances_survive_reopen_replay_and_rebuild(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append_copies([(copy(o), ["q"]) for o in range(5)])
    shutil.copytree(tmp_path / "index", tmp_path / "index-old")
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 4}
        s.append_copies([(copy(o), ["q"]) for o in range(3, 9)])
        s.advance_origin("B", "x:0", "copy", 77)
    # the index as it was before: recovery's replay puts the marks back
    shutil.rmtree(tmp_path / "index")
    shutil.move(tmp_path / "index-old", tmp_path / "index")
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.replayed_records == 5  # copies 5..8 and the advance
        assert s.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 8}
        assert s.origins.high_water("B", "copy", ["x:0"]) == {"x:0": 77}
        assert s.append_copies([(copy(8), ["q"])]) == [None]
        report = s.rebuild_index()
        assert report.index_rebuilt
        assert s.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 8}
        assert s.origins.high_water("B", "copy", ["x:0"]) == {"x:0": 77}
        assert len(bodies(s, "q")) == 9
    shutil.rmtree(tmp_path / "index")  # lost: the log alone gives the marks back
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 8}
        assert s.origins.high_water("B", "copy", ["x:0"]) == {"x:0": 77}


def test_a_rebuild_keeps_marks_whose_records_retention_removed(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=1)
    with MessageStore.open(tmp_path, cfg) as s:
        s.append_copies([(copy(0, queue="old:0", body=b"x" * 500), ["old"])])
        for o in range(300):
            s.append_copies([(copy(o, body=b"y" * 500), ["q"])])
        assert s.apply_retention().segments_removed > 0
        assert s.lmq("old") is None or s.lmq("old").messages == 0
        s.rebuild_index()
        assert s.origins.high_water("A", "copy", ["old:0", "src:0"]) == {"old:0": 0, "src:0": 299}
        assert s.append_copies([(copy(0, queue="old:0"), ["old"])]) == [None]


def test_translate_finds_the_first_copy_at_or_after_the_committed_offset(store):
    # source offsets 10, 12, 14 ... (a filter skipped the odd ones), two origin queues
    # interleaved in one target queue
    for o in range(10, 30, 2):
        store.append_copies([(copy(o), ["t:0"]), (copy(o, queue="src:1"), ["t:0"])])
    # t:0 holds src:0 at even target offsets, src:1 at odd ones
    assert store.translate_origin("A", "src:0", "t:0", 0) == 0
    assert store.translate_origin("A", "src:0", "t:0", 14) == 4
    assert store.translate_origin("A", "src:0", "t:0", 15) == 6  # 15 was filtered out
    assert store.translate_origin("A", "src:1", "t:0", 14) == 5
    assert store.translate_origin("A", "src:0", "t:0", 1000) == 19  # past the last copy
    assert store.translate_origin("A", "src:9", "t:0", 3) is None
    assert store.translate_origin("A", "src:0", "nope", 3) is None


def test_read_only_store_sees_the_marks(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append_copies([(copy(4), ["q"])])
        ro = MessageStore.open_read_only(tmp_path, SMALL)
        try:
            assert ro.origins.high_water("A", "copy", ["src:0"]) == {"src:0": 4}
        finally:
            ro.close()


# Any interleaving of copies from several origins, with repeats and restarts: each
# (origin, offset) the test ever sent is stored exactly once, in origin order.
_step = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(["A", "B"]), st.sampled_from(["s:0", "s:1"]),
              st.integers(0, 4), st.integers(1, 4)),
    st.tuples(st.just("restart"), st.just(""), st.just(""), st.just(0), st.just(0)),
    st.tuples(st.just("rebuild"), st.just(""), st.just(""), st.just(0), st.just(0)),
)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=14))
def test_copies_are_stored_exactly_once_in_order(tmp_path_factory, steps):
    data = tmp_path_factory.mktemp("origins")
    s = MessageStore.open(data, SMALL)
    next_offset: dict[tuple[str, str], int] = {}
    try:
        for kind, cluster, queue, back, count in steps:
            if kind == "restart":
                s.close()
                s = MessageStore.open(data, SMALL)
                continue
            if kind == "rebuild":
                s.rebuild_index()
                continue
            # a connector resumes from the mark, repeating up to ``back`` copies
            start = max(next_offset.get((cluster, queue), 0) - back, 0)
            s.append_copies(
                [(copy(o, queue, cluster), ["all"]) for o in range(start, start + count)])
            key = (cluster, queue)
            next_offset[key] = max(next_offset.get(key, 0), start + count)
        got = [decode_origin(b"\x00".join(b.split(b"/"))) for b in bodies(s, "all")]
        for key, n in next_offset.items():
            mine = [g[2] for g in got if g is not None and (g[0], g[1]) == key]
            assert mine == list(range(n))
            assert s.origins.high_water(key[0], "copy", [key[1]]) == {key[1]: n - 1}
    finally:
        s.close()


@pytest.mark.slow
def test_copies_and_marks_agree_after_sigkill(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from origin_writer import LMQ, TOPIC
    finally:
        sys.path.pop(0)
    for round_ in range(3):
        lines = run_and_kill(WRITER, tmp_path, 0, 0.5 + 0.2 * round_)
        acked = max(int(ln.split()[2]) for ln in lines)
        with MessageStore.open(tmp_path) as store:
            offsets = [int(b) for b in bodies(store, LMQ)]
            # exactly once, in order, nothing acknowledged lost, and the mark is the
            # last copy stored: the copy and its mark were one atomic append
            assert offsets == list(range(len(offsets))), round_
            assert offsets[-1] >= acked
            assert store.origins.high_water("A", TOPIC, ["src:0"]) == {"src:0": offsets[-1]}


def test_advance_records_are_skipped_by_verify_the_tools_and_the_spark_reader(tmp_path):
    from spark.reader import RangeReport, list_segments, scan_range

    with MessageStore.open(tmp_path, SMALL) as s:
        s.append_copies([(copy(1), ["q"])])
        s.advance_origin("A", "src:0", "copy", 9)
        s.append(Message(topic="copy", body=b"plain"), ["q"])
        assert s.verify().ok
        assert [r.body for r in bodies_of_positions(s)] == [b"A/src:0/1", b"plain"]
    [segment] = list_segments(str(tmp_path))
    data = Path(segment.path).read_bytes()
    report = RangeReport(segment.name, segment.base, 0, len(data))
    records = list(scan_range(data, segment=segment.name, base=segment.base, start=0,
                              end=len(data), limit=len(data), expected_bytes=None,
                              is_last=True, report=report))
    assert [r.body for r in records] == [b"A/src:0/1", b"plain"]
    assert report.control_records == 1


def bodies_of_positions(store: MessageStore) -> list:
    """``record_at`` (the ``lmq messages`` lookup) of every record's position: control
    records are not messages."""
    found = [store.record_at(r.position) for r in store.records_from(0)]
    return [r for r in found if r is not None]


def test_an_index_ahead_of_the_log_drops_the_marks_the_log_lost(tmp_path):
    """A power loss can leave the index ahead of the log: a mark set by a copy the log no
    longer holds must fall back, or the connector would never send that copy again."""
    import os

    with MessageStore.open(tmp_path, SMALL) as s:
        s.append_copies([(copy(0), ["q"]), (copy(0, queue="src:1"), ["q"])])
        s.append_copies([(copy(1), ["q"])])
        cut = s.append_copies([(copy(2), ["q"])])[0]
        assert cut is not None
        last = s.log.segments()[-1]
    os.truncate(last.path, cut.position - last.base)
    with MessageStore.open(tmp_path, SMALL) as s:
        assert "ahead" in s.recovery.rebuild_reason
        assert s.origins.high_water("A", "copy", ["src:0", "src:1"]) == {"src:0": 1, "src:1": 0}
        assert s.append_copies([(copy(2), ["q"])])[0] is not None


def test_retention_trims_the_translation_keys_of_removed_copies(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=1)
    with MessageStore.open(tmp_path, cfg) as s:
        for o in range(300):
            s.append_copies([(copy(o, body=b"y" * 500), ["q"]),
                             (copy(o, queue="src:1", body=b"z" * 500), ["r"])])
        assert s.apply_retention().segments_removed > 0
        first_q, first_r = s.lmq("q").min_offset, s.lmq("r").min_offset
        assert first_q > 0 and first_r > 0
        keys = [k for k, _ in s.index.db.items(from_key=b"J") if bytes(k).startswith(b"J")]
        # one key per copy still held, none of the removed ones
        assert len(keys) == (300 - first_q) + (300 - first_r)
        assert s.translate_origin("A", "src:0", "q", 0) == first_q
        assert s.translate_origin("A", "src:0", "q", 299) == 299
        # the marks outlive their copies
        assert s.origins.high_water("A", "copy", ["src:0", "src:1"]) == {"src:0": 299, "src:1": 299}
