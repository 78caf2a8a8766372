"""FIFO pop in the store with one poisoned message group, by hand (not in CI).

    .venv/bin/python bench/fifo.py [--groups 10000] [--per-group 10] [--backlog 10000]
                                   [--rounds 3]

One LMQ holds ``--groups`` message groups of ``--per-group`` messages each,
interleaved (group 0, 1, ..., then each group's second message, ...), plus
``--backlog`` more messages of group 0 at the end. One consumer pops 32 at a time
with the FIFO pop (``MessageStore.pop_fifo``) and acks what it got (``ack_many``).

- **no poison**: every message is acked;
- **poison**: group 0's first message is never acked (its invisible time is longer
  than the run), so group 0 is blocked and its other messages (``per-group - 1``
  plus the backlog) are parked as the pop passes them.

Each run ends when every message of groups 1.. is acked and reports those messages
per second (group 0's are not counted in either run, so the two count the same
work). The runs alternate (none, poison, none, ...); medians and their ratio are
printed, with a plain pop (``MessageStore.pop``, no order) of the same backlog for
reference. 100-byte bodies, async durability.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import machine  # noqa: E402
from broker_core import Message, MessageStore, StoreConfig  # noqa: E402

KEY = "__SHARDINGKEY"
BODY = bytes(100)


def _fill(s: MessageStore, groups: int, per_group: int, backlog: int) -> None:
    batch: list[tuple[Message, list[str]]] = []
    for _n in range(per_group):
        for g in range(groups):
            batch.append((Message(topic="t", body=BODY, properties={KEY: b"g%d" % g}), ["q"]))
            if len(batch) >= 4096:
                s.append_batch(batch)
                batch = []
    for _ in range(backlog):
        batch.append((Message(topic="t", body=BODY, properties={KEY: b"g0"}), ["q"]))
        if len(batch) >= 4096:
            s.append_batch(batch)
            batch = []
    if batch:
        s.append_batch(batch)


def _run(mode: str, groups: int, per_group: int, backlog: int) -> tuple[float, int]:
    """(messages of groups 1.. acked per second, messages parked at the end)."""
    tmp = Path(tempfile.mkdtemp(prefix="lmq-fifo-bench-"))
    try:
        s = MessageStore.open(tmp, StoreConfig())
        _fill(s, groups, per_group, backlog)
        target = (groups - 1) * per_group
        done = 0
        started = time.perf_counter()
        while done < target:
            if mode == "plain":
                got = s.pop.pop("c", "q", 32, 3_600_000)
            else:
                got = s.pop.pop_fifo("c", "q", 32, 3_600_000, KEY)
            if not got:
                raise RuntimeError(f"{mode}: nothing to pop after {done} of {target}")
            acks = []
            for p in got:
                if p.message.record.properties.get(KEY) == b"g0":
                    if mode == "poison":
                        continue  # never acked: group 0 stays blocked
                else:
                    done += 1
                acks.append(p.receipt)
            s.pop.ack_many(acks)
        elapsed = time.perf_counter() - started
        parked = sum(1 for _ in s.state.fifo_parked())
        s.close()
        return done / elapsed, parked
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mach = machine()
    print(f"machine: {mach['host']}, {mach['cpus']} cpus ({mach['cpu_model']}), "
          f"{mach['memory_gib']} GiB, python {mach['python']}")
    print(f"{args.groups} groups x {args.per_group} messages, group 0 backlog"
          f" {args.backlog}; {args.rounds} alternating rounds")
    rates: dict[str, list[float]] = {"none": [], "poison": [], "plain": []}
    for r in range(args.rounds):
        for mode in ("none", "poison", "plain"):
            rate, parked = _run(mode, args.groups, args.per_group, args.backlog)
            rates[mode].append(rate)
            print(f"round {r + 1} {mode:6}: {rate:9.0f} msg/s (groups 1..), parked at end"
                  f" {parked}", flush=True)
    med = {mode: statistics.median(v) for mode, v in rates.items()}
    print(f"median FIFO, no poison : {med['none']:9.0f} msg/s")
    print(f"median FIFO, poisoned  : {med['poison']:9.0f} msg/s")
    print(f"median plain pop       : {med['plain']:9.0f} msg/s")
    print(f"poisoned / no poison   : {med['poison'] / med['none']:.2f}")


if __name__ == "__main__":
    main()
