"""Pure DataFrame -> DataFrame transforms over :data:`spark.schema.RECORD_SCHEMA` rows.

Each function selects the columns it needs first and names every output column in a
final ``select``, so its contract is readable in one place and it can be tested alone on
a handful of inline rows. Nothing here reads or writes files, collects, or caches.

Vocabulary: a record's *fan-out* is the number of LMQs it was dispatched to; its
*deliveries* are the same number summed over records (queue entries written). Means are
over messages. Percentiles are exact (Spark's ``percentile``: linear interpolation
between the closest ranks, numpy's default) — fan-out has few distinct values, so exact
costs no more than approximate. Ties in top-N lists break by name, ascending.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

#: Lower edges of the fan-out histogram buckets: [0], [1], [2], [3,5), [5,10), ...
DEFAULT_FANOUT_EDGES: tuple[int, ...] = (
    0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
)  # fmt: skip
DEFAULT_PERCENTILES: tuple[float, ...] = (0.5, 0.9, 0.99)


def percentile_name(q: float) -> str:
    """``0.5 -> "p50"``, ``0.999 -> "p99_9"``."""
    return "p" + f"{q * 100:g}".replace(".", "_")


def _traffic_aggs() -> list[Column]:
    return [
        F.count(F.lit(1)).alias("messages"),
        F.sum("payload_size").cast("long").alias("bytes"),
        F.avg("fanout").alias("mean_fanout"),
        F.max("fanout").alias("max_fanout"),
        F.sum("fanout").cast("long").alias("deliveries"),
    ]


_TRAFFIC_COLUMNS = ["messages", "bytes", "mean_fanout", "max_fanout", "deliveries"]


def _traffic_and_devices(rows: DataFrame, keys: Sequence[str], spread: bool = True) -> DataFrame:
    """The traffic figures (:func:`_traffic_aggs`) and distinct ``devices`` per ``keys``
    of ``rows`` (the keys, device, payload_size, fanout).

    Counted per (keys, device), then per keys: the same figures as ``_traffic_aggs``
    beside ``countDistinct("device")`` (the mean is the same division of the same
    integer sums; a null device is in the sums, not among the devices), without the row
    expansion Spark plans for a distinct aggregate beside others (about half the time).
    ``spread``: the rows are partitioned by the keys once and both aggregations run
    where they are (one shuffle; for many keys). Without it Spark aggregates per (keys,
    device) before its shuffle and again per keys (for a handful of keys, which would
    put nearly every row in one partition).
    """
    keys = list(keys)
    pairs = rows.repartition(*keys) if spread else rows
    return (
        pairs.groupBy(*keys, "device")
        .agg(
            F.count(F.lit(1)).alias("_n"),
            F.sum("payload_size").alias("_bytes"),
            F.sum("fanout").alias("_fanout"),
            F.max("fanout").alias("_max"),
        )
        .groupBy(*keys)
        .agg(
            F.coalesce(F.sum("_n"), F.lit(0)).cast("long").alias("messages"),
            F.sum("_bytes").cast("long").alias("bytes"),
            (F.sum("_fanout").cast("double") / F.sum("_n").cast("double")).alias("mean_fanout"),
            F.max("_max").alias("max_fanout"),
            F.sum("_fanout").cast("long").alias("deliveries"),
            F.count("device").alias("devices"),
        )
    )


def fanout_counts(records: DataFrame) -> DataFrame:
    """Messages per fan-out value (a few hundred rows at most), with the first and last
    store time of each: what :func:`fanout_stats_of` and :func:`fanout_histogram_of`
    (and the job's time range) need, from one pass over the records."""
    return (
        records.select("fanout", "store_time")
        .groupBy("fanout")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.min("store_time").alias("first_store_time"),
            F.max("store_time").alias("last_store_time"),
        )
    )


