"""The real ali-ons clients of tests/node as subprocesses (no tests here).

``OnsProcess`` runs ``node tests/node/ons_client.js MODE JSON`` and collects the lines it
prints for the test (``LMQ {json}``); it is stopped by PID (SIGTERM, which closes the
ali-ons consumer cleanly, then SIGKILL past a bound). ``require_node`` makes sure node and
the locked npm packages are there -- installing them from the lockfile if needed -- and
fails the test otherwise: these tests never skip.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
NODE_DIR = ROOT / "tests" / "node"
SCRIPT = NODE_DIR / "ons_client.js"
INSTALL = ROOT / "scripts" / "install-node-deps.sh"

_checked: list[bool] = []


def require_node() -> str:
    """The node executable; ali-ons installed from the lockfile. Fails, never skips."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (scripts/install-system-deps.sh installs it)")
    if not _checked:
        if not (NODE_DIR / "node_modules" / "ali-ons" / "package.json").exists():
            done = subprocess.run(
                ["bash", str(INSTALL)], capture_output=True, text=True, timeout=300
            )
            if done.returncode != 0:
                pytest.fail(f"npm packages missing and npm ci failed:\n{done.stderr[-2000:]}")
        _checked.append(True)
    return node


class OnsProcess:
    """One ali-ons producer or push consumer process."""

    def __init__(self, mode: str, **config: Any) -> None:
        node = require_node()
        self.proc = subprocess.Popen(
            [node, str(SCRIPT), mode, json.dumps(config)],
            cwd=NODE_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("LMQ "):
                self.events.put(json.loads(line[4:]))
        self.events.put({"exit": True})

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first event not yet taken that matches ``pred``; events that do not match
        stay for later calls (and every event is in ``seen``)."""
        for i, event in enumerate(self.pending):
            if pred(event):
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"ali-ons: no matching event in {timeout} s; seen {self.seen[-10:]}\n"
                    + "".join(self.stderr[-30:])
                )
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(event)
            if "fatal" in event:
                raise AssertionError(f"ali-ons failed: {event['fatal']}")
            if pred(event):
                return event
            if event.get("exit"):
                raise AssertionError(
                    f"ali-ons exited ({self.proc.poll()}); seen {self.seen[-10:]}\n"
                    + "".join(self.stderr[-30:])
                )
            self.pending.append(event)

    def collect(self, key: str, n: int, timeout: float) -> list[dict[str, Any]]:
        """The next ``n`` events carrying ``key`` (e.g. ``"msg"``), as their values."""
        out = []
        for _ in range(n):
            out.append(self.wait_for(lambda e: key in e, timeout)[key])
        return out

    def quiet(self, key: str, wait: float) -> list[dict[str, Any]]:
        """Events carrying ``key`` not yet taken or arriving within ``wait`` seconds
        (a test expects none)."""
        got = [e[key] for e in self.pending if key in e]
        self.pending = [e for e in self.pending if key not in e]
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(event)
            if key in event:
                got.append(event[key])
            else:
                self.pending.append(event)
        return got

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (the consumer commits its offsets and unregisters), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def produce(namesrv: str, topic: str, group: str, messages: list[dict[str, Any]],
            timeout: float = 60.0, **extra: Any) -> list[dict[str, Any]]:
    """Send ``messages`` ({body, tag, keys, properties}) with an ali-ons producer and
    return its send results (one per message, in order)."""
    p = OnsProcess("produce", nameSrv=namesrv, topic=topic, group=group, messages=messages,
                   **extra)
    try:
        results = []
        for _ in messages:
            event = p.wait_for(lambda e: "sent" in e or "error" in e, timeout)
            if "error" in event:
                raise AssertionError(f"ali-ons send failed: {event}")
            results.append(event["sent"])
        p.wait_for(lambda e: e.get("closed") is True, timeout)
        return results
    finally:
        p.stop()
