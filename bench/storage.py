"""Storage engine benchmark (run by hand, not in CI).

    .venv/bin/python bench/storage.py                 # everything, default sizes
    .venv/bin/python bench/storage.py --only append,fanout --seconds 5
    .venv/bin/python bench/storage.py --lmqs 10000000 --only scale

Prints, for this machine: appends/s and MB/s for 100 B and 1 KiB messages in each
durability mode; dispatched index entries/s at fan-out 1, 10 and 100; pull messages/s;
pop+ack/s; the LMQ scale run (N LMQs holding one message each: resident memory, bytes
on disk, open file descriptors, time to read one random LMQ); and recovery time after a
SIGKILL with the log holding many records (plus a full index rebuild). Each figure is
the median of ``--repeat`` runs. Results go to stdout and, with ``--json FILE``, to a
file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from broker_core import Durability, Message, MessageStore, StoreConfig  # noqa: E402

BATCH = 256


def machine() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def median_of(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(fn() for _ in range(repeat))


def bench_append(tmp: Path, size: int, durability: Durability, seconds: float) -> float:
    """Appends/s with batches of 256 (async) or 8 threads appending one at a time (sync:
    group commit is what makes sync mode fast, so that is what we measure)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    cfg = StoreConfig(durability=durability)
    body = os.urandom(size)
    with MessageStore.open(d, cfg) as s:
        if durability == Durability.ASYNC:
            batch = [
                (Message(topic=f"t/{i % 64}", body=body), [f"t/{i % 64}"]) for i in range(BATCH)
            ]
            n = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                s.append_batch(batch, wait=False)
                n += BATCH
            rate = n / (time.perf_counter() - start)
        else:
            counts = [0] * 8
            stop = time.perf_counter() + seconds

            def worker(i: int) -> None:
                msg = Message(topic=f"t/{i}", body=body)
                while time.perf_counter() < stop:
                    s.append(msg, [f"t/{i}"])  # waits for the shared fsync
                    counts[i] += 1

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rate = sum(counts) / (time.perf_counter() - start)
    shutil.rmtree(d)
    return rate


def bench_fanout(tmp: Path, fanout: int, seconds: float) -> float:
    """Index entries dispatched per second (appends/s x fan-out), 100 B bodies."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    with MessageStore.open(d, StoreConfig()) as s:
        per_batch = max(1, BATCH // fanout)
        groups = [[f"f{fanout}/{g}/{j}" for j in range(fanout)] for g in range(16)]
        batch = [(Message(topic="t", body=b"x" * 100), groups[i % 16]) for i in range(per_batch)]
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            s.append_batch(batch, wait=False)
            n += per_batch * fanout
        rate = n / (time.perf_counter() - start)
    shutil.rmtree(d)
    return rate


def bench_pull_pop(tmp: Path, count: int) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(dir=tmp))
    with MessageStore.open(d, StoreConfig()) as s:
        msgs = [(Message(topic="t", body=b"x" * 100), ["q"]) for _ in range(BATCH)]
        for _ in range(count // BATCH):
            s.append_batch(msgs, wait=False)
        start = time.perf_counter()
        offset, n = 0, 0
        while True:
            res = s.pull("q", offset, max_count=64)
            if not res.messages:
                break
            n += len(res.messages)
            offset = res.next_offset
        pull_rate = n / (time.perf_counter() - start)
        start = time.perf_counter()
        n = 0
        while True:
            popped = s.pop.pop("g", "q", 32, 60_000)
            if not popped:
                break
            for p in popped:
                s.pop.ack(p.receipt)
            n += len(popped)
        pop_rate = n / (time.perf_counter() - start)
    shutil.rmtree(d)
    return pull_rate, pop_rate


_SCALE_CHILD = textwrap.dedent(
    """
    import json, os, random, sys, time
    import psutil
    sys.path.insert(0, sys.argv[3])
    from broker_core import Message, MessageStore, StoreConfig
    d, n = sys.argv[1], int(sys.argv[2])
    proc = psutil.Process()
    fds0 = proc.num_fds()
    body = b"x" * 100
    start = time.perf_counter()
    with MessageStore.open(d, StoreConfig()) as s:
        fds_open = proc.num_fds()
        step = 1000
        for base in range(0, n, step):
            s.append_batch([(Message(topic="dev", body=body), [f"dev/{i}/inbox"])
                            for i in range(base, min(n, base + step))], wait=False)
        write_s = time.perf_counter() - start
        fds_after = proc.num_fds()
        rss = proc.memory_info().rss
        reads = []
        rnd = random.Random(7)
        for _ in range(200):
            name = f"dev/{rnd.randrange(n)}/inbox"
            t = time.perf_counter()
            got = s.pull(name, 0).messages
            reads.append(time.perf_counter() - t)
            assert len(got) == 1
        reads.sort()
    print(json.dumps({"lmqs": n, "write_s": write_s, "rss_bytes": rss,
                      "fds_before_open": fds0, "fds_after_open": fds_open,
                      "fds_after_writes": fds_after,
                      "read_one_lmq_p50_ms": reads[len(reads)//2] * 1000,
                      "read_one_lmq_p99_ms": reads[int(len(reads)*0.99)] * 1000}))
    """
)


def bench_scale(tmp: Path, lmqs: int) -> dict[str, object]:
    d = Path(tempfile.mkdtemp(dir=tmp))
    out = subprocess.run(
        [sys.executable, "-c", _SCALE_CHILD, str(d), str(lmqs), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout)
    result["disk_bytes"] = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    shutil.rmtree(d)
    return result


_CRASH_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    from broker_core import Message, MessageStore, StoreConfig
    d, n = sys.argv[1], int(sys.argv[2])
    s = MessageStore.open(d, StoreConfig())
    body = b"x" * 100
    for base in range(0, n, 1000):
        s.append_batch([(Message(topic="t", body=body), [f"q/{i % 1000}", "all"])
                        for i in range(base, min(n, base + 1000))], wait=False)
    print("DONE", flush=True)
    sys.stdin.read()
    """
)


