"""The real ali-ons clients of tests/node as subprocesses (no tests here).

``OnsProcess`` runs ``node tests/node/ons_client.js MODE JSON`` and collects the lines it
prints for the test (``LMQ {json}``, see ``line_process.LineProcess``); it is stopped by
PID (SIGTERM, which closes the ali-ons consumer cleanly, then SIGKILL past a bound).
``require_node`` makes sure node and the locked npm packages (ali-ons and
rocketmq-client-nodejs) are there -- installing them from the lockfile if needed -- and
fails the test otherwise: these tests never skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..line_process import LineProcess

ROOT = Path(__file__).resolve().parents[3]
NODE_DIR = ROOT / "tests" / "node"
SCRIPT = NODE_DIR / "ons_client.js"
INSTALL = ROOT / "scripts" / "install-node-deps.sh"
NPM_CLIENTS = ("ali-ons", "rocketmq-client-nodejs")

_checked: list[bool] = []


def require_node() -> str:
    """The node executable; the npm clients installed from the lockfile. Fails, never
    skips."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (scripts/install-system-deps.sh installs it)")
    if not _checked:
        modules = NODE_DIR / "node_modules"
        if not all((modules / name / "package.json").exists() for name in NPM_CLIENTS):
            done = subprocess.run(
                ["bash", str(INSTALL)], capture_output=True, text=True, timeout=300
            )
            if done.returncode != 0:
                pytest.fail(f"npm packages missing and npm ci failed:\n{done.stderr[-2000:]}")
        _checked.append(True)
    return node


class OnsProcess(LineProcess):
    """One ali-ons producer or push consumer process."""

    def __init__(self, mode: str, **config: Any) -> None:
        node = require_node()
        super().__init__("ali-ons", [node, str(SCRIPT), mode, json.dumps(config)],
                         cwd=NODE_DIR)


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
