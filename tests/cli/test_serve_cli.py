"""``lmq serve`` as a real subprocess: ports printed, ``ready``, /health, SIGTERM -> exit 0.

Runs ``python -m cli.serve`` (the module behind ``lmq serve``) so the test does not
depend on the command's registration in cli/main.py.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from broker_core import MessageStore
from cli.serve import serve

ROOT = Path(__file__).resolve().parents[2]
BOUND = 15.0


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("LMQ_DATA_DIR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "cli.serve", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines_until_ready(proc: subprocess.Popen[str]) -> list[str]:
    """stdout lines up to ``ready``, read in a thread so a hung child cannot hang us."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        line = lines.get(timeout=BOUND)
        assert line is not None, f"exited before ready: {seen}"
        seen.append(line)
        if line == "ready":
            return seen


def test_serve_prints_ports_answers_health_and_stops_on_sigterm(tmp_path):
    proc = spawn(
        "--data-dir", str(tmp_path / "data"), "--mqtt-port", "auto", "--amqp-port", "0",
        "--unified-port", "auto", "--grpc-port", "auto", "--log-format", "json",
    )
    try:
        lines = lines_until_ready(proc)
        listening = dict(line.split(" ")[1:] for line in lines if line.startswith("listening "))
        # amqp disabled by port 0; grpc is a listener of the gateway like the others
        assert set(listening) == {"mqtt", "unified", "grpc"}
        assert all(address.startswith("127.0.0.1:") for address in listening.values())
        url = f"http://{listening['unified']}/health"
        with urllib.request.urlopen(url, timeout=BOUND) as response:
            health = json.load(response)
        assert health["status"] == "ok"
        assert {f"127.0.0.1:{item['port']}" for item in health["listeners"]} == set(
            listening.values()
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=BOUND) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.stderr.close()
    events = [json.loads(line)["msg"] for line in stderr.splitlines()]
    assert "listener started" in events and "shutdown: done" in events
    assert "connection closed" in events
    with MessageStore.open(tmp_path / "data"):
        pass


def test_serve_store_in_use_is_one_line_exit_1(tmp_path):
    with MessageStore.open(tmp_path / "data"):
        result = CliRunner().invoke(
            serve, ["--data-dir", str(tmp_path / "data"), "--mqtt-port", "0",
                    "--amqp-port", "0", "--unified-port", "auto"],
        )
    assert result.exit_code == 1
    assert "Error: store: data directory" in result.output and "in use" in result.output
    assert "Traceback" not in result.output


def test_serve_config_errors(tmp_path):
    config = tmp_path / "lmq.toml"
    config.write_text("mqtt_port = 1883\nunified_prot = 1\n")
    result = CliRunner().invoke(serve, ["--config", str(config)])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {config}: unknown option 'unified_prot'"
    result = CliRunner().invoke(serve, ["--mqtt-port", "99999"])
    assert result.exit_code == 2 and "--mqtt-port" in result.output
    assert "expected a port 0-65535" in result.output


def test_help_names_every_protocol():
    result = CliRunner().invoke(serve, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for protocol in ("MQTT 3.1, 3.1.1 and 5.0", "AMQP 0-9-1", "RocketMQ remoting",
                     "RocketMQ 5 gRPC", "HTTP (the JSON API, the Aliyun MQ HTTP API, RIP-17)"):
        assert protocol in text, protocol
