"""The store's side of replication (broker_core.replication): a slave applying a
master's chunks holds the same bytes at the same positions and derives the same index;
a fenced store writes nothing; a returning member's log is cut where the master's
history says."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig, StoreError
from broker_core.errors import CorruptRecord, NotMaster
from broker_core.replication import Epoch, load_epochs
from protocol.replication import EpochEntry, divergence

SMALL = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024)


@contextmanager
def _pair(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    """A master of epoch 1 and its fenced slave (empty stores), closed at the end."""
    master = MessageStore.open(tmp_path / "m", SMALL)
    slave = MessageStore.open(tmp_path / "s", SMALL)
    try:
        assert master.replica is not None and slave.replica is not None
        master.replica.become_master(1)
        slave.replica.fence("a slave")
        yield master, slave
    finally:
        master.close()
        slave.close()


def _copy_all(master: MessageStore, slave: MessageStore, max_bytes: int = 5000) -> None:
    """What the gateway's stream does: chunks from the slave's end until it has all."""
    assert master.replica is not None and slave.replica is not None
    while slave.log_end < master.log_end:
        epoch, data = master.replica.chunk(slave.log_end, max_bytes)
        slave.replica.apply(slave.log_end, epoch, data)


def _segment_bytes(store: MessageStore) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((store.data_dir / "commitlog").iterdir()))


def test_slave_holds_the_same_bytes_and_index(tmp_path: Path) -> None:
    with _pair(tmp_path) as (master, slave):
        assert master.replica is not None and slave.replica is not None
        for i in range(300):  # several segments
            master.append(
                Message(topic="t", body=b"x" * (i % 700), properties={"KEYS": b"k%d" % i}),
                ["q1", "q2"] if i % 3 else ["q3"],
            )
        due = master.delay_level_due(1) + 3_600_000
        delayed = master.append_delayed(Message(topic="t", body=b"later"), ["q9"], due)
        half = master.append_half(Message(topic="t", body=b"half"), ["q1"], "pg")
        _copy_all(master, slave)
        master.end_transaction(half.position, True)
        master.append(Message(topic="t", body=b"after"), ["q2"])
        _copy_all(master, slave)
        assert slave.log_end == master.log_end
        assert _segment_bytes(slave) == _segment_bytes(master)
        for lmq in ("q1", "q2", "q3"):
            a = master.pull(lmq, 0, 1000)
            b = slave.pull(lmq, 0, 1000)
            assert [(m.offset, m.body) for m in a.messages] == [
                (m.offset, m.body) for m in b.messages
            ]
        assert slave.timers.pending() == master.timers.pending() == 1
        assert slave.pending_timer(delayed.position) is not None
        assert [r.position for r in slave.find_by_key("t", "k7")] == [
            r.position for r in master.find_by_key("t", "k7")
        ]
        assert slave.transaction_outcome(half.position) == master.transaction_outcome(half.position)
        assert slave.verify().ok
        assert slave.replica.epochs == [Epoch(1, 0)]
        # the slave's own writes are refused, nothing written
        end = slave.log_end
        with pytest.raises(NotMaster):
            slave.append(Message(topic="t", body=b"no"), ["q1"])
        assert slave.fire_timers(now=due + 1) == 0
        assert slave.log_end == end


def test_apply_refuses_bad_chunks_and_writes_nothing(tmp_path: Path) -> None:
    master = MessageStore.open(tmp_path / "m", SMALL)
    slave = MessageStore.open(tmp_path / "s", SMALL)
    try:
        assert master.replica is not None and slave.replica is not None
        master.replica.become_master(2)
        for i in range(5):
            master.append(Message(topic="t", body=b"m%d" % i), ["q"])
        epoch, data = master.replica.chunk(0, 1 << 20)
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        with pytest.raises(CorruptRecord):
            slave.replica.apply(0, epoch, bytes(flipped))
        with pytest.raises(CorruptRecord):  # torn: a chunk ending inside a record
            slave.replica.apply(0, epoch, data[:-3])
        with pytest.raises(StoreError, match="this log ends at 0"):  # a gap
            slave.replica.apply(len(data), epoch, data)
        assert slave.log_end == 0
        slave.replica.apply(0, epoch, data)
        with pytest.raises(StoreError, match="older than"):
            slave.replica.apply(slave.log_end, 1, data)
        assert slave.log_end == len(data)
        assert [m.body for m in slave.pull("q", 0, 10).messages] == [b"m%d" % i for i in range(5)]
    finally:
        master.close()
        slave.close()


def test_returning_master_is_cut_to_the_new_epoch_start(tmp_path: Path) -> None:
    """A (old master, epoch 1) and B (slave) share a prefix; A writes more that B never
    got, B becomes master of epoch 2 and writes; A returns: cut at epoch 2's start, then
    it tails B and holds B's bytes exactly, its index rebuilt for the cut range."""
    a = MessageStore.open(tmp_path / "a", SMALL)
    b = MessageStore.open(tmp_path / "b", SMALL)
    try:
        assert a.replica is not None and b.replica is not None
        a.replica.become_master(1)
        b.replica.fence("slave")
        for i in range(20):
            a.append(Message(topic="t", body=b"common%d" % i), ["q"])
        _copy_all(a, b)
        for i in range(7):  # never replicated
            a.append(Message(topic="t", body=b"lost%d" % i), ["q", "only-a"])
        b.replica.become_master(2)
        for i in range(3):
            b.append(Message(topic="t", body=b"new%d" % i), ["q"])
        a.replica.fence("slave again")
        cut = divergence(
            [EpochEntry(*e) for e in b.replica.epochs],
            b.log_end,
            [EpochEntry(*e) for e in a.replica.epochs],
            a.log_end,
        )
        assert cut == b.replica.epochs[-1].start < a.log_end
        assert a.replica.truncate(cut) > 0
        _copy_all(b, a)
        assert _segment_bytes(a) == _segment_bytes(b)
        assert [m.body for m in a.pull("q", 0, 100).messages] == [
            m.body for m in b.pull("q", 0, 100).messages
        ]
        assert a.lmq("only-a") is None  # it existed only in the cut tail
        assert a.verify().ok
        assert a.replica.epochs == [Epoch(1, 0), Epoch(2, cut)]
        a.close()
        assert load_epochs(tmp_path / "a", 10**9) == [Epoch(1, 0), Epoch(2, cut)]
    finally:
        a.close()
        b.close()


