"""Support for the connector tests (no tests here): the connector as a process
(``python -m cli.connector run``), rules files for two gateways, and remoting helpers
to send to and read back a whole topic."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway.clients import Producer, PullConsumer, ReceivedMessage, RemotingClient
from gateway.connector.heartbeat import HEARTBEAT

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT = 20.0


class ConnectorProcess:
    """``lmq connector run`` in a subprocess: bounded start, SIGTERM or kill -9 by PID."""

    def __init__(self, rules_file: Path) -> None:
        self.rules_file = rules_file
        self.proc: subprocess.Popen[str] | None = None
        self.status_url = ""
        self.output: list[str] = []

    def start(self) -> ConnectorProcess:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "cli.connector", "run",
                "--rules", str(self.rules_file), "--status-address", "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError("connector not ready:\n" + "".join(self.output)) from None
            if line is None:
                self.stop()
                raise RuntimeError("connector exited:\n" + "".join(self.output))
            if line.startswith("status "):
                self.status_url = "http://" + line.split()[1]
            if line.strip() == "ready":
                return self

    def status(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(self.status_url + "/status", timeout=5) as response:
            rules = json.loads(response.read())["rules"]
        return {r["rule"]: r for r in rules}

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._close()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


def rules_text(
    a_port: int, b_port: int, rules: str, *, heartbeat: float = 0, extra: str = ""
) -> str:
    return f"""
heartbeat_interval = {heartbeat}
stall_after = 5
retry_initial = 0.05
retry_max = 0.5
group_offsets_interval = 0.2
{extra}
[clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{a_port}"]

[clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{b_port}"]

{rules}
"""


async def send(
    port: int,
    topic: str,
    count: int,
    *,
    queues: int = 4,
    tag: Callable[[int], str | None] = lambda i: None,
    prefix: str = "m",
    properties: Callable[[int], dict[str, str]] = lambda i: {},
) -> list[str]:
    """Send ``count`` messages ``<prefix>-<i>`` round robin over queue ids < ``queues``;
    returns the bodies, in order."""
    bodies = []
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        producer = Producer(client, "test-producers")
        for i in range(count):
            body = f"{prefix}-{i}"
            await producer.send(
                topic,
                body.encode(),
                tags=tag(i),
                keys=[f"k{i}"],
                properties=properties(i),
                queue_id=i % queues,
            )
            bodies.append(body)
    return bodies


async def read_all(port: int, topic: str) -> dict[int, list[ReceivedMessage]]:
    """Every message of ``topic`` at the gateway on ``port``, per queue id, in order."""
    out: dict[int, list[ReceivedMessage]] = {}
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PullConsumer(client, "test-readers")
        route = await client.route(topic, refresh=True)
        for mq in route.read_queues:
            messages: list[ReceivedMessage] = []
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=64)
                if not result.messages:
                    break
                messages += result.messages
                offset = result.next_begin_offset
            if messages:
                out[mq.queue_id] = messages
    return out


def bodies_of(messages: dict[int, list[ReceivedMessage]]) -> list[str]:
    """The bodies, sorted, without the connector's heartbeats (as docs/connector.md tells
    consumers to skip them)."""
    return sorted(
        m.body.decode() for ms in messages.values() for m in ms if HEARTBEAT not in m.properties
    )


async def eventually(
    check: Callable[[], Awaitable[Any]], *, timeout: float = 10.0, interval: float = 0.1
) -> Any:
    """Await ``check()`` until it returns a true value (returned) or ``timeout`` passes
    (its last value is returned, for the assertion to show)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)
