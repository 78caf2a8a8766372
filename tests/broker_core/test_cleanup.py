"""Retention, idle TTL and LMQ removal: nothing live loses its offsets."""

from __future__ import annotations

import os
import time

from broker_core import Message, MessageStore, StoreConfig
from broker_core.store import now_ms

from .conftest import SMALL

BODY = b"r" * 8_000


def test_retention_by_size_drops_segments_and_index_entries(tmp_path):
    cfg = StoreConfig(
        segment_bytes=SMALL.segment_bytes, max_message_bytes=64 * 1024, retention_bytes=600 * 1024
    )
    with MessageStore.open(tmp_path, cfg) as s:
        for i in range(300):
            s.append(
                Message(topic="t", body=BODY), ["busy"] + (["rare"] if i == 0 else []), wait=False
            )
        before = s.lmq("busy")
        report = s.apply_retention()
        assert report.segments_removed > 0
        assert s.log.size_bytes <= 600 * 1024 + SMALL.segment_bytes
        after = s.lmq("busy")
        assert after.max_offset == before.max_offset  # never reset
        assert after.min_offset > 0 and after.messages < before.messages
        assert after.bytes == after.messages * len(BODY)
        got = s.pull("busy", 0, max_count=1)
        assert got.messages[0].offset == after.min_offset
        rare = s.lmq("rare")
        assert (rare.min_offset, rare.max_offset, rare.messages) == (1, 1, 0)
        assert report.entries_removed == before.messages - after.messages + 1
        assert s.verify().ok
        # a new message continues the offsets
        assert s.append(Message(topic="t", body=b""), ["rare"]).offsets == (1,)


def test_retention_by_age_uses_segment_mtime(tmp_path):
    cfg = StoreConfig(
        segment_bytes=SMALL.segment_bytes, max_message_bytes=64 * 1024, retention_ms=3_600_000
    )
    with MessageStore.open(tmp_path, cfg) as s:
        for _ in range(100):
            s.append(Message(topic="t", body=BODY), ["q"], wait=False)
        segs = s.log.segments()
        old = time.time() - 7200
        for seg in segs[:2]:
            os.utime(seg.path, (old, old))
        report = s.apply_retention()
        assert report.segments_removed == 2
        assert s.log.min_position == segs[2].base


def test_crash_between_segment_drop_and_index_trim_is_finished_on_open(tmp_path):
    cfg = StoreConfig(segment_bytes=SMALL.segment_bytes, max_message_bytes=64 * 1024)
    with MessageStore.open(tmp_path, cfg) as s:
        for _ in range(100):
            s.append(Message(topic="t", body=BODY), ["q"], wait=False)
        first = s.log.segments()[0]
    first.path.unlink()  # as if retention had removed it and then crashed
    with MessageStore.open(tmp_path, cfg) as s:
        assert s.recovery.trimmed_entries > 0
        info = s.lmq("q")
        assert info.max_offset == 100 and info.min_offset > 0
        assert s.verify().ok


def test_remove_lmqs_takes_entries_offsets_and_pop_state(store):
    store.append_batch([(Message(topic="t", body=b"x"), ["dev/1", "dev/2", "keep"])] * 3)
    store.commit_offset("sess", "dev/1", 2)
    store.pop.pop("grp", "dev/1", 1, 60_000)
    report = store.remove_lmqs(["dev/1", "missing"])
    assert report.lmqs == 1 and report.entries == 3 and report.offsets == 2
    assert store.lmq("dev/1") is None
    assert list(store.offsets("dev/1")) == []
    assert list(store.state.all_inflight()) == []
    assert store.lmq("keep").max_offset == 3
    # the name can be used again: a new LMQ
    assert store.append(Message(topic="t", body=b"y"), ["dev/1"]).offsets == (0,)


def test_removal_survives_restart_and_rebuild(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(Message(topic="t", body=b"x"), ["a", "b"])
        s.remove_lmqs(["a"])
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.lmq("a") is None and s.lmq("b").messages == 1
        s.rebuild_index()
        assert s.lmq("a") is None and s.lmq("b").messages == 1


def test_idle_ttl(tmp_path):
    cfg = StoreConfig(segment_bytes=SMALL.segment_bytes, max_message_bytes=1024, lmq_ttl_ms=1000)
    with MessageStore.open(tmp_path, cfg) as s:
        s.append(Message(topic="t", body=b"x"), ["idle", "read", "listened"])
        s.commit_offset("g", "read", 1)
        s.add_listener("listened", lambda *_: None)
        later = now_ms() + 30_000
        names = {i.name for i in s.idle_lmqs(1000, later)}
        # "read" had an offset commit, but that is older than the cutoff too
        assert names == {"idle", "read"}
        assert {i.name for i in s.idle_lmqs(1000, now_ms() + 10)} == set()
        report = s.remove_lmqs([i.name for i in s.idle_lmqs(cfg.lmq_ttl_ms, later)])
        assert report.lmqs == 2
        assert s.lmq("listened") is not None and s.lmq("idle") is None
