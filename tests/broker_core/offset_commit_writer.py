"""Child process of the offset-commit crash test: commits one group's offsets on many
LMQs, all to the same value ``seq``, one ``commit_offsets`` call per step (sync
durability), and reports each returned call on stdout as ``COMMIT seq``."""

from __future__ import annotations

import sys

from broker_core import Durability, MessageStore, StoreConfig

LMQS = [f"sess/{i}" for i in range(64)]
GROUP = "session-a"


def main() -> None:
    data_dir, start = sys.argv[1], int(sys.argv[2])
    store = MessageStore.open(data_dir, StoreConfig(durability=Durability.SYNC))
    for name in LMQS:
        store.create_lmq(name)
    print("READY", flush=True)
    seq = start
    while True:
        store.commit_offsets(GROUP, dict.fromkeys(LMQS, seq))
        sys.stdout.write(f"COMMIT {seq}\n")
        sys.stdout.flush()
        seq += 1


if __name__ == "__main__":
    main()
