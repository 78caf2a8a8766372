"""Cost per append of a connector copy vs a plain RocketMQ send, in the store (issue 19).

    .venv/bin/python bench/origins.py --rounds 5 --messages 50000

Each round runs, in fresh processes and alternating, the two kinds over the same loop:
records as the remoting send builds them (``rmq.props`` with WAIT and UNIQ_KEY, 100 B
bodies, ``rmq.born_host``), batches of 64 to 8 queue LMQs, async durability:

- ``plain``: ``store.append_batch`` of plain sends;
- ``copy``: ``store.append_copies`` of copies (the same plus the three ``__LMQ_ORIGIN_*``
  properties and ``__LMQ_PATH`` in ``rmq.props`` and the store's ``lmq.origin``), one
  origin queue per LMQ, offsets rising;
- ``dup``: ``store.append_copies`` of the same copies a second time (every one a
  duplicate: the check alone).

Prints CPU time per message (process time) per round and the medians, split into
building the store messages (the front end's part: ``to_store_message``) and the
append (the store's part). Run by hand; results go in docs/storage.md ("Origins").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH = 64
QUEUES = 8


def run(kind: str, n: int) -> tuple[float, float]:
    from broker_core import MessageStore, StoreConfig
    from broker_core.origins import ORIGIN_PROPERTY, encode_origin
    from gateway.rocketmq.records import to_store_message
    from lmq.rocketmq import queue_lmq
    from protocol.remoting.messages import encode_properties
    from protocol.remoting.origins import ORIGIN_CLUSTER, ORIGIN_OFFSET, ORIGIN_QUEUE, PATH

    lmqs = [[queue_lmq("bench", q)] for q in range(QUEUES)]

    def build(seq: int):  # type: ignore[no-untyped-def]
        props = {"WAIT": "true", "UNIQ_KEY": f"AC110001{seq:024X}"}
        q = seq % QUEUES
        if kind != "plain":
            props.update({ORIGIN_CLUSTER: "lmq-0123456789abcdef", ORIGIN_QUEUE: f"src:{q}",
                          ORIGIN_OFFSET: str(seq // QUEUES), PATH: "lmq-0123456789abcdef"})
        msg = to_store_message(
            "bench", seq.to_bytes(8, "big") + bytes(92), encode_properties(props), props,
            origin="PID_bench", born_ms=1_700_000_000_000 + seq, born_host="127.0.0.1:54321")
        if kind != "plain":
            assert msg.properties is not None
            msg.properties = {  # type: ignore[misc]
                **msg.properties,
                ORIGIN_PROPERTY: encode_origin("lmq-0123456789abcdef", f"src:{q}", seq // QUEUES)}
        return msg, lmqs[q]

    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore.open(Path(tmp), StoreConfig())
        try:
            if kind == "dup":  # store them once, untimed
                for start in range(0, n, BATCH):
                    store.append_copies([build(s) for s in range(start, min(start + BATCH, n))])
            t0 = time.process_time()
            batches = [[build(s) for s in range(start, min(start + BATCH, n))]
                       for start in range(0, n, BATCH)]
            t1 = time.process_time()
            for items in batches:
                if kind == "plain":
                    store.append_batch(items)
                else:
                    store.append_copies(items)
            t2 = time.process_time()
            return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6
        finally:
            store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--child", nargs=2, metavar=("KIND", "N"))
    args = ap.parse_args()
    if args.child:
        build, append = run(args.child[0], int(args.child[1]))
        print(f"{build:.3f} {append:.3f}")
        return
    kinds = ("plain", "copy", "dup")
    builds: dict[str, list[float]] = {k: [] for k in kinds}
    appends: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        for kind in kinds:
            out = subprocess.run(
                [sys.executable, __file__, "--child", kind, str(args.messages)],
                check=True, capture_output=True, text=True).stdout.split()
            builds[kind].append(float(out[0]))
            appends[kind].append(float(out[1]))
        print(f"round {r + 1}: " + ", ".join(
            f"{k} build {builds[k][-1]:.2f} + append {appends[k][-1]:.2f} us" for k in kinds),
            flush=True)
    print("medians (us/message): " + ", ".join(
        f"{k} build {statistics.median(builds[k]):.2f} append {statistics.median(appends[k]):.2f}"
        for k in kinds))


if __name__ == "__main__":
    main()
