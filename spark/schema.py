"""Every schema of the fan-out analytics, in one place.

Three families:

- :data:`SEGMENT_TASK_SCHEMA`: one row per unit of reading work (a byte range of one
  commit-log segment), built on the driver from a directory listing.
- :data:`RAW_SCHEMA`: what the Python readers hand back to Spark. One scan yields both
  message rows (``report`` is null) and one report row per task (``report`` set, every
  other column null), so a single pass over the bytes gives the data *and* the account
  of what could not be read. :mod:`spark.reader` splits it into the two frames below.
- :data:`RECORD_SCHEMA`: one row per message record, the input of every transform.
  :data:`SCAN_REPORT_SCHEMA`: one row per task: records read, bytes skipped, problems.
- :data:`SOURCE_SCHEMA`: the rows of ``spark.read.format("lmq")`` (spark.datasource):
  RECORD_SCHEMA and the row's ``kind``, optionally a ``report`` column.

Top-level columns are nullable because Spark derives them from :data:`RAW_SCHEMA`; the
reader never emits a null in them. Times are ``TimestampType`` built from the record's
millisecond clocks; date and minute buckets follow the session time zone (the job sets
it to UTC).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SEGMENT_TASK_SCHEMA = StructType(
    [
        StructField("path", StringType(), False),  # URI or local path of the segment
        StructField("segment", StringType(), False),  # file name, e.g. 000...0042.log
        StructField("base", LongType(), False),  # log position of the segment's byte 0
        StructField("start", LongType(), False),  # byte range [start, end) this task owns
        StructField("end", LongType(), False),
        StructField("limit", LongType(), False),  # records end here (see reader.py)
        StructField("file_bytes", LongType(), False),  # file length when listed
        StructField("expected_bytes", LongType(), True),  # next base - base; null if last
        StructField("is_last", BooleanType(), False),
    ]
)

PROBLEM_SCHEMA = StructType(
    [
        StructField("position", LongType(), False),  # log position where the damage starts
        StructField("bytes", LongType(), False),  # bytes skipped from there
        StructField("reason", StringType(), False),
    ]
)

SCAN_REPORT_SCHEMA = StructType(
    [
        StructField("segment", StringType(), False),
        StructField("base", LongType(), False),
        StructField("start", LongType(), False),
        StructField("end", LongType(), False),
        StructField("records", LongType(), False),  # messages and dispatches emitted
        StructField("held_records", LongType(), False),  # delayed and half messages read
        StructField("control_records", LongType(), False),  # other non-message records
        StructField("filtered_records", LongType(), False),  # outside --since/--until
        StructField("sys_records", LongType(), False),  # $SYS messages left out
        StructField("record_bytes", LongType(), False),  # bytes of valid records
        StructField("skipped_bytes", LongType(), False),  # corrupt bytes, never silent
        StructField("tail_bytes", LongType(), False),  # unwritten/torn end of last segment
        StructField("problems", ArrayType(PROBLEM_SCHEMA, False), False),
    ]
)

RAW_SCHEMA = StructType(
    [
        StructField("position", LongType(), True),
        StructField("store_ms", LongType(), True),
        StructField("born_ms", LongType(), True),
        StructField("device", StringType(), True),
        StructField("protocol", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("payload_size", IntegerType(), True),
        StructField("qos", IntegerType(), True),
        StructField("retained", BooleanType(), True),
        StructField("lmqs", ArrayType(StringType(), False), True),
        # 0: a message dispatched when stored (every column above set);
        # 1: a held record (a delayed message, a half message): dispatched later, if
        #    ever; its columns as stored, ``lmqs`` null;
        # 2: a dispatch of a held record (a timer's fire, a transaction's commit or
        #    dead-lettering): ``position`` is the held record's, ``store_ms`` and ``lmqs``
        #    the dispatch's, every other column null. spark.reader joins 2 with 1.
        StructField("kind", IntegerType(), True),
        StructField("report", SCAN_REPORT_SCHEMA, True),
    ]
)

RECORD_SCHEMA = StructType(
    [
        StructField("position", LongType(), True),  # log position of the record
        StructField("store_time", TimestampType(), True),
        StructField("born_time", TimestampType(), True),
        StructField("date", DateType(), True),  # of store_time; Parquet partition key
        StructField("device", StringType(), True),  # origin: MQTT client id
        StructField("protocol", StringType(), True),  # MQTT, AMQP or INTERNAL
        StructField("topic", StringType(), True),
        StructField("topic_levels", ArrayType(StringType(), False), True),
        StructField("payload_size", IntegerType(), True),
        StructField("qos", IntegerType(), True),
        StructField("retained", BooleanType(), True),
        StructField("fanout", IntegerType(), True),  # len(dispatch list)
        StructField("lmqs", ArrayType(StringType(), False), True),
    ]
)

#: The rows of the ``lmq`` data source (spark.datasource): RECORD_SCHEMA and ``kind``
#: (``message``; with the option ``held``, also ``held`` and ``dispatch``: see
#: spark.reader.dispatched). Dates and times are UTC.
SOURCE_SCHEMA = StructType([*RECORD_SCHEMA.fields, StructField("kind", StringType(), True)])


def source_schema(*, report: bool = False) -> StructType:
    """:data:`SOURCE_SCHEMA`, and with ``report`` a last column ``report``
    (:data:`SCAN_REPORT_SCHEMA`), set on one row per partition (``kind`` ``report``)."""
    if not report:
        return SOURCE_SCHEMA
    return StructType([*SOURCE_SCHEMA.fields, StructField("report", SCAN_REPORT_SCHEMA, True)])
