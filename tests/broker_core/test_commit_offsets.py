"""``MessageStore.commit_offsets``: one group's offsets on several LMQs in one write
batch (all or nothing across a kill -9), with the checks of ``commit_offset``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreError, UnknownLmq

from .conftest import SMALL
from .killed_writer import run_and_kill

WRITER = Path(__file__).with_name("offset_commit_writer.py")


def commit_and_kill(data_dir: Path, start: int, run_for: float) -> list[int]:
    """Run the writer for ``run_for`` seconds, SIGKILL it, return the acknowledged
    commits (``seq`` of every call that returned)."""
    return [int(ln.split()[1]) for ln in run_and_kill(WRITER, data_dir, start, run_for)]


@pytest.mark.slow
def test_commit_offsets_is_all_or_nothing_across_sigkill(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from offset_commit_writer import GROUP, LMQS
    finally:
        sys.path.pop(0)
    start = 1
    for round_ in range(4):
        acked = commit_and_kill(tmp_path, start, run_for=0.4 + 0.2 * round_)
        assert acked, "the writer committed nothing before the kill"
        with MessageStore.open(tmp_path) as store:
            seen = {store.get_offset(GROUP, lmq) for lmq in LMQS}
        # one value on every LMQ: the kill never split a commit ...
        assert len(seen) == 1, f"round {round_}: a commit was split: {sorted(seen)}"
        (value,) = seen
        # ... and every acknowledged commit survived (the one in flight may have too)
        assert value is not None and value >= acked[-1]
        assert value <= acked[-1] + 1
        start = value + 1


def test_commit_offsets_commits_every_lmq(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as store:
        for name in ("a", "b", "c"):
            store.append(Message(topic=name, body=b"x"), [name])
        store.commit_offsets("g", {"a": 1, "b": 0, "c": 7})
        store.commit_offsets("g", {})
    with MessageStore.open(tmp_path, SMALL) as store:
        assert [store.get_offset("g", n) for n in ("a", "b", "c")] == [1, 0, 7]
        assert store.get_offset("other", "a") is None
        assert sorted(store.offsets()) == [("a", "g", 1), ("b", "g", 0), ("c", "g", 7)]


def test_commit_offsets_checks_everything_before_writing(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as store:
        store.create_lmq("a")
        store.create_lmq("b")
        with pytest.raises(UnknownLmq):
            store.commit_offsets("g", {"a": 3, "missing": 1, "b": 4})
        with pytest.raises(ValueError):
            store.commit_offsets("g", {"a": 3, "b": -1})
        # the same errors as commit_offset
        with pytest.raises(UnknownLmq):
            store.commit_offset("g", "missing", 1)
        with pytest.raises(ValueError):
            store.commit_offset("g", "b", -1)
        assert store.get_offset("g", "a") is None
        assert store.get_offset("g", "b") is None
    ro = MessageStore.open_read_only(tmp_path, SMALL)
    try:
        with pytest.raises(StoreError, match="read-only"):
            ro.commit_offsets("g", {"a": 1})
        with pytest.raises(StoreError, match="read-only"):
            ro.commit_offset("g", "a", 1)
    finally:
        ro.close()
    with MessageStore.open(tmp_path, SMALL) as store:
        assert store.get_offset("g", "a") is None


def test_commit_offsets_marks_lmqs_in_use(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as store:
        store.create_lmq("a")
        store.create_lmq("b")
        for name in ("a", "b"):
            meta = store.lmq_table.meta_for_read(name)
            assert meta is not None
            meta.touched_ms -= 3_600_000
        before = {n: store.lmq_table.meta_for_read(n).touched_ms for n in ("a", "b")}
        store.commit_offsets("g", {"a": 0, "b": 0})
        after = {n: store.lmq_table.meta_for_read(n).touched_ms for n in ("a", "b")}
        assert all(after[n] >= before[n] + 3_600_000 for n in ("a", "b"))