def test_consumer_state_ships_beside_the_log(tmp_path: Path) -> None:
    """Offsets, pop state and metadata: a snapshot, then every change in write order;
    a fenced slave writes none of its own."""
    with _pair(tmp_path) as (master, slave):
        assert master.replica is not None and slave.replica is not None
        for i in range(10):
            master.append(Message(topic="t", body=b"m%d" % i), ["q"])
        master.commit_offset("g0", "q", 3)
        master.put_meta("topic/t", b"config")
        snapshot = master.replica.state_snapshot()
        shipped: list = []
        master.replica.ship_state(shipped.append)
        master.commit_offsets("g1", {"q": 5})
        popped = master.pop.pop("pg", "q", 2, 60_000)
        master.pop.ack(popped[0].receipt)
        master.delete_meta("topic/t")
        master.put_meta("topic/u", b"other")
        _copy_all(master, slave)
        slave.replica.apply_state([(0, k, v) for k, v in snapshot], wipe=True)
        for ops in shipped:
            slave.replica.apply_state(ops, wipe=False)
        assert master.replica.state_snapshot() == slave.replica.state_snapshot()
        assert slave.get_offset("g1", "q") == 5 and slave.get_offset("g0", "q") == 3
        assert slave.get_meta("topic/t") is None and slave.get_meta("topic/u") == b"other"
        with pytest.raises(NotMaster):
            slave.commit_offset("g2", "q", 1)
        assert slave.pop.revive() == 0
        # promoted, the slave pops where the master left off: the unacked one comes back
        # after its invisible time, the next fresh one is offset 2
        slave.replica.become_master(2)
        again = slave.pop.pop("pg", "q", 1, 60_000)
        assert [m.message.offset for m in again] == [2]


