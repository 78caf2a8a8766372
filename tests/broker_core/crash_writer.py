"""Child process of the crash test: appends with sync durability and reports each
acknowledged append on stdout as ``ACK seq position lmq:offset,...``."""

from __future__ import annotations

import random
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    cfg = StoreConfig(
        durability=Durability.SYNC, segment_bytes=256 * 1024, max_message_bytes=16 * 1024
    )
    rnd = random.Random(seed)
    names = [f"dev/{i}" for i in range(12)]
    store = MessageStore.open(data_dir, cfg)
    print("READY", flush=True)
    seq = 0
    while True:
        batch = []
        for _ in range(rnd.randint(1, 8)):
            targets = rnd.sample(names, rnd.randint(1, 5))
            body = f"{seed}:{seq}:".encode() + bytes(rnd.randint(0, 3000))
            batch.append((Message(topic=f"t/{seq}", body=body), targets, seq))
            seq += 1
        results = store.append_batch([(m, t) for m, t, _ in batch])  # waits for fsync
        lines = []
        for (_m, targets, s), r in zip(batch, results, strict=True):
            pairs = ",".join(f"{n}:{o}" for n, o in zip(targets, r.offsets, strict=True))
            lines.append(f"ACK {s} {r.position} {pairs}\n")
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
