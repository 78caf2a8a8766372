"""The device fan-out job: extract (commit log), transform, load (Parquet, PNG, summary).

Run it embedded (``lmq analyze fanout``, ``python -m spark.job``) or on a cluster::

    spark-submit --master spark://host:7077 --py-files lmq_spark.zip \\
        spark/job.py --data-dir hdfs://nn/lmq/data --out /tmp/fanout

(see docs/spark.md). :func:`run` takes a session, so embedding code and tests bring their
own; :func:`main` builds one from ``--master``.

Outputs under ``out``: ``summary.json``, ``summary.md``, ``charts/*.png`` (driver-local
files) and ``tables/<name>/`` Parquet (or ``--tables URI``): ``records`` and
``traffic_per_minute`` partitioned by ``date``, ``topic_prefixes`` by ``depth``, and
``devices``, ``topics``, ``lmq_fan_in``, ``fanout_histogram``, ``fanout_change``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from spark import transforms as T
from spark.reader import (
    DEFAULT_SPLIT_BYTES,
    ReadFilter,
    dispatched,
    is_local,
    list_segments,
    local_path,
    parse_time,
    read_and_write_records,
    read_commit_log,
    to_ms,
)

Progress = Callable[[str], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class JobConfig:
    data_dir: str
    out_dir: str
    since: datetime | None = None
    until: datetime | None = None
    #: Length of the top-N lists (devices, topics, prefixes, fan-out changes).
    top: int = 10
    #: Topic-prefix depths tabulated (level 1, level 2, ...).
    prefix_depths: tuple[int, ...] = (1, 2)
    #: Byte-range size of one read task (local reads).
    split_bytes: int = DEFAULT_SPLIT_BYTES
    #: ``auto``, ``local`` or ``hadoop``: see :func:`spark.reader.read_commit_log`.
    read_mode: str = "auto"
    #: Where the Parquet tables go (any Hadoop URI); default ``<out_dir>/tables``.
    tables_dir: str | None = None
    #: Also write the per-record table (the largest output by far).
    write_records: bool = True
    charts: bool = True
    #: Count the gateway's own ``$SYS/...`` statistics messages as device traffic.
    include_sys: bool = False
    #: ``columnar`` or ``rows`` (record by record: the reference decoder, slower).
    decoder: str = "columnar"


@dataclass
class JobResult:
    summary: dict
    summary_json: Path
    summary_md: Path
    charts: list[Path] = field(default_factory=list)

    @property
    def skipped_bytes(self) -> int:
        return int(self.summary["log"]["skipped_bytes"])

    @property
    def problems(self) -> list[dict]:
        return list(self.summary["log"]["problems"])


def quiet_pyspark_warnings() -> None:
    """PySpark warns that pandas 3 is unsupported whenever it checks (mapInArrow does);
    the job does not use pandas."""
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )


def build_session(master: str | None = "local[*]", app_name: str = "lmq-fanout", conf=None):
    """A SparkSession for ``master`` (None: whatever spark-submit configured).

    Local masters bind to 127.0.0.1 and run without the web UI.
    """
    from pyspark.sql import SparkSession

    # Python workers must be this interpreter (it has broker_core and crc32c); on a
    # cluster spark-submit's own PYSPARK_PYTHON / spark.pyspark.python wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(max(4, (os.cpu_count() or 2) * 2)))
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def halves(first: datetime, last: datetime) -> tuple[tuple[datetime, datetime], ...]:
    """The two windows compared by the fan-out change table: ``[first, mid)`` and
    ``[mid, last]``."""
    end = last + timedelta(milliseconds=1)
    mid = first + (end - first) / 2
    return (first, mid), (mid, end)


def _from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _num(value):
    return None if value is None else float(value)


def _rows(df) -> list[dict]:
    return [row.asDict(recursive=True) for row in df.collect()]


def run(session, config: JobConfig, progress: Progress = lambda _msg: None) -> JobResult:
    """Run the job on ``session``; returns the summary and where it was written.

    Stages: read (the ``lmq`` data source, decoded into Arrow batches, cached once);
    the per-record table written from that (or the records cached, without it); every
    other table computed from the records with DataFrame expressions and written; the
    summary's lists read back from those tables (small), its totals and percentiles
    from the records.
    """
    session.conf.set("spark.sql.session.timeZone", "UTC")
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = config.tables_dir or str(out / "tables")

    progress(f"listing segments in {config.data_dir}")
    segments = list_segments(config.data_dir, session)
    log_bytes = sum(s.length for s in segments)
    direct = config.read_mode != "hadoop" and is_local(config.data_dir) and is_local(tables)
    scan = None
    if not direct:
        scan = read_commit_log(
            session,
            config.data_dir,
            since=config.since,
            until=config.until,
            split_bytes=config.split_bytes,
            mode=config.read_mode,
            segments=segments,
            include_sys=config.include_sys,
            decoder=config.decoder,
        ).persist()
    records = None
    records_dir = os.path.join(local_path(tables), "records")
    if not config.write_records:
        records_dir = str(out / "_records")
    try:
        progress(
            f"reading {len(segments)} segment(s), {log_bytes / 2**20:.1f} MiB "
            f"on {session.sparkContext.master}"
            + (", writing the per-record table as read" if direct else "")
        )
        if direct:
            report = _read_direct(session, segments, config, records_dir)
            progress(
                f"scanned {sum(r['records'] for r in report):,} records in {len(report)} task(s)"
            )
            records = _read_records(session, records_dir)
        else:
            assert scan is not None
            report = _rows(scan.report)
            progress(
                f"scanned {sum(r['records'] for r in report):,} records in {len(report)} "
                "task(s); writing the per-record table"
            )
            records = _records(scan, config, tables)
            scan.unpersist()
        progress(f"computing figures and writing Parquet tables to {tables}")
        summary = _summarise(records, report, segments, log_bytes, config, tables, progress)
        summary["include_sys"] = config.include_sys
        hist, minutes = _small_tables(session, tables, records)
        progress(
            f"read {summary['messages']:,} messages from {summary['devices']:,} devices "
            f"to {summary['lmqs']:,} LMQs"
        )
        summary["outputs"] = {"tables": tables}
        charts: list[Path] = []
        if config.charts:
            progress(f"drawing charts in {out / 'charts'}")
            charts = draw_charts(out / "charts", hist, summary["top_devices"], minutes)
            summary["outputs"]["charts"] = [str(p) for p in charts]
    finally:
        if scan is not None:
            scan.unpersist()
            if records is not None and not config.write_records:
                records.unpersist()
        if direct and not config.write_records:
            shutil.rmtree(records_dir, ignore_errors=True)
    summary_json = out / "summary.json"
    summary_md = out / "summary.md"
    summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    summary_md.write_text(render_markdown(summary))
    progress(f"summary written to {summary_md}")
    return JobResult(summary, summary_json, summary_md, charts)


def _save(df, tables: str, name: str, *partition_by: str) -> None:
    writer = df.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(f"{tables}/{name}")


def _read_direct(session, segments, config: JobConfig, records_dir: str) -> list[dict]:
    """The read pass that writes the per-record table as it decodes
    (:func:`spark.reader.read_and_write_records`); the messages held and dispatched
    later are joined and appended to it. Returns the report rows."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    shutil.rmtree(records_dir, ignore_errors=True)
    os.makedirs(records_dir, exist_ok=True)
    flt = ReadFilter(to_ms(config.since), to_ms(config.until), config.include_sys)
    side = read_and_write_records(
        session, segments, flt, config.split_bytes, config.decoder, records_dir
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        report = _rows(side.where(F.col("report").isNotNull()).select("report.*"))
        # only held records and dispatches are left in side; a dispatch joins only a
        # held record read, so without one there is nothing to join (and no job to run)
        if sum(r["held_records"] for r in report):
            dispatched(side).write.mode("append").partitionBy("date").parquet(records_dir)
    finally:
        side.unpersist()
    return report


def _read_records(session, records_dir: str):
    from spark.schema import RECORD_SCHEMA

    if not any(Path(records_dir).rglob("*.parquet")):
        return session.createDataFrame([], RECORD_SCHEMA)
    return session.read.parquet(records_dir).select(*RECORD_SCHEMA.names)


def _records(scan, config: JobConfig, tables: str):
    """The records every figure is computed from, read from the log once: the
    per-record table as written (Parquet: each figure reads only its columns), or
    without it the records cached."""
    from pyspark import StorageLevel

    from spark.schema import RECORD_SCHEMA

    if config.write_records:
        _save(scan.records, tables, "records", "date")
        session = scan.raw.sparkSession
        return session.read.schema(RECORD_SCHEMA).parquet(f"{tables}/records")
    records = scan.records.persist(StorageLevel.MEMORY_AND_DISK)
    records.count()
    return records


def _summarise(
    records, report, segments, log_bytes, config: JobConfig, tables: str, progress: Progress
) -> dict:
    """Compute and write every table but the per-record one; the summary of them.
    ``progress`` is told each step (so a caller can time them)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    session = records.sparkSession

    written: dict = {}

    def save(df, name: str, *partition_by: str) -> None:
        progress(f"table {name}")
        written[name] = df
        _save(df, tables, name, *partition_by)

    def read_back(name: str):
        return _read_back(session, tables, name, written[name].schema)

    progress("fan-out counts: percentiles, histogram, time range")
    counts = T.fanout_counts(records).persist()
    try:
        span = counts.agg(
            F.unix_millis(F.min("first_store_time")).alias("first"),
            F.unix_millis(F.max("last_store_time")).alias("last"),
        ).collect()[0]
        first, last = _from_ms(span["first"]), _from_ms(span["last"])
        stats = T.fanout_stats_of(counts, (0.5, 0.9, 0.99)).collect()[0]
        save(T.fanout_histogram_of(counts), "fanout_histogram")
    finally:
        counts.unpersist()
    # devices and both halves' fan-out per device: one aggregation for two tables
    windows = halves(first, last) if first is not None and last is not None and last > first else ()
    figures = T.device_figures(records, windows).persist()
    try:
        save(T.devices_of(figures), "devices")
        changes: list[dict] = []
        if windows:
            save(T.fanout_change_of(figures), "fanout_change")
            change = read_back("fanout_change")
            change = change.append_column("_abs", pc.abs(change["change"]))
            changes = _top(change, config.top, by="_abs", key="device").drop(["_abs"]).to_pylist()
    finally:
        figures.unpersist()
    # the totals from the devices table (a row per device, null included), not
    # another pass over the records: the same sums
    devices = read_back("devices")
    # topics and minutes: one pass, one shuffle
    keyed = T.keyed_figures(records).persist()
    try:
        save(T.topics_of(keyed), "topics")
        save(T.minutes_of(keyed), "traffic_per_minute", "date")
    finally:
        keyed.unpersist()
    if config.prefix_depths:
        save(T.topic_prefixes(records, config.prefix_depths), "topic_prefixes", "depth")
    save(T.lmq_fan_in(records), "lmq_fan_in")

    progress("top lists")
    lmqs = _table_rows(session, tables, "lmq_fan_in")
    top_devices = _top(devices, config.top, key="device").to_pylist()
    top_topics = _top(read_back("topics"), config.top, key="topic").to_pylist()
    prefixes: dict[str, list[dict]] = {}
    if config.prefix_depths:
        prefix_table = read_back("topic_prefixes")
        depths = pc.cast(prefix_table["depth"], pa.int32())
        for d in config.prefix_depths:
            rows = prefix_table.filter(pc.equal(depths, d))
            prefixes[str(d)] = _top(rows, config.top, key="prefix").to_pylist()

    problems = [{"segment": r["segment"], **p} for r in report for p in r["problems"]]
    problems.sort(key=lambda p: p["position"])
    return {
        "messages": int(stats["messages"]),
        "devices": devices["device"].length() - devices["device"].null_count,
        "lmqs": int(lmqs),
        "bytes": int(pc.sum(devices["bytes"]).as_py() or 0),
        "deliveries": int(stats["deliveries"] or 0),
        "fanout": {
            "mean": _num(stats["mean_fanout"]),
            "p50": _num(stats["p50"]),
            "p90": _num(stats["p90"]),
            "p99": _num(stats["p99"]),
            "min": stats["min_fanout"],
            "max": stats["max_fanout"],
        },
        "top_devices": [
            {
                "device": d["device"],
                "messages": d["messages"],
                "bytes": d["bytes"],
                "mean_fanout": d["mean_fanout"],
                "max_fanout": d["max_fanout"],
            }
            for d in top_devices
        ],
        "top_topics": [
            {
                "topic": t["topic"],
                "messages": t["messages"],
                "bytes": t["bytes"],
                "mean_fanout": t["mean_fanout"],
                "devices": t["devices"],
            }
            for t in top_topics
        ],
        "top_prefixes": {
            depth: [
                {k: p[k] for k in ("prefix", "messages", "bytes", "mean_fanout", "devices")}
                for p in rows
            ]
            for depth, rows in prefixes.items()
        },
        "fanout_changes": changes,
        "window": {
            "since": _iso(config.since),
            "until": _iso(config.until),
            "first_store_time": _iso(first),
            "last_store_time": _iso(last),
        },
        "log": {
            "data_dir": config.data_dir,
            "segments": len(segments),
            "bytes": log_bytes,
            "tasks": len(report),
            "record_bytes": sum(r["record_bytes"] for r in report),
            "held_records": sum(r["held_records"] for r in report),
            "control_records": sum(r["control_records"] for r in report),
            "filtered_records": sum(r["filtered_records"] for r in report),
            "sys_records": sum(r["sys_records"] for r in report),
            "skipped_bytes": sum(r["skipped_bytes"] for r in report),
            "tail_bytes": sum(r["tail_bytes"] for r in report),
            "problems": problems,
        },
        "generated_at": _iso(datetime.now(UTC)),
    }


def _read_back(session, tables: str, name: str, schema, columns: list[str] | None = None):
    """A table the job wrote (``schema``: the Spark schema it was written with), as an
    Arrow table on the driver: read with pyarrow where the tables are local (no Spark
    job: the summary reads a handful of small tables back, and each Spark read of one
    cost several jobs), else collected by Spark. Partition columns come back too
    (``depth`` as a dictionary); an empty partitioned table (no file) as ``schema``."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    if is_local(tables):
        table = pq.read_table(os.path.join(local_path(tables), name), partitioning="hive")
        if table.num_columns == 0:
            table = to_arrow_schema(schema, timezone="UTC").empty_table()
        return table.select(columns) if columns else table
    df = session.read.parquet(f"{tables}/{name}")
    return (df.select(*columns) if columns else df).toArrow()


def _table_rows(session, tables: str, name: str) -> int:
    """Rows of a table the job wrote (local: from the Parquet footers)."""
    import pyarrow.dataset as ds

    if is_local(tables):
        path = os.path.join(local_path(tables), name)
        return ds.dataset(path, format="parquet", partitioning="hive").count_rows()
    return session.read.parquet(f"{tables}/{name}").count()


def _ms(scalar) -> int | None:
    """Epoch milliseconds of an Arrow timestamp scalar (any unit; Spark's Parquet
    timestamps are UTC), None for null."""
    import pyarrow as pa

    if not scalar.is_valid:
        return None
    return scalar.cast(pa.timestamp("ms")).cast(pa.int64()).as_py()


def _top(table, n: int, key: str, by: str = "messages"):
    """The ``n`` rows of an Arrow ``table`` with the largest ``by``, ties by ``key``
    ascending (as :func:`spark.transforms.top_n` orders them: byte order of the UTF-8,
    a null key first)."""
    import pyarrow.compute as pc

    # a null key first without null_placement (its form differs across pyarrow versions)
    keyed = table.append_column("_has_key", pc.is_valid(table[key]))
    order = pc.sort_indices(
        keyed, sort_keys=[(by, "descending"), ("_has_key", "ascending"), (key, "ascending")]
    )
    return table.take(order[:n])


def _small_tables(session, tables: str, records):
    """The histogram and per-minute rows for the charts, read back from their tables."""
    hist = _read_back(session, tables, "fanout_histogram", T.fanout_histogram(records).schema)
    minutes = _read_back(
        session,
        tables,
        "traffic_per_minute",
        T.traffic_per_minute(records).schema,
        ["minute", "messages", "deliveries"],
    )
    rows = minutes.sort_by("minute").to_pylist()
    # Parquet timestamps are UTC (naive in Arrow): as aware datetimes, as the charts want
    for row, minute in zip(rows, minutes.sort_by("minute")["minute"], strict=True):
        row["minute"] = _from_ms(_ms(minute))
    return hist.sort_by("lower").to_pylist(), rows


def draw_charts(charts_dir: Path, hist, top_devices: list[dict], minutes) -> list[Path]:
    """Three PNGs with matplotlib's Agg canvas (no display, no pyplot state).

    ``hist``: rows with bucket and messages; ``minutes``: rows with minute, messages,
    deliveries (minutes as UTC datetimes)."""
    from matplotlib.figure import Figure

    charts_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.bar([r["bucket"] for r in hist], [r["messages"] for r in hist], color="#4477aa")
    ax.set_title("Fan-out per message")
    ax.set_xlabel("LMQs dispatched to")
    ax.set_ylabel("messages")
    ax.tick_params(axis="x", labelrotation=45)
    paths.append(charts_dir / "fanout_histogram.png")
    fig.savefig(paths[-1], dpi=100)

    fig = Figure(figsize=(9, max(3.0, 0.35 * len(top_devices) + 1.5)), layout="constrained")
    ax = fig.add_subplot()
    names = [d["device"] or "(no client id)" for d in reversed(top_devices)]
    ax.barh(names, [d["messages"] for d in reversed(top_devices)], color="#228833")
    ax.set_title("Top devices by messages published")
    ax.set_xlabel("messages")
    paths.append(charts_dir / "top_devices.png")
    fig.savefig(paths[-1], dpi=100)

    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if minutes:
        xs = [r["minute"] for r in minutes]
        ax.plot(xs, [r["messages"] for r in minutes], label="messages")
        ax.plot(xs, [r["deliveries"] for r in minutes], label="LMQ deliveries")
        ax.legend()
    ax.set_title("Traffic per minute (UTC)")
    ax.set_ylabel("per minute")
    fig.autofmt_xdate()
    paths.append(charts_dir / "traffic_per_minute.png")
    fig.savefig(paths[-1], dpi=100)
    return paths


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_markdown(summary: dict) -> str:
    fan, log, win = summary["fanout"], summary["log"], summary["window"]
    lines = [
        "# LMQ device fan-out summary",
        "",
        f"Commit log `{log['data_dir']}`: {log['segments']} segment(s), "
        f"{_fmt(log['bytes'])} bytes; store times {win['first_store_time'] or '-'} to "
        f"{win['last_store_time'] or '-'}"
        + (
            f" (window {win['since'] or '…'} to {win['until'] or '…'})"
            if win["since"] or win["until"]
            else ""
        )
        + ".",
        "",
        "| figure | value |",
        "|---|---|",
        f"| messages | {_fmt(summary['messages'])} |",
        f"| devices (distinct client ids) | {_fmt(summary['devices'])} |",
        f"| LMQs dispatched to | {_fmt(summary['lmqs'])} |",
        f"| payload bytes | {_fmt(summary['bytes'])} |",
        f"| LMQ deliveries | {_fmt(summary['deliveries'])} |",
        f"| fan-out mean / p50 / p90 / p99 / max | {_fmt(fan['mean'])} / {_fmt(fan['p50'])}"
        f" / {_fmt(fan['p90'])} / {_fmt(fan['p99'])} / {_fmt(fan['max'])} |",
        f"| held records (delayed and half messages) | {_fmt(log['held_records'])} |",
        f"| control records (not messages) | {_fmt(log['control_records'])} |",
        f"| the gateway's own $SYS statistics | "
        f"{'included' if summary.get('include_sys') else 'left out (--include-sys)'} |",
        f"| corrupt bytes skipped | {_fmt(log['skipped_bytes'])} |",
        f"| torn tail bytes (last segment) | {_fmt(log['tail_bytes'])} |",
        "",
    ]
    if log["problems"]:
        lines += [
            "## Damage skipped",
            "",
            "| segment | position | bytes | reason |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['segment']} | {p['position']} | {p['bytes']} | {p['reason']} |"
            for p in log["problems"]
        ]
        lines.append("")
    lines += [
        "## Top devices",
        "",
        "| device | messages | bytes | mean fan-out |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {d['device']} | {_fmt(d['messages'])} | {_fmt(d['bytes'])} | {_fmt(d['mean_fanout'])} |"
        for d in summary["top_devices"]
    ]
    lines += ["", "## Top topics", "", "| topic | messages | mean fan-out |", "|---|---|---|"]
    lines += [
        f"| {t['topic']} | {_fmt(t['messages'])} | {_fmt(t['mean_fanout'])} |"
        for t in summary["top_topics"]
    ]
    for depth, rows in summary["top_prefixes"].items():
        lines += [
            "",
            f"## Top topic prefixes, depth {depth}",
            "",
            "| prefix | messages | mean fan-out | devices |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['prefix']} | {_fmt(p['messages'])} | {_fmt(p['mean_fanout'])} | "
            f"{_fmt(p['devices'])} |"
            for p in rows
        ]
    if summary["fanout_changes"]:
        lines += [
            "",
            "## Largest fan-out changes (first half -> second half of the window)",
            "",
            "| device | before | after | change |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {c['device']} | {_fmt(c['mean_fanout_before'])} | "
            f"{_fmt(c['mean_fanout_after'])} | {c['change']:+.2f} |"
            for c in summary["fanout_changes"]
        ]
    charts = summary.get("outputs", {}).get("charts", [])
    if charts:
        lines += ["", "## Charts", ""]
        lines += [f"![{Path(c).stem}](charts/{Path(c).name})" for c in charts]
    lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark/job.py", description="LMQ device fan-out analytics over the commit log."
    )
    parser.add_argument("--data-dir", required=True, help="data dir or commitlog dir (any URI)")
    parser.add_argument("--out", required=True, help="driver-local output directory")
    parser.add_argument("--since", type=parse_time, help="ISO 8601 time or epoch ms")
    parser.add_argument("--until", type=parse_time, help="ISO 8601 time or epoch ms")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default: spark-submit's, else local[*])",
    )
    parser.add_argument("--tables", default=None, help="Parquet output URI (default OUT/tables)")
    parser.add_argument("--read-mode", choices=("auto", "local", "hadoop"), default="auto")
    parser.add_argument("--split-mb", type=int, default=DEFAULT_SPLIT_BYTES >> 20)
    parser.add_argument("--no-records", action="store_true", help="skip the per-record table")
    parser.add_argument("--no-charts", action="store_true")
    parser.add_argument(
        "--include-sys", action="store_true", help="count the gateway's $SYS messages too"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_pyspark_warnings()
    # Under spark-submit (which starts the driver's JVM gateway first) the master comes
    # from the submit command; run directly with python, the default is local[*].
    master = args.master or (None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]")
    session = build_session(master)
    config = JobConfig(
        data_dir=args.data_dir,
        out_dir=args.out,
        since=args.since,
        until=args.until,
        top=args.top,
        split_bytes=args.split_mb << 20,
        read_mode=args.read_mode,
        tables_dir=args.tables,
        write_records=not args.no_records,
        charts=not args.no_charts,
        include_sys=args.include_sys,
    )
    try:
        result = run(session, config, progress=lambda m: print(m, file=sys.stderr))
    finally:
        session.stop()
    if result.skipped_bytes:
        print(
            f"warning: {result.skipped_bytes} bytes of corrupt records skipped "
            f"({len(result.problems)} problem(s), see {result.summary_json})",
            file=sys.stderr,
        )
        return 1
    print(result.summary_md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
