"""Durable timers (broker_core.timers): delayed messages stored once, fired in due order
by control records, reproduced exactly by a replay of the log, safe under kill -9."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from broker_core.errors import CorruptRecord
from broker_core.record import RecordType
from broker_core.timers import FIRE_BODY, DelayTooLong, delay_level_ms

from . import killed_writer

SMALL = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)
WRITER = Path(__file__).with_name("timer_writer.py")


def msg(body: bytes, topic: str = "orders") -> Message:
    return Message(topic=topic, body=body)


def bodies(store: MessageStore, lmq: str) -> list[bytes]:
    if store.lmq(lmq) is None:
        return []
    return [m.record.body for m in store.pull(lmq, 0, max_count=10_000).messages]


def timer_state(store: MessageStore) -> dict[bytes, bytes]:
    """Every timer key of the index (T, P, Q, F, W, V) and the LMQ entries, by LMQ name."""
    out: dict[bytes, bytes] = {}
    for key, value in store.index.all_items():
        if key[:1] in (b"T", b"P", b"Q", b"F", b"W", b"V"):
            out[key] = value
    for info in store.lmqs():
        for m in store.pull(info.name, 0, max_count=100_000).messages:
            out[b"entry:%s:%d" % (info.name.encode(), m.offset)] = b"%d" % m.record.position
    return out


def test_not_readable_before_due_then_in_every_lmq_as_the_original_record(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        due = now_ms() + 60_000
        res = s.append_delayed(msg(b"later"), ["q:a", "q:b", "q:c"], due)
        assert res.offsets == ()
        s.append(msg(b"now"), ["q:a"])
        assert bodies(s, "q:a") == [b"now"]
        assert s.lmq("q:b") is None
        assert s.fire_timers(now=due - 1) == 0  # ms precision: one ms early is early
        assert bodies(s, "q:b") == []
        assert s.fire_timers(now=due) == 1
        for lmq in ("q:a", "q:b", "q:c"):
            got = s.pull(lmq, 0).messages
            assert got[-1].record.body == b"later"
            # consumers read the original record, written once at publish
            assert got[-1].record.position == res.position
        assert bodies(s, "q:a") == [b"now", b"later"]
        assert s.fire_timers(now=due + 10_000) == 0  # fired once
        report = s.verify()
        assert report.ok, report.problems
        # verify checks a fire's entries against the delayed record's position
        meta = s.lmq_table.meta_for_read("q:b")
        assert meta is not None
        entry = s.index.entry(meta.id, 0)
        assert entry is not None
        batch = s.index.new_batch()
        batch.put_entry(meta.id, 0, entry.position + 1, entry.record_size, entry.body_size,
                        entry.tag_hash, entry.store_ms)
        batch.commit()
        assert any("'q:b' offset 0 points at" in p for p in s.verify().problems)


def test_fired_in_due_order_to_the_millisecond(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        base = now_ms() + 10_000
        for delta in (5, 1, 3, 2, 4, 0):
            s.append_delayed(msg(b"%d" % delta), ["q"], base + delta)
        assert s.next_timer_due() == base
        assert s.fire_timers(now=base + 2) == 3
        assert bodies(s, "q") == [b"0", b"1", b"2"]
        assert s.fire_timers(now=base + 5) == 3
        assert bodies(s, "q") == [b"%d" % d for d in range(6)]
        assert s.next_timer_due() is None


def test_cancel_and_reschedule(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        base = now_ms() + 10_000
        a = s.append_delayed(msg(b"a"), ["q"], base)
        b = s.append_delayed(msg(b"b"), ["q"], base + 1)
        c = s.append_delayed(msg(b"c"), ["q"], base + 2)
        assert s.cancel_timer(a.position)
        assert not s.cancel_timer(a.position)  # already cancelled
        assert s.reschedule_timer(c.position, base - 5_000)  # earlier than b
        assert s.reschedule_timer(b.position, base + 50)
        pending = s.pending_timer(b.position)
        assert pending is not None and pending.due_ms == base + 50
        assert s.fire_timers(now=base + 49) == 1
        assert bodies(s, "q") == [b"c"]
        assert s.fire_timers(now=base + 50) == 1
        assert bodies(s, "q") == [b"c", b"b"]
        assert not s.cancel_timer(b.position)  # fired
        assert not s.reschedule_timer(b.position, base)
        assert not s.cancel_timer(12345)  # no record there
        # timers added or moved before the last one fired still fire
        d = s.append_delayed(msg(b"d"), ["q"], base + 10)
        e = s.append_delayed(msg(b"e"), ["q"], base + 100)
        assert s.reschedule_timer(e.position, base + 20)
        assert s.next_timer_due() == base + 10
        assert s.fire_timers(now=base + 60) == 2
        assert bodies(s, "q") == [b"c", b"b", b"d", b"e"]
        assert s.pending_timer(d.position) is None


def test_maximum_delay_is_configurable_and_refused_with_nothing_stored(tmp_path):
    cfg = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024,
                      max_timer_delay_ms=3_600_000)
    with MessageStore.open(tmp_path, cfg) as s:
        end = s.log_end
        with pytest.raises(DelayTooLong, match="maximum delay"):
            s.append_delayed(msg(b"x"), ["q"], now_ms() + 3_600_000 + 60_000)
        assert s.log_end == end and s.timers.pending() == 0
        r = s.append_delayed(msg(b"x"), ["q"], now_ms() + 3_500_000)
        with pytest.raises(DelayTooLong):
            s.reschedule_timer(r.position, now_ms() + 4_000_000)
    # the default is 40 days, far past RocketMQ's three
    assert StoreConfig().max_timer_delay_ms == 40 * 24 * 3600 * 1000
    with MessageStore.open(tmp_path / "d", SMALL) as s:
        s.append_delayed(msg(b"x"), ["q"], now_ms() + 39 * 24 * 3600 * 1000)
        with pytest.raises(DelayTooLong):
            s.append_delayed(msg(b"x"), ["q"], now_ms() + 41 * 24 * 3600 * 1000)


def test_pending_counts_per_topic_survive_reopen(tmp_path):
    base = now_ms() + 10_000
    with MessageStore.open(tmp_path, SMALL) as s:
        rs = [s.append_delayed(msg(b"%d" % i, f"t{i % 2}"), ["q"], base + i) for i in range(5)]
        assert (s.timers.pending("t0"), s.timers.pending("t1"), s.timers.pending()) == (3, 2, 5)
        s.cancel_timer(rs[1].position)
        s.fire_timers(now=base)  # fires t0's first
        assert (s.timers.pending("t0"), s.timers.pending("t1")) == (2, 1)
    with MessageStore.open(tmp_path, SMALL) as s:
        assert (s.timers.pending("t0"), s.timers.pending("t1")) == (2, 1)
        assert s.stats()["timers_pending"] == 3  # the gauge lmq_store_timers_pending
        s.fire_timers(now=base + 100)
        assert s.timers.pending() == 0 and s.timers.pending("t0") == 0


def test_paging_fires_a_page_per_batch(tmp_path):
    cfg = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024, timer_page=10)
    with MessageStore.open(tmp_path, cfg) as s:
        base = now_ms() + 10_000
        s.append_delayed_batch([(msg(b"%d" % i), ["q"], base) for i in range(95)])
        # one page is read from the index at a time, never everything due
        assert len(s.timers.due(base, cfg.timer_page)) == 10
        assert s.fire_timers(now=base, max_count=25) == 25
        assert s.timers.pending() == 70
        assert s.fire_timers(now=base) == 70
        assert sorted(int(b) for b in bodies(s, "q")) == list(range(95))


def test_delay_levels():
    levels = StoreConfig().delay_levels
    assert delay_level_ms(levels, 1) == 1000
    assert delay_level_ms(levels, 3) == 10_000
    assert delay_level_ms(levels, 5) == 60_000
    assert delay_level_ms(levels, 18) == 7_200_000
    assert delay_level_ms(levels, 40) == 7_200_000  # past the last: the last
    assert delay_level_ms(("250ms", "1d"), 1) == 250
    with pytest.raises(ValueError):
        delay_level_ms(levels, 0)
    # a bad configuration is refused when the store is configured, not at a first send
    with pytest.raises(ValueError, match="5x"):
        StoreConfig(delay_levels=("1s", "5x"))
    with pytest.raises(ValueError, match="at least one"):
        StoreConfig(delay_levels=())


def test_delay_level_due_is_on_the_same_timers(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        now = now_ms()
        due = s.delay_level_due(2, now)
        assert due == now + 5000
        s.append_delayed(msg(b"x"), ["q"], due)
        assert s.fire_timers(now=now + 4999) == 0
        assert s.fire_timers(now=now + 5000) == 1


def test_retention_keeps_pending_records_and_fired_ones_for_retention_ms(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                      retention_ms=1000)
    with MessageStore.open(tmp_path, cfg) as s:
        due = now_ms() + 3_600_000
        r = s.append_delayed(msg(b"delayed"), ["q"], due)
        for i in range(200):
            s.append(msg(b"x" * 1000 + b"%d" % i), ["filler"])
        assert len(s.log.segments()) > 2
        far = now_ms() + 10 * 3_600_000  # every segment is "old"
        s.apply_retention(far)
        # the pending record was moved to the log's end rather than lost or pinning
        timer = s.pending_timer(r.position)
        assert timer is not None and timer.position >= s.log_start > r.position
        assert s.record_at(timer.position).body == b"delayed"  # type: ignore[union-attr]
        for i in range(200):
            s.append(msg(b"y" * 1000 + b"%d" % i), ["filler"])
        assert s.fire_timers(now=due) == 1
        # fired at `due`: held for retention_ms after the fire, then removed
        s.apply_retention(due + 500)
        assert s.log_start <= timer.position
        assert bodies(s, "q") == [b"delayed"]
        s.apply_retention(due + 2000)
        assert s.log_start > timer.position


def test_recovery_replays_timers_after_the_checkpoint(tmp_path):
    """The index lost its last batches (a crash before they reached RocksDB): replaying
    the log from the checkpoint re-adds, fires and cancels the same timers."""
    base = now_ms() + 10_000
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(msg(b"plain"), ["q"])
        before = dict(s.index.all_items())
        a = s.append_delayed(msg(b"a"), ["q", "r"], base)
        s.append_delayed(msg(b"b"), ["q"], base + 5)
        c = s.append_delayed(msg(b"c"), ["q"], base + 7)
        s.cancel_timer(c.position)
        s.fire_timers(now=base)
        expected = timer_state(s)
    # put the index back to what it was before the timers (keys and checkpoint)
    with MessageStore.open(tmp_path, SMALL) as s:
        for key in [k for k, _ in s.index.all_items()]:
            del s.index.db[key]
        for key, value in before.items():
            s.index.db[key] = value
    with MessageStore.open(tmp_path, SMALL) as s:
        assert s.recovery is not None and s.recovery.replayed_records >= 5
        assert timer_state(s) == expected
        assert s.timers.pending() == 1
        assert s.pull("r", 0).messages[0].record.position == a.position
        assert s.fire_timers(now=base + 1000) == 1
        assert bodies(s, "q") == [b"plain", b"a", b"b"]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(0, 50), st.integers(0, 2)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("reschedule"), st.integers(0, 30), st.integers(0, 50)),
        st.tuples(st.just("fire"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
        # traffic past a segment, then size retention: pending timers are relocated
        st.tuples(st.just("retain"), st.integers(60, 140), st.just(0)),
    ),
    max_size=25,
)


@settings(
    max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops)
def test_rebuild_reproduces_the_timer_index_exactly(tmp_path, program):
    data = tmp_path / "hyp"
    shutil.rmtree(data, ignore_errors=True)
    base = now_ms() + 60_000
    positions: list[int] = []
    fired: list[int] = []
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                      retention_bytes=128 * 1024, timer_page=3)
    s = MessageStore.open(data, cfg)
    try:
        for i, (op, a, b) in enumerate(program):
            if op == "schedule":
                lmqs = [["q"], ["q", "r"], ["r"]][b]
                positions.append(s.append_delayed(msg(b"%d" % i, f"t{b}"), lmqs, base + a).position)
            elif op == "cancel" and positions:
                s.cancel_timer(positions[a % len(positions)])
            elif op == "reschedule" and positions:
                s.reschedule_timer(positions[a % len(positions)], base + b)
            elif op == "fire":
                fired.append(s.fire_timers(now=base + a))
            elif op == "reopen":
                s.close()
                s = MessageStore.open(data, cfg)
            elif op == "retain":
                s.append_batch([(msg(b"f" * 1000), ["filler"])] * a)
                s.apply_retention()
        expected = timer_state(s)
        counts = {t: s.timers.pending(t) for t in ("t0", "t1", "t2")}
        # the counters are the index's pending keys, counted by topic
        by_topic = Counter(v[12:].decode() for k, v in expected.items() if k[:1] == b"P")
        assert {t: by_topic.get(t, 0) for t in counts} == counts
        s.rebuild_index()
        assert timer_state(s) == expected
        assert {t: s.timers.pending(t) for t in counts} == counts
        s.close()
        s = MessageStore.open(data, cfg)
        assert timer_state(s) == expected
        # every timer fires exactly once in the end
        s.fire_timers(now=base + 1000)
        assert s.timers.pending() == 0
        fires = [r for r in s.records_from(s.log_start) if r.type == RecordType.TIMER_FIRE]
        fired_positions = [FIRE_BODY.unpack_from(r.body, 0)[0] for r in fires]
        assert len(fired_positions) == len(set(fired_positions))
        # a relocated message fires once, whatever its position: bodies are unique
        delivered = bodies(s, "q") + bodies(s, "r")
        for lmq in ("q", "r"):
            got = bodies(s, lmq)
            assert len(got) == len(set(got)), f"a message fired twice into {lmq}"
        assert not [k for k, _ in s.index.all_items() if k[:1] in (b"W", b"V")]
        assert delivered is not None
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "crash_rate"), [(1, "0"), (2, "0"), (3, "0.01"), (4, "0.01")])
def test_kill_9_while_scheduling_and_firing(tmp_path, monkeypatch, seed, crash_rate):
    """SIGKILL a process that schedules (acknowledged in sync durability) and fires, six
    times: no acknowledged timer is lost, none fires twice, none fires before it is due,
    and each fire reaches both LMQs at the same offsets. With a crash rate the writer
    also kills itself between a batch's log write and its index commit (see
    timer_writer.py), so recovery has fires and changes to replay."""
    monkeypatch.setenv("TIMER_WRITER_CRASH_RATE", crash_rate)
    scheduled: dict[int, int] = {}
    for round_ in range(6):
        for line in killed_writer.run_and_kill(WRITER, tmp_path, seed * 10 + round_, 0.5):
            _, pos, due = line.split()
            scheduled[int(pos)] = int(due)
    assert len(scheduled) > 30
    cfg = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024)
    with MessageStore.open(tmp_path, cfg) as s:
        fires_before = sum(1 for r in s.records_from(0) if r.type == RecordType.TIMER_FIRE)
        assert fires_before > 0  # the kills hit a process that was firing
        if crash_rate != "0":
            assert s.recovery is not None
        s.fire_timers(now=now_ms() + 10_000)
        assert s.timers.pending() == 0
        fires = [r for r in s.records_from(0) if r.type == RecordType.TIMER_FIRE]
        count = Counter(FIRE_BODY.unpack_from(r.body, 0)[0] for r in fires)
        assert not [p for p, n in count.items() if n > 1], "fired twice"
        assert set(scheduled) <= set(count), "lost"
        for r in fires:
            position, _, _, due = FIRE_BODY.unpack_from(r.body, 0)
            assert r.store_ms >= due, "fired early"
            if position in scheduled:
                assert due == scheduled[position]
            assert [name for name, _ in r.dispatch] == ["timers:a", "timers:b"]
        a = [m.record.position for m in s.pull("timers:a", 0, max_count=100_000).messages]
        b = [m.record.position for m in s.pull("timers:b", 0, max_count=100_000).messages]
        assert a == b and len(a) == len(fires) and len(set(a)) == len(a)
        report = s.verify()
        assert report.ok, report.problems


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(topic=names, tag=st.one_of(st.just(""), names), body=st.binary(max_size=300),
       props=st.dictionaries(names, st.binary(max_size=20), max_size=3),
       lmqs=st.lists(names, min_size=1, max_size=4, unique=True),
       position=st.integers(0, 2**40), due=st.integers(0, 2**50))
def test_the_fire_path_reads_and_writes_what_the_full_codec_does(
    topic, tag, body, props, lmqs, position, due
):
    """The burst path's partial read of a delayed record and its direct encoding of the
    fire record agree with decode_record / encode_record_with_tail byte for byte."""
    from broker_core.record import (
        FLAG_DELAYED,
        decode_record,
        dispatch_name,
        encode_dispatch_wire,
        encode_record_with_tail,
    )
    from broker_core.timer_records import fire_fields as _fire_fields
    from broker_core.timer_records import fire_record as _fire_record

    wires = [dispatch_name(n.encode()) for n in lmqs]
    message = Message(topic, body, properties=props or None, tag=tag)
    raw = encode_record_with_tail(position, due, message, encode_dispatch_wire(
        wires, [due] * len(wires)), RecordType.MESSAGE, FLAG_DELAYED)
    full = decode_record(raw, position)
    topic_b, tag_b, body_size, got = _fire_fields(raw, position)
    assert (topic_b.decode(), tag_b.decode(), body_size) == (full.topic, full.tag, len(body))
    assert [w[2:].decode() for w in got] == [n for n, _ in full.dispatch] == lmqs
    fire_body = FIRE_BODY.pack(position, len(raw), len(body), due)
    tail = encode_dispatch_wire(wires, list(range(len(wires))))
    assert _fire_record(position + 7, due, topic_b, tag_b, fire_body, tail) == (
        encode_record_with_tail(position + 7, due, Message(topic, fire_body, tag=tag), tail,
                                RecordType.TIMER_FIRE))
    damaged = bytearray(raw)
    damaged[-9] ^= 1
    with pytest.raises(CorruptRecord):
        _fire_fields(bytes(damaged), position)
    with pytest.raises(CorruptRecord):
        _fire_fields(raw, position + 1)


def test_a_damaged_pending_record_is_cancelled_not_fired(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        due = now_ms() + 60_000
        bad = s.append_delayed(msg(b"bad"), ["q"], due)
        s.append_delayed(msg(b"good"), ["q"], due)
        seg = s.log.segments()[-1]
        with open(seg.path, "r+b") as f:  # a flipped byte in the first record's body
            f.seek(bad.position - seg.base + bad.size - 20)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        s.log._last_read = None
        assert s.fire_timers(now=due) == 2
        assert bodies(s, "q") == [b"good"]
        assert s.timers.pending() == 0
        after = s.records_from(bad.position + bad.size)  # the scan stops at damage
        changes = [r for r in after if r.type == RecordType.TIMER_CHANGE]
        assert len(changes) == 1
