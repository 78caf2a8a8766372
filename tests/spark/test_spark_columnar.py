"""The columnar decoder (spark/columnar.py) against the record-at-a-time reader.

``broker_core.record.decode_record`` is the definition of a record; the row reader
(:func:`spark.reader.scan_range`, ``decoder="rows"``) walks a log with it. Here the
two readers read the same bytes, split into the same byte ranges, and must return the
same rows and the same report: on every record kind, with the window and ``$SYS``
filters, and on damaged bytes (Hypothesis: flipped bytes, cuts, junk, and records
forged with a valid CRC around impossible contents). No Spark session: plain Python.
"""

from __future__ import annotations

import os
import struct

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402
from crc32c import crc32c  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broker_core.record import (  # noqa: E402
    FLAG_DELAYED,
    MAGIC,
    Message,
    Protocol,
    RecordType,
    encode_dispatch,
    encode_record_with_tail,
)
from broker_core.timer_records import FIRE_BODY  # noqa: E402
from broker_core.transactions import CONTROL, Action  # noqa: E402
from spark import columnar  # noqa: E402
from spark import reader as R  # noqa: E402
from spark.schema import SEGMENT_TASK_SCHEMA  # noqa: E402

T0 = 1_714_564_800_000
_TASK_FIELDS = [f.name for f in SEGMENT_TASK_SCHEMA.fields]


def _record(position: int, i: int) -> bytes:
    """Record ``i`` of a log that has every kind of record, at ``position``."""
    kind = i % 12
    store = T0 + i * 1000
    lmqs = [(f"q{(i + j) % 7}".encode(), i + j) for j in range(i % 5)]
    msg = Message(
        topic=f"site/{i % 3}/dev{i % 5}/t" if kind != 9 else "$SYS/broker/uptime",
        body=bytes(i % 50),
        origin=f"dev{i % 5}" if kind != 9 else "$SYS",
        qos=i % 3,
        retain=i % 4 == 0,
        protocol=Protocol(i % 3),
        born_ms=store - 3 if i % 2 else 0,
    )
    flags = 0
    rtype = RecordType.MESSAGE
    if kind == 1:
        msg.tag = "tag-" + str(i)
    elif kind == 2:
        msg.properties = {"k": b"v" * (i % 4), "ü": b""}
    elif kind == 3:  # delayed: the dispatch list names LMQs with due times
        flags = FLAG_DELAYED
    elif kind == 4:
        rtype = RecordType.TXN_HALF
    elif kind == 5:  # the fire of the delayed message written 2 records before
        rtype = RecordType.TIMER_FIRE
        msg = Message(topic=msg.topic, body=FIRE_BODY.pack(position - 1, 1, 2, store))
    elif kind == 6:
        action = (Action.COMMIT, Action.ROLLBACK, Action.CHECK, Action.DEAD_LETTER)[i % 4]
        rtype = RecordType.TXN_CONTROL
        msg = Message(topic=msg.topic, body=CONTROL.pack(position - 2, 10, 3, 7, action))
    elif kind == 7:
        rtype = RecordType.LMQ_REMOVAL
    elif kind == 8:
        rtype = RecordType((RecordType.TIMER_CHANGE, RecordType.ORIGIN_ADVANCE)[i % 2])
    elif kind == 10:
        lmqs = [(f"wide{j}".encode(), j) for j in range(40)]
    return encode_record_with_tail(position, store, msg, encode_dispatch(lmqs), rtype, flags)


def forged(position: int, rest: bytes, rtype: int = 1, proto: int = 1) -> bytes:
    """A record-shaped byte string with a valid size, magic, CRC and position around
    arbitrary contents (lengths, strings, dispatch list): decode_record decides."""
    body = bytes([rtype, proto, 0, 0]) + struct.pack(">QQQ", position, T0, T0) + rest
    return struct.pack(">III", 12 + len(body), MAGIC, crc32c(body)) + body


