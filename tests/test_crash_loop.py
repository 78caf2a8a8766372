"""Crash loop at the storage level: a sync writer on overlapping LMQs is killed with
SIGKILL at random moments and restarted, five times on the same data directory; after
every restart each acknowledged append is readable from each of its LMQs at the offset
it was acknowledged with, no LMQ's max offset moved backwards, and ``verify`` is ok.

The harness is ``bench/crash_loop.py`` (run it for 20+ kills); this is its short run.
"""

from __future__ import annotations

import importlib

import pytest


def _harness():  # type: ignore[no-untyped-def]
    return importlib.import_module("bench.crash_loop")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_sigkill_loop_loses_nothing_and_never_moves_an_offset_back(tmp_path, seed):
    harness = _harness()
    figures = harness.crash_loop(tmp_path / "data", kills=5, seed=seed, max_s=0.8)
    assert figures.problems == []
    assert figures.lost == 0 and figures.offset_regressions == 0
    assert figures.verify_failures == 0
    assert figures.kills == 5 and len(figures.recovery_s) == 5
    assert figures.acked > 100  # the writer did get to write between the kills
