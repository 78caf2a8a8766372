"""Crash helper for test_schedule.py: schedule one message at level 2 (5 s), move it
with the clock 6 s ahead, and SIGKILL this process right after the move's append was
acknowledged and before the level's offset is committed.

Usage: schedule_crasher.py DATA_DIR
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from gateway.publisher import Publisher
from gateway.rocketmq.schedule import ScheduleService

TARGET = "rmq:orders:3"


class KilledBeforeCommit(ScheduleService):
    def commit(self, lmq: str, offset: int) -> None:
        sys.stdout.write("MOVED\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


async def main(data_dir: str) -> None:
    store = MessageStore.open(data_dir, StoreConfig(durability=Durability.SYNC))
    loop = asyncio.get_running_loop()
    shift = 0

    def clock() -> int:
        return now_ms() + shift

    service = KilledBeforeCommit(store, Publisher(store, loop).submit, loop, clock=clock)
    service.start()
    await service.schedule(Message(topic="orders", body=b"late"), [TARGET], 2)
    sys.stdout.write("SCHEDULED\n")
    sys.stdout.flush()
    shift = 6_000
    service.rearm()
    await asyncio.sleep(30)  # killed long before


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
