"""``lmq analyze fanout`` leaves the gateway's own ``$SYS`` statistics out of the device
figures unless asked (``--include-sys``, ``JobConfig.include_sys``): on a gateway that
ran for a while they outnumber a small fleet's messages."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from broker_core.record import Message, Protocol  # noqa: E402
from broker_core.store import MessageStore  # noqa: E402
from spark.job import JobConfig, run  # noqa: E402

pytestmark = [pytest.mark.spark]


def test_sys_left_out_unless_included(spark_session, tmp_path):
    with MessageStore.open(tmp_path / "data") as store:
        for _ in range(3):
            store.append(
                Message(
                    topic="sensors/kitchen/temp",
                    body=b"21.5",
                    origin="dev-1",
                    protocol=Protocol.MQTT,
                ),
                ["mqtt:sensors/#"],
            )
        for topic in ("$SYS/broker/uptime", "$SYS/broker/clients/connected", "$SYS"):
            store.append(Message(topic=topic, body=b"7", origin="$SYS", protocol=Protocol.MQTT), [])
    summaries = {}
    for include in (False, True):
        config = JobConfig(
            str(tmp_path / "data"),
            str(tmp_path / f"out-{include}"),
            include_sys=include,
            charts=False,
            write_records=False,
        )
        summaries[include] = run(spark_session, config).summary
    left_out, included = summaries[False], summaries[True]
    assert (left_out["messages"], left_out["devices"]) == (3, 1)
    assert [d["device"] for d in left_out["top_devices"]] == ["dev-1"]
    assert (included["messages"], included["devices"]) == (6, 2)
    assert {d["device"] for d in included["top_devices"]} == {"dev-1", "$SYS"}
    md = (tmp_path / "out-False" / "summary.md").read_text()
    assert "left out (--include-sys)" in md
