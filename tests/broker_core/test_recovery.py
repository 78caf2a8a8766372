"""Recovery: torn tails, lost and stale indexes, rebuild equals live."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig, StoreError
from broker_core.consume_queue import LmqMeta
from broker_core.record import encode_record

from .conftest import SMALL


def fill(s: MessageStore, n: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    names = [f"lmq/{i}" for i in range(8)]
    for i in range(n):
        targets = rnd.sample(names, rnd.randint(1, 3))
        s.append(Message(topic=f"t/{i}", body=os.urandom(rnd.randint(0, 200))), targets, wait=False)


def index_by_name(s: MessageStore) -> tuple[dict, dict]:
    """The index content keyed by LMQ name (ids may differ between live and rebuilt)."""
    names: dict[int, str] = {}
    metas: dict[str, tuple] = {}
    for key, value in s.index.all_items():
        if key[:1] == b"M":
            meta = LmqMeta.decode(int.from_bytes(key[1:9], "big"), value)
            names[meta.id] = meta.name
            metas[meta.name] = (meta.next_offset, meta.min_offset, meta.bytes, meta.min_position)
    entries = {}
    for key, value in s.index.all_items():
        if key[:1] == b"E":
            lmq_id = int.from_bytes(key[1:9], "big")
            entries[(names[lmq_id], int.from_bytes(key[9:17], "big"))] = value
    return entries, metas


def test_reopen_after_clean_close_replays_nothing(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 300)
        before = index_by_name(s)
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.replayed_records == 0 and not s.recovery.index_rebuilt
        assert index_by_name(s) == before


def test_rebuilt_index_equals_the_live_index(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 2000)
        s.remove_lmqs(["lmq/3"])
        fill(s, 300, seed=7)  # lmq/3 comes back as a new LMQ, from offset 0
        live = index_by_name(s)
        assert live[1]["lmq/3"][0] < 300
        report = s.rebuild_index()
        assert report.replayed_records > 2000
        assert index_by_name(s) == live
        assert s.verify().ok


def test_lost_index_is_rebuilt_on_open(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 500)
        live = index_by_name(s)
    shutil.rmtree(tmp_path / "index")
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.index_rebuilt and s.recovery.replayed_records == 500
        assert index_by_name(s) == live


def test_index_ahead_of_log_is_rebuilt(tmp_path):
    """A power loss can leave the index (RocksDB WAL) ahead of the log's synced bytes."""
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 50)
        last = s.log.segments()[-1]
        cut_at = s.pull("lmq/0", 0).messages[-1].record.position
    os.truncate(last.path, cut_at - last.base)
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.index_rebuilt
        assert "ahead" in s.recovery.rebuild_reason
        assert s.verify().ok
        for m in s.pull("lmq/0", 0, max_count=1000).messages:
            assert m.record.position < cut_at


def _store_with_torn_tail(tmp_path: Path) -> tuple[Path, bytes, int, dict]:
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 20)
        s.append(Message(topic="last/before", body=b"ok"), ["tail"])
        position = s.log.end
        seg = s.log.segments()[-1]
        metas = {i.name: i.max_offset for i in s.lmqs()}
        torn = encode_record(
            position=position,
            store_ms=1,
            message=Message(topic="last", body=b"never acknowledged" * 3),
            dispatch=[(b"tail", metas["tail"]), (b"lmq/0", metas["lmq/0"])],
        )
    return seg.path, torn, position, metas


def test_torn_last_record_is_cut_at_every_byte(tmp_path):
    """Write the last record partially, cut at every byte position: recovery always
    ends the log at the previous record, and every LMQ keeps its offsets."""
    base = tmp_path / "base"
    seg_path, torn, position, metas = _store_with_torn_tail(base)
    for cut in range(0, len(torn)):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(base, work)
        with open(work / "commitlog" / seg_path.name, "ab") as f:
            f.write(torn[:cut])
        with MessageStore.open(work, SMALL) as s:
            rep = s.recovery
            assert s.log.end == position, cut
            assert rep.truncated_bytes == cut
            assert not rep.index_rebuilt
            assert {i.name: i.max_offset for i in s.lmqs()} == metas
            # and the store keeps working from there
            r = s.append(Message(topic="after", body=b"x"), ["tail"])
            assert r.position == position and r.offsets == (metas["tail"],)
        shutil.rmtree(work)


def test_complete_but_undispatched_record_is_replayed(tmp_path):
    seg_path, torn, position, metas = _store_with_torn_tail(tmp_path)
    with open(seg_path, "ab") as f:
        f.write(torn)
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery.replayed_records == 1 and s.recovery.truncated_bytes == 0
        got = s.pull("tail", metas["tail"]).messages
        assert [m.topic for m in got] == ["last"]
        assert s.lmq("lmq/0").max_offset == metas["lmq/0"] + 1


def test_missing_middle_segment_refuses_to_start(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        for _i in range(60):
            s.append(Message(topic="t", body=b"x" * 10_000), ["q"], wait=False)
        segs = s.log.segments()
    assert len(segs) >= 3
    segs[1].path.unlink()
    with pytest.raises(StoreError, match="segment missing"):
        MessageStore.open(tmp_path, SMALL)


def test_verify_reports_a_corrupt_record(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        fill(s, 30)
        victim = s.pull("lmq/1", 0).messages[0].record
        seg = s.log.segments()[0]
    with open(seg.path, "r+b") as f:
        f.seek(victim.position - seg.base + 60)
        b = f.read(1)
        f.seek(victim.position - seg.base + 60)
        f.write(bytes([b[0] ^ 0xFF]))
    # the damage is before the checkpoint: the store opens, verify finds it
    s = MessageStore.open(tmp_path, SMALL)
    try:
        report = s.verify()
        assert not report.ok and "CRC" in report.problems[0]
    finally:
        s.close()


def test_sync_mode_group_commit(tmp_path):
    cfg = StoreConfig(segment_bytes=SMALL.segment_bytes, max_message_bytes=1024, durability="sync")
    with MessageStore.open(tmp_path, cfg) as s:
        for i in range(20):
            s.append(Message(topic="t", body=b"%d" % i), ["q"])
        assert s.flusher.durable_position >= s.log.end
        futs = [
            s.acknowledged(s.append(Message(topic="t", body=b"x"), ["q"], wait=False).end)
            for _ in range(50)
        ]
        assert all(f.result(timeout=10) for f in futs)
