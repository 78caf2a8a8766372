"""The commit-log reader: byte-range scanning in plain Python, then through Spark."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from broker_core.record import HEADER_SIZE, Message, Protocol, RecordType  # noqa: E402
from spark.datasource import register  # noqa: E402
from spark.reader import (  # noqa: E402
    NoSegments,
    RangeReport,
    list_segments,
    plan_tasks,
    read_commit_log,
    scan_range,
)
from spark.schema import RECORD_SCHEMA, SEGMENT_TASK_SCHEMA, SOURCE_SCHEMA  # noqa: E402

pytestmark = [
    pytest.mark.spark,
]

T0_MS = 1_714_564_800_000  # 2024-05-01T12:00:00Z


def fill(writer, n: int, *, start_ms: int = T0_MS) -> None:
    for i in range(n):
        writer.append(
            Message(
                topic=f"site/{i % 3}/dev{i % 5}/temp",
                body=bytes(i % 40),
                origin=f"dev{i % 5}",
                qos=i % 3,
                retain=i % 7 == 0,
                protocol=Protocol.MQTT if i % 4 else Protocol.AMQP,
                born_ms=start_ms + i * 1000 - 5,
            ),
            [f"q{j}" for j in range(i % 6)],
            start_ms + i * 1000,
        )


def scan_all(data_dir, split_bytes: int):
    """Every task of the plan, scanned in order, without Spark."""
    names = [f.name for f in SEGMENT_TASK_SCHEMA.fields]
    records, reports = [], []
    for values in plan_tasks(list_segments(str(data_dir)), split_bytes):
        task = dict(zip(names, values, strict=True))
        with open(task["path"], "rb") as fh:
            data = fh.read()
        report = RangeReport(task["segment"], task["base"], task["start"], task["end"])
        records += list(
            scan_range(
                data,
                segment=task["segment"],
                base=task["base"],
                start=task["start"],
                end=task["end"],
                limit=task["limit"],
                expected_bytes=task["expected_bytes"],
                is_last=task["is_last"],
                report=report,
            )
        )
        reports.append(report)
    return records, reports


def totals(reports):
    return {
        key: sum(getattr(r, key) for r in reports)
        for key in ("skipped_bytes", "tail_bytes", "control_records")
    }


def segment_of(writer, written):
    """(path, offset in file) of a written record."""
    segs = writer.segments()
    bases = [int(p.stem) for p in segs]
    i = max(k for k, b in enumerate(bases) if b <= written.position)
    return segs[i], written.position - bases[i]


def corrupt(writer, written) -> None:
    """Flip one byte inside the record's body/dispatch: its CRC no longer matches."""
    path, offset = segment_of(writer, written)
    with open(path, "r+b") as fh:
        fh.seek(offset + HEADER_SIZE + 2)
        byte = fh.read(1)
        fh.seek(offset + HEADER_SIZE + 2)
        fh.write(bytes([byte[0] ^ 0xFF]))


def size_of(writer, written) -> int:
    i = writer.records.index(written)
    nxt = writer.records[i + 1].position if i + 1 < len(writer.records) else writer.base
    return nxt - written.position


# -- plain Python --------------------------------------------------------------------------


@pytest.mark.parametrize("split", [1, 97, 1000, 1 << 30])
def test_every_split_reads_every_record_once(segment_writer, split):
    w = segment_writer(segment_bytes=4096)
    fill(w, 120)
    w.append(Message(topic="", body=b""), ["q1"], T0_MS, RecordType.LMQ_REMOVAL)
    assert len(w.segments()) > 2
    records, reports = scan_all(w.data_dir, split)
    assert [r.position for r in records] == [m.position for m in w.messages()]
    assert totals(reports) == {"skipped_bytes": 0, "tail_bytes": 0, "control_records": 1}


@pytest.mark.parametrize("split", [1, 50, 1 << 30])
def test_corrupt_record_is_counted_and_skipped_alone(segment_writer, split):
    w = segment_writer(segment_bytes=4096)
    fill(w, 60)
    victim = w.messages()[17]
    corrupt(w, victim)
    records, reports = scan_all(w.data_dir, split)
    assert [r.position for r in records] == [m.position for m in w.messages() if m is not victim]
    assert totals(reports)["skipped_bytes"] == size_of(w, victim)
    problems = [p for r in reports for p in r.problems]
    assert [(p[0], p[1]) for p in problems] == [(victim.position, size_of(w, victim))]
    assert "CRC" in problems[0][2]


def test_torn_tail_of_last_segment_is_not_damage(segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 40)
    last = w.records[-1]
    path, offset = segment_of(w, last)
    os.truncate(path, offset + 30)  # the writer is mid-way through the last record
    records, reports = scan_all(w.data_dir, 1 << 30)
    assert [r.position for r in records] == [m.position for m in w.messages()[:-1]]
    assert totals(reports)["skipped_bytes"] == 0
    assert totals(reports)["tail_bytes"] == 30


