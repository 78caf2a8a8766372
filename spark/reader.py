"""Commit-log segments -> a DataFrame of message records, read in parallel.

Theory of operation
-------------------

1. **List** (driver). ``<data-dir>/commitlog/<20-digit base>.log`` (or a directory that
   holds the segments itself). Local paths and ``file:`` URIs are listed with ``os``;
   any other URI (``hdfs://``, ``s3a://``, ``abfs://``...) through the Hadoop
   ``FileSystem`` of the Spark session, so it uses the cluster's own configuration.
   The listing is a snapshot: each segment's length *at listing time* bounds what is
   read, so a directory the gateway is appending to gives a consistent answer.

2. **Plan** (driver). One task per byte range of at most ``split_bytes`` of a segment
   (256 MiB segments with the default 16 MiB split -> 16 tasks). A task owns the records
   that *start* in its range; a task whose range starts mid-segment finds its first
   record by scanning for the magic and accepting only a candidate that decodes with a
   valid CRC *and* claims its own position (records carry their log position, so a
   record-shaped payload elsewhere cannot be mistaken for a boundary).

3. **Read** (executors, Python). ``mapInArrow`` over the task rows; each task maps the
   file (local mode: ``mmap`` of the path, so executors must see the same file system:
   ``local[*]`` or a shared mount) or receives its bytes from Spark's ``binaryFile``
   source (Hadoop mode: whole segment per task, read by the JVM through Hadoop).
   Records are decoded with :func:`broker_core.record.decode_record` and nothing else,
   and emitted as Arrow batches.

What is *not* a record, and how it is counted (never silently):

- ``skipped_bytes``: damage. Bytes that do not decode (bad magic, CRC, position) where a
  valid record follows later in the segment, or anywhere in a segment that is not the
  last one (its end is known: the next segment's base). The reader resynchronises at the
  next valid record, so one bad record costs only itself.
- ``tail_bytes``: the last segment's torn or not-yet-complete final write: the bytes
  after its last valid record when no valid record follows them. The store does not
  preallocate (see ``broker_core/commit_log.py``), so this is exactly what its recovery
  would truncate, or what the writer has not finished yet.

Both appear per task in :attr:`CommitLogScan.report` with the position and reason of
each problem.

A message is counted when it is dispatched to its LMQs, which is not always when it is
stored (see :func:`classify`): a delayed message (a type 1 record flagged delayed) and
a half message (type 5) are *held* records, dispatched later by a timer's fire record
(type 3) or a transaction's commit or dead-lettering (type 6), or never (cancelled,
rolled back). Held records and their dispatches are emitted separately (they may lie in
different tasks, even segments) and joined on the held record's position by
:attr:`CommitLogScan.records`: a dispatched message is one row with the held record's
fields and the dispatch's store time and LMQs. The other records (LMQ removals, timer
changes, a transaction's rollback or check, origin advances) are counted as control
records, not emitted.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from broker_core.errors import CorruptRecord, InsufficientData
from broker_core.record import Record, RecordType, decode_record, find_record
from broker_core.timer_records import FIRE_BODY
from broker_core.transactions import CONTROL, Action

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
DEFAULT_SPLIT_BYTES = 16 * 1024 * 1024
#: Rows per Arrow batch handed back to the JVM.
BATCH_ROWS = 32_768
#: Problems listed per task; the byte counts stay exact beyond it.
MAX_PROBLEMS = 100


#: Row kinds (RAW_SCHEMA's ``kind``): a message dispatched when stored, a held record
#: (dispatched later, if ever), a dispatch of a held record.
PLAIN, HELD, DISPATCH = 0, 1, 2
_DISPATCHING = (Action.COMMIT, Action.DEAD_LETTER)


def classify(record: Record) -> tuple[int, int] | None:
    """``(kind, position)`` of a record the reader emits (``position``: the message's,
    the held record's for a dispatch), None for a control record."""
    rtype = record.type
    if rtype is RecordType.MESSAGE:
        return (HELD if record.delayed else PLAIN), record.position
    if rtype is RecordType.TXN_HALF:
        return HELD, record.position
    # a body too short for its kind (never written by the store) is not a dispatch
    if rtype is RecordType.TIMER_FIRE and len(record.body) >= FIRE_BODY.size:
        return DISPATCH, FIRE_BODY.unpack_from(record.body)[0]
    if rtype is RecordType.TXN_CONTROL and len(record.body) >= CONTROL.size:
        half, _size, _body, _thash, action = CONTROL.unpack_from(record.body)
        return (DISPATCH, half) if action in _DISPATCHING else None
    return None


class NoSegments(LookupError):
    """The data directory holds no commit-log segment."""


@dataclass(frozen=True, slots=True)
class SegmentFile:
    path: str  # local path or URI, as the reader will open it
    name: str
    base: int
    length: int


# -- listing -----------------------------------------------------------------------------


def is_local(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else uri


def _segments_from(entries: Iterable[tuple[str, str, int]]) -> list[SegmentFile]:
    found = []
    for path, name, length in entries:
        m = SEGMENT_NAME.match(name)
        if m:
            found.append(SegmentFile(path=path, name=name, base=int(m.group(1)), length=length))
    return sorted(found, key=lambda s: s.base)


def list_segments(data_dir: str, session=None) -> list[SegmentFile]:
    """The segments of ``data_dir`` (or of its ``commitlog/`` subdirectory), by base.

    Non-local URIs need ``session`` (its Hadoop configuration opens the file system).
    Raises :class:`NoSegments` when there is none, ``FileNotFoundError`` when the
    directory does not exist.
    """
    if is_local(data_dir):
        root = local_path(data_dir)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"no such directory: {root}")
        log_dir = os.path.join(root, "commitlog")
        if not os.path.isdir(log_dir):
            log_dir = root
        with os.scandir(log_dir) as it:
            entries = [
                (os.path.abspath(e.path), e.name, e.stat().st_size) for e in it if e.is_file()
            ]
        segments = _segments_from(entries)
    else:
        if session is None:
            raise ValueError(f"listing {data_dir} needs a SparkSession")
        segments = _segments_from(_hadoop_list(session, data_dir))
        log_dir = data_dir
    if not segments:
        raise NoSegments(f"no commit-log segments (<20 digits>.log) in {log_dir}")
    return segments


def _hadoop_list(session, uri: str) -> list[tuple[str, str, int]]:
    sc = session.sparkContext
    jvm = sc._jvm
    path_cls = jvm.org.apache.hadoop.fs.Path
    root = path_cls(uri)
    fs = root.getFileSystem(sc._jsc.hadoopConfiguration())
    if not fs.exists(root):
        raise FileNotFoundError(f"no such directory: {uri}")
    sub = path_cls(root, "commitlog")
    log_dir = sub if fs.exists(sub) else root
    return [
        (st.getPath().toString(), st.getPath().getName(), st.getLen())
        for st in fs.listStatus(log_dir)
        if st.isFile()
    ]


def plan_tasks(segments: list[SegmentFile], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[tuple]:
    """Rows of :data:`spark.schema.SEGMENT_TASK_SCHEMA`.

    ``limit`` is where this segment's records end: the next segment's base for a sealed
    segment (the rest of the file is padding), the listed length for the last one.
    """
    if split_bytes <= 0:
        raise ValueError("split_bytes must be positive")
    tasks = []
    for i, seg in enumerate(segments):
        is_last = i == len(segments) - 1
        expected = None if is_last else segments[i + 1].base - seg.base
        limit = seg.length if expected is None else min(seg.length, expected)
        starts = list(range(0, max(limit, 1), split_bytes))
        for j, start in enumerate(starts):
            # the final range also owns the bytes past ``limit`` (padding checks)
            end = starts[j + 1] if j + 1 < len(starts) else max(limit, seg.length)
            tasks.append(
                (seg.path, seg.name, seg.base, start, end, limit, seg.length, expected, is_last)
            )
    return tasks


# -- scanning one byte range (plain Python, no Spark) -------------------------------------


@dataclass(slots=True)
class RangeReport:
    segment: str
    base: int
    start: int
    end: int
    records: int = 0
    held_records: int = 0
    control_records: int = 0
    filtered_records: int = 0
    sys_records: int = 0
    record_bytes: int = 0
    skipped_bytes: int = 0
    tail_bytes: int = 0
    problems: list[tuple[int, int, str]] = field(default_factory=list)

    def problem(self, position: int, size: int, reason: str) -> None:
        self.skipped_bytes += size
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((position, size, reason))

    def as_row(self) -> dict:
        return {
            "segment": self.segment,
            "base": self.base,
            "start": self.start,
            "end": self.end,
            "records": self.records,
            "held_records": self.held_records,
            "control_records": self.control_records,
            "filtered_records": self.filtered_records,
            "sys_records": self.sys_records,
            "record_bytes": self.record_bytes,
            "skipped_bytes": self.skipped_bytes,
            "tail_bytes": self.tail_bytes,
            "problems": [{"position": p, "bytes": b, "reason": r} for p, b, r in self.problems],
        }


def scan_range(
    data,
    *,
    segment: str,
    base: int,
    start: int,
    end: int,
    limit: int,
    expected_bytes: int | None,
    is_last: bool,
    report: RangeReport,
) -> Iterator[Record]:
    """Yield the valid records that start in ``[start, end)``, accounting in ``report``.

    ``data`` holds the segment from byte 0 (bytes or mmap; it may be longer than
    ``limit`` if the file grew after listing, and those bytes are ignored).
    """
    view = memoryview(data)
    size = len(data)
    limit = min(limit, size)
    if start == 0:
        pos = 0
    else:
        # bytes before the first boundary belong to the previous range's last record,
        # or to damage the previous range has already counted
        found = find_record(data, base, start, limit, limit, view)
        pos = limit if found is None else found
    while pos < limit:
        try:
            record = decode_record(view[pos:limit], expected_position=base + pos)
        except (InsufficientData, CorruptRecord) as exc:
            # Damage starts here. Its owner is the task that walked onto it, even when
            # that is past ``end`` (the next task cannot tell a continuation of our last
            # record from damage, so it starts at the next valid record).
            nxt = skip_damage(data, view, base, pos, limit, is_last, report, exc)
            if nxt is not None:
                pos = nxt
                continue
            pos = limit
            break
        if pos >= end:  # a valid record the next task owns
            break
        report.record_bytes += record.size
        pos += record.size
        if classify(record) is None:
            report.control_records += 1
        else:
            yield record
    if end >= limit and not is_last and expected_bytes is not None:
        if size < expected_bytes:
            missing = expected_bytes - size
            report.problem(base + size, missing, f"segment ends {missing} bytes early")
        elif size > limit:
            report.problem(base + limit, size - limit, "bytes past the next segment's base")


def skip_damage(
    data: bytes,
    view: memoryview,
    base: int,
    pos: int,
    limit: int,
    is_last: bool,
    report: RangeReport,
    exc: Exception,
) -> int | None:
    """A record at ``pos`` failed to decode with ``exc``: the position of the next valid
    record before ``limit``, the bytes between reported as damage; or None when there is
    none, the rest reported (a torn tail of the last segment, damage elsewhere)."""
    nxt = find_record(data, base, pos + 1, limit, limit, view)
    if nxt is not None:
        report.problem(base + pos, nxt - pos, _reason(exc))
        return nxt
    if is_last:
        report.tail_bytes += limit - pos
    else:
        report.problem(base + pos, limit - pos, _reason(exc))
    return None


def _reason(exc: Exception) -> str:
    if isinstance(exc, InsufficientData):
        return f"record cut short ({exc.missing} bytes missing)"
    return str(exc) or type(exc).__name__


# -- Spark side ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadFilter:
    """Which records a read returns: ``since_ms <= store time < until_ms`` (None: no
    bound), and the gateway's own ``$SYS`` messages only if ``include_sys``."""

    since_ms: int | None
    until_ms: int | None
    include_sys: bool = True


def is_sys_topic(topic: str) -> bool:
    """A topic of the gateway's own statistics (``$SYS/...``, gateway/mqtt/frontend.py)."""
    return topic == "$SYS" or topic.startswith("$SYS/")


#: RAW_SCHEMA's columns before ``report``.
COLUMNS = 11


class _BatchBuilder:
    """Collects record rows column by column and cuts Arrow batches."""

    def __init__(self, schema) -> None:
        self.schema = schema
        self._reset()

    def _reset(self) -> None:
        self.cols: list[list] = [[] for _ in range(COLUMNS)]

    def __len__(self) -> int:
        return len(self.cols[0])

    def add(self, r: Record, kind: int, position: int) -> None:
        c = self.cols
        c[0].append(position)
        c[1].append(r.store_ms)
        lmqs = None if kind == HELD else [name for name, _ in r.dispatch]
        if kind == DISPATCH:  # the held record's fields come from the join
            for i in range(2, 9):
                c[i].append(None)
        else:
            c[2].append(r.born_ms)
            c[3].append(r.origin)
            c[4].append(r.protocol.name)
            c[5].append(r.topic)
            c[6].append(len(r.body))
            c[7].append(r.qos)
            c[8].append(r.retain)
        c[9].append(lmqs)
        c[10].append(kind)

    def flush(self):
        import pyarrow as pa

        n = len(self)
        arrays = [pa.array(col, type=self.schema.field(i).type) for i, col in enumerate(self.cols)]
        arrays.append(pa.nulls(n, type=self.schema.field(COLUMNS).type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _report_batch(schema, report: RangeReport):
    import pyarrow as pa

    arrays = [pa.nulls(1, type=schema.field(i).type) for i in range(COLUMNS)]
    arrays.append(pa.array([report.as_row()], type=schema.field(COLUMNS).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def keep_row(record: Record, report: RangeReport, flt: ReadFilter) -> bool:
    """Whether the reader emits ``record`` (a message, held record or dispatch in the
    window, not ``$SYS`` unless asked for), counting it in ``report`` either way."""
    since, until = flt.since_ms, flt.until_ms
    classified = classify(record)
    if classified is None:
        report.control_records += 1
        return False
    kind = classified[0]
    # the window is on the dispatch time: a held record is kept unless its store
    # time is past the window (its dispatch can only come later)
    if (since is not None and kind != HELD and record.store_ms < since) or (
        until is not None and record.store_ms >= until
    ):
        report.filtered_records += 1
        return False
    if not flt.include_sys and kind != DISPATCH and is_sys_topic(record.topic):
        report.sys_records += 1
        return False
    if kind == HELD:
        report.held_records += 1
    else:
        report.records += 1
    return True


def _row_batch(schema, records: Iterable[Record]):
    builder = _BatchBuilder(schema)
    for record in records:
        classified = classify(record)
        assert classified is not None  # only what keep_row kept
        builder.add(record, *classified)
    return builder.flush() if len(builder) else None


#: Decoders: a batch at a time (:mod:`spark.columnar`), or record by record
#: (:func:`scan_range`, the reference the columnar one is tested against).
DECODERS = ("columnar", "rows")


def scan_task(data, task: dict, flt: ReadFilter, schema, decoder: str = "columnar") -> Iterator:
    report = RangeReport(task["segment"], task["base"], task["start"], task["end"])
    where = {
        "base": task["base"],
        "start": task["start"],
        "end": task["end"],
        "limit": task["limit"],
        "expected_bytes": task["expected_bytes"],
        "is_last": task["is_last"],
        "report": report,
    }
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
    if decoder == "rows":
        builder = _BatchBuilder(schema)
        # scan_range counts the control records and yields the rest
        for record in scan_range(data, segment=task["segment"], **where):
            if not keep_row(record, report, flt):
                continue
            classified = classify(record)
            assert classified is not None
            builder.add(record, *classified)
            if len(builder) >= BATCH_ROWS:
                yield builder.flush()
        if len(builder):
            yield builder.flush()
    else:
        from spark.columnar import scan_columns

        yield from scan_columns(
            data,
            **where,
            flt=flt,
            schema=schema,
            row_batch=lambda records: _row_batch(schema, records),
        )
    yield _report_batch(schema, report)


def arrow_raw_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark.schema import RAW_SCHEMA

    return to_arrow_schema(RAW_SCHEMA)


def source_batch(batch, schema, *, held: bool, report: bool):
    """A batch of the data source's rows (``schema``: SOURCE_SCHEMA, with ``report`` if
    ``report``) from a batch of RAW_SCHEMA rows, or None if nothing of it is wanted:
    the derived columns computed by Arrow, vectorised (times and dates in UTC)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    reports = batch.column("report")
    if reports.null_count < len(reports):  # a report row (scan_task yields it alone)
        if not report:
            return None
        arrays = [pa.nulls(len(batch), schema.field(i).type) for i in range(len(schema) - 2)]
        arrays.append(pa.array(["report"] * len(batch), schema.field(len(schema) - 2).type))
        arrays.append(reports.cast(schema.field(len(schema) - 1).type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    if not held:
        batch = batch.filter(pc.equal(batch.column("kind"), PLAIN))
    n = len(batch)
    if n == 0:
        return None
    store_ms = batch.column("store_ms")
    field = schema.field
    ts = field("store_time").type

    def time_of(ms):
        return pc.cast(pc.multiply(ms, 1000), ts)

    days = np.floor_divide(store_ms.to_numpy(zero_copy_only=False), 86_400_000)
    lmqs = batch.column("lmqs")
    arrays = [
        batch.column("position"),
        time_of(store_ms),
        time_of(batch.column("born_ms")),
        pa.array(days.astype(np.int32)).cast(field("date").type),
        batch.column("device"),
        batch.column("protocol"),
        batch.column("topic"),
        pc.split_pattern(batch.column("topic"), "/").cast(field("topic_levels").type),
        batch.column("payload_size"),
        batch.column("qos"),
        batch.column("retained"),
        pc.list_value_length(lmqs).cast(pa.int32()),
        lmqs.cast(field("lmqs").type),
        _KIND_NAMES.take(batch.column("kind")),
    ]
    if report:
        arrays.append(pa.nulls(n, field("report").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _KindNames:
    """RAW_SCHEMA's kind numbers as the data source's names (an Arrow array, lazily)."""

    def take(self, kinds):
        import pyarrow as pa

        return pa.array(list(KIND_NAMES), pa.string()).take(kinds)


_KIND_NAMES = _KindNames()
#: The data source's ``kind`` of PLAIN, HELD and DISPATCH rows.
KIND_NAMES = ("message", "held", "dispatch")


def _read_hadoop(flt: ReadFilter, tasks_by_name: dict[str, dict], schema, decoder: str):
    def run(batches):
        from pyspark.sql.pandas.types import to_arrow_schema

        raw_schema = arrow_raw_schema()
        out_schema = to_arrow_schema(schema, timezone="UTC")
        for batch in batches:
            paths = batch.column("path").to_pylist()
            contents = batch.column("content")
            for i, path in enumerate(paths):
                task = tasks_by_name.get(path.rsplit("/", 1)[-1])
                if task is None:  # a segment created after the listing
                    continue
                data = contents[i].as_py() or b""
                for raw in scan_task(data, task, flt, raw_schema, decoder):
                    out = source_batch(raw, out_schema, held=True, report=True)
                    if out is not None:
                        yield out

    return run


@contextmanager
def mapped(path: str) -> Iterator:
    """The bytes of the segment at ``path`` (a local path or ``file:`` URI), mapped
    read-only (an empty file: ``b""``, which mmap cannot map)."""
    with open(local_path(path), "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


def _write_records_task(task: dict, flt: ReadFilter, decoder: str, records_dir: str, schema):
    """One read task of the fan-out job: the messages dispatched when stored go straight
    from the Arrow batches to Parquet files under ``records_dir/date=<day>/`` (pyarrow,
    in this worker); yields the rest (held records, dispatches, the report) as batches
    of ``schema`` (the data source's rows with ``report``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spark.schema import RECORD_SCHEMA

    raw_schema = arrow_raw_schema()
    columns = [n for n in RECORD_SCHEMA.names if n != "date"]
    name = f"part-{task['base']:020d}-{task['start']:012d}.parquet"
    writers: dict[str, pq.ParquetWriter] = {}

    def scan(data):
        for raw in scan_task(data, task, flt, raw_schema, decoder):
            batch = source_batch(raw, schema, held=True, report=True)
            if batch is None:
                continue
            message = pc.equal(batch.column("kind"), KIND_NAMES[PLAIN])
            rest = batch.filter(pc.invert(message))
            if len(rest):
                yield rest
            plain = batch.filter(message)
            if not len(plain):
                continue
            dates = plain.column("date")
            for day in pc.unique(dates).to_pylist():
                part = plain.filter(pc.equal(dates, pa.scalar(day, dates.type)))
                table = pa.Table.from_batches([part]).select(columns)
                key = day.isoformat()
                if key not in writers:
                    directory = os.path.join(records_dir, f"date={key}")
                    os.makedirs(directory, exist_ok=True)
                    writers[key] = pq.ParquetWriter(os.path.join(directory, name), table.schema)
                writers[key].write_table(table)

    try:
        with mapped(task["path"]) as data:
            yield from scan(data)
    finally:
        for writer in writers.values():
            writer.close()


def read_and_write_records(
    session, segments, flt: ReadFilter, split_bytes: int, decoder: str, records_dir: str
):
    """The fan-out job's read pass (local data and a local ``records_dir``): every task
    decodes its byte range and writes its messages to ``records_dir`` (Parquet, by
    ``date``) itself; returns the frame of what is left (held records, dispatches and
    one report row per task: the data source's rows with ``report``), lazily."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark.schema import SEGMENT_TASK_SCHEMA, source_schema

    schema = source_schema(report=True)
    tasks = plan_tasks(segments, split_bytes)

    def run(batches):
        out_schema = to_arrow_schema(schema, timezone="UTC")
        for batch in batches:
            for task in batch.to_pylist():
                yield from _write_records_task(task, flt, decoder, records_dir, out_schema)

    rdd = session.sparkContext.parallelize(tasks, numSlices=max(1, len(tasks)))
    frame = session.createDataFrame(rdd, SEGMENT_TASK_SCHEMA)
    return frame.mapInArrow(run, schema)


def dispatched(rows):
    """One row per dispatched message (RECORD_SCHEMA) from the data source's rows read
    with ``held`` (SOURCE_SCHEMA): the messages dispatched when stored, and each
    dispatch of a held record joined with it on the held record's position (a dispatch
    whose held record is not in the log any more, removed by retention, or not read,
    cannot be described and is left out). DataFrame expressions only."""
    from pyspark.sql import functions as F

    from spark.schema import RECORD_SCHEMA

    kind = F.col("kind")
    columns = RECORD_SCHEMA.names
    from_dispatch = ["position", "store_time", "date", "fanout", "lmqs"]
    held = rows.where(kind == KIND_NAMES[HELD]).select(
        *[c for c in columns if c not in from_dispatch or c == "position"]
    )
    later = (
        rows.where(kind == KIND_NAMES[DISPATCH])
        .select(*from_dispatch)
        .join(held, "position", "inner")
        .select(*columns)
    )
    return rows.where(kind == KIND_NAMES[PLAIN]).select(*columns).unionByName(later)


@dataclass
class CommitLogScan:
    """One pass over the log: :attr:`records` and :attr:`report` share :attr:`raw`.

    Persist :attr:`raw` (:meth:`persist`) before using both, or each action reads the
    segments again.
    """

    raw: DataFrame  # the data source's rows, with held records and reports
    segments: list[SegmentFile]

    @property
    def records(self):
        """One row per dispatched message (RECORD_SCHEMA): :func:`dispatched`."""
        return dispatched(self.raw)

    @property
    def report(self):
        from pyspark.sql import functions as F

        return self.raw.where(F.col("report").isNotNull()).select("report.*")

    def persist(self) -> CommitLogScan:
        from pyspark import StorageLevel

        self.raw = self.raw.persist(StorageLevel.MEMORY_AND_DISK)
        return self

    def unpersist(self) -> None:
        self.raw.unpersist()


def parse_time(text: str) -> datetime:
    """ISO 8601 date or date-time (naive means UTC), or epoch milliseconds."""
    text = text.strip()
    if text.isdigit():
        return _EPOCH + timedelta(milliseconds=int(text))
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use ISO 8601, e.g. 2024-05-01T12:00Z, or epoch ms)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def to_ms(t: datetime | int | None) -> int | None:
    if t is None or isinstance(t, int):
        return t
    return int(t.timestamp() * 1000)


def read_commit_log(
    session,
    data_dir: str,
    *,
    since: datetime | int | None = None,
    until: datetime | int | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    mode: str = "auto",
    segments: list[SegmentFile] | None = None,
    include_sys: bool = False,
    decoder: str = "columnar",
) -> CommitLogScan:
    """Plan and (lazily) read the commit log of ``data_dir``.

    ``since``/``until`` (datetimes, or epoch milliseconds) keep records with
    ``since <= store time < until``; ``$SYS`` messages only with ``include_sys``.
    ``mode``: ``local`` reads through the ``lmq`` data source (:mod:`spark.datasource`:
    Python maps the files, byte-range splits), ``hadoop`` reads them through Spark's
    ``binaryFile`` source (any Hadoop URI; one task per segment), ``auto`` picks
    ``local`` for local paths.
    """
    from spark.schema import SEGMENT_TASK_SCHEMA, source_schema

    if segments is None:
        segments = list_segments(data_dir, session)
    if mode == "auto":
        mode = "local" if is_local(data_dir) else "hadoop"
    flt = ReadFilter(to_ms(since), to_ms(until), include_sys)
    if mode == "local":
        from spark.datasource import register

        register(session)
        options = {
            "held": "true",
            "report": "true",
            "sys": str(include_sys).lower(),
            "splitBytes": str(split_bytes),
            "decoder": decoder,
        }
        if flt.since_ms is not None:
            options["since"] = str(flt.since_ms)
        if flt.until_ms is not None:
            options["until"] = str(flt.until_ms)
        raw = session.read.format("lmq").options(**options).load(data_dir)
    elif mode == "hadoop":
        # one task per whole segment: binaryFile hands each task complete files
        tasks = plan_tasks(segments, split_bytes=1 << 62)
        names = [f.name for f in SEGMENT_TASK_SCHEMA.fields]
        by_name = {t[1]: dict(zip(names, t, strict=True)) for t in tasks}
        files = (
            session.read.format("binaryFile")
            .load([s.path for s in segments])
            .select("path", "content")
        )
        schema = source_schema(report=True)
        raw = files.mapInArrow(_read_hadoop(flt, by_name, schema, decoder), schema)
    else:
        raise ValueError(f"mode must be auto, local or hadoop, not {mode!r}")
    return CommitLogScan(raw=raw, segments=segments)