def bench_recovery(tmp: Path, records: int) -> dict[str, float]:
    d = Path(tempfile.mkdtemp(dir=tmp))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASH_CHILD, str(d), str(records), str(ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "DONE"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    start = time.perf_counter()
    with MessageStore.open(d, StoreConfig()) as s:
        reopen = time.perf_counter() - start
        replayed = s.recovery.replayed_records
        assert s.lmq("all").messages == records
        start = time.perf_counter()
        s.rebuild_index()
        rebuild = time.perf_counter() - start
    shutil.rmtree(d)
    return {
        "records": records,
        "reopen_after_kill_s": reopen,
        "replayed_records": replayed,
        "full_rebuild_s": rebuild,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="append,fanout,pullpop,scale,recovery")
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lmqs", type=int, default=1_000_000)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp", type=Path, default=None, help="where to put the stores")
    args = ap.parse_args()
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="lmq-bench-", dir=args.tmp))
    results: dict[str, object] = {"machine": machine(), "date": time.strftime("%Y-%m-%d")}
    print(f"machine: {results['machine']}")
    try:
        if "append" in only:
            for mode in (Durability.ASYNC, Durability.SYNC):
                for size in (100, 1024):
                    rate = median_of(
                        args.repeat, lambda s=size, m=mode: bench_append(tmp, s, m, args.seconds)
                    )
                    results[f"append_{mode.value}_{size}B_per_s"] = rate
                    print(
                        f"append {mode.value:5} {size:5} B: {rate:12,.0f} msgs/s"
                        f" {rate * size / 1e6:8.1f} MB/s"
                    )
        if "fanout" in only:
            for fanout in (1, 10, 100):
                rate = median_of(args.repeat, lambda f=fanout: bench_fanout(tmp, f, args.seconds))
                results[f"dispatch_fanout{fanout}_entries_per_s"] = rate
                print(
                    f"dispatch fan-out {fanout:3}: {rate:12,.0f} index entries/s"
                    f" ({rate / fanout:,.0f} appends/s)"
                )
        if "pullpop" in only:
            runs = [bench_pull_pop(tmp, 100_000) for _ in range(args.repeat)]
            pull = statistics.median(r[0] for r in runs)
            pop = statistics.median(r[1] for r in runs)
            results["pull_msgs_per_s"] = pull
            results["pop_ack_msgs_per_s"] = pop
            print(f"pull: {pull:12,.0f} msgs/s   pop+ack: {pop:10,.0f} msgs/s")
        if "scale" in only:
            scale = bench_scale(tmp, args.lmqs)
            results["scale"] = scale
            print(
                f"scale: {scale['lmqs']:,} LMQs written in {scale['write_s']:.1f}s;"
                f" RSS {scale['rss_bytes'] / 2**20:.0f} MiB;"
                f" disk {scale['disk_bytes'] / 2**20:.0f} MiB;"
                f" fds {scale['fds_after_open']} after open -> {scale['fds_after_writes']}"
                f" after writes; read one random LMQ p50 {scale['read_one_lmq_p50_ms']:.3f} ms"
                f" p99 {scale['read_one_lmq_p99_ms']:.3f} ms"
            )
        if "recovery" in only:
            rec = bench_recovery(tmp, args.records)
            results["recovery"] = rec
            print(
                f"recovery: {rec['records']:,} records; reopen after SIGKILL"
                f" {rec['reopen_after_kill_s']:.2f}s (replayed {rec['replayed_records']});"
                f" full index rebuild {rec['full_rebuild_s']:.1f}s"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    random.seed(1)
    main()