def write_log(tmp_path, records: list[bytes], segment_bytes: int) -> str:
    """Segments of at most ``segment_bytes`` (a record never spans two)."""
    log = tmp_path / "commitlog"
    log.mkdir(parents=True, exist_ok=True)
    for old in log.iterdir():
        old.unlink()
    position, used, fh = 0, 0, None
    try:
        for raw in records:
            if fh is None or used + len(raw) > segment_bytes:
                if fh is not None:
                    fh.close()
                fh = open(log / f"{position:020d}.log", "wb")  # noqa: SIM115
                used = 0
            fh.write(raw)
            used += len(raw)
            position += len(raw)
    finally:
        if fh is not None:
            fh.close()
    return str(tmp_path)


def build(n: int) -> list[bytes]:
    out, position = [], 0
    for i in range(n):
        raw = _record(position, i)
        out.append(raw)
        position += len(raw)
    return out


def read(data_dir: str, split: int, flt: R.ReadFilter, rows: bool, monkeypatch):
    schema = R.arrow_raw_schema()
    batches, reports = [], []
    for values in R.plan_tasks(R.list_segments(data_dir), split):
        task = dict(zip(_TASK_FIELDS, values, strict=True))
        with open(task["path"], "rb") as fh:
            data = fh.read()
        for batch in R.scan_task(data, task, flt, schema, "rows" if rows else "columnar"):
            if batch.column("report").null_count == len(batch):
                batches.append(batch)
            else:
                reports += batch.column("report").to_pylist()
    table = pa.Table.from_batches(batches, schema=schema).drop_columns(["report"])
    table = table.sort_by([("position", "ascending"), ("kind", "ascending")])
    return table, reports


def assert_same(data_dir: str, split: int, flt: R.ReadFilter, monkeypatch) -> None:
    want_rows, want_report = read(data_dir, split, flt, True, monkeypatch)
    got_rows, got_report = read(data_dir, split, flt, False, monkeypatch)
    assert got_report == want_report
    assert got_rows.to_pylist() == want_rows.to_pylist()
    assert got_rows.schema == want_rows.schema


@pytest.fixture(params=["c", "python"])
def walker(request, monkeypatch):
    """The C walk (spark/_walk.c, when built) and its Python twin."""
    if request.param == "c":
        try:
            from spark import _walk
        except ImportError:
            pytest.skip("spark._walk is not built (LMQ_NO_EXTENSIONS=1 or no compiler)")
        monkeypatch.setattr(columnar, "_WALK", _walk.walk)
    else:
        monkeypatch.setattr(columnar, "_WALK", columnar._walk_py)
    return request.param


FILTERS = [
    R.ReadFilter(None, None),
    R.ReadFilter(None, None, include_sys=False),
    R.ReadFilter(T0 + 40_000, T0 + 200_000, include_sys=False),
]


@pytest.mark.parametrize("split", [97, 1000, 1 << 30])
@pytest.mark.parametrize("flt", FILTERS)
def test_every_record_kind_reads_the_same(tmp_path, monkeypatch, walker, split, flt):
    data_dir = write_log(tmp_path, build(300), segment_bytes=8192)
    rows, report = read(data_dir, split, flt, False, monkeypatch)
    assert sum(r["skipped_bytes"] + r["tail_bytes"] for r in report) == 0
    kinds = set(rows.column("kind").to_pylist())
    assert kinds == {R.PLAIN, R.HELD, R.DISPATCH}
    assert sum(r["control_records"] for r in report) > 0
    if not flt.include_sys:
        assert sum(r["sys_records"] for r in report) > 0
    assert_same(data_dir, split, flt, monkeypatch)


def test_batches_longer_than_one_walk(tmp_path, monkeypatch, walker):
    monkeypatch.setattr(columnar, "BATCH_ROWS", 7)
    data_dir = write_log(tmp_path, build(100), segment_bytes=1 << 20)
    assert_same(data_dir, 1 << 30, FILTERS[0], monkeypatch)


