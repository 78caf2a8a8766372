"""Child process of the origins crash test: appends batches of copies of one origin queue
(sync durability), each batch starting a little before the last acknowledged offset (as a
connector resuming after a crash would repeat some), and reports ``ACK first last`` for
each acknowledged batch of origin offsets."""

from __future__ import annotations

import sys

from broker_core import Durability, Message, MessageStore, StoreConfig
from broker_core.origins import ORIGIN_PROPERTY, encode_origin

LMQ = "rmq:copy:0"
TOPIC = "copy"
BATCH = 8


def copy(offset: int) -> Message:
    return Message(
        topic=TOPIC, body=b"%d" % offset,
        properties={ORIGIN_PROPERTY: encode_origin("A", "src:0", offset)},
    )


def main() -> None:
    data_dir = sys.argv[1]
    store = MessageStore.open(data_dir, StoreConfig(durability=Durability.SYNC))
    high = store.origins.high_water("A", TOPIC, ["src:0"]).get("src:0", -1)
    print("READY", flush=True)
    start = max(high - 3, 0)  # repeat a few: they must be dropped
    while True:
        store.append_copies([(copy(o), [LMQ]) for o in range(start, start + BATCH)])
        sys.stdout.write(f"ACK {start} {start + BATCH - 1}\n")
        sys.stdout.flush()
        start += BATCH - 2  # overlapping batches


if __name__ == "__main__":
    main()
