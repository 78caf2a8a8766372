"""The persistent schedule (gateway/rocketmq/schedule.py) on a real store: due order,
restart with a pending delay, a crash between move and commit, time moved by an
injected clock (the 1 s level in real time)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from gateway.publisher import Publisher
from gateway.rocketmq.schedule import (
    PROP_DELAY,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TARGETS,
    SCHEDULE_GROUP,
    ScheduleService,
    level_lmq,
)

ROOT = Path(__file__).resolve().parents[3]
TARGET = "rmq:orders:3"


class Clock:
    """Wall-clock milliseconds plus a shift the test moves forward."""

    def __init__(self) -> None:
        self.shift = 0

    def __call__(self) -> int:
        return now_ms() + self.shift


def bodies(store: MessageStore, lmq: str) -> list[bytes]:
    if store.lmq(lmq) is None:
        return []
    return [m.body for m in store.pull(lmq, 0, 100).messages]


async def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.clock = Clock()
        self.store: MessageStore | None = None
        self.service: ScheduleService | None = None

    def open(self, config: StoreConfig | None = None, held_levels: int = 0) -> ScheduleService:
        loop = asyncio.get_running_loop()
        self.store = MessageStore.open(self.data, config or StoreConfig())
        self.service = ScheduleService(
            self.store, Publisher(self.store, loop).submit, loop, clock=self.clock,
            held_levels=held_levels,
        )
        self.service.start()
        return self.service

    def close(self) -> None:
        if self.service is not None:
            self.service.stop()
        if self.store is not None:
            self.store.close()
        self.service = self.store = None


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "data")
    h.open()
    try:
        yield h
    finally:
        h.close()


def test_levels_are_rocketmqs_by_default(harness: Harness) -> None:
    svc = harness.service
    assert svc is not None
    delays = [lv.delay_ms for lv in svc.levels]
    assert svc.max_level == len(delays) == 18
    assert delays[0] == 1000 and delays[4] == 60_000 and delays[-1] == 2 * 3_600_000
    assert level_lmq(1) == "rmq:SCHEDULE_TOPIC_XXXX:0"
    assert level_lmq(18) == "rmq:SCHEDULE_TOPIC_XXXX:17"


async def test_levels_are_the_stores_and_a_shorter_configuration_strands_nothing(
    tmp_path: Path,
) -> None:
    """A send-back waits as a DELAY send of its level does (StoreConfig.delay_levels);
    levels an earlier configuration had beyond the current ones are still moved."""
    h = Harness(tmp_path / "data")
    svc = h.open(StoreConfig(delay_levels=("2s", "3s", "4s", "9s")))
    await svc.schedule(Message(topic="orders", body=b"four"), [TARGET], 4)
    h.close()
    svc = h.open(StoreConfig(delay_levels=("2s", "7s")), held_levels=4)
    store = h.store
    assert store is not None
    try:
        assert [lv.delay_ms for lv in svc.levels] == [2000, 7000, 7000, 7000]
        assert svc.max_level == 2 and svc.clamp(5) == 2
        await svc.schedule(Message(topic="orders", body=b"clamped"), [TARGET], 5)
        assert bodies(store, level_lmq(2)) == [b"clamped"]
        h.clock.shift = 6_000
        svc.rearm()
        await asyncio.sleep(0.1)
        await svc.drain()
        assert bodies(store, TARGET) == []
        h.clock.shift = 7_500  # the stranded level 4 moves at the last level's delay
        svc.rearm()
        await wait_for(lambda: len(bodies(store, TARGET)) == 2)
        assert sorted(bodies(store, TARGET)) == [b"clamped", b"four"]
        assert svc.pending() == 0
    finally:
        h.close()


async def test_due_order_across_levels(harness: Harness) -> None:
    svc, store = harness.service, harness.store
    assert svc is not None and store is not None
    await svc.schedule(Message(topic="orders", body=b"ten"), [TARGET], 3)  # 10 s
    await svc.schedule(Message(topic="orders", body=b"five-a"), [TARGET], 2)  # 5 s
    await svc.schedule(Message(topic="orders", body=b"five-b"), [TARGET], 2)
    await asyncio.sleep(0.05)
    assert bodies(store, TARGET) == []
    assert svc.pending() == 3
    harness.clock.shift = 6_000
    svc.rearm()
    await wait_for(lambda: len(bodies(store, TARGET)) == 2)
    await svc.drain()
    assert bodies(store, TARGET) == [b"five-a", b"five-b"]
    assert svc.pending(2) == 0 and svc.pending(3) == 1
    harness.clock.shift = 11_000
    svc.rearm()
    await wait_for(lambda: len(bodies(store, TARGET)) == 3)
    assert bodies(store, TARGET)[-1] == b"ten"
    moved = store.pull(TARGET, 0, 10).messages[0].record
    assert moved.properties[PROP_REAL_TOPIC] == b"orders"
    assert moved.properties[PROP_REAL_QID] == b"3"
    assert PROP_DELAY not in moved.properties and PROP_TARGETS not in moved.properties


async def test_fan_out_targets_and_properties_kept(harness: Harness) -> None:
    svc, store = harness.service, harness.store
    assert svc is not None and store is not None
    targets = ["rmq:orders:0", "mqtt:orders/#"]
    await svc.schedule(
        Message(topic="orders/eu", body=b"x", properties={"KEYS": b"k1"}, tag="T"), targets, 2
    )
    held = store.pull(level_lmq(2), 0, 1).messages[0].record
    assert json.loads(held.properties[PROP_TARGETS]) == targets
    harness.clock.shift = 5_500
    svc.rearm()
    await wait_for(lambda: all(bodies(store, t) == [b"x"] for t in targets))
    rec = store.pull("mqtt:orders/#", 0, 1).messages[0].record
    assert rec.topic == "orders/eu" and rec.tag == "T" and rec.properties["KEYS"] == b"k1"


async def test_idle_levels_arm_no_timer_and_the_append_wakes_one(harness: Harness) -> None:
    svc = harness.service
    assert svc is not None
    assert all(lv.timer is None for lv in svc.levels)
    await svc.schedule(Message(topic="orders", body=b"x"), [TARGET], 4)
    await wait_for(lambda: svc.levels[3].timer is not None)
    armed = [lv.level for lv in svc.levels if lv.timer is not None]
    assert armed == [4]
    # armed for the head's due time (30 s), not a polling interval
    when = svc.levels[3].timer.when() - asyncio.get_running_loop().time()  # type: ignore[union-attr]
    assert 29.0 < when <= 30.0


async def test_level_one_in_real_time(harness: Harness) -> None:
    svc, store = harness.service, harness.store
    assert svc is not None and store is not None
    result = await svc.schedule(Message(topic="orders", body=b"soon"), [TARGET], 1)
    await wait_for(lambda: bodies(store, TARGET) == [b"soon"], timeout=5.0)
    arrived = store.pull(TARGET, 0, 1).messages[0].record.store_ms
    assert arrived >= result.store_ms + 1000
    await svc.drain()
    assert store.get_offset(SCHEDULE_GROUP, level_lmq(1)) == 1


async def test_restart_with_a_pending_delay(harness: Harness) -> None:
    svc = harness.service
    assert svc is not None
    await svc.schedule(Message(topic="orders", body=b"survives"), [TARGET], 2)
    harness.close()  # before it was due
    svc = harness.open()
    store = harness.store
    assert store is not None
    assert svc.pending() == 1 and bodies(store, TARGET) == []
    harness.clock.shift = 6_000
    svc.rearm()
    await wait_for(lambda: bodies(store, TARGET) == [b"survives"])
    await svc.drain()
    harness.close()  # moved and committed: a restart does not move it again
    svc = harness.open()
    store = harness.store
    assert store is not None
    await asyncio.sleep(0.1)
    assert svc.pending() == 0 and bodies(store, TARGET) == [b"survives"]


async def test_level_above_the_highest_is_clamped(harness: Harness) -> None:
    svc, store = harness.service, harness.store
    assert svc is not None and store is not None
    await svc.schedule(Message(topic="orders", body=b"x"), [TARGET], 99)
    assert store.lmq(level_lmq(18)).max_offset == 1  # type: ignore[union-attr]


async def test_crash_between_move_and_commit_delivers_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("schedule_crasher.py")), str(data)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.splitlines() == ["SCHEDULED", "MOVED"]
    h = Harness(data)
    h.clock.shift = 6_000
    svc = h.open()
    store = h.store
    assert store is not None
    try:
        # moved before the kill, and moved again: at least once, never lost
        await wait_for(lambda: bodies(store, TARGET) == [b"late", b"late"])
        await svc.drain()
        assert svc.pending() == 0
    finally:
        h.close()