def test_crc_of_the_c_walk_is_crc32c():
    _walk = pytest.importorskip("spark._walk")
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000):
        data = os.urandom(n)
        assert _walk.crc32c(data) == crc32c(data)


# -- damage ------------------------------------------------------------------------------

damage = st.lists(
    st.tuples(
        st.sampled_from(["flip", "zero", "junk", "cut", "forge"]),
        st.integers(0, 10**6),
        st.binary(min_size=1, max_size=80),
    ),
    min_size=1,
    max_size=4,
)


def damaged(records: list[bytes], edits) -> list[bytes]:
    """The log's bytes with ``edits`` applied, cut back into the original records'
    boundaries (segments roll at the same places; a record can change length)."""
    out = [bytearray(r) for r in records]
    for what, at, blob in edits:
        i = at % len(out)
        rec = out[i]
        j = at % len(rec)
        if what == "flip":
            rec[j] ^= blob[0] or 1
        elif what == "zero":
            rec[j : j + len(blob)] = bytes(len(rec[j : j + len(blob)]))
        elif what == "junk":
            rec[j:j] = blob
        elif what == "cut":
            del rec[j : j + len(blob)]
        else:  # a valid-CRC record with arbitrary contents replaces record i
            position = sum(len(r) for r in out[:i])
            out[i] = bytearray(forged(position, blob, rtype=1 + at % 8, proto=at % 4))
    return [bytes(r) for r in out]


@settings(max_examples=60)
@given(edits=damage, split=st.sampled_from([150, 1000, 1 << 30]))
def test_damaged_logs_read_the_same(tmp_path_factory, edits, split):
    records = damaged(build(60), edits)
    tmp = tmp_path_factory.mktemp("log")
    data_dir = write_log(tmp, records, segment_bytes=3000)
    with pytest.MonkeyPatch.context() as mp:
        for walk in {columnar._walker(), columnar._walk_py}:
            mp.setattr(columnar, "_WALK", walk)
            assert_same(data_dir, split, FILTERS[0], mp)
            assert_same(data_dir, split, FILTERS[2], mp)


@settings(max_examples=100)
@given(rest=st.binary(max_size=200), rtype=st.integers(0, 9), proto=st.integers(0, 3))
def test_forged_records_read_the_same(tmp_path_factory, rest, rtype, proto):
    """Contents behind a valid CRC: lengths that overrun, bad UTF-8, broken dispatch
    lists, unknown types: accepted or rejected exactly as decode_record does."""
    good = build(3)
    position = sum(len(r) for r in good)
    bad = forged(position, rest, rtype, proto)
    tail = _record(position + len(bad), 5)  # resync lands on it only if `bad` is invalid
    data_dir = write_log(tmp_path_factory.mktemp("log"), [*good, bad, tail], 1 << 20)
    with pytest.MonkeyPatch.context() as mp:
        assert_same(data_dir, 1 << 30, FILTERS[0], mp)


def test_bad_utf8_behind_a_valid_crc(tmp_path, monkeypatch, walker):
    records = build(5)
    position = sum(len(r) for r in records)
    topic = b"\xff\xfe"
    rest = struct.pack(">HHHHII", 0, len(topic), 0, 0, 0, 0) + topic + struct.pack(">I", 0)
    bad = forged(position, rest)
    tail = _record(position + len(bad), 6)
    data_dir = write_log(tmp_path, [*records, bad, tail], 1 << 20)
    rows, report = read(data_dir, 1 << 30, FILTERS[0], False, monkeypatch)
    assert sum(r["skipped_bytes"] for r in report) == len(bad)
    assert "undecodable" in report[0]["problems"][0]["reason"]
    assert_same(data_dir, 1 << 30, FILTERS[0], monkeypatch)
