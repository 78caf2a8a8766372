"""The gateway's timer firing (gateway/rocketmq/timer_service.py) over a real store:
fires at the due time, a page per loop turn, and timers left by an earlier run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_core import Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from gateway.rocketmq.timer_service import TimerFiring

CFG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024, timer_page=10)


def count(store: MessageStore, lmq: str) -> int:
    info = store.lmq(lmq)
    return 0 if info is None else info.messages


async def test_fires_at_the_due_time_a_page_per_loop_turn(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    with MessageStore.open(tmp_path, CFG) as store:
        due = now_ms() + 300
        store.append_delayed_batch([(Message("t", b"%d" % i), ["q"], due) for i in range(25)])
        firing = TimerFiring(store, loop)
        firing.start()
        await asyncio.sleep(0.1)
        assert count(store, "q") == 0  # not before its time
        seen: list[int] = []
        while count(store, "q") < 25 and now_ms() < due + 5000:
            seen.append(count(store, "q"))
            await asyncio.sleep(0)  # one loop turn
        assert count(store, "q") == 25 and now_ms() >= due
        # the other work of the loop ran between the pages: 10 and 20 were seen
        assert 10 in seen and 20 in seen
        firing.stop()


async def test_an_earlier_due_time_rearms_and_earlier_runs_timers_fire(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    with MessageStore.open(tmp_path, CFG) as store:
        store.append_delayed(Message("t", b"old"), ["q"], now_ms() - 1000)  # an earlier run's
        store.append_delayed(Message("t", b"late"), ["q"], now_ms() + 60_000)
        firing = TimerFiring(store, loop)
        firing.start()
        await asyncio.sleep(0.05)
        assert count(store, "q") == 1
        soon = now_ms() + 100
        store.append_delayed(Message("t", b"soon"), ["q"], soon)
        firing.arm(soon)  # armed at the late one: moved earlier
        await asyncio.sleep(0.4)
        assert [m.record.body for m in store.pull("q", 0).messages] == [b"old", b"soon"]
        firing.stop()
