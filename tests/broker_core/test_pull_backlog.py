"""Pulling an offline backlog from disk (not the hot tail): LMQs whose records are
interleaved in the log (one read per record) and LMQs whose records are adjacent (one
coalesced read), across several segments. Offsets exact, every record CRC-checked, the
decoded-record cache bounded."""

from __future__ import annotations

import os

import pytest

from broker_core import CorruptRecord, MessageStore, StoreConfig, reads, tail_cache
from broker_core.record import Message, PlainMessage, Protocol, RawMessage, raw_properties

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


def _drain(s: MessageStore, name: str, batch: int = 256, plain: bool = False) -> list:
    """Every message of ``name`` by pull (or pull_plain), checking offsets are dense."""
    pull = s.pull_plain if plain else s.pull
    out, offset = [], 0
    while True:
        r = pull(name, offset, max_count=batch)
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
        assert len(s.tail.records) <= tail_cache.RECORD_CACHE


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
        s.tail.clear_records()  # read it from disk again
        _flip(s, victim.record.position + 60)
        if cfg.on_corrupt == "refuse":
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                _drain(s, name)
            # the records before and after it are served
            assert len(s.pull(name, 0, max_count=300).messages) == 300
            assert s.pull(name, 301, max_count=500).messages[0].offset == 301
        else:
            assert _offsets_read(s, name) == [k for k in range(PER_LMQ) if k != 300]
            assert s.corrupt_reads == 1


# -- pull_plain: the same backlog, plain records left undecoded --------------------------


def _offsets_read(s: MessageStore, name: str, plain: bool = False) -> list[int]:
    """The offsets a reader of ``name`` is served, pulling until it stops advancing
    (gaps allowed: a record skipped under ``on_corrupt = "skip"``)."""
    pull = s.pull_plain if plain else s.pull
    offsets, offset = [], 0
    while True:
        r = pull(name, offset, max_count=256)
        if r.next_offset == offset:
            return offsets
        offsets.extend(m.offset for m in r.messages)
        offset = r.next_offset


def _drain_plain(s: MessageStore, name: str, batch: int = 256) -> list:
    return _drain(s, name, batch, plain=True)


def _as_pulled(m) -> tuple:
    """(offset, qos, retain, topic, body) of a PlainMessage or a StoredMessage."""
    if isinstance(m, PlainMessage):
        return (m.offset, m.qos, m.retain, m.topic.decode(), m.body)
    r = m.record
    return (m.offset, r.qos, r.retain, r.topic, r.body)


