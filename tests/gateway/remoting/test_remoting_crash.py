"""kill -9 under RocketMQ remoting sends with sync durability, three times, restarting on
the same data directory (harness: bench/remoting_crash_loop.py, run it for 20+ kills):
no acknowledged send is lost and no acknowledged offset commit is found lower after a
restart."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

KILLS = 3


def test_kill9_loses_no_acknowledged_send_and_no_offset_moves_back(tmp_path: Path) -> None:
    harness = importlib.import_module("bench.remoting_crash_loop")
    fig = harness.crash_loop(tmp_path / "data", kills=KILLS, seed=11, min_s=1.0, max_s=2.5)
    print(fig.summary())
    assert fig.kills == KILLS
    # load did run, and the consumer committed between the kills
    assert fig.acked > 100 and fig.commits_acked > 5 and fig.offset_checks > 0
    assert fig.lost == 0, fig.problems
    assert fig.offset_regressions == 0, fig.problems
    assert fig.offsets_past_end == 0