def test_zeros_after_the_last_record_are_a_torn_tail(segment_writer):
    # the store does not preallocate: zeros there are an extension the write never filled
    w = segment_writer(segment_bytes=4096)
    fill(w, 40)
    with open(w.segments()[-1], "ab") as fh:
        fh.write(bytes(5000))
    records, reports = scan_all(w.data_dir, 700)
    assert len(records) == 40
    assert totals(reports) == {"skipped_bytes": 0, "tail_bytes": 5000, "control_records": 0}


def test_bytes_past_the_next_base_of_a_sealed_segment_are_counted(segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 60)
    with open(w.segments()[0], "ab") as fh:
        fh.write(b"junk")
    records, reports = scan_all(w.data_dir, 1 << 30)
    assert len(records) == 60
    assert totals(reports)["skipped_bytes"] == 4


def test_damage_at_the_end_of_a_sealed_segment_is_counted(segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 60)
    first_seg = w.segments()[0]
    in_first = [m for m in w.messages() if segment_of(w, m)[0] == first_seg]
    victim = in_first[-1]
    corrupt(w, victim)
    records, reports = scan_all(w.data_dir, 1 << 30)
    assert len(records) == 59
    assert totals(reports)["skipped_bytes"] == size_of(w, victim)
    assert totals(reports)["tail_bytes"] == 0


def test_sealed_segment_cut_short_is_counted(segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 60)
    first_seg = w.segments()[0]
    in_first = [m for m in w.messages() if segment_of(w, m)[0] == first_seg]
    size = os.path.getsize(first_seg)
    os.truncate(first_seg, in_first[-1].position + 10)
    records, reports = scan_all(w.data_dir, 1 << 30)
    assert len(records) == 59
    assert totals(reports)["skipped_bytes"] == size - in_first[-1].position


