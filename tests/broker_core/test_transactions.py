"""Transactional messages in the store: half messages, commit / rollback, idempotent
ends, the check-back schedule, recovery and retention (broker_core.transactions)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Durability, Message, MessageStore
from broker_core.errors import StorageFull
from broker_core.record import RecordType
from broker_core.transactions import GROUP_PROPERTY, IMMUNITY_PROPERTY, Outcome

from .conftest import SMALL

DAY = 24 * 3600 * 1000


def bodies(store: MessageStore, lmq: str) -> list[bytes]:
    info = store.lmq(lmq)
    if info is None:
        return []
    return [m.body for m in store.pull(lmq, 0, max_count=10_000, max_bytes=1 << 40).messages]


def test_half_is_not_readable_until_commit(store):
    store.append(Message(topic="t", body=b"before"), ["a"])
    half = store.append_half(Message(topic="t", body=b"txn"), ["a", "b"], "pg")
    assert bodies(store, "a") == [b"before"]
    assert store.lmq("b") is None
    pending = list(store.txns.iter_pending())
    assert [(p.position, p.group, p.topic, p.lmqs) for p in pending] == [
        (half.position, "pg", "t", ("a", "b"))
    ]
    result = store.end_transaction(half.position, commit=True)
    assert result.outcome == Outcome.COMMITTED
    assert bodies(store, "a") == [b"before", b"txn"]
    assert bodies(store, "b") == [b"txn"]
    # consumers read the original record, at its own position
    got = store.read_at("b", 0)
    assert got is not None and got.record.position == half.position
    assert got.record.type == RecordType.TXN_HALF
    assert got.record.properties[GROUP_PROPERTY] == b"pg"
    assert list(store.txns.iter_pending()) == []


def test_commit_is_atomic_over_all_lmqs(store, monkeypatch):
    """One WriteBatch holds every LMQ's entry: a commit whose index write fails leaves
    the message in none of them (and still pending); the retry puts it in all, at the
    same log position."""
    lmqs = [f"q{i}" for i in range(20)]
    half = store.append_half(Message(topic="t", body=b"x"), lmqs, "pg")
    end = store.log_end
    real_write = store.index.write

    def failing_write(wb):
        raise StorageFull("injected: the disk is full")

    monkeypatch.setattr(store.index, "write", failing_write)
    with pytest.raises(StorageFull):
        store.end_transaction(half.position, commit=True)
    monkeypatch.setattr(store.index, "write", real_write)
    assert all(store.lmq(n) is None or bodies(store, n) == [] for n in lmqs)
    assert store.log_end == end  # the control record was cut off again
    assert [p.position for p in store.txns.iter_pending()] == [half.position]
    assert store.end_transaction(half.position, commit=True).outcome == Outcome.COMMITTED
    for n in lmqs:
        got = store.read_at(n, 0)
        assert got is not None and got.record.position == half.position


def test_commit_notifies_listeners_and_serves_the_hot_tail(store):
    calls: list[tuple[str, int]] = []
    store.create_lmq("a")
    store.append(Message(topic="t", body=b"first"), ["b"])
    store.add_listener("a", lambda lmq, nxt: calls.append((lmq, nxt)))
    half = store.append_half(Message(topic="t", body=b"hot"), ["a", "b"], "pg")
    assert calls == []
    store.end_transaction(half.position, commit=True)
    assert calls == [("a", 1)]
    got = store.pull("a", 0).messages
    assert [m.body for m in got] == [b"hot"]
    # served from the hot tail, with the offsets the commit assigned (the half record in
    # the log has offset 0 for every LMQ)
    assert dict(got[0].record.dispatch) == {"a": 0, "b": 1}
    assert [m.body for m in store.pull("b", 0).messages] == [b"first", b"hot"]


def test_rollback_never_delivers(store):
    half = store.append_half(Message(topic="t", body=b"no"), ["a"], "pg")
    assert store.end_transaction(half.position, commit=False).outcome == Outcome.ROLLED_BACK
    assert bodies(store, "a") == []
    assert store.end_transaction(half.position, commit=True).outcome == (
        Outcome.ALREADY_ROLLED_BACK
    )
    assert bodies(store, "a") == []
    assert list(store.txns.iter_pending()) == []


def test_repeated_commit_stores_and_delivers_once(store):
    half = store.append_half(Message(topic="t", body=b"once"), ["a", "b"], "pg")
    first = store.end_transaction(half.position, commit=True)
    end = store.log_end
    again = store.end_transaction(half.position, commit=True)
    late_rollback = store.end_transaction(half.position, commit=False)
    assert again.outcome == Outcome.ALREADY_COMMITTED
    assert late_rollback.outcome == Outcome.ALREADY_COMMITTED
    assert again.control_end == first.control_end
    assert store.log_end == end  # nothing more stored
    assert bodies(store, "a") == [b"once"] and bodies(store, "b") == [b"once"]


def test_unknown_position(store):
    plain = store.append(Message(topic="t", body=b"m"), ["a"])
    assert store.end_transaction(plain.position, commit=True).outcome == Outcome.UNKNOWN
    assert store.end_transaction(12345, commit=False).outcome == Outcome.UNKNOWN
    assert bodies(store, "a") == [b"m"]


def test_concurrent_ends_decide_once(store):
    halves = [store.append_half(Message(topic="t", body=b"%d" % i), ["a"], "pg")
              for i in range(20)]
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def end(commit: bool) -> None:
        for h in halves:
            o = store.end_transaction(h.position, commit=commit).outcome
            with lock:
                outcomes.append(o)

    threads = [threading.Thread(target=end, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decided = [o for o in outcomes if o in (Outcome.COMMITTED, Outcome.ROLLED_BACK)]
    assert len(decided) == len(halves)
    committed = sum(1 for o in outcomes if o == Outcome.COMMITTED)
    assert len(bodies(store, "a")) == committed  # each committed half delivered once
    assert len(set(bodies(store, "a"))) == committed


def test_survives_reopen(tmp_path):
    d = tmp_path / "data"
    with MessageStore.open(d, SMALL) as s:
        h1 = s.append_half(Message(topic="t", body=b"1"), ["a"], "pg")
        h2 = s.append_half(Message(topic="t", body=b"2"), ["a"], "pg")
        h3 = s.append_half(Message(topic="t", body=b"3"), ["a"], "pg")
        s.end_transaction(h1.position, commit=True)
        s.end_transaction(h2.position, commit=False)
    with MessageStore.open(d, SMALL) as s:
        assert [p.position for p in s.txns.iter_pending()] == [h3.position]
        assert s.end_transaction(h1.position, True).outcome == Outcome.ALREADY_COMMITTED
        assert s.end_transaction(h2.position, True).outcome == Outcome.ALREADY_ROLLED_BACK
        assert s.end_transaction(h3.position, True).outcome == Outcome.COMMITTED
        assert bodies(s, "a") == [b"1", b"3"]
        assert s.verify().ok
        report = s.rebuild_index()
        assert report.index_rebuilt
        assert bodies(s, "a") == [b"1", b"3"]
        assert s.end_transaction(h3.position, True).outcome == Outcome.ALREADY_COMMITTED


def test_check_schedule_then_dead_letter(tmp_path):
    cfg = replace(SMALL, txn_first_check_ms=6_000, txn_check_interval_ms=30_000,
                  txn_max_checks=3, txn_dead_letter_lmq="DLQ-TXN")
    d = tmp_path / "data"
    with MessageStore.open(d, cfg) as s:
        h = s.append_half(Message(topic="t", body=b"x"), ["a"], "pg")
        t0 = s.txns.pending.get(h.position).store_ms  # type: ignore[union-attr]
        assert s.transaction_checks_due(t0 + 5_999) == []
        first = s.transaction_checks_due(t0 + 6_000)
        assert [(t.position, t.checks, t.group) for t in first] == [(h.position, 1, "pg")]
        # a check is due 30 s after the CHECK record's store time (now, in real time)
        assert s.transaction_checks_due(t0 + 6_001) == []
        due_at = s.txns.pending.get(h.position).next_check_ms  # type: ignore[union-attr]
        assert due_at >= t0 + 30_000
    with MessageStore.open(d, cfg) as s:  # the count survives a restart
        assert s.txns.pending.get(h.position).checks == 1  # type: ignore[union-attr]
        assert s.transaction_checks_due(due_at - 1) == []
        assert [t.checks for t in s.transaction_checks_due(due_at)] == [2]
        assert [t.checks for t in s.transaction_checks_due(due_at + DAY)] == [3]
        # the 3rd check was the last: next time it is dead-lettered, not checked
        assert s.transaction_checks_due(due_at + 2 * DAY) == []
        assert list(s.txns.iter_pending()) == []
        assert bodies(s, "DLQ-TXN") == [b"x"]
        assert bodies(s, "a") == []
        assert s.stats()["transactions_dead_lettered"] == 1
        assert s.end_transaction(h.position, True).outcome == Outcome.ALREADY_DEAD_LETTERED
        assert bodies(s, "a") == []
    with MessageStore.open(d, cfg) as s:
        assert bodies(s, "DLQ-TXN") == [b"x"]
        assert list(s.txns.iter_pending()) == []


def test_immunity_property_delays_first_check(store):
    h = store.append_half(
        Message(topic="t", body=b"x", properties={IMMUNITY_PROPERTY: b"60"}), ["a"], "pg"
    )
    t0 = store.txns.pending.get(h.position).store_ms
    assert store.transaction_checks_due(t0 + 59_999) == []
    assert len(store.transaction_checks_due(t0 + 60_000)) == 1


def test_retention_keeps_pending_halves(tmp_path):
    cfg = replace(SMALL, retention_ms=0, retention_bytes=64 * 1024)
    with MessageStore.open(tmp_path / "d", cfg) as s:
        h = s.append_half(Message(topic="t", body=b"pending"), ["a"], "pg")
        for _ in range(200):
            s.append(Message(topic="t", body=bytes(8000)), ["filler"])
        report = s.apply_retention()
        assert report.segments_removed == 0  # the half is in the first segment
        assert s.log_start <= h.position
        assert s.end_transaction(h.position, commit=True).outcome == Outcome.COMMITTED
        assert bodies(s, "a") == [b"pending"]
        # once ended, nothing pins it
        report = s.apply_retention()
        assert report.segments_removed > 0 and s.log_start > h.position
        assert s.end_transaction(h.position, commit=True).outcome == Outcome.UNKNOWN


# -- recovery reproduces state: Hypothesis over sequences of operations -----------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("half"), st.lists(st.sampled_from("abc"), min_size=1, max_size=3)),
        st.tuples(st.just("commit"), st.integers(0, 20)),
        st.tuples(st.just("rollback"), st.integers(0, 20)),
        st.tuples(st.just("check"), st.integers(0, 3)),
        st.tuples(st.just("reopen"), st.booleans()),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_recovery_reproduces_state(tmp_path_factory, sequence):
    cfg = replace(SMALL, txn_first_check_ms=0, txn_check_interval_ms=1, txn_max_checks=2,
                  txn_dead_letter_lmq="dlq")
    d: Path = tmp_path_factory.mktemp("txn")
    halves: list[int] = []
    # the model: position -> ("pending", checks) | ("commit"|"rollback"|"dlq", None)
    model: dict[int, tuple[str, int]] = {}
    delivered: dict[str, list[bytes]] = {"a": [], "b": [], "c": [], "dlq": []}
    body_of: dict[int, bytes] = {}
    lmqs_of: dict[int, list[str]] = {}
    s = MessageStore.open(d, cfg)
    try:
        for op, arg in sequence:
            if op == "half":
                body = b"h%d" % len(halves)
                r = s.append_half(Message(topic="t", body=body), arg, "pg")
                halves.append(r.position)
                model[r.position] = ("pending", 0)
                body_of[r.position] = body
                lmqs_of[r.position] = list(dict.fromkeys(arg))
            elif op in ("commit", "rollback") and halves:
                pos = halves[arg % len(halves)]
                out = s.end_transaction(pos, commit=op == "commit").outcome
                state = model[pos][0]
                if state == "pending":
                    assert out == (Outcome.COMMITTED if op == "commit" else Outcome.ROLLED_BACK)
                    model[pos] = (op, 0)
                    if op == "commit":
                        for n in lmqs_of[pos]:
                            delivered[n].append(body_of[pos])
                else:
                    expect = {"commit": Outcome.ALREADY_COMMITTED,
                              "rollback": Outcome.ALREADY_ROLLED_BACK,
                              "dlq": Outcome.ALREADY_DEAD_LETTERED}[state]
                    assert out == expect
            elif op == "check":
                due = {t.position for t in s.transaction_checks_due(now=1 << 62)}
                for pos, (state, checks) in sorted(model.items()):
                    if state != "pending":
                        continue
                    if checks >= 2:
                        model[pos] = ("dlq", 0)
                        delivered["dlq"].append(body_of[pos])
                        assert pos not in due
                    else:
                        model[pos] = ("pending", checks + 1)
                        assert pos in due
            elif op == "reopen":
                s.close()
                s = MessageStore.open(d, cfg)
                if arg:
                    s.rebuild_index()
            pending = {p.position: p.checks for p in s.txns.iter_pending()}
            assert pending == {p: c for p, (st_, c) in model.items() if st_ == "pending"}
            for name, expect in delivered.items():
                assert bodies(s, name) == expect
    finally:
        s.close()


# -- kill -9 ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_commits_survive_sigkill_exactly_once(tmp_path, seed):
    from . import killed_writer, txn_writer

    writer = Path(txn_writer.__file__)
    halves: dict[int, bytes] = {}
    committed: dict[int, set[str]] = {}
    rolled_back: set[int] = set()
    for round_ in range(3):
        for line in killed_writer.run_and_kill(writer, tmp_path, seed * 10 + round_,
                                               run_for=0.5 + 0.3 * round_):
            kind, pos, rest = (line.split() + [""])[:3]
            if kind == "HALF":
                halves[int(pos)] = rest.encode()
            elif kind == "COMMIT":
                committed[int(pos)] = set(rest.split(","))
            elif kind == "ROLLBACK":
                rolled_back.add(int(pos))
    assert len(committed) > 20 and rolled_back
    with MessageStore.open(tmp_path, txn_writer.CONFIG) as s:
        seen: dict[str, list[int]] = {}
        for name in txn_writer.NAMES:
            info = s.lmq(name)
            msgs = s.pull(name, 0, max_count=100_000, max_bytes=1 << 40).messages if info else []
            seen[name] = [m.record.position for m in msgs]
            assert len(seen[name]) == len(set(seen[name])), "a half delivered twice"
        for pos, lmqs in committed.items():  # acknowledged commits: delivered, once
            for name in lmqs:
                assert seen[name].count(pos) == 1, (pos, name)
            assert s.end_transaction(pos, True).outcome == Outcome.ALREADY_COMMITTED
        for positions in seen.values():
            for pos in positions:  # nothing delivered without a commit in the log
                assert pos not in rolled_back
                if pos not in committed:  # committed, not acknowledged before the kill
                    assert s.end_transaction(pos, False).outcome == Outcome.ALREADY_COMMITTED
        for pos in rolled_back:
            assert s.end_transaction(pos, True).outcome == Outcome.ALREADY_ROLLED_BACK
        # what is left pending is a half whose end was never acknowledged, and it is
        # checked back after the restart
        pending = {t.position for t in s.txns.iter_pending()}
        assert not pending & (set(committed) | rolled_back)
        assert {t.position for t in s.transaction_checks_due(now=1 << 62)} == pending
        assert s.verify().ok


def test_verify_checks_commit_entries(store):
    plain = store.append(Message(topic="t", body=b"p"), ["z"])
    half = store.append_half(Message(topic="t", body=b"x"), ["a"], "pg")
    store.end_transaction(half.position, commit=True)
    assert store.verify().ok
    meta = store.lmq("a")
    batch = store.index.new_batch()  # damage: the entry points at another record
    batch.put_entry(meta.id, 0, plain.position, plain.size, 1, 0, 0)
    batch.commit()
    problems = store.verify().problems
    assert problems == [
        f"index entry 'a' offset 0 points at {plain.position}, the log has it at {half.position}"
    ]


def test_sync_commit_returns_only_when_durable(tmp_path):
    """In sync durability the flusher fsyncs only when asked: an end that did not wait
    for its control record would return with the durable position behind it."""
    cfg = replace(SMALL, durability=Durability.SYNC)
    with MessageStore.open(tmp_path / "d", cfg) as s:
        assert s.flusher is not None
        half = s.append_half(Message(topic="t", body=b"x"), ["a"], "pg")
        assert s.flusher.durable_position >= half.end
        first = s.end_transaction(half.position, commit=True)
        assert s.flusher.durable_position >= first.control_end > half.end
        other = s.append_half(Message(topic="t", body=b"y"), ["a"], "pg", wait=False)
        rolled = s.end_transaction(other.position, commit=False)
        assert s.flusher.durable_position >= rolled.control_end
        assert s.end_transaction(half.position, True).control_end == first.control_end


def _state(s: MessageStore, halves: list[int]) -> tuple[object, ...]:
    pending = {t.position: (t.checks, t.next_check_ms, t.lmqs) for t in s.txns.iter_pending()}
    outcomes = {p: s.transaction_outcome(p) for p in halves}
    lmqs = {i.name: bodies(s, i.name) for i in s.lmqs()}
    return pending, outcomes, lmqs


step = st.tuples(st.sampled_from(["half", "commit", "rollback", "check"]), st.integers(0, 9))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(step, max_size=12), st.lists(step, min_size=1, max_size=12))
def test_replay_from_an_old_checkpoint_reproduces_state(tmp_path_factory, before, after):
    """The index is put back to what it was after ``before`` (as if its last writes were
    lost): opening replays the records of ``after`` onto the pending keys as they were
    then, and must reach the same state as the live run."""
    import shutil

    cfg = replace(SMALL, txn_first_check_ms=0, txn_check_interval_ms=1, txn_max_checks=2,
                  txn_dead_letter_lmq="dlq")
    d: Path = tmp_path_factory.mktemp("old")
    halves: list[int] = []

    def run(s: MessageStore, steps: list[tuple[str, int]]) -> None:
        for op, arg in steps:
            if op == "half":
                lmqs = ["abc"[arg % 3], "abc"[(arg // 3) % 3]]
                halves.append(s.append_half(Message(topic="t", body=b"%d" % len(halves)),
                                            lmqs, "pg").position)
            elif op in ("commit", "rollback") and halves:
                s.end_transaction(halves[arg % len(halves)], commit=op == "commit")
            elif op == "check":
                s.transaction_checks_due(now=1 << 62)

    with MessageStore.open(d, cfg) as s:
        run(s, before)
    shutil.copytree(d / "index", d / "index-old")
    with MessageStore.open(d, cfg) as s:
        run(s, after)
        live = _state(s, halves)
    shutil.rmtree(d / "index")
    (d / "index-old").rename(d / "index")
    with MessageStore.open(d, cfg) as s:
        assert _state(s, halves) == live
        assert s.verify().ok
