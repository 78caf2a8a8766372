"""The connector's rules through the admin API: two ``lmq serve`` processes, the
first running a rule that copies a topic of the second into its own; disabled over the
API, the rule copies nothing; enabled again, it catches up."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import requests

from ..gateway_process import GatewayProcess
from .support import AdminClient, admin_gateway, audit_lines

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def publish(port: int, topic: str, body: str) -> None:
    r = requests.post(
        f"http://127.0.0.1:{port}/v1/topics/{topic}/messages", json={"body": body}, timeout=10
    )
    assert r.status_code == 201, r.text


def copied(api: AdminClient) -> int:
    rows = api.get("/lmqs", prefix="rmq:copy:")["items"]
    return sum(r["messages"] for r in rows)


def wait_for(pred, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def rules_config(tmp_path: Path, source_port: int, target_port: int,
                 heartbeat_interval: float) -> Path:
    """The target's configuration: one rule copying the source's ``orders`` into its own
    ``copy``, from the earliest message."""
    config = tmp_path / "a.toml"
    config.write_text(f"""
[connector]
heartbeat_interval = {heartbeat_interval}
retry_max = 1
[connector.clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{source_port}"]
[connector.clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{target_port}"]
[[connector.rules]]
name = "b-to-a"
source = "b"
topic = "orders"
target = "a"
target_topic = "copy"
start = "earliest"
""")
    return config


def test_disable_and_enable_a_rule(tmp_path: Path) -> None:
    target_port = free_port()  # named in the rules before the target starts
    source = GatewayProcess(tmp_path / "b").start()
    try:
        b_unified = source.ports["unified"]
        config = rules_config(tmp_path, b_unified, target_port, heartbeat_interval=0)
        publish(b_unified, "orders", "one")
        target = admin_gateway(
            tmp_path / "a", "--config", str(config), "--unified-port", str(target_port)
        ).start()
        try:
            api = AdminClient(target.ports["admin"])
            assert wait_for(lambda: copied(api) == 1)
            rules = api.get("/connector/rules")["items"]
            assert [r["rule"] for r in rules] == ["b-to-a"]

            def rule() -> dict:  # type: ignore[type-arg]
                [row] = api.get("/connector/rules")["items"]
                return row  # type: ignore[no-any-return]

            # its state, lag and errors: running, caught up, the one copied
            assert wait_for(lambda: rule()["messages"] == 1 and rule()["lag"] == 0)
            row = rule()
            assert (row["state"], row["errors"], row["last_error"]) == ("running", 0, ""), row
            assert "delay_ms" in row  # (measured by heartbeats, off here: None)
            off = api.call("POST", "/connector/rules/b-to-a/disable")
            assert off.status_code == 200 and off.json()["state"] == "stopped", off.text
            publish(b_unified, "orders", "two")
            assert not wait_for(lambda: copied(api) > 1, timeout=3.0)
            on = api.call("POST", "/connector/rules/b-to-a/enable")
            assert on.status_code == 200, on.text
            assert wait_for(lambda: copied(api) == 2)
            missing = api.call("POST", "/connector/rules/nope/disable")
            assert missing.status_code == 404 and missing.json()["field"] == "rule"
            actions = [(a["action"], a["status"]) for a in audit_lines(target.data_dir)]
            assert actions == [
                ("connector.disable", 200),
                ("connector.enable", 200),
                ("connector.disable", 404),
            ]
        finally:
            target.stop()
    finally:
        source.stop()


def test_a_rules_delay_measured_by_its_heartbeats(tmp_path: Path) -> None:
    """With heartbeats on, the rule's ``delay_ms`` is the age of the newest heartbeat
    copied to the target (docs/connector.md): a number once one has arrived."""
    target_port = free_port()
    source = GatewayProcess(tmp_path / "b").start()
    try:
        config = rules_config(tmp_path, source.ports["unified"], target_port,
                              heartbeat_interval=0.5)
        target = admin_gateway(
            tmp_path / "a", "--config", str(config), "--unified-port", str(target_port)
        ).start()
        try:
            api = AdminClient(target.ports["admin"])

            def delay() -> float | None:
                [row] = api.get("/connector/rules")["items"]
                return row["delay_ms"]  # type: ignore[no-any-return]

            assert wait_for(lambda: delay() is not None)
            measured = delay()
            assert measured is not None and 0 <= measured < 30_000, measured
        finally:
            target.stop()
    finally:
        source.stop()
