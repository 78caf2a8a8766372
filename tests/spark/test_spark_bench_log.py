"""The fan-out job on the benchmark generator's output (bench/spark_fanout.py): the
columnar decoder gives the same rows as the record-at-a-time one, row for row, and the
job's figures are those counted in plain Python from ``decode_record``'s records."""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import pytest

pytest.importorskip("pyspark")

from bench.spark_fanout import Traffic, generate_segments  # noqa: E402
from broker_core.record import iter_records  # noqa: E402
from spark.datasource import register  # noqa: E402
from spark.job import JobConfig, run  # noqa: E402

pytestmark = [pytest.mark.spark]


def python_figures(data_dir) -> dict:
    fan, devices, lmqs, payload = [], defaultdict(list), set(), 0
    for path in sorted((data_dir / "commitlog").glob("*.log")):
        for record, _pos, error in iter_records(path.read_bytes(), int(path.stem)):
            assert error is None and record is not None
            fan.append(len(record.dispatch))
            devices[record.origin].append((len(record.body), len(record.dispatch)))
            lmqs.update(name for name, _ in record.dispatch)
            payload += len(record.body)
    top = sorted(devices.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:10]
    return {
        "messages": len(fan),
        "devices": len(devices),
        "lmqs": len(lmqs),
        "bytes": payload,
        "deliveries": sum(fan),
        "min": min(fan),
        "max": max(fan),
        "mean": sum(fan) / len(fan),
        "top_devices": [
            {
                "device": d,
                "messages": len(rows),
                "bytes": sum(b for b, _ in rows),
                "mean_fanout": sum(f for _, f in rows) / len(rows),
                "max_fanout": max(f for _, f in rows),
            }
            for d, rows in top
        ],
        "fanout_counts": Counter(fan),
    }


def test_columnar_and_row_decoders_give_the_same_rows_and_summary(spark_session, tmp_path):
    args = argparse.Namespace(
        seed=3, devices=300, topics=200, lmqs=5000, max_topic_fanout=60, records=6000,
        batch=1000,
    )  # fmt: skip
    data = tmp_path / "data"
    generate_segments(args, Traffic(args), data)
    # the two decoders give the same rows and reports through the data source (so the
    # job, which reads nothing else, gives the same summary with either: running it
    # twice would only time Spark again)
    register(spark_session)
    read = {
        decoder: sorted(
            spark_session.read.format("lmq")
            .options(decoder=decoder, held="true", report="true", splitBytes="100000")
            .load(str(data))
            .collect(),
            key=lambda r: (r.kind, r.position or 0, r.report and r.report.start),
        )
        for decoder in ("columnar", "rows")
    }
    assert read["columnar"] == read["rows"]
    assert sum(r.kind == "message" for r in read["rows"]) == args.records

    config = JobConfig(str(data), str(tmp_path / "job"), split_bytes=100_000, charts=False)
    got = run(spark_session, config).summary
    want = python_figures(data)
    for key in ("messages", "devices", "lmqs", "bytes", "deliveries"):
        assert got[key] == want[key], key
    assert (got["fanout"]["min"], got["fanout"]["max"]) == (want["min"], want["max"])
    assert got["fanout"]["mean"] == pytest.approx(want["mean"])
    assert got["top_devices"] == [pytest.approx(d) for d in want["top_devices"]]
    hist = tmp_path / "job" / "tables" / "fanout_histogram"
    import pyarrow.parquet as pq

    rows = pq.read_table(hist).to_pylist()
    assert sum(r["messages"] for r in rows) == want["messages"]
    assert got["log"]["skipped_bytes"] == got["log"]["tail_bytes"] == 0
