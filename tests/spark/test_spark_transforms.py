"""Every transform of spark/transforms.py on a handful of inline rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

pytest.importorskip("pyspark")

from pyspark.testing import assertDataFrameEqual  # noqa: E402

from spark import transforms as T  # noqa: E402
from spark.schema import RECORD_SCHEMA  # noqa: E402

pytestmark = [
    pytest.mark.spark,
]

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def rec(device, topic, lmqs, *, size=10, at=0.0, position=0):
    """One RECORD_SCHEMA row; ``at`` is seconds after T0."""
    t = T0 + timedelta(seconds=at)
    return (
        position,
        t,
        t,
        t.date(),
        device,
        "MQTT",
        topic,
        topic.split("/"),
        size,
        1,
        False,
        len(lmqs),
        list(lmqs),
    )


@pytest.fixture(scope="module")
def records(spark_session):
    rows = [
        rec("d1", "a/b/c", ["q1", "q2", "q3"], size=10, at=0),
        rec("d1", "a/b/c", ["q1"], size=20, at=30),
        rec("d2", "a/b/d", [], size=5, at=61),
        rec("d2", "a/x", ["q1", "q2"], size=7, at=65),
        rec("d3", "z", ["q3"] * 1 + ["q4", "q5", "q6", "q7", "q8"], size=1, at=130),
    ]
    return spark_session.createDataFrame(rows, RECORD_SCHEMA)


def frame(spark_session, rows, ddl):
    return spark_session.createDataFrame(rows, ddl)


def test_fanout_histogram(spark_session, records):
    actual = T.fanout_histogram(records, edges=(0, 1, 2, 5))
    expected = frame(
        spark_session,
        [("0", 0, 0, 1), ("1", 1, 1, 1), ("2-4", 2, 4, 2), ("5+", 5, None, 1)],
        "bucket string, lower int, upper int, messages long",
    )
    assertDataFrameEqual(actual, expected, checkRowOrder=True)


def test_fanout_histogram_rejects_bad_edges(records):
    with pytest.raises(ValueError):
        T.fanout_histogram(records, edges=(1, 2))
    with pytest.raises(ValueError):
        T.fanout_histogram(records, edges=(0, 2, 2))


def test_fanout_stats(spark_session, records):
    # fan-outs 3, 1, 0, 2, 6: sorted 0 1 2 3 6
    actual = T.fanout_stats(records, percentiles=(0.5, 0.9, 0.99))
    expected = frame(
        spark_session,
        [(5, 12 / 5, 2.0, 4.8, 5.88, 0, 6, 12)],
        "messages long, mean_fanout double, p50 double, p90 double, p99 double, "
        "min_fanout int, max_fanout int, deliveries long",
    )
    assertDataFrameEqual(actual, expected)
    assert T.percentile_name(0.999) == "p99_9"


def test_device_stats(spark_session, records):
    actual = T.device_stats(records)
    expected = frame(
        spark_session,
        [
            ("d1", 2, 30, 2.0, 3, 4, T0, T0 + timedelta(seconds=30)),
            ("d2", 2, 12, 1.0, 2, 2, T0 + timedelta(seconds=61), T0 + timedelta(seconds=65)),
            ("d3", 1, 1, 6.0, 6, 6, T0 + timedelta(seconds=130), T0 + timedelta(seconds=130)),
        ],
        "device string, messages long, bytes long, mean_fanout double, max_fanout int, "
        "deliveries long, first_seen timestamp, last_seen timestamp",
    )
    assertDataFrameEqual(actual, expected)


def test_topic_stats(spark_session, records):
    actual = T.topic_stats(records)
    expected = frame(
        spark_session,
        [
            ("a/b/c", 2, 30, 2.0, 3, 4, 1),
            ("a/b/d", 1, 5, 0.0, 0, 0, 1),
            ("a/x", 1, 7, 2.0, 2, 2, 1),
            ("z", 1, 1, 6.0, 6, 6, 1),
        ],
        "topic string, messages long, bytes long, mean_fanout double, max_fanout int, "
        "deliveries long, devices long",
    )
    assertDataFrameEqual(actual, expected)


@pytest.mark.parametrize(
    ("depth", "rows"),
    [
        (1, [(1, "a", 4, 42, 1.5, 3, 6, 2), (1, "z", 1, 1, 6.0, 6, 6, 1)]),
        (
            2,
            [
                (2, "a/b", 3, 35, 4 / 3, 3, 4, 2),
                (2, "a/x", 1, 7, 2.0, 2, 2, 1),
                (2, "z", 1, 1, 6.0, 6, 6, 1),
            ],
        ),
    ],
)
def test_topic_prefix_stats(spark_session, records, depth, rows):
    actual = T.topic_prefix_stats(records, depth)
    expected = frame(
        spark_session,
        rows,
        "depth int, prefix string, messages long, bytes long, mean_fanout double, "
        "max_fanout int, deliveries long, devices long",
    )
    assertDataFrameEqual(actual, expected)
    with pytest.raises(ValueError):
        T.topic_prefix_stats(records, 0)


def test_top_devices_and_topics(spark_session, records):
    devices = T.top_devices(records, 2).select("device", "messages")
    # d1 and d2 tie on messages: the name breaks the tie
    assertDataFrameEqual(
        devices,
        frame(spark_session, [("d1", 2), ("d2", 2)], "device string, messages long"),
        checkRowOrder=True,
    )
    by_fanout = T.top_devices(records, 1, by="mean_fanout").select("device", "mean_fanout")
    assertDataFrameEqual(
        by_fanout,
        frame(spark_session, [("d3", 6.0)], "device string, mean_fanout double"),
        checkRowOrder=True,
    )
    topics = T.top_topics(records, 3).select("topic", "messages")
    assertDataFrameEqual(
        topics,
        frame(
            spark_session,
            [("a/b/c", 2), ("a/b/d", 1), ("a/x", 1)],
            "topic string, messages long",
        ),
        checkRowOrder=True,
    )


def test_top_n_generic(spark_session):
    stats = frame(spark_session, [("x", 1), ("y", 3), ("w", 3)], "name string, n long")
    assertDataFrameEqual(
        T.top_n(stats, 2, by="n"),
        frame(spark_session, [("w", 3), ("y", 3)], "name string, n long"),
        checkRowOrder=True,
    )
    with pytest.raises(ValueError):
        T.top_n(stats, -1)


def test_traffic_per_minute(spark_session, records):
    actual = T.traffic_per_minute(records)
    m = T0.replace(tzinfo=None)  # the session zone is UTC
    expected = frame(
        spark_session,
        [
            (m, date(2024, 5, 1), 2, 30, 2.0, 3, 4, 1),
            (m + timedelta(minutes=1), date(2024, 5, 1), 2, 12, 1.0, 2, 2, 1),
            (m + timedelta(minutes=2), date(2024, 5, 1), 1, 1, 6.0, 6, 6, 1),
        ],
        "minute timestamp, date date, messages long, bytes long, mean_fanout double, "
        "max_fanout int, deliveries long, devices long",
    )
    assertDataFrameEqual(actual, expected, checkRowOrder=True)


def test_lmq_fan_in(spark_session, records):
    actual = T.lmq_fan_in(records)
    expected = frame(
        spark_session,
        [
            ("q1", 3, 2),
            ("q2", 2, 2),
            ("q3", 2, 2),
            ("q4", 1, 1),
            ("q5", 1, 1),
            ("q6", 1, 1),
            ("q7", 1, 1),
            ("q8", 1, 1),
        ],
        "lmq string, messages long, publishers long",
    )
    assertDataFrameEqual(actual, expected)


def test_fanout_change(spark_session):
    rows = [
        rec("steady", "t", ["q1", "q2"], at=0),
        rec("steady", "t", ["q1", "q2"], at=100),
        rec("grew", "t", ["q1"], at=0),
        rec("grew", "t", ["q1"], at=10),
        rec("grew", "t", ["q1", "q2", "q3", "q4"], at=100),
        rec("shrank", "t", ["q1", "q2", "q3"], at=5),
        rec("shrank", "t", [], at=110),
        rec("only_before", "t", ["q1"], at=1),
        rec("only_after", "t", ["q1"], at=101),
    ]
    records = spark_session.createDataFrame(rows, RECORD_SCHEMA)
    before = (T0, T0 + timedelta(seconds=60))
    after = (T0 + timedelta(seconds=60), T0 + timedelta(seconds=120))
    actual = T.fanout_change(records, before, after)
    expected = frame(
        spark_session,
        [
            ("grew", 2, 1.0, 1, 4.0, 3.0),
            ("shrank", 1, 3.0, 1, 0.0, -3.0),
            ("steady", 1, 2.0, 1, 2.0, 0.0),
        ],
        "device string, messages_before long, mean_fanout_before double, "
        "messages_after long, mean_fanout_after double, change double",
    )
    assertDataFrameEqual(actual, expected, checkRowOrder=True)
    # min_messages drops devices with too few messages in either window
    assertDataFrameEqual(
        T.fanout_change(records, before, after, min_messages=2).select("device"),
        frame(spark_session, [], "device string"),
    )


def test_one_pass_figures(spark_session):
    """The job's one-pass aggregations (topics and minutes together, every prefix
    depth together, devices with both halves, counts per fan-out value) give each
    figure as counted here in plain Python; a record without a client id is in the
    sums, not among the devices, and not compared between halves."""
    rows = [
        rec("d1", "a/b/c", ["q1", "q2"], size=3, at=0),
        rec("d1", "a/x", ["q1"], size=4, at=10),
        rec(None, "a/b/c", [], size=5, at=20),
        rec("d2", "a/b/c", ["q3"], size=6, at=70),
        rec(None, "z", ["q1"], size=7, at=80),
        rec("d2", "z", ["q1", "q2", "q3"], size=8, at=130),
        rec("d1", "a/b/c", ["q2", "q3", "q4", "q5"], size=9, at=135),
    ]
    records = spark_session.createDataFrame(rows, RECORD_SCHEMA)

    def figures(key_of) -> list[tuple]:
        groups: dict = {}
        for r in rows:
            groups.setdefault(key_of(r), []).append(r)
        out = []
        for key, rs in groups.items():
            fan = [r[11] for r in rs]
            devices = {r[4] for r in rs if r[4] is not None}
            out.append(
                (
                    key,
                    len(rs),
                    sum(r[8] for r in rs),
                    sum(fan) / len(rs),
                    max(fan),
                    sum(fan),
                    len(devices),
                )
            )
        return out

    traffic = (
        "messages long, bytes long, mean_fanout double, max_fanout int, deliveries long, "
        "devices long"
    )
    keyed = T.keyed_figures(records)
    assertDataFrameEqual(
        T.topics_of(keyed),
        frame(spark_session, figures(lambda r: r[6]), f"topic string, {traffic}"),
    )
    minutes = [
        (m, m.date(), *rest) for m, *rest in figures(lambda r: r[1].replace(second=0, tzinfo=None))
    ]
    assertDataFrameEqual(
        T.minutes_of(keyed),
        frame(spark_session, sorted(minutes), f"minute timestamp, date date, {traffic}"),
        checkRowOrder=True,
    )
    prefixes = [
        (depth, *row) for depth in (1, 2) for row in figures(lambda r, d=depth: "/".join(r[7][:d]))
    ]
    assertDataFrameEqual(
        T.topic_prefixes(records, (1, 2)),
        frame(spark_session, prefixes, f"depth int, prefix string, {traffic}"),
    )
    before = (T0, T0 + timedelta(seconds=60))
    after = (T0 + timedelta(seconds=60), T0 + timedelta(seconds=140))
    device_figures = T.device_figures(records, (before, after))
    assertDataFrameEqual(
        T.devices_of(device_figures).select("device", "messages", "deliveries"),
        frame(
            spark_session,
            [("d1", 3, 7), ("d2", 2, 4), (None, 2, 1)],
            "device string, messages long, deliveries long",
        ),
    )
    # d1: before 2 and 1 -> 1.5, after 4; d2: only after
    assertDataFrameEqual(
        T.fanout_change_of(device_figures),
        frame(
            spark_session,
            [("d1", 2, 1.5, 1, 4.0, 2.5)],
            "device string, messages_before long, mean_fanout_before double, "
            "messages_after long, mean_fanout_after double, change double",
        ),
    )
    # fan-outs 2 1 0 1 1 3 4: sorted 0 1 1 1 2 3 4
    counts = T.fanout_counts(records)
    assertDataFrameEqual(
        T.fanout_stats_of(counts, (0.5, 0.9)),
        frame(
            spark_session,
            [(7, 12 / 7, 1.0, 3.4, 0, 4, 12)],
            "messages long, mean_fanout double, p50 double, p90 double, "
            "min_fanout int, max_fanout int, deliveries long",
        ),
    )
    with pytest.raises(ValueError):
        T.keyed_figures(records, ("device",))
    with pytest.raises(ValueError):
        T.topic_prefixes(records, (1, 0))
