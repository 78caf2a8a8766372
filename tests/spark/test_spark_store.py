"""The reader on a log written by the real storage engine (format compatibility)."""

from __future__ import annotations

import time
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


def test_delayed_and_transactional_messages_count_when_dispatched(spark_session, tmp_path):
    """A delayed message counts when its timer fires, a half message when it is committed
    or dead-lettered, with the dispatch's time and LMQs: never when stored, never if
    cancelled, rolled back or still pending (the held record and its dispatch may lie in
    different tasks and segments)."""
    store = MessageStore.open(
        tmp_path / "data",
        config=StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, txn_max_checks=0),
    )

    def msg(name: str) -> Message:
        return Message(
            topic=f"t/{name}", body=name.encode() * 20, origin=name, qos=1, protocol=Protocol.MQTT
        )

    def traffic(n: int) -> list:
        items = [
            (
                Message(topic="t/plain", body=bytes(600), origin=f"p{i}", protocol=Protocol.MQTT),
                [f"lmq{i % 3}"],
            )
            for i in range(n)
        ]
        return [(m, lmqs, r) for (m, lmqs), r in zip(items, store.append_batch(items), strict=True)]

    def now() -> int:
        time.sleep(0.005)  # a new millisecond on either side of what is bracketed
        t = int(time.time() * 1000)
        time.sleep(0.005)
        return t

    try:
        plain = traffic(100)
        soon = int(time.time() * 1000) + 50
        fire = store.append_delayed(msg("d-fire"), ["d1", "d2"], soon)
        cancelled = store.append_delayed(msg("d-cancel"), ["d1"], soon)
        pending = store.append_delayed(msg("d-pending"), ["d1"], soon + 86_400_000)
        commit = store.append_half(msg("h-commit"), ["h1", "h2", "h3"], "pg")
        rollback = store.append_half(msg("h-rollback"), ["h1"], "pg")
        dead = store.append_half(msg("h-dead"), ["h1"], "pg")
        plain += traffic(100)
        assert store.cancel_timer(cancelled.position)
        t_commit = now()
        store.end_transaction(commit.position, True)
        store.end_transaction(rollback.position, False)
        t_dead = now()
        assert store.transaction_checks_due(now=t_dead + 86_400_000) == []  # dead-lettered
        t_fire = now()
        while time.time() * 1000 < soon:
            time.sleep(0.01)
        assert store.fire_timers() == 1
        t_end = now()
        store.append_half(msg("h-pending"), ["h1"], "pg")
        plain += traffic(100)
    finally:
        store.close()
    assert len(list((tmp_path / "data" / "commitlog").glob("*.log"))) > 2

    def ms(t) -> int:
        return int(t.timestamp() * 1000)

    scan = read_commit_log(spark_session, str(tmp_path / "data"), split_bytes=4096).persist()
    try:
        rows = {r.position: r for r in scan.records.collect()}
        report = scan.report.collect()
    finally:
        scan.unpersist()
    expected = {r.position for _, _, r in plain} | {fire.position, commit.position, dead.position}
    assert set(rows) == expected
    for m, lmqs, r in plain:
        row = rows[r.position]
        assert (ms(row.store_time), row.device, row.lmqs, row.fanout) == (
            r.store_ms,
            m.origin,
            lmqs,
            1,
        )
    for res, name, lmqs, (lo, hi) in (
        (fire, "d-fire", ["d1", "d2"], (t_fire, t_end)),
        (commit, "h-commit", ["h1", "h2", "h3"], (t_commit, t_dead)),
        (dead, "h-dead", ["TRANS_CHECK_MAX_TIME_TOPIC"], (t_dead, t_fire)),
    ):
        row = rows[res.position]
        assert (row.device, row.topic, row.payload_size, row.qos, row.lmqs) == (
            name,
            f"t/{name}",
            len(name) * 20,
            1,
            lmqs,
        )
        assert ms(row.born_time) == res.store_ms  # born when stored ...
        assert lo <= ms(row.store_time) < hi  # ... counted when dispatched
    assert sum(r.held_records for r in report) == 7
    assert sum(r.records for r in report) == len(plain) + 3
    # the cancel's change record and the rollback's control record
    assert sum(r.control_records for r in report) == 2
    assert sum(r.skipped_bytes + r.tail_bytes for r in report) == 0
    assert pending.position not in rows

    # a window on the dispatch time: the delayed message stored before it, fired in it
    window = read_commit_log(
        spark_session, str(tmp_path / "data"), since=t_fire, until=t_end
    ).records.collect()
    assert [(r.position, r.lmqs) for r in window] == [(fire.position, ["d1", "d2"])]