def test_a_slave_read_before_the_state_arrived_revives_once_promoted(tmp_path: Path) -> None:
    """What a slave answers before its master's pop state arrives (its statistics: the
    blocked FIFO groups; the gateway reads them at start) must not leave it with empty
    in-flight tables: promoted, it revives the messages popped on the master."""
    with _pair(tmp_path) as (master, slave):
        assert master.replica is not None and slave.replica is not None
        slave.stats()  # what the gateway reads at its start (the blocked FIFO groups too)
        assert slave.pop.blocked_groups() == []
        shipped: list = []
        snapshot = master.replica.state_snapshot()
        master.replica.ship_state(shipped.append)
        for i in range(4):
            master.append(Message(topic="t", body=b"m%d" % i), ["q"])
        popped = master.pop.pop("pg", "q", 2, 1_000, now=1_000)
        assert len(popped) == 2
        _copy_all(master, slave)
        slave.replica.apply_state([(0, k, v) for k, v in snapshot], wipe=True)
        for ops in shipped:
            slave.replica.apply_state(ops, wipe=False)
        slave.replica.become_master(2)
        assert slave.pop.next_revive_at() == 2_000
        assert slave.pop.revive(now=2_000) == 2
        again = slave.pop.pop("pg", "q", 4, 60_000, now=2_000)
        assert sorted(m.message.offset for m in again) == [0, 1, 2, 3]


def _retained_pair(tmp_path: Path, known: str = "") -> tuple[MessageStore, MessageStore]:
    """A master (epoch 1) holding 1,500 messages in nine 64 KiB segments, under a
    192 KiB retention not yet applied, and an empty fenced slave (that knew the empty
    LMQ ``known``, when given)."""
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=192 * 1024)
    master = MessageStore.open(tmp_path / "m", cfg)
    slave = MessageStore.open(tmp_path / "s", cfg)
    assert master.replica is not None and slave.replica is not None
    master.replica.become_master(1)
    if known:
        slave.create_lmq(known)
    slave.replica.fence("slave")
    for i in range(1500):
        master.append(Message(topic="t", body=b"%d-" % i + b"x" * 300), ["q"])
    return master, slave


def test_a_new_slave_starts_at_the_masters_log_start(tmp_path: Path) -> None:
    """Retention removed the master's first segments: an empty slave starts its log at
    the master's log start and then holds the same bytes at the same positions."""
    # "q": an LMQ the slave knew (empty) before its first record
    master, slave = _retained_pair(tmp_path, known="q")
    try:
        assert master.replica is not None and slave.replica is not None
        master.apply_retention()
        start = master.log_start
        assert start > 0
        slave.replica.start_at(start)
        assert slave.log_start == slave.log_end == start
        _copy_all(master, slave)
        assert _segment_bytes(slave) == _segment_bytes(master)
        first = master.lmq("q")
        assert first is not None
        a = master.pull("q", first.min_offset, 1000)
        b = slave.pull("q", first.min_offset, 1000)
        assert [(m.offset, m.body) for m in b.messages] == [(m.offset, m.body) for m in a.messages]
        assert slave.verify().ok
        with pytest.raises(StoreError, match="only an empty log"):
            slave.replica.start_at(start * 2)
    finally:
        master.close()
        slave.close()


def test_a_slave_trims_to_the_masters_log_start(tmp_path: Path) -> None:
    """Retention on the master, then the master's log start given to the slave
    (a TRIM frame): the slave removes the same segments (it rolled where the master
    did: apply once let a chunk overfill a segment, so the files differed) and its LMQs
    start where the master's do; the active segment is never removed."""
    master, slave = _retained_pair(tmp_path)
    try:
        _copy_all(master, slave)
        master.apply_retention()
        assert master.log_start > 0
        assert slave.replica is not None
        assert slave.replica.trim_to(master.log_start) > 0
        assert slave.log_start == master.log_start
        assert _segment_bytes(slave) == _segment_bytes(master)
        a, b = master.lmq("q"), slave.lmq("q")
        assert a is not None and b is not None and b.min_offset == a.min_offset > 0
        pulled = slave.pull("q", 0, 10)
        assert pulled.messages and pulled.messages[0].offset == a.min_offset
        assert slave.verify().ok
        assert slave.replica.trim_to(master.log_start) == 0  # nothing more to remove
        end = slave.log_end
        slave.replica.trim_to(end)  # never the active segment
        assert slave.log_end == end and len(list((slave.data_dir / "commitlog").iterdir())) == 1
    finally:
        master.close()
        slave.close()
