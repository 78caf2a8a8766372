"""``lmq connector validate / status / run`` and ``[connector]`` in ``lmq serve``."""
# ruff: noqa: E501  (rules texts read best on one line)

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from cli.main import main
from gateway.config import ConfigError, load_config

from ..gateway_process import GatewayProcess
from .connector_support import ConnectorProcess, bodies_of, eventually, read_all, rules_text, send


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_validate_names_the_bad_key(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        rules_text(1, 2, '[[rules]]\nname = "r"\nsource = "a"\ntopic = "t"\ntarget = "b"\n')
    )
    result = CliRunner().invoke(main, ["connector", "validate", str(good)])
    assert result.exit_code == 0 and "2 clusters, 1 rules, OK" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text(
        rules_text(1, 2, '[[rules]]\nname = "r"\nsource = "a"\ntopic = "t"\ntarget = "eu"\n')
    )
    result = CliRunner().invoke(main, ["connector", "validate", str(bad)])
    assert result.exit_code == 2
    assert "bad.toml: rules.1.target: unknown cluster 'eu'" in result.output
    result = CliRunner().invoke(main, ["connector", "run", "--rules", str(bad)])
    assert result.exit_code == 2 and "unknown cluster 'eu'" in result.output


def test_connector_table_errors_name_the_key(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text('[connector.clusters.a]\nkind = "kafka"\nendpoints = ["h:1"]\n')
    try:
        load_config(config)
    except ConfigError as exc:
        assert "connector: clusters.a.kind: must be one of" in str(exc)
    else:
        raise AssertionError("a bad [connector] table was accepted")
    rules = tmp_path / "rules.toml"
    rules.write_text(
        rules_text(1, 2, '[[rules]]\nname = "r"\nsource = "a"\ntopic = "t"\ntarget = "b"\n')
    )
    config.write_text(f'[connector]\nrules = "{rules}"\n')
    loaded = load_config(config).connector
    assert loaded is not None and [r.name for r in loaded.rules] == ["r"]


async def test_status_table_of_a_running_connector(tmp_path: Path) -> None:
    a = GatewayProcess(tmp_path / "a").start()
    b = GatewayProcess(tmp_path / "b").start()
    rules = tmp_path / "rules.toml"
    rules.write_text(
        rules_text(a.ports["unified"], b.ports["unified"],
                   '[[rules]]\nname = "orders"\nsource = "a"\ntopic = "orders"\ntarget = "b"\n'
                   'start = "earliest"\n', heartbeat=0.5)
    )  # fmt: skip
    conn = ConnectorProcess(rules).start()
    try:
        await send(a.ports["unified"], "orders", 8)

        async def delay_measured():
            s = conn.status()["orders"]
            done = s["delay_ms"] is not None and s["messages"] >= 8 and s["lag"] == 0
            return s if done else None

        status = await eventually(delay_measured)
        assert status, conn.status()
        assert status["heartbeats"] >= 1 and status["delay_ms"] >= 0
        result = CliRunner().invoke(main, ["connector", "status", "--url", conn.status_url])
        assert result.exit_code == 0, result.output
        header, row = result.output.splitlines()[:2]
        assert header.split() == [
            "RULE",
            "STATE",
            "LAG",
            "DELAY_MS",
            "TPS",
            "LAST_SYNC",
            "LAST_ERROR",
        ]
        # the lag is a number (a heartbeat may be on its way)
        assert row.split()[:2] == ["orders", "running"] and row.split()[2].isdigit()
        with urllib.request.urlopen(conn.status_url + "/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert 'lmq_connector_state{rule="orders",state="running"} 1' in metrics
        assert 'lmq_connector_messages_total{rule="orders"}' in metrics
        assert "lmq_connector_delay_ms" in metrics
        assert conn.stop() == 0
    finally:
        conn.stop()
        b.stop()
        a.stop()
    result = CliRunner().invoke(main, ["connector", "status", "--url", conn.status_url])
    assert result.exit_code == 1 and "cannot read" in result.output


async def test_connector_inside_lmq_serve(tmp_path: Path) -> None:
    b = GatewayProcess(tmp_path / "b").start()
    a_port = free_port()
    config = tmp_path / "a.toml"
    config.write_text(
        f"""
[connector]
status_address = ""
[connector.clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{a_port}"]
[connector.clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{b.ports["unified"]}"]
[[connector.rules]]
name = "out"
source = "a"
topic = "jobs"
target = "b"
start = "earliest"
"""
    )
    a = GatewayProcess(tmp_path / "a", "--config", str(config), "--unified-port", str(a_port))
    a.start()
    try:
        sent = await send(a_port, "jobs", 12)

        async def copied():
            got = await read_all(b.ports["unified"], "jobs")
            return got if len(bodies_of(got)) >= 12 else None

        got = await eventually(copied)
        assert got and bodies_of(got) == sorted(sent)
        # the rule's metrics are on the gateway's own /metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{a_port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert 'lmq_connector_state{rule="out",state="running"} 1' in metrics
        assert 'lmq_connector_messages_total{rule="out"}' in metrics
        assert a.stop() == 0
    finally:
        a.stop()
        b.stop()


def test_validate_refuses_two_rules_sharing_a_high_water_mark(tmp_path: Path) -> None:
    path = tmp_path / "shared.toml"
    rule = '[[rules]]\nname = "{0}"\nsource = "a"\ntopic = "t"\ntag = "{0}"\ntarget = "b"\n'
    path.write_text(rules_text(1, 2, rule.format("eu") + "\n" + rule.format("us")))
    result = CliRunner().invoke(main, ["connector", "validate", str(path)])
    assert result.exit_code == 2
    assert "shared.toml: rules.2: rules 'eu' (rules.1) and 'us' both copy topic 't'" in result.output
    result = CliRunner().invoke(main, ["connector", "run", "--rules", str(path)])
    assert result.exit_code == 2 and "high-water mark" in result.output
