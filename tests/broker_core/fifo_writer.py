"""Child process of the FIFO crash test: publishes messages of 20 message groups and
FIFO-pops them, acking most, with sync durability; prints each acknowledged step:
``PUB <group>:<seq>`` once the append returned, ``GOT <group>:<seq>`` for a delivery,
``ACK <group>:<seq>`` once the ack returned. Unacked deliveries come back after their
invisible time (300 ms) and the FIFO backoff, in this run or the next."""

from __future__ import annotations

import random
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig, UnknownReceipt

CONFIG = StoreConfig(
    durability=Durability.SYNC, segment_bytes=1024 * 1024, max_message_bytes=16 * 1024,
    fifo_retry_backoff_ms=10, fifo_retry_max_backoff_ms=50, max_deliveries=1_000_000,
)
KEY = "__SHARDINGKEY"
GROUPS = [f"k{i}" for i in range(20)]


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(seed)
    store = MessageStore.open(data_dir, CONFIG)
    store.create_lmq("q")
    seq = {g: 0 for g in GROUPS}
    for m in store.pull("q", 0, 1_000_000, max_bytes=1 << 40).messages:
        seq[m.record.properties[KEY].decode()] += 1
    print("READY", flush=True)
    while True:
        if rnd.random() < 0.3:
            items = []
            for g in rnd.choices(GROUPS, k=rnd.randint(1, 5)):
                items.append((Message(topic="t", body=f"{g}:{seq[g]}".encode(),
                                      properties={KEY: g.encode()}), ["q"]))
                seq[g] += 1
            store.append_batch(items)
            for msg, _ in items:
                print(f"PUB {msg.body.decode()}", flush=True)
            continue
        got = store.pop.pop_fifo("c", "q", 8, 300, KEY)
        for p in got:
            print(f"GOT {p.message.record.body.decode()}", flush=True)
        for p in got:
            if rnd.random() < 0.8:
                try:
                    store.pop.ack(p.receipt)
                except UnknownReceipt:
                    continue
                print(f"ACK {p.message.record.body.decode()}", flush=True)


if __name__ == "__main__":
    main()