def test_no_segments(tmp_path):
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / "notes.txt").write_text("not a segment")
    with pytest.raises(NoSegments):
        list_segments(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        list_segments(str(tmp_path / "missing"))


# -- through Spark ---------------------------------------------------------------------------


def expected_rows(writer, keep=lambda m: True):
    rows = []
    for m in writer.messages():
        if not keep(m):
            continue
        msg = m.message
        store = datetime.fromtimestamp(m.store_ms / 1000, tz=UTC)
        born = datetime.fromtimestamp((msg.born_ms or m.store_ms) / 1000, tz=UTC)
        rows.append(
            Row(
                position=m.position,
                store_time=store,
                born_time=born,
                date=store.date(),
                device=msg.origin,
                protocol=msg.protocol.name,
                topic=msg.topic,
                topic_levels=msg.topic.split("/"),
                payload_size=len(msg.body),
                qos=msg.qos,
                retained=msg.retain,
                fanout=len(m.lmqs),
                lmqs=m.lmqs,
            )
        )
    return rows


def test_spark_reads_records_with_the_explicit_schema(spark_session, segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 150)
    w.append(Message(topic="", body=b""), ["q3"], T0_MS, RecordType.LMQ_REMOVAL)
    scan = read_commit_log(spark_session, str(w.data_dir), split_bytes=1500).persist()
    try:
        assert scan.records.schema == RECORD_SCHEMA
        expected = spark_session.createDataFrame(expected_rows(w), RECORD_SCHEMA)
        assertDataFrameEqual(scan.records, expected)
        report = scan.report.collect()
        assert len(report) == len(plan_tasks(scan.segments, 1500))
        assert sum(r.records for r in report) == 150
        assert sum(r.control_records for r in report) == 1
        assert sum(r.skipped_bytes + r.tail_bytes for r in report) == 0
    finally:
        scan.unpersist()


def test_spark_counts_damage_and_torn_tail(spark_session, segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 80)
    victim = w.messages()[10]
    corrupt(w, victim)
    last = w.records[-1]
    path, offset = segment_of(w, last)
    os.truncate(path, offset + 21)
    scan = read_commit_log(spark_session, str(w.data_dir), split_bytes=1000).persist()
    try:
        kept = lambda m: m is not victim and m is not last  # noqa: E731
        expected = spark_session.createDataFrame(expected_rows(w, kept), RECORD_SCHEMA)
        assertDataFrameEqual(scan.records, expected)
        report = scan.report.collect()
        assert sum(r.skipped_bytes for r in report) == size_of(w, victim)
        assert sum(r.tail_bytes for r in report) == 21
        problems = [p for r in report for p in r.problems]
        assert [(p.position, p.bytes) for p in problems] == [(victim.position, size_of(w, victim))]
    finally:
        scan.unpersist()


def test_spark_hadoop_mode_and_time_window(spark_session, segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 90)
    since, until = T0_MS + 20_000, T0_MS + 70_000
    scan = read_commit_log(
        spark_session,
        w.data_dir.as_uri(),  # file:///...: the Hadoop FileSystem path, as for hdfs://
        since=datetime.fromtimestamp(since / 1000, tz=UTC),
        until=until,
        mode="hadoop",
    ).persist()
    try:
        keep = lambda m: since <= m.store_ms < until  # noqa: E731
        expected = spark_session.createDataFrame(expected_rows(w, keep), RECORD_SCHEMA)
        assertDataFrameEqual(scan.records, expected)
        report = scan.report.collect()
        assert len(report) == len(w.segments())
        assert sum(r.filtered_records for r in report) == 90 - 50
    finally:
        scan.unpersist()


# -- the data source, as users read it --------------------------------------------------------


def test_data_source_from_pyspark_and_sql(spark_session, segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 90)
    sys_msg = w.append(
        Message(topic="$SYS/broker/uptime", body=b"7 seconds", origin="$SYS"), [], T0_MS + 500
    )
    register(spark_session)
    path = str(w.data_dir)
    df = spark_session.read.format("lmq").option("splitBytes", "700").load(path)
    assert df.schema == SOURCE_SCHEMA
    expected = expected_rows(w, lambda m: m is not sys_msg)  # $SYS: left out by default
    assertDataFrameEqual(df.drop("kind"), spark_session.createDataFrame(expected, RECORD_SCHEMA))
    assert [r.kind for r in df.select("kind").distinct().collect()] == ["message"]

    since, until = T0_MS + 20_000, T0_MS + 70_000
    windowed = (
        spark_session.read.format("lmq")
        .options(sys="true", since="2024-05-01T12:00:20Z", until=str(until))
        .load(path)
    )
    expected = expected_rows(w, lambda m: since <= m.store_ms < until)
    assertDataFrameEqual(
        windowed.drop("kind"), spark_session.createDataFrame(expected, RECORD_SCHEMA)
    )

    spark_session.sql(
        f"CREATE TEMPORARY VIEW lmq_log USING lmq OPTIONS (path '{path}', sys 'true')"
    )
    try:
        row = spark_session.sql(
            "SELECT count(*) AS n, sum(fanout) AS deliveries, count(DISTINCT device) AS devices,"
            " sum(CASE WHEN topic LIKE '$SYS/%' THEN 1 ELSE 0 END) AS sys FROM lmq_log"
        ).collect()[0]
    finally:
        spark_session.catalog.dropTempView("lmq_log")
    messages = w.messages()
    assert row.n == len(messages) == 91 and row.sys == 1
    assert row.deliveries == sum(len(m.lmqs) for m in messages)
    assert row.devices == len({m.message.origin for m in messages})


def test_data_source_as_a_sql_table(spark_session, segment_writer, tmp_path):
    """CREATE TABLE ... USING lmq: pyspark 4 keeps no OPTIONS (nor LOCATION) for a Python
    data source's table, so a plain read of it is a clear error, and the options go
    with the query (WITH)."""
    from pyspark.errors import AnalysisException

    w = segment_writer(segment_bytes=4096)
    fill(w, 40)
    register(spark_session)
    path = str(w.data_dir)
    # an external table in an empty directory: nothing goes to the warehouse directory
    spark_session.sql(
        f"CREATE TABLE lmq_table USING lmq OPTIONS (dataDir '{path}') "
        f"LOCATION '{tmp_path / 'table'}'"
    )
    try:
        assert spark_session.table("lmq_table").schema == SOURCE_SCHEMA
        with pytest.raises(AnalysisException, match="CREATE TABLE ... USING lmq does not keep"):
            spark_session.sql("SELECT count(*) FROM lmq_table").collect()
        row = spark_session.sql(
            f"SELECT count(*) AS n, sum(fanout) AS deliveries FROM lmq_table "
            f"WITH ('dataDir' = '{path}', 'splitBytes' = '1000')"
        ).collect()[0]
    finally:
        spark_session.sql("DROP TABLE lmq_table")
    assert row.n == len(w.messages()) == 40
    assert row.deliveries == sum(len(m.lmqs) for m in w.messages())


def test_data_source_reports_damage(spark_session, segment_writer):
    w = segment_writer(segment_bytes=4096)
    fill(w, 80)
    victim = w.messages()[33]
    corrupt(w, victim)
    register(spark_session)
    df = (
        spark_session.read.format("lmq")
        .options(report="true", splitBytes="900")
        .load(w.data_dir.as_uri())
    )
    assert df.where("kind = 'message'").count() == 79
    report = df.where("kind = 'report'").select("report.*").collect()
    assert len(report) == len(plan_tasks(list_segments(str(w.data_dir)), 900))
    assert sum(r.skipped_bytes for r in report) == size_of(w, victim)
    problems = [p for r in report for p in r.problems]
    assert [(p.position, p.bytes) for p in problems] == [(victim.position, size_of(w, victim))]