def fanout_histogram(records: DataFrame, edges: Sequence[int] = DEFAULT_FANOUT_EDGES) -> DataFrame:
    """Messages per fan-out bucket ``[lower, upper]`` (``upper`` null for the last one).

    ``edges`` are the buckets' lower bounds, strictly increasing, starting at 0. Only
    non-empty buckets appear; rows are ordered by ``lower``.
    """
    return fanout_histogram_of(fanout_counts(records), edges)


def fanout_histogram_of(
    counts: DataFrame, edges: Sequence[int] = DEFAULT_FANOUT_EDGES
) -> DataFrame:
    """:func:`fanout_histogram` from :func:`fanout_counts` rows."""
    edges = list(edges)
    if not edges or edges[0] != 0 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise ValueError("edges must be strictly increasing and start at 0")
    pairs = list(zip(edges, edges[1:], strict=False))
    lower: Column = F.lit(edges[-1])
    for edge, nxt in reversed(pairs):
        lower = F.when(F.col("fanout") < nxt, F.lit(edge)).otherwise(lower)
    upper: Column = F.lit(None).cast("int")
    for edge, nxt in pairs:
        upper = F.when(F.col("lower") == edge, F.lit(nxt - 1)).otherwise(upper)
    label = F.when(F.col("upper").isNull(), F.format_string("%d+", "lower")).otherwise(
        F.when(F.col("lower") == F.col("upper"), F.col("lower").cast("string")).otherwise(
            F.format_string("%d-%d", "lower", "upper")
        )
    )
    return (
        counts.select(lower.cast("int").alias("lower"), "messages")
        .groupBy("lower")
        .agg(F.coalesce(F.sum("messages"), F.lit(0)).cast("long").alias("messages"))
        .select("lower", upper.alias("upper"), "messages")
        .orderBy("lower")
        .select(label.alias("bucket"), "lower", "upper", "messages")
    )


