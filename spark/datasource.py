"""The commit log as a Spark data source: ``spark.read.format("lmq").load(data_dir)``.

A Python data source (Spark 4's :mod:`pyspark.sql.datasource`). Register it once per
session, then read the log from DataFrames or SQL::

    from spark.datasource import register
    register(spark)
    df = spark.read.format("lmq").option("since", "2024-05-01").load("/var/lib/lmq")
    spark.sql("CREATE TEMPORARY VIEW log USING lmq OPTIONS (path '/var/lib/lmq')")

Rows: :data:`spark.schema.SOURCE_SCHEMA`, one per message (the columns of
:data:`~spark.schema.RECORD_SCHEMA`, times and dates in UTC, and ``kind``). Planning
is :mod:`spark.reader`'s (segments listed on the driver, one partition per byte range of
``splitBytes``); each partition maps its segment and decodes it a batch at a time
(:mod:`spark.columnar`) into Arrow record batches handed to the JVM as they are.

Options (all strings, as Spark passes them):

``since``, ``until``
    keep records with ``since <= store time < until`` (ISO 8601, naive = UTC, or epoch
    milliseconds).
``sys``
    ``true`` also returns the gateway's own ``$SYS/...`` statistics messages; by default
    they are left out (and counted in the report's ``sys_records``).
``held``
    ``true`` also returns the *held* records (delayed messages, transaction half
    messages: ``kind`` = ``held``, ``lmqs`` null) and their *dispatches* (a timer's
    fire, a transaction's commit or dead-lettering: ``kind`` = ``dispatch``, with the
    held record's ``position``, the dispatch's store time and LMQs, the rest null).
    :func:`spark.reader.dispatched` joins them into one message row each, as the
    fan-out job counts them. By default only messages dispatched when stored are
    returned (``kind`` = ``message``).
``report``
    ``true`` adds a ``report`` column (:data:`~spark.schema.SCAN_REPORT_SCHEMA`) and one
    row per partition with ``kind`` = ``report`` and every other column null: what the
    partition read, skipped as damaged, left as a torn tail.
``splitBytes``
    the byte range of one partition (default 16 MiB).
``decoder``
    ``columnar`` (default) or ``rows``: record by record with
    :func:`broker_core.record.decode_record`, the reference (slower).

Paths are local (or ``file:`` URIs) seen by every executor; for ``hdfs://`` and other
Hadoop URIs use :func:`spark.reader.read_commit_log` with ``mode="hadoop"``.

SQL: ``CREATE TEMPORARY VIEW ... USING lmq OPTIONS (path ...)`` keeps its options. A
catalog table (``CREATE TABLE t USING lmq ...``) does not: pyspark 4's wrapper of a
Python data source (``PythonDataSourceV2.getTable``) drops the table's options and
location, so a read of ``t`` gets only the options of the query itself:
``SELECT ... FROM t WITH ('dataDir' = '/var/lib/lmq')`` (or
``spark.read.option("dataDir", ...).table("t")``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark import reader as R
from spark.schema import SEGMENT_TASK_SCHEMA, source_schema

_TASK_FIELDS = [f.name for f in SEGMENT_TASK_SCHEMA.fields]
_TRUE = ("true", "1", "yes")


def _flag(options, name: str) -> bool:
    value = options.get(name)
    if value is None:
        return False
    if str(value).lower() in _TRUE:
        return True
    if str(value).lower() in ("false", "0", "no", ""):
        return False
    raise ValueError(f"option {name} must be true or false, not {value!r}")


def _time_ms(options, name: str) -> int | None:
    value = options.get(name)
    if value is None or str(value) == "":
        return None
    return R.to_ms(R.parse_time(str(value)))


class SegmentRange(InputPartition):
    """One read task: a row of :data:`~spark.schema.SEGMENT_TASK_SCHEMA` (a dict)."""

    def __init__(self, task: dict) -> None:
        super().__init__(task)


class LmqDataSource(DataSource):
    """``format("lmq")``: see the module's documentation for the rows and options."""

    @classmethod
    def name(cls) -> str:
        return "lmq"

    def schema(self) -> StructType:
        return source_schema(report=_flag(self.options, "report"))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LmqReader(dict(self.options), schema)


class LmqReader(DataSourceReader):
    def __init__(self, options: dict, schema: StructType) -> None:
        options = {k.lower(): v for k, v in options.items()}
        # load(path) and a temporary view's OPTIONS pass ``path``; a catalog table's
        # read passes only the query's own options (see the module's documentation)
        path = options.get("datadir") or options.get("path")
        if not path:
            raise ValueError(
                "format('lmq') needs the data directory: .load(data_dir), the option "
                "dataDir, or in SQL a temporary view (CREATE TEMPORARY VIEW v USING lmq "
                "OPTIONS (path '...')); a table made by CREATE TABLE ... USING lmq does not "
                "keep its OPTIONS or LOCATION (pyspark 4 drops them), so give them where "
                "it is read: SELECT ... FROM t WITH ('dataDir' = '...')"
            )
        if not R.is_local(path):
            raise ValueError(
                f"format('lmq') reads local paths (or file: URIs) only, not {path}; use "
                "spark.reader.read_commit_log(..., mode='hadoop') for Hadoop URIs"
            )
        self.path = path
        self.filter = R.ReadFilter(
            _time_ms(options, "since"),
            _time_ms(options, "until"),
            include_sys=_flag(options, "sys"),
        )
        self.held = _flag(options, "held")
        self.report = _flag(options, "report")
        split = options.get("splitbytes")
        self.split_bytes = int(split) if split else R.DEFAULT_SPLIT_BYTES
        self.schema = schema
        self.decoder = options.get("decoder") or "columnar"
        if self.decoder not in R.DECODERS:
            raise ValueError(f"option decoder must be one of {', '.join(R.DECODERS)}")

    def partitions(self) -> list[InputPartition]:
        tasks = R.plan_tasks(R.list_segments(self.path), self.split_bytes)
        return [SegmentRange(dict(zip(_TASK_FIELDS, t, strict=True))) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        task = partition.value
        raw_schema = R.arrow_raw_schema()
        out_schema = to_arrow_schema(self.schema, timezone="UTC")
        for batch in _scan_file(task, self.filter, raw_schema, self.decoder):
            converted = R.source_batch(batch, out_schema, held=self.held, report=self.report)
            if converted is not None:
                yield converted


def _scan_file(task: dict, flt: R.ReadFilter, raw_schema, decoder: str) -> Iterator:
    with R.mapped(task["path"]) as data:
        yield from R.scan_task(data, task, flt, raw_schema, decoder)


def register(session) -> None:
    """Register ``format("lmq")`` (and ``USING lmq``) in ``session``."""
    session.dataSource.register(LmqDataSource)
