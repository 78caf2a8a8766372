"""Child process of the key-index crash test: appends batches of keyed messages (sync
durability) to one LMQ and reports each acknowledged message as ``ACK seq``."""

from __future__ import annotations

import sys

from broker_core import Durability, Message, MessageStore, StoreConfig

LMQ = "rmq:orders:0"
BATCH = 8


def message(seq: int) -> Message:
    props = {"KEYS": b"k%d shared" % seq, "UNIQ_KEY": b"u%d" % seq}
    return Message(topic=f"orders/dev/{seq % 5}", body=b"%d" % seq, properties=props)


def main() -> None:
    data_dir, start = sys.argv[1], int(sys.argv[2])
    store = MessageStore.open(data_dir, StoreConfig(durability=Durability.SYNC))
    print("READY", flush=True)
    seq = start
    while True:
        store.append_batch([(message(s), [LMQ]) for s in range(seq, seq + BATCH)])
        sys.stdout.write("".join(f"ACK {s}\n" for s in range(seq, seq + BATCH)))
        sys.stdout.flush()
        seq += BATCH


if __name__ == "__main__":
    main()
