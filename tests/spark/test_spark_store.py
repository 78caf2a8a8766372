"""The reader on a log written by the real storage engine (format compatibility)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from broker_core.config import StoreConfig  # noqa: E402
from broker_core.record import Message, Protocol  # noqa: E402
from broker_core.store import MessageStore  # noqa: E402
from spark.reader import read_commit_log  # noqa: E402

pytestmark = [
    pytest.mark.spark,
]


def test_reader_sees_exactly_what_the_store_appended(spark_session, tmp_path):
    items = [
        (
            Message(
                topic=f"fleet/{i % 4}/truck{i % 11}/gps",
                body=bytes(i % 300),
                origin=f"truck{i % 11}",
                qos=i % 3,
                retain=i % 13 == 0,
                protocol=Protocol.MQTT,
            ),
            [f"mqtt/fleet/{i % 4}/#", "mqtt/#"][: 1 + i % 2] + [f"amqp/q{i % 5}"] * (i % 3 > 0),
        )
        for i in range(600)
    ]
    store = MessageStore.open(
        tmp_path / "data", config=StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096)
    )
    try:
        results = []
        for k in range(0, len(items), 50):
            results += store.append_batch(items[k : k + 50])
    finally:
        store.close()
    assert len(list((tmp_path / "data" / "commitlog").glob("*.log"))) > 1

    expected = []
    for (msg, lmqs), res in zip(items, results, strict=True):
        t = datetime.fromtimestamp(res.store_ms / 1000, tz=UTC)
        expected.append(
            Row(
                position=res.position,
                store_ms=t,
                device=msg.origin,
                topic=msg.topic,
                payload_size=len(msg.body),
                qos=msg.qos,
                retained=msg.retain,
                lmqs=list(lmqs),
            )
        )
    scan = read_commit_log(spark_session, str(tmp_path / "data"), split_bytes=16 * 1024).persist()
    try:
        actual = scan.records.select(
            "position",
            "store_time",
            "device",
            "topic",
            "payload_size",
            "qos",
            "retained",
            "lmqs",
        ).withColumnRenamed("store_time", "store_ms")
        assertDataFrameEqual(actual, spark_session.createDataFrame(expected, actual.schema))
        report = scan.report.collect()
        assert sum(r.skipped_bytes + r.tail_bytes for r in report) == 0
    finally:
        scan.unpersist()
