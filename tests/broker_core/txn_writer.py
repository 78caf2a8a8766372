"""Child process of the transaction crash test: half messages, then commits and
rollbacks, with sync durability; prints each acknowledged step on stdout:
``HALF position body``, ``COMMIT position lmq,...``, ``ROLLBACK position``. At start it
commits every half message left pending by the run before (after a restart)."""

from __future__ import annotations

import random
import sys

from broker_core import Durability, Message, MessageStore, StoreConfig

CONFIG = StoreConfig(
    durability=Durability.SYNC, segment_bytes=256 * 1024, max_message_bytes=16 * 1024
)
NAMES = [f"q/{i}" for i in range(6)]


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(seed)
    store = MessageStore.open(data_dir, CONFIG)
    print("READY", flush=True)
    for txn in store.txns.iter_pending():
        store.end_transaction(txn.position, commit=True)
        print(f"COMMIT {txn.position} {','.join(txn.lmqs)}", flush=True)
    seq = 0
    while True:
        lmqs = rnd.sample(NAMES, rnd.randint(1, 3))
        body = f"{seed}:{seq}"
        half = store.append_half(Message(topic="t", body=body.encode()), lmqs, "pg")
        print(f"HALF {half.position} {body}", flush=True)
        seq += 1
        roll = rnd.random()
        if roll < 0.7:
            store.end_transaction(half.position, commit=True)
            print(f"COMMIT {half.position} {','.join(lmqs)}", flush=True)
            if rnd.random() < 0.2:  # a repeated commit stores nothing
                store.end_transaction(half.position, commit=True)
        elif roll < 0.9:
            store.end_transaction(half.position, commit=False)
            print(f"ROLLBACK {half.position}", flush=True)


if __name__ == "__main__":
    main()
