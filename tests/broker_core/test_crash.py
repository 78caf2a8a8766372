"""Kill -9 a writer mid-stream: every acknowledged append survives, in every LMQ, at the
same offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import MessageStore, StoreConfig

from . import killed_writer

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(data_dir: Path, seed: int, run_for: float) -> list[str]:
    return killed_writer.run_and_kill(WRITER, data_dir, seed, run_for)


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
        assert s.verify().ok
