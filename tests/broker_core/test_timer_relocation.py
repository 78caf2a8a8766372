"""Relocation of pending timers under retention pressure (broker_core.timers): one timer
40 days out no longer keeps every later segment; the message, its keys and its recall by
the first position survive the move; replay and rebuild reproduce it."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Durability, Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from broker_core.record import RecordType
from broker_core.timers import FIRE_BODY

from . import killed_writer
from .test_timers import bodies, timer_state

DAY = 86_400_000
# segments of 64 KiB, the log kept to 192 KiB by size (time retention: see the age test)
CFG = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                  retention_bytes=192 * 1024, timer_page=4)
WRITER = Path(__file__).with_name("timer_relocate_writer.py")


def traffic(s: MessageStore, n: int = 300, size: int = 1000) -> None:
    for i in range(0, n, 50):
        s.append_batch([(Message("filler", b"x" * size + b"%d" % j), ["filler"])
                        for j in range(i, min(n, i + 50))])


def long_timer(s: MessageStore, body: bytes, due: int, uniq: str = "") -> int:
    props = {"UNIQ_KEY": (uniq or body.decode()).encode(), "KEYS": b"k-" + body}
    return s.append_delayed(Message("orders", body, properties=props, tag="t"),
                            ["q:a", "q:b"], due).position


def test_a_40_day_timer_does_not_pin_the_segments_after_it(tmp_path):
    with MessageStore.open(tmp_path, CFG) as s:
        due = now_ms() + 40 * DAY - 60_000
        first = long_timer(s, b"late", due)
        traffic(s)
        report = s.apply_retention()
        # the segment holding the 40-day timer went: its record moved to the log's end
        assert s.log_start > first
        assert report.timers_relocated == 1
        assert s.log_bytes <= CFG.retention_bytes + CFG.segment_bytes
        timer = s.pending_timer(first)
        assert timer is not None and timer.position > first and timer.due_ms == due
        assert s.timers.pending("orders") == 1
        copy = s.record_at(timer.position)
        assert copy is not None and copy.delayed and copy.body == b"late"
        assert copy.tag == "t" and copy.properties["UNIQ_KEY"] == b"late"
        assert [n for n, _ in copy.dispatch] == ["q:a", "q:b"]
        # a lookup by message id or key finds the copy
        assert [r.position for r in s.find_by_key("orders", "late")] == [timer.position]
        assert [r.position for r in s.find_by_key("orders", "k-late")] == [timer.position]
        # more traffic, more retention: relocated again, still one hop from the first
        traffic(s)
        s.apply_retention()
        again = s.pending_timer(first)
        assert again is not None and again.position > timer.position
        assert s.log_start > timer.position
        assert [k for k, _ in s.index.all_items() if k[:1] in (b"W", b"V")] == [
            b"V" + again.position.to_bytes(8, "big"), b"W" + first.to_bytes(8, "big"),
        ]
        assert s.fire_timers(now=due - 1) == 0
        assert s.fire_timers(now=due) == 1
        assert bodies(s, "q:a") == bodies(s, "q:b") == [b"late"]
        assert s.pull("q:a", 0).messages[0].record.position == again.position
        # fired: the forward went with the timer
        assert s.pending_timer(first) is None
        assert not [k for k, _ in s.index.all_items() if k[:1] in (b"W", b"V")]


def test_nothing_moves_without_retention_pressure(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                      retention_bytes=10 * 1024 * 1024)
    with MessageStore.open(tmp_path, cfg) as s:
        first = long_timer(s, b"late", now_ms() + DAY)
        traffic(s)
        assert s.apply_retention().timers_relocated == 0
        assert s.pending_timer(first).position == first  # type: ignore[union-attr]


def test_age_retention_relocates_too_and_a_page_per_pass(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                      retention_ms=60_000, timer_page=3)
    with MessageStore.open(tmp_path, cfg) as s:
        due = now_ms() + 10 * DAY
        firsts = [long_timer(s, b"m%d" % i, due + i) for i in range(7)]
        traffic(s)
        later = now_ms() + 3_600_000  # every segment but the active one is old
        assert s.apply_retention(later).timers_relocated == 3  # one page
        assert s.log_start <= firsts[3]
        assert s.apply_retention(later).timers_relocated == 3
        assert s.apply_retention(later).timers_relocated == 1
        assert s.log_start > firsts[-1]
        assert s.timers.pending() == 7
        assert s.fire_timers(now=due + 10) == 7
        assert bodies(s, "q:a") == [b"m%d" % i for i in range(7)]


def test_recall_and_reschedule_by_the_first_position_after_relocation(tmp_path):
    with MessageStore.open(tmp_path, CFG) as s:
        due = now_ms() + 5 * DAY
        a = long_timer(s, b"a", due)
        b = long_timer(s, b"b", due)
        traffic(s)
        s.apply_retention()
        assert s.log_start > b
        assert s.cancel_timer(a)
        assert not s.cancel_timer(a)
        assert s.reschedule_timer(b, due + 5)
        assert s.pending_timer(b).due_ms == due + 5  # type: ignore[union-attr]
        assert s.fire_timers(now=due + 4) == 0
        assert s.fire_timers(now=due + 5) == 1
        assert bodies(s, "q:a") == [b"b"]
        assert s.timers.pending() == 0
        assert not [k for k, _ in s.index.all_items() if k[:1] in (b"W", b"V")]


def test_relocation_replays_and_rebuilds_exactly(tmp_path):
    due = now_ms() + 5 * DAY
    with MessageStore.open(tmp_path, CFG) as s:
        a = long_timer(s, b"a", due)
        long_timer(s, b"b", due + 1)
        traffic(s)
        checkpoint = dict(s.index.all_items())
        s.apply_retention()
        expected = timer_state(s)
        assert any(k[:1] == b"W" for k in expected)
        s.rebuild_index()
        assert timer_state(s) == expected
    # the index as before the relocation (its batch lost in a crash), on a log that
    # has the copies (the log write reached the disk): a replay does what it did
    with MessageStore.open(tmp_path, CFG) as s:
        for key in [k for k, _ in s.index.all_items()]:
            del s.index.db[key]
        for key, value in checkpoint.items():
            s.index.db[key] = value
    with MessageStore.open(tmp_path, CFG) as s:
        assert s.recovery is not None and s.recovery.replayed_records >= 4
        assert timer_state(s) == expected
        assert s.cancel_timer(a)
        assert s.fire_timers(now=due + 1) == 1
        assert bodies(s, "q:b") == [b"b"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_between_the_relocation_write_and_its_index_commit(tmp_path, monkeypatch, seed):
    """A writer schedules long timers (sync durability), writes traffic and applies
    retention, and SIGKILLs itself at random just before index commits, ten times as
    often in a relocation (the window between its log write and its index batch: most
    kills land there, checked by hand with a print in the writer), six times: every
    acknowledged timer is pending exactly once, found by its first position, and a
    rebuild reproduces the timer index."""
    monkeypatch.setenv("TIMER_WRITER_CRASH_RATE", "0.03")
    scheduled: dict[int, int] = {}
    for round_ in range(6):
        for line in killed_writer.run_and_kill(WRITER, tmp_path, seed * 10 + round_, 1.0):
            _, pos, due = line.split()
            scheduled[int(pos)] = int(due)
    assert len(scheduled) > 10
    cfg = StoreConfig(durability=Durability.SYNC, segment_bytes=64 * 1024,
                      max_message_bytes=16 * 1024, retention_bytes=192 * 1024, timer_page=4)
    with MessageStore.open(tmp_path, cfg) as s:
        relocations = [r for r in s.records_from(s.log_start)
                       if r.type == RecordType.TIMER_CHANGE and len(r.body) > 28]
        assert relocations, "nothing was relocated"
        assert s.log_start > min(scheduled)
        assert s.timers.pending() >= len(scheduled)
        current = {p: s.pending_timer(p) for p in scheduled}
        assert all(t is not None and t.due_ms == scheduled[p] for p, t in current.items())
        assert len({t.position for t in current.values() if t}) == len(scheduled)
        expected = timer_state(s)
        s.rebuild_index()
        assert timer_state(s) == expected
        assert s.verify().ok
        s.fire_timers(now=max(scheduled.values()))
        assert s.timers.pending() == 0
        fires = [FIRE_BODY.unpack_from(r.body, 0)[0] for r in s.records_from(s.log_start)
                 if r.type == RecordType.TIMER_FIRE]
        assert len(fires) == len(set(fires))
        assert {t.position for t in current.values() if t} <= set(fires)
