"""Child process of the relocation crash test: schedules delayed messages due days
ahead (sync durability), writes traffic and applies size retention, which relocates the
pending timers that pin old segments; reports each acknowledged schedule as
``SCHED position due_ms``.

With a crash rate (``TIMER_WRITER_CRASH_RATE``, per index write) the process SIGKILLs
itself just before an index batch is committed: a relocation's copies and relocate
records are then in the log and not in the index, and recovery must replay them."""

from __future__ import annotations

import os
import random
import signal
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from broker_core.consume_queue import ConsumeQueueIndex
from broker_core.timers import Timers

CONFIG = StoreConfig(
    durability=Durability.SYNC, segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
    retention_bytes=192 * 1024, timer_page=4,
)


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    store = MessageStore.open(data_dir, CONFIG)
    print("READY", flush=True)
    crash_rate = float(os.environ.get("TIMER_WRITER_CRASH_RATE", "0"))
    relocating = [False]
    if crash_rate:
        real_write = ConsumeQueueIndex.write
        real_relocate = Timers.relocate_locked

        def write(self: ConsumeQueueIndex, wb: object) -> None:
            # a relocation's index commit (its copies already written to the log) is
            # hit ten times as often as any other index write
            if rng.random() < crash_rate * (10 if relocating[0] else 1):
                os.kill(os.getpid(), signal.SIGKILL)
            real_write(self, wb)  # type: ignore[arg-type]

        def relocate(self: Timers, before: int, limit: int, now: int) -> int:
            relocating[0] = True
            try:
                return real_relocate(self, before, limit, now)
            finally:
                relocating[0] = False

        ConsumeQueueIndex.write = write  # type: ignore[method-assign]
        Timers.relocate_locked = relocate  # type: ignore[method-assign]
    seq = 0
    while True:
        due = now_ms() + 86_400_000 + rng.randrange(0, 1000)
        body = b"%d-%d" % (seed, seq)
        result = store.append_delayed(
            Message("orders", body, properties={"UNIQ_KEY": body}), ["q:a", "q:b"], due)
        sys.stdout.write(f"SCHED {result.position} {due}\n")
        sys.stdout.flush()
        seq += 1
        store.append_batch([(Message("filler", b"x" * 1000), ["filler"])] * 20)
        store.apply_retention()


if __name__ == "__main__":
    main()
