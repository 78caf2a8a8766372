"""Run a writer script in a subprocess, SIGKILL it mid-work, return what it acknowledged.

A writer (``crash_writer.py``, ``offset_commit_writer.py``) prints ``READY`` once its
store is open, then one line per acknowledged operation; a line only counts once its
newline was written (the kill can cut the last one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(writer: Path, data_dir: Path, arg: int, run_for: float) -> list[str]:
    """Run ``writer data_dir arg`` for ``run_for`` seconds, SIGKILL it, and return its
    complete acknowledgement lines (those already in the pipe at the kill count too)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(writer), str(data_dir), str(arg)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + run_for
        lines: list[str] = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        lines.extend(proc.stdout.read().splitlines(keepends=True))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    return [ln for ln in lines if ln.endswith("\n")]
