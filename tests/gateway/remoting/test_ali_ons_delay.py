"""Delayed messages from the real npm ``ali-ons`` producer (its own API: the
``delayTimeLevel`` setter, which sends ``DELAY``, and ``setStartDeliverTime``, Aliyun's
absolute ``__STARTDELIVERTIME``) to an ali-ons push consumer, through a gateway
subprocess: each delivered once, never before its due time, and soon after it.

Every node process is stopped by PID; every wait is bounded. If node or the npm packages
are missing the tests fail (``node_clients.require_node``), they never skip.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.grpc.test_grpc_send import create_topic

from ..gateway_process import GatewayProcess
from .node_clients import OnsProcess, produce, require_node

pytestmark = pytest.mark.slow

WAIT = 45.0


def test_delay_levels_and_start_deliver_time(tmp_path: Path) -> None:
    require_node()
    data = tmp_path / "data"
    create_topic(data, "onsDelay", "--type", "delay", "--queues", "2")
    gw = GatewayProcess(data).start()
    try:
        nameserver = f"127.0.0.1:{gw.ports['unified']}"
        c = OnsProcess("consume", nameSrv=nameserver, topic="onsDelay", group="GID_delay")
        try:
            c.wait_for(lambda e: e.get("ready") is True, WAIT)
            start_at = int(time.time() * 1000) + 3000
            sent = produce(nameserver, "onsDelay", "PID_delay", [
                {"body": "level1", "delayLevel": 1},  # 1 s
                {"body": "level2", "delayLevel": 2},  # 5 s
                {"body": "start", "startDeliverTime": start_at},
            ])
            assert all(s["status"] == "SEND_OK" for s in sent)
            started = {s["body"]: s["startedAt"] for s in sent}
            got = {m["body"]: m for m in c.collect("msg", 3, WAIT)}
            assert sorted(got) == ["level1", "level2", "start"]
            due = {"level1": started["level1"] + 1000, "level2": started["level2"] + 5000,
                   "start": start_at}
            for body, at in due.items():
                consumed = got[body]["consumedAt"]
                assert consumed >= at, (body, consumed - at)  # never before its due time
                assert consumed - at < 10_000, (body, consumed - at)  # and not lost
                # the consumer sees the message in its own topic, with the id it was sent with
                assert got[body]["topic"] == "onsDelay"
                assert got[body]["msgId"] == next(s["msgId"] for s in sent if s["body"] == body)
            assert got["level1"]["properties"]["DELAY"] == "1"
            assert got["start"]["properties"]["__STARTDELIVERTIME"] == str(start_at)
            assert c.quiet("msg", 2.0) == []  # each once
        finally:
            c.stop()
    finally:
        gw.stop()