def fanout_stats(
    records: DataFrame, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> DataFrame:
    """One row: messages, mean, the requested percentiles (``p50``...), min and max
    fan-out, and deliveries."""
    return fanout_stats_of(fanout_counts(records), percentiles)


def fanout_stats_of(
    counts: DataFrame, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> DataFrame:
    """:func:`fanout_stats` from :func:`fanout_counts` rows: the same numbers as over
    the records (the percentiles weighted by the counts are Spark's ``percentile`` of
    the same values; the mean is the same division of the same integer sums)."""
    qs = list(percentiles)
    fanout, messages = F.col("fanout"), F.col("messages")
    sum_fanout = F.sum(fanout.cast("long") * messages)
    return counts.agg(
        F.coalesce(F.sum(messages), F.lit(0)).cast("long").alias("messages"),
        (
            sum_fanout.cast("double") / F.sum(F.when(fanout.isNotNull(), messages)).cast("double")
        ).alias("mean_fanout"),
        F.percentile(fanout, F.array(*[F.lit(q) for q in qs]), messages).alias("_qs"),
        F.min(fanout).alias("min_fanout"),
        F.max(fanout).alias("max_fanout"),
        sum_fanout.cast("long").alias("deliveries"),
    ).select(
        "messages",
        "mean_fanout",
        *[F.col("_qs")[i].alias(percentile_name(q)) for i, q in enumerate(qs)],
        "min_fanout",
        "max_fanout",
        "deliveries",
    )


_DEVICE_COLUMNS = ["device", *_TRAFFIC_COLUMNS, "first_seen", "last_seen"]
_CHANGE_COLUMNS = [
    "device",
    "messages_before",
    "mean_fanout_before",
    "messages_after",
    "mean_fanout_after",
    "change",
]


def device_figures(
    records: DataFrame, windows: tuple[tuple[datetime, datetime], ...] = ()
) -> DataFrame:
    """Per device: :func:`device_stats`'s columns and, with ``windows`` (before,
    after: ``[start, end)`` store times), each window's messages and mean fan-out
    (``messages_before``, ``mean_fanout_before``, ``..._after``): one aggregation for
    :func:`devices_of` and :func:`fanout_change_of`."""
    aggs = [
        *_traffic_aggs(),
        F.min("store_time").alias("first_seen"),
        F.max("store_time").alias("last_seen"),
    ]
    for (start, end), suffix in zip(windows, ("before", "after"), strict=False):
        inside = (F.col("store_time") >= F.lit(start)) & (F.col("store_time") < F.lit(end))
        aggs += [
            F.count(F.when(inside, F.lit(1))).alias(f"messages_{suffix}"),
            F.avg(F.when(inside, F.col("fanout"))).alias(f"mean_fanout_{suffix}"),
        ]
    return (
        records.select("device", "payload_size", "fanout", "store_time")
        .groupBy("device")
        .agg(*aggs)
    )


def device_stats(records: DataFrame) -> DataFrame:
    """Per device (MQTT client id): publishes, payload bytes, mean and max fan-out,
    deliveries, first and last store time."""
    return devices_of(device_figures(records))


def devices_of(figures: DataFrame) -> DataFrame:
    """:func:`device_stats` from :func:`device_figures` rows."""
    return figures.select(*_DEVICE_COLUMNS)


def topic_stats(records: DataFrame) -> DataFrame:
    """Per exact topic: messages, bytes, mean and max fan-out, deliveries, publishers."""
    return topics_of(keyed_figures(records, ("topic",)))


def keyed_figures(records: DataFrame, keys: Sequence[str] = ("topic", "minute")) -> DataFrame:
    """The traffic figures and distinct devices per topic and per minute (``keys``:
    either or both) from one pass over the records: a row per (``key``, value), the
    value in the column named by ``key`` (``topic``, ``minute``), the other null. For
    :func:`topics_of` and :func:`minutes_of`."""
    columns = {
        "topic": (F.col("topic"), "string"),
        "minute": (F.date_trunc("minute", "store_time"), "timestamp"),
    }
    unknown = set(keys) - set(columns)
    if not keys or unknown:
        raise ValueError(f"keys must be some of {', '.join(columns)}")
    keyed = F.array(
        *[
            F.struct(
                F.lit(key).alias("key"),
                *[
                    (value if name == key else F.lit(None).cast(kind)).alias(name)
                    for name, (value, kind) in columns.items()
                ],
            )
            for key in keys
        ]
    )
    rows = records.select(F.explode(keyed).alias("_k"), "device", "payload_size", "fanout")
    names = ["key", *columns]
    return _traffic_and_devices(
        rows.select(*[f"_k.{n}" for n in names], "device", "payload_size", "fanout"), names
    )


def topics_of(figures: DataFrame) -> DataFrame:
    """:func:`topic_stats` from :func:`keyed_figures` rows."""
    return figures.where(F.col("key") == "topic").select("topic", *_TRAFFIC_COLUMNS, "devices")


def topic_prefix_stats(records: DataFrame, depth: int) -> DataFrame:
    """Traffic per topic prefix of ``depth`` levels (``a/b/c`` at depth 2 is ``a/b``;
    shorter topics are their own prefix)."""
    return topic_prefixes(records, (depth,))


def topic_prefixes(records: DataFrame, depths: Sequence[int]) -> DataFrame:
    """:func:`topic_prefix_stats` of every depth in ``depths``, from one pass: each
    record is counted once per depth (its prefix at that depth)."""
    depths = list(depths)
    if not depths or min(depths) < 1:
        raise ValueError("depth must be at least 1")
    prefixes = F.array(
        *[
            F.struct(
                F.lit(d).alias("depth"),
                F.array_join(F.slice("topic_levels", 1, d), "/").alias("prefix"),
            )
            for d in depths
        ]
    )
    rows = records.select(
        F.explode(prefixes).alias("_p"), "device", "payload_size", "fanout"
    ).select("_p.depth", "_p.prefix", "device", "payload_size", "fanout")
    # not spread: a handful of prefixes (one at depth 1) would put nearly every row in
    # one partition, on one core
    return _traffic_and_devices(rows, ["depth", "prefix"], spread=False).select(
        "depth", "prefix", *_TRAFFIC_COLUMNS, "devices"
    )


def top_n(stats: DataFrame, n: int, by: str = "messages", key: str | None = None) -> DataFrame:
    """The ``n`` rows of ``stats`` with the largest ``by``, ties broken by ``key``
    (default: the first column) ascending; rows come out in that order."""
    if n < 0:
        raise ValueError("n must not be negative")
    key = key or stats.columns[0]
    columns = stats.columns
    return (
        stats.select(*columns).orderBy(F.col(by).desc(), F.col(key).asc()).limit(n).select(*columns)
    )


def top_devices(records: DataFrame, n: int, by: str = "messages") -> DataFrame:
    """The ``n`` hottest devices (:func:`device_stats` rows), most ``by`` first."""
    return top_n(device_stats(records), n, by=by, key="device")


def top_topics(records: DataFrame, n: int, by: str = "messages") -> DataFrame:
    """The ``n`` hottest topics (:func:`topic_stats` rows), most ``by`` first."""
    return top_n(topic_stats(records), n, by=by, key="topic")


def traffic_per_minute(records: DataFrame) -> DataFrame:
    """One row per minute (session time zone) that has traffic, in time order."""
    return minutes_of(keyed_figures(records, ("minute",)))


def minutes_of(figures: DataFrame) -> DataFrame:
    """:func:`traffic_per_minute` from :func:`keyed_figures` rows."""
    return (
        figures.where(F.col("key") == "minute")
        .orderBy("minute")
        .select(
            "minute",
            F.to_date("minute").alias("date"),
            *_TRAFFIC_COLUMNS,
            "devices",
        )
    )


def lmq_fan_in(records: DataFrame) -> DataFrame:
    """Per LMQ: messages dispatched to it and distinct publishing devices (fan-in).

    Counted per (LMQ, device) first, then per LMQ: the same figures as ``count`` and
    ``countDistinct("device")`` per LMQ, without the row expansion Spark plans for a
    distinct aggregate beside another (the largest cost of the job with a million LMQs).
    The rows are partitioned by LMQ once, so both aggregations run where the rows are:
    one shuffle of the (LMQ, device) rows instead of one per aggregation (the pairs
    are nearly all distinct, so a partial aggregation before a shuffle saves nothing).
    """
    return (
        records.select("device", F.explode("lmqs").alias("lmq"))
        .repartition("lmq")
        .groupBy("lmq", "device")
        .agg(F.count(F.lit(1)).alias("n"))
        .groupBy("lmq")
        .agg(
            F.sum("n").cast("long").alias("messages"),
            F.count("device").alias("publishers"),
        )
        .select("lmq", "messages", "publishers")
    )


def fanout_change(
    records: DataFrame,
    before: tuple[datetime, datetime],
    after: tuple[datetime, datetime],
    min_messages: int = 1,
) -> DataFrame:
    """Devices whose mean fan-out moved most from window ``before`` to window ``after``.

    Windows are ``[start, end)`` store times. Only devices with at least
    ``min_messages`` in both windows appear, largest absolute change first.
    """
    return fanout_change_of(device_figures(records, (before, after)), min_messages)


def fanout_change_of(figures: DataFrame, min_messages: int = 1) -> DataFrame:
    """:func:`fanout_change` from :func:`device_figures` rows with both windows (a
    device without a client id is not compared)."""
    least = max(1, min_messages)
    change = F.col("mean_fanout_after") - F.col("mean_fanout_before")
    return (
        figures.where(
            F.col("device").isNotNull()
            & (F.col("messages_before") >= least)
            & (F.col("messages_after") >= least)
        )
        .select(*_CHANGE_COLUMNS[:-1], change.alias("change"))
        .orderBy(F.abs("change").desc(), F.col("device").asc())
        .select(*_CHANGE_COLUMNS)
    )
