"""Pulling an offline backlog from disk (not the hot tail): LMQs whose records are
interleaved in the log (one read per record) and LMQs whose records are adjacent (one
coalesced read), across several segments. Offsets exact, every record CRC-checked, the
decoded-record cache bounded."""

from __future__ import annotations

import os

import pytest

from broker_core import CorruptRecord, MessageStore, StoreConfig
from broker_core import store as store_mod
from broker_core.record import Message

from .conftest import SMALL

SKIP = StoreConfig(
    segment_bytes=SMALL.segment_bytes, max_message_bytes=SMALL.max_message_bytes, on_corrupt="skip"
)
N_LMQS = 30
PER_LMQ = 400


def _fill(s: MessageStore) -> None:
    """``N_LMQS`` interleaved LMQs (``bl/i``), then one LMQ written in a run (``run``)."""
    items = []
    for j in range(N_LMQS * PER_LMQ):
        i = j % N_LMQS
        body = b"%d:%d" % (i, j // N_LMQS) + bytes(80)
        items.append((Message(f"bl/{i}", body, qos=1), [f"bl/{i}"]))
        if len(items) == 500:
            s.append_batch(items)
            items = []
    s.append_batch(items)
    s.append_batch([(Message("run", b"r%d" % k), ["run"]) for k in range(PER_LMQ)])


def _drain(s: MessageStore, name: str, batch: int = 256) -> list:
    out, offset = [], 0
    while True:
        r = s.pull(name, offset, max_count=batch)
        if not r.messages:
            assert r.next_offset == offset
            return out
        assert [m.offset for m in r.messages] == list(range(offset, offset + len(r.messages)))
        out.extend(r.messages)
        offset = r.next_offset


def test_backlog_of_interleaved_lmqs_is_read_exactly(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        assert len(s.log.segments()) > 3  # the reads cross segments
        for i in range(N_LMQS):
            got = _drain(s, f"bl/{i}")
            assert [m.body[: m.body.index(b"\0")] for m in got] == [
                b"%d:%d" % (i, k) for k in range(PER_LMQ)
            ]
            assert all(
                m.record.qos == 1 and m.record.dispatch == ((f"bl/{i}", m.offset),) for m in got
            )
        assert [m.body for m in _drain(s, "run", 100)] == [b"r%d" % k for k in range(PER_LMQ)]
        assert len(s._records) <= store_mod._RECORD_CACHE


def _flip(s: MessageStore, position: int) -> None:
    seg = next(g for g in s.log.segments() if g.base <= position < g.end)
    with open(seg.path, "r+b") as f:
        f.seek(position - seg.base)
        byte = f.read(1)
        f.seek(position - seg.base)
        f.write(bytes([byte[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


@pytest.mark.parametrize("cfg", [SMALL, SKIP], ids=["refuse", "skip"])
@pytest.mark.parametrize("name", ["bl/7", "run"], ids=["interleaved", "adjacent"])
def test_a_damaged_record_in_a_backlog_is_never_served(tmp_path, cfg, name):
    with MessageStore.open(tmp_path / "data", cfg) as s:
        _fill(s)
        victim = s.pull(name, 300, max_count=1).messages[0]
        s._records.clear()  # read it from disk again
        _flip(s, victim.record.position + 60)
        if cfg.on_corrupt == "refuse":
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                _drain(s, name)
            # the records before and after it are served
            assert len(s.pull(name, 0, max_count=300).messages) == 300
            assert s.pull(name, 301, max_count=500).messages[0].offset == 301
        else:
            offsets, offset = [], 0
            while True:
                r = s.pull(name, offset, max_count=256)
                if r.next_offset == offset:
                    break
                offsets.extend(m.offset for m in r.messages)
                offset = r.next_offset
            assert offsets == [k for k in range(PER_LMQ) if k != 300]
            assert s.corrupt_reads == 1
