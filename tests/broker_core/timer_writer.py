"""Child process of the timer crash test: schedules delayed messages (sync durability)
due 0-300 ms ahead to two LMQs, fires due timers between batches, and reports each
acknowledged schedule as ``SCHED position due_ms``.

With a crash rate (third argument, per index write), the process also SIGKILLs itself
just before an index batch is committed: after a batch's records reached the log and
before the index (timer keys, checkpoint) says so, the one window where recovery must
replay fires and changes from the log to keep every timer exactly once."""

from __future__ import annotations

import os
import random
import signal
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from broker_core.consume_queue import ConsumeQueueIndex

LMQS = ["timers:a", "timers:b"]
CONFIG = StoreConfig(
    durability=Durability.SYNC, segment_bytes=256 * 1024, max_message_bytes=16 * 1024,
    timer_page=7,
)


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    store = MessageStore.open(data_dir, CONFIG)
    print("READY", flush=True)
    crash_rate = float(os.environ.get("TIMER_WRITER_CRASH_RATE", "0"))
    if crash_rate:  # after READY: the harness expects it from every run
        real_write = ConsumeQueueIndex.write

        def write(self: ConsumeQueueIndex, wb: object) -> None:
            if rng.random() < crash_rate:
                os.kill(os.getpid(), signal.SIGKILL)
            real_write(self, wb)  # type: ignore[arg-type]

        ConsumeQueueIndex.write = write  # type: ignore[method-assign]
    seq = 0
    while True:
        now = now_ms()
        items = [
            (Message(topic=f"t{i % 3}", body=b"%d-%d" % (seed, seq + i)), LMQS,
             now + rng.randrange(0, 300))
            for i in range(5)
        ]
        results = store.append_delayed_batch(items)
        sys.stdout.write("".join(
            f"SCHED {r.position} {due}\n" for r, (_, _, due) in zip(results, items, strict=True)
        ))
        sys.stdout.flush()
        seq += 5
        store.fire_timers()


if __name__ == "__main__":
    main()
