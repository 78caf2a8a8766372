"""FIFO pop (broker_core.fifo): per message group order, a poisoned group blocks only
itself, orderly retries with backoff, dead letters, release, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Message, MessageStore, StoreConfig, UnknownReceipt
from broker_core.clock import now_ms
from broker_core.pop import PoppedMessage
from broker_core.receipts import decode_receipt

from .conftest import SMALL

KEY = "__SHARDINGKEY"
NOW = 10_000_000
CONFIG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024,
                     fifo_retry_backoff_ms=100, fifo_retry_max_backoff_ms=1_000,
                     max_deliveries=4)


def publish(s: MessageStore, groups: list[str | None], lmq: str = "q") -> None:
    """One message per entry, its body ``<group>:<seq in group>``."""
    seen: dict[str | None, int] = {}
    for _, lmq_info in [(0, s.lmq(lmq))]:
        if lmq_info is not None:
            for m in s.pull(lmq, 0, 100_000).messages:
                g = m.record.properties.get(KEY)
                key = g.decode() if g else None
                seen[key] = seen.get(key, 0) + 1
    items = []
    for g in groups:
        n = seen.get(g, 0)
        seen[g] = n + 1
        props = {KEY: g.encode()} if g is not None else {}
        items.append((Message(topic="t", body=f"{g}:{n}".encode(), properties=props), [lmq]))
    s.append_batch(items)


def bodies(popped) -> list[str]:
    return [p.message.record.body.decode() for p in popped]


@pytest.fixture
def fstore(tmp_path: Path):
    s = MessageStore.open(tmp_path / "data", CONFIG)
    yield s
    s.close()


def test_one_message_per_group_until_acked(fstore):
    publish(fstore, ["a", "a", "b", "a", "b", "c"])
    got = fstore.pop.pop_fifo("g", "q", 10, 30_000, KEY, now=NOW)
    assert bodies(got) == ["a:0", "b:0", "c:0"]
    assert fstore.get_offset("g", "q") == 6  # the offset moved on: the rest is parked
    assert fstore.pop.pop_fifo("g", "q", 10, 30_000, KEY, now=NOW) == []
    fstore.pop.ack(got[0].receipt)  # a:0 done: a:1 is next, nothing else
    nxt = fstore.pop.pop_fifo("g", "q", 10, 30_000, KEY, now=NOW)
    assert bodies(nxt) == ["a:1"]
    fstore.pop.ack(got[1].receipt)
    fstore.pop.ack(nxt[0].receipt)
    assert bodies(fstore.pop.pop_fifo("g", "q", 10, 30_000, KEY, now=NOW)) == ["a:2", "b:1"]


def test_messages_without_a_group_are_each_their_own(fstore):
    publish(fstore, [None, None, "a", None, "a"])
    got = fstore.pop.pop_fifo("g", "q", 10, 30_000, KEY, now=NOW)
    assert bodies(got) == ["None:0", "None:1", "a:0", "None:2"]


def test_unacked_head_comes_back_first_after_backoff(fstore):
    publish(fstore, ["a", "a", "b"])
    first = fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW)
    assert bodies(first) == ["a:0", "b:0"]
    fstore.pop.ack(first[1].receipt)
    # a:0's invisible time runs out at NOW+1000; its backoff (100 ms) follows
    assert fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 1_000) == []
    blocked = fstore.pop.blocked_groups("g")
    assert [(b.message_group, b.offset, b.deliveries, b.waiting) for b in blocked] == [
        ("a", 0, 1, 1)]
    assert blocked[0].since_ms == NOW and blocked[0].ready_at == NOW + 1_100
    again = fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 1_100)
    assert bodies(again) == ["a:0"] and again[0].deliveries == 2
    # the backoff doubles: the second retry waits 200 ms
    assert fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 2_100 + 199) == []
    third = fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 2_100 + 200)
    assert bodies(third) == ["a:0"] and third[0].deliveries == 3
    with pytest.raises(UnknownReceipt):
        fstore.pop.ack(first[0].receipt)  # its first receipt is void
    fstore.pop.ack(third[0].receipt)
    assert bodies(fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 3_400)) == ["a:1"]
    assert fstore.pop.blocked_groups() == []


def test_dead_letter_after_max_deliveries_and_the_group_moves_on(fstore):
    publish(fstore, ["a", "a", "b"])
    now = NOW
    got = fstore.pop.pop_fifo("g", "q", 10, 10, KEY, now=now)
    fstore.pop.ack(got[1].receipt)  # b:0
    for delivery in range(2, 5):
        now += 10_000
        got = fstore.pop.pop_fifo("g", "q", 10, 10, KEY, now=now)
        assert bodies(got) == ["a:0"] and got[0].deliveries == delivery
    now += 10_000  # the fourth delivery ran out: max_deliveries = 4 -> the DLQ
    got = fstore.pop.pop_fifo("g", "q", 10, 10, KEY, now=now)
    assert bodies(got) == ["a:1"]
    dlq = fstore.pull("%DLQ%g", 0, 10).messages
    assert [m.record.body for m in dlq] == [b"a:0"]
    assert dlq[0].record.properties["DLQ_DELIVERIES"] == b"4"


def test_change_invisible_time_keeps_the_group_blocked(fstore):
    publish(fstore, ["a", "a"])
    (p,) = fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW)
    new = fstore.pop.change_invisible_time(p.receipt, 60_000)
    assert fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY) == []
    fstore.pop.ack(new)
    assert bodies(fstore.pop.pop_fifo("g", "q", 10, 1_000, KEY)) == ["a:1"]


def test_requeue_makes_the_head_ready_now(fstore):
    publish(fstore, ["a", "a"])
    got = fstore.pop.pop_fifo("g", "q", 10, 60_000, KEY)
    assert fstore.pop.requeue_many([got[0].receipt]) == 1
    again = fstore.pop.pop_fifo("g", "q", 10, 60_000, KEY)
    assert bodies(again) == ["a:0"]
    fstore.pop.ack_many([again[0].receipt, got[0].receipt])  # the stale receipt is ignored
    assert bodies(fstore.pop.pop_fifo("g", "q", 10, 60_000, KEY)) == ["a:1"]


def test_release_sends_the_head_to_the_dlq(fstore):
    publish(fstore, ["a", "a", "a", "b"])
    got = fstore.pop.pop_fifo("g", "q", 10, 60_000, KEY)
    assert bodies(got) == ["a:0", "b:0"]
    assert fstore.pop.release_message_group("g", "q", "zz") is None
    assert fstore.pop.release_message_group("g", "q", "a") == 0
    with pytest.raises(UnknownReceipt):
        fstore.pop.ack(got[0].receipt)  # released: its receipt is void
    assert bodies(fstore.pop.pop_fifo("g", "q", 10, 60_000, KEY)) == ["a:1"]
    assert [m.record.body for m in fstore.pull("%DLQ%g", 0, 10).messages] == [b"a:0"]


def test_state_survives_a_restart(tmp_path):
    path = tmp_path / "data"
    with MessageStore.open(path, CONFIG) as s:
        publish(s, ["a", "a", "b", "b", "c"])
        got = s.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW)
        assert bodies(got) == ["a:0", "b:0", "c:0"]
        s.pop.ack(got[1].receipt)
    with MessageStore.open(path, CONFIG) as s:
        # a:0 and c:0 are in flight still; b:1 was promoted by the ack
        assert bodies(s.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 10)) == ["b:1"]
        again = s.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 1_100)
        assert sorted(bodies(again)) == ["a:0", "c:0"]
        s.pop.ack(again[0].receipt)
        s.pop.ack(again[1].receipt)
    with MessageStore.open(path, CONFIG) as s:
        # a:1 promoted by the ack; b:1 (in flight until NOW+1010) back after its backoff
        got = s.pop.pop_fifo("g", "q", 10, 1_000, KEY, now=NOW + 1_200)
        assert [(p.message.record.body, p.deliveries) for p in got] == [
            (b"a:1", 1), (b"b:1", 2)]


def test_ten_thousand_groups_one_poisoned(tmp_path):
    """One group's head is never acked: every other group's messages are delivered."""
    cfg = StoreConfig(segment_bytes=8 * 1024 * 1024, max_message_bytes=64 * 1024)
    with MessageStore.open(tmp_path / "data", cfg) as s:
        groups = [f"g{i}" for i in range(10_000)]
        s.append_batch([
            (Message(topic="t", body=f"{g}:{n}".encode(), properties={KEY: g.encode()}),
             ["q"]) for n in range(3) for g in groups])
        delivered: dict[str, list[int]] = {}
        poisoned = None
        for _ in range(1000):
            got = s.pop.pop_fifo("c", "q", 32, 600_000, KEY)
            if not got:
                break
            for p in got:
                g, n = p.message.record.body.decode().split(":")
                delivered.setdefault(g, []).append(int(n))
                if g == "g7":
                    poisoned = p  # never acked
                else:
                    s.pop.ack(p.receipt)
        assert poisoned is not None
        assert delivered.pop("g7") == [0]
        assert len(delivered) == 9_999
        assert all(seq == [0, 1, 2] for seq in delivered.values())
        (b,) = s.pop.blocked_groups() or [None]
        assert b is None  # delivered once, still in flight: not blocked yet
        assert s.stats()["fifo_blocked_groups"] == 0


# -- a model of per-group order under random schedules --------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.lists(st.sampled_from(["a", "b", "c", None]),
                                               min_size=1, max_size=5)),
        st.tuples(st.just("pop"), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.integers(0, 10)),
        st.tuples(st.just("nack"), st.integers(0, 10)),
        st.tuples(st.just("time"), st.integers(1, 3_000)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 2)),
        st.tuples(st.just("change"), st.integers(0, 10)),
        st.tuples(st.just("ack_many"), st.integers(0, 10)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_model_order_per_group(tmp_path_factory, ops):
    """Whatever the schedule of publishes, pops, acks, nacks, timeouts and restarts:
    a grouped message is delivered only when every earlier message of its group was
    acked or dead-lettered, at most one message per group is out, and in the end every
    message is acked or dead-lettered exactly once, each group in order."""
    path = tmp_path_factory.mktemp("fifo") / "data"
    s = MessageStore.open(path, CONFIG)
    s.create_lmq("q")
    now = NOW
    done: dict[str, list[int]] = {}  # group -> seqs acked or dead-lettered, in order
    sent: dict[str | None, int] = {}
    outstanding: list = []  # popped, not settled by us
    try:
        def finish(body: str) -> None:
            g, n = body.split(":")
            if g != "None":
                done.setdefault(g, []).append(int(n))

        def dead_lettered() -> None:
            info = s.lmq("%DLQ%g")
            if info is None:
                return
            for m in s.pull("%DLQ%g", dead_lettered.seen, 1000).messages:  # type: ignore[attr-defined]
                finish(m.record.body.decode())
                dead_lettered.seen = m.offset + 1  # type: ignore[attr-defined]
        dead_lettered.seen = 0  # type: ignore[attr-defined]

        def pop(n: int) -> list:
            got = s.pop.pop_fifo("g", "q", n, 1_000, KEY, now=now)
            dead_lettered()
            for p in got:
                g, seq = p.message.record.body.decode().split(":")
                if g == "None":
                    continue
                # every earlier message of its group is done
                assert done.get(g, []) == list(range(int(seq))), (g, seq, done.get(g))
                # no other message of its group is out
                assert all(o.message.record.body.decode().split(":")[0] != g
                           or o.message.offset == p.message.offset for o in outstanding)
            outstanding[:] = [o for o in outstanding
                              if o.message.offset not in {p.message.offset for p in got}]
            outstanding.extend(got)
            return got

        for op, arg in ops:
            if op == "publish":
                for g in arg:
                    sent[g] = sent.get(g, 0) + 1
                publish(s, arg)
            elif op == "pop":
                pop(arg)
            elif op in ("ack", "nack") and outstanding:
                p = outstanding.pop(arg % len(outstanding))
                if op == "ack":
                    try:
                        s.pop.ack(p.receipt)
                        finish(p.message.record.body.decode())
                    except UnknownReceipt:
                        pass  # its invisible time ran out
                else:
                    s.pop.requeue_many([p.receipt])
                    dead_lettered()
            elif op == "release":
                grp = "abc"[arg]
                if s.pop.release_message_group("g", "q", grp) is not None:
                    dead_lettered()
                    outstanding[:] = [o for o in outstanding
                                      if not o.message.record.body.startswith(grp.encode())]
            elif op == "change" and outstanding:
                i = arg % len(outstanding)
                try:
                    new = s.pop.change_invisible_time(outstanding[i].receipt, arg * 300)
                    outstanding[i] = PoppedMessage(outstanding[i].message, new,
                                                   outstanding[i].deliveries)
                except UnknownReceipt:
                    del outstanding[i]
            elif op == "ack_many" and outstanding:
                take = outstanding[: arg + 1]
                del outstanding[: arg + 1]
                live = []
                for p in take:  # which are still in flight: acked, the rest ignored
                    key = decode_receipt(p.receipt)
                    if s.state.get_inflight(key) is not None:
                        live.append(p)
                s.pop.ack_many([p.receipt for p in take])
                for p in live:
                    finish(p.message.record.body.decode())
            elif op == "time":
                now += arg
            elif op == "restart":
                s.close()
                s = MessageStore.open(path, CONFIG)
                outstanding.clear()  # the consumer died with its receipts
        # drain: the consumer acks what it holds, then everything, waiting out
        # invisible times and backoffs
        for p in outstanding:
            try:
                s.pop.ack(p.receipt)
                finish(p.message.record.body.decode())
            except UnknownReceipt:
                pass
        outstanding.clear()
        # (change_invisible_time runs on the store's clock, the rest on the model's)
        now = max(now, now_ms() + 10_000)
        for _ in range(200):
            now += 2_000
            for p in pop(100):
                try:
                    s.pop.ack(p.receipt)
                    finish(p.message.record.body.decode())
                except UnknownReceipt:
                    pass
            outstanding.clear()
        dead_lettered()
        for g, count in sent.items():
            if g is not None:
                assert done.get(g, []) == list(range(count)), (g, done.get(g))
    finally:
        s.close()


def test_small_config_default_store_has_no_fifo_state(store):
    assert store.pop.blocked_groups() == []
    assert SMALL.fifo_scan_limit == 4096


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_group_order_survives_sigkill(tmp_path, seed):
    """kill -9 a FIFO consumer-and-producer three times: per message group, deliveries
    (before and after each restart, then a drain) go n, n again (a redelivery) or n+1,
    never back and never skipping; an acknowledged ack is never delivered again; every
    acknowledged publish is delivered."""
    from . import fifo_writer, killed_writer

    writer = Path(fifo_writer.__file__)
    lines: list[tuple[str, str]] = []
    for round_ in range(3):
        for line in killed_writer.run_and_kill(writer, tmp_path, seed * 10 + round_,
                                               run_for=0.8 + 0.4 * round_):
            kind, body = line.split()
            lines.append((kind, body))
    assert sum(kind == "ACK" for kind, _ in lines) > 20
    with MessageStore.open(tmp_path, fifo_writer.CONFIG) as s:
        far = 1 << 50
        for _ in range(10_000):
            got = s.pop.pop_fifo("c", "q", 64, 1_000, KEY, now=far)
            if not got:
                break
            for p in got:
                lines.append(("GOT", p.message.record.body.decode()))
                s.pop.ack(p.receipt)
                lines.append(("ACK", p.message.record.body.decode()))
    last: dict[str, int] = {}
    acked: set[str] = set()
    published: dict[str, int] = {}
    for kind, body in lines:
        g, n = body.split(":")
        if kind == "PUB":
            published[g] = max(published.get(g, -1), int(n))
        elif kind == "GOT":
            assert body not in acked, f"{body} delivered after its ack"
            assert int(n) in (last.get(g, -1), last.get(g, -1) + 1), (body, last.get(g))
            last[g] = int(n)
        else:
            acked.add(body)
    for g, n in published.items():
        assert last.get(g, -1) >= n, (g, n, last.get(g))


def test_the_backlog_is_read_once_whatever_is_blocked(fstore):
    """A poisoned group does not make pops read the log again: across a whole drain
    every message is read from the LMQ once (delivered or parked), plus one read per
    redelivery of a head (counted by wrapping the store's own reader)."""
    groups = [f"g{i}" for i in range(20)]
    fstore.append_batch([
        (Message(topic="t", body=f"{g}:{n}".encode(), properties={KEY: g.encode()}), ["q"])
        for n in range(50) for g in groups])
    consumer = fstore.pop
    reads = {"pulled": 0, "at": 0}
    pull, read_at = consumer.reader.pull, consumer.reader.read_at

    class Counting:
        def __getattr__(self, name):
            return getattr(fstore, name)

        def pull(self, *a, **k):
            result = pull(*a, **k)
            reads["pulled"] += len(result.messages)
            return result

        def read_at(self, *a, **k):
            reads["at"] += 1
            return read_at(*a, **k)

    consumer.reader = Counting()  # type: ignore[assignment]
    delivered = 0
    poisoned = None
    for _ in range(1000):
        got = fstore.pop.pop_fifo("c", "q", 8, 600_000, KEY, now=NOW)
        if not got:
            break
        for p in got:
            delivered += 1
            if p.message.record.body.startswith(b"g3:"):
                poisoned = p  # never acked (yet): g3's 49 others are parked
            else:
                fstore.pop.ack(p.receipt)
    assert delivered == 19 * 50 + 1 and poisoned is not None
    assert reads["pulled"] == 1000  # each stored message read once
    assert reads["at"] == 0
    fstore.pop.ack(poisoned.receipt)  # g3 unblocked: its parked messages follow in order
    seq = []
    while got := fstore.pop.pop_fifo("c", "q", 8, 600_000, KEY, now=NOW):
        assert len(got) == 1
        seq.append(int(got[0].message.record.body.split(b":")[1]))
        fstore.pop.ack(got[0].receipt)
    assert seq == list(range(1, 50))
    assert reads["pulled"] == 1000  # none read from the LMQ again
    assert reads["at"] == 49  # each parked message read once, when its turn came
    assert fstore.pop.pop_fifo("c", "q", 8, 600_000, KEY, now=NOW) == []
    assert reads["pulled"] == 1000
