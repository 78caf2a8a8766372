"""Kill -9 a writer mid-stream: every acknowledged append survives, in every LMQ, at the
same offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_core import MessageStore, StoreConfig
from broker_core.recovery import verify

WRITER = Path(__file__).with_name("crash_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(data_dir: Path, seed: int, run_for: float) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), str(seed)],
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
        # acks already written to the pipe before the kill count too
        lines.extend(proc.stdout.read().splitlines(keepends=True))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    return [ln for ln in lines if ln.endswith("\n")]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_acknowledged_appends_survive_sigkill(tmp_path, seed):
    acked: list[tuple[int, int, list[tuple[str, int]]]] = []
    # three kills in a row on the same data directory
    for round_ in range(3):
        for line in run_and_kill(tmp_path, seed * 10 + round_, run_for=0.6 + 0.3 * round_):
            _, _seq, pos, pairs = line.split()
            targets = [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in pairs.split(",")]
            acked.append((round_, int(pos), targets))
    assert len(acked) > 50
    cfg = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024)
    with MessageStore.open(tmp_path, cfg) as s:
        for _, position, targets in acked:
            for name, offset in targets:
                got = s.read_at(name, offset)
                assert got is not None, (name, offset)
                assert got.record.position == position
        for info in s.lmqs():
            n = len(s.pull(info.name, 0, max_count=100_000, max_bytes=1 << 40).messages)
            assert n == info.messages == info.max_offset  # dense, no holes
        assert verify(s).ok
