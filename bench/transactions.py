"""Transactional messages in the store, by hand (not in CI).

    .venv/bin/python bench/transactions.py [--seconds 3] [--fanout 1] [--threads 1]

Prints, per durability mode: plain appends/s (the baseline), transactions/s (one
``append_half`` then one ``end_transaction(commit=True)``, each acknowledged as the
mode says), and for 10,000 pending halves the time of one ``transaction_checks_due``
pass and a restart (open with the pending state loaded). 1 KiB bodies. With
``--threads`` N writers run at once (in sync mode they share fsyncs).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from broker_core import Durability, Message, MessageStore, StoreConfig


def _rate(work, seconds: float, threads: int) -> float:
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop:
            work(i, done[i])
            done[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    start = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done) / (time.monotonic() - start)


def _mode(mode: Durability, seconds: float, fanout: int, threads: int) -> None:
    body = bytes(1024)
    tmp = Path(tempfile.mkdtemp(prefix="lmq-txn-bench-"))
    try:
        cfg = StoreConfig(durability=mode)
        s = MessageStore.open(tmp, cfg)
        lmqs = [[f"q/{t}/{i}" for i in range(fanout)] for t in range(threads)]

        def plain(t: int, n: int) -> None:
            s.append(Message(topic="t", body=body), lmqs[t])

        def txn(t: int, n: int) -> None:
            half = s.append_half(Message(topic="t", body=body), lmqs[t], "pg")
            s.end_transaction(half.position, commit=True)

        base = _rate(plain, seconds, threads)
        rate = _rate(txn, seconds, threads)
        for _ in range(10_000):
            s.append_half(Message(topic="t", body=body), ["pending"], "pg", wait=False)
        started = time.perf_counter()
        due = s.transaction_checks_due(now=1 << 62, limit=10_000)
        check_s = time.perf_counter() - started
        s.close()
        started = time.perf_counter()
        s = MessageStore.open(tmp, cfg)
        open_s = time.perf_counter() - started
        pending = len(list(s.txns.iter_pending()))
        s.close()
        print(f"{mode.value:5}  plain appends/s {base:9.0f}  transactions/s {rate:9.0f}"
              f"  (fan-out {fanout}, {threads} thread(s))")
        print(f"       checks due pass over {len(due)} halves: {check_s * 1000:.0f} ms;"
              f" reopen with {pending} pending: {open_s * 1000:.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--fanout", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    for mode in (Durability.ASYNC, Durability.SYNC):
        _mode(mode, args.seconds, args.fanout, args.threads)


if __name__ == "__main__":
    main()