def test_pull_plain_reads_what_pull_reads(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        # records pull_plain must decode in full: properties, a tag, AMQP
        s.append_batch(
            [
                (Message("run", b"p", properties={"k": b"v"}, qos=1), ["run"]),
                (Message("run", b"t", tag="x"), ["run"]),
                (Message("run", b"a", protocol=Protocol.AMQP, retain=True), ["run"]),
                (Message("run", b"z", qos=2, retain=True, protocol=Protocol.MQTT), ["run"]),
            ]
        )
        for name in [f"bl/{i}" for i in range(0, N_LMQS, 7)] + ["run"]:
            s.tail.clear_records()
            want = [_as_pulled(m) for m in _drain(s, name, 100)]
            got = _drain_plain(s, name, 100)
            assert [_as_pulled(m) for m in got] == want
        kinds = [type(m).__name__ for m in got[-4:]]
        assert kinds == ["StoredMessage", "StoredMessage", "StoredMessage", "PlainMessage"]
        assert all(isinstance(m, PlainMessage) for m in got[:-4])


def test_pull_plain_budget_and_empty(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        for max_bytes in (1, 250, 400):
            r = s.pull_plain("bl/3", 10, max_count=50, max_bytes=max_bytes)
            want = s.pull("bl/3", 10, max_count=50, max_bytes=max_bytes)
            assert [m.offset for m in r.messages] == [m.offset for m in want.messages]
            assert r.next_offset == want.next_offset == 10 + len(want.messages)
        r = s.pull_plain("bl/3", PER_LMQ, max_count=50)
        assert r.messages == [] and r.next_offset == PER_LMQ


@pytest.mark.parametrize("cfg", [SMALL, SKIP], ids=["refuse", "skip"])
def test_a_damaged_record_is_never_served_by_pull_plain(tmp_path, cfg):
    with MessageStore.open(tmp_path / "data", cfg) as s:
        _fill(s)
        victim = s.pull("bl/7", 300, max_count=1).messages[0]
        _flip(s, victim.record.position + 60)
        if cfg.on_corrupt == "refuse":
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                _drain_plain(s, "bl/7")
            assert len(s.pull_plain("bl/7", 0, max_count=300).messages) == 300
            assert s.pull_plain("bl/7", 301, max_count=500).messages[0].offset == 301
        else:
            assert _offsets_read(s, "bl/7", plain=True) == [k for k in range(PER_LMQ) if k != 300]
            assert s.corrupt_reads == 1


def test_index_spans_are_the_entries(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        meta = s.index.meta_by_name("bl/4")
        for start, stop, count in [(0, PER_LMQ, 50), (390, PER_LMQ, 50), (5, 9, 50), (3, 300, 0)]:
            want = list(s.index.entries(meta.id, start, stop))[:count]
            assert s.index.spans(meta.id, start, stop, count) == (
                [e.offset for e in want],
                [e.position for e in want],
                [e.record_size for e in want],
                [e.body_size for e in want],
            )


# -- pull_raw: the same backlog, message records checked and left as stored bytes -----


def _drain_raw(s: MessageStore, name: str, batch: int = 256) -> list:
    out, offset = [], 0
    while True:
        r = s.pull_raw(name, offset, max_count=batch)
        if not r.messages:
            assert r.next_offset == offset
            return out
        assert [m.offset for m in r.messages] == list(range(offset, offset + len(r.messages)))
        out.extend(r.messages)
        offset = r.next_offset


def _raw_as_record(m) -> tuple:
    """The fields a RawMessage leaves as bytes, decoded, or the same of a StoredMessage."""
    if isinstance(m, RawMessage):
        props = {k.decode(): v for k, v in raw_properties(m.properties).items()}
        return (m.offset, m.position, m.protocol, m.store_ms, m.born_ms, m.topic.decode(),
                m.tag.decode(), props, m.body)
    r = m.record
    return (m.offset, r.position, int(r.protocol), r.store_ms, r.born_ms, r.topic, r.tag,
            r.properties, r.body)


def test_pull_raw_reads_what_pull_reads(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        s.append_batch(
            [
                (Message("run", b"p", properties={"k": b"v", "": b"", "long": bytes(300)},
                         qos=1, tag="x", origin="me"), ["run"]),
                (Message("run", b"a", protocol=Protocol.AMQP, retain=True), ["run"]),
                (Message("run", b"", protocol=Protocol.MQTT, born_ms=5), ["run"]),
            ]
        )
        for name in [f"bl/{i}" for i in range(0, N_LMQS, 7)] + ["run"]:
            for batch in (1, 48, 256):
                s.tail.clear_records()
                want = [_raw_as_record(m) for m in _drain(s, name, batch)]
                got = _drain_raw(s, name, batch)
                assert all(isinstance(m, RawMessage) for m in got)
                assert [_raw_as_record(m) for m in got] == want
        assert got[-3].properties and raw_properties(got[-3].properties)[b"long"] == bytes(300)


def test_pull_raw_reads_records_far_apart_one_by_one(tmp_path, monkeypatch):
    """One read of the span when the records are close, one pread each when they are
    not (the span over SPAN_FACTOR times their bytes); the same messages either way."""
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        each = []
        monkeypatch.setattr(s.log, "read_each", lambda p, z: each.append(len(p)) or
                            type(s.log).read_each(s.log, p, z))
        want = [_raw_as_record(m) for m in _drain(s, "bl/3", 40)]
        # 30 LMQs interleaved: a pull's span is ~30x its records' bytes
        assert [_raw_as_record(m) for m in _drain_raw(s, "bl/3", 40)] == want
        assert sum(each) == PER_LMQ
        each.clear()
        monkeypatch.setattr(reads, "SPAN_FACTOR", 32)
        assert [_raw_as_record(m) for m in _drain_raw(s, "bl/3", 40)] == want
        assert each == []


def test_pull_raw_budget_and_hot_tail(tmp_path):
    with MessageStore.open(tmp_path / "data", SMALL) as s:
        _fill(s)
        for max_bytes in (1, 250, 400):
            r = s.pull_raw("bl/3", 10, max_count=50, max_bytes=max_bytes)
            want = s.pull("bl/3", 10, max_count=50, max_bytes=max_bytes)
            assert [m.offset for m in r.messages] == [m.offset for m in want.messages]
            assert r.next_offset == want.next_offset == 10 + len(want.messages)
        assert s.pull_raw("bl/3", PER_LMQ, max_count=50).messages == []
        remove = s.add_listener("hot", lambda *_: None)
        s.append_batch([(Message("hot", b"h%d" % k), ["hot"]) for k in range(5)])
        hot = s.pull_raw("hot", 1, max_count=10).messages  # served decoded, from memory
        assert [type(m).__name__ for m in hot] == ["StoredMessage"] * 4
        assert [m.body for m in hot] == [b"h1", b"h2", b"h3", b"h4"]
        remove()


@pytest.mark.parametrize("cfg", [SMALL, SKIP], ids=["refuse", "skip"])
@pytest.mark.parametrize("name", ["bl/7", "run"], ids=["interleaved", "adjacent"])
def test_a_damaged_record_is_never_served_by_pull_raw(tmp_path, cfg, name):
    with MessageStore.open(tmp_path / "data", cfg) as s:
        _fill(s)
        victim = s.pull(name, 300, max_count=1).messages[0]
        _flip(s, victim.record.position + 60)
        if cfg.on_corrupt == "refuse":
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                _drain_raw(s, name)
            assert len(s.pull_raw(name, 0, max_count=300).messages) == 300
            assert s.pull_raw(name, 301, max_count=500).messages[0].offset == 301
        else:
            offsets, offset = [], 0
            while (r := s.pull_raw(name, offset, max_count=64)).next_offset != offset:
                offsets.extend(m.offset for m in r.messages)
                offset = r.next_offset
            assert offsets == [k for k in range(PER_LMQ) if k != 300]
            assert s.corrupt_reads == 1


def test_raw_properties_refuses_overruns():
    block = b"\x00\x01k\x00\x00\x00\x02v"  # the value claims 2 bytes, 1 is there
    with pytest.raises(CorruptRecord):
        raw_properties(block)
    with pytest.raises(CorruptRecord):
        raw_properties(b"\x00\x05ab")
    assert raw_properties(b"\x00\x01k\x00\x00\x00\x01v\x00\x00\x00\x00\x00\x00") == {
        b"k": b"v", b"": b""}
