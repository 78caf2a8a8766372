"""Benchmark of the Spark fan-out job (run by hand; not part of the test suite).

    .venv/bin/python bench/spark_fanout.py                     # 10M records (long)
    .venv/bin/python bench/spark_fanout.py --records 200000    # a quick check

1. Generates a commit log: ``--records`` messages from ``--devices`` devices (Zipf-skewed
   activity) on ``--topics`` topics (Zipf-skewed popularity). Each topic has a fixed set
   of subscriber LMQs (heavy-tailed size: most topics have a handful, a few have
   hundreds), and each message also lands in one per-session LMQ drawn from a universe
   of ``--lmqs`` names, so the log touches about that many distinct LMQs.
   ``--writer store`` (default) appends through ``broker_core.store.MessageStore`` in
   batches (RocksDB index and all; store times are real time). ``--writer segments``
   writes segments directly with ``encode_record`` (faster; store times spread evenly
   over a simulated day).
2. Times reading the log's bytes from disk with plain Python (16 MiB reads; the page
   cache as the job finds it): the limit the job's read stage is compared with.
3. Times ``spark.job.run`` in local mode and prints records/s, the time of each stage
   (from the job's progress messages), the machine and its load average before and
   after, and the peak resident memory of the JVM, the Python workers and the
   driver. ``--conf`` passes Spark settings. ``--rows`` decodes record by record (the
   reference decoder) instead of a batch at a time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_core.record import Message, Protocol, encode_record  # noqa: E402


def zipf_weights(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank**s) for rank in range(1, n + 1)))


class Traffic:
    def __init__(self, args: argparse.Namespace) -> None:
        rng = random.Random(args.seed)
        self.rng = rng
        self.devices = [f"dev-{i:06d}" for i in range(args.devices)]
        self.topics = [
            f"fleet/r{t % 16}/site{t // 16 % 64}/{('temp', 'gps', 'status', 'alarm')[t % 4]}"
            f"/{t // 1024}"
            for t in range(args.topics)
        ]
        rng.shuffle(self.topics)
        self.device_w = zipf_weights(args.devices, 0.8)
        self.topic_w = zipf_weights(args.topics, 1.1)
        self.lmqs = args.lmqs
        # heavy-tailed subscriber sets: Pareto sizes, capped
        self.subs: list[list[str]] = []
        for _ in range(args.topics):
            size = min(args.max_topic_fanout, int(rng.paretovariate(1.3)))
            start = rng.randrange(args.lmqs)
            self.subs.append([f"app/q{(start + k * 7919) % args.lmqs:07d}" for k in range(size)])

    def batch(self, n: int):
        rng = self.rng
        devs = rng.choices(range(len(self.devices)), cum_weights=self.device_w, k=n)
        tops = rng.choices(range(len(self.topics)), cum_weights=self.topic_w, k=n)
        for d, t in zip(devs, tops, strict=True):
            lmqs = [*self.subs[t], f"mqtt/session/{rng.randrange(self.lmqs):07d}"]
            body = b"x" * (16 + (d * 31 + t) % 240)
            yield (
                Message(
                    topic=self.topics[t],
                    body=body,
                    origin=self.devices[d],
                    qos=1,
                    protocol=Protocol.MQTT,
                ),
                lmqs,
            )


def generate_with_store(args, traffic: Traffic, data_dir: Path) -> None:
    from broker_core.config import StoreConfig
    from broker_core.store import MessageStore

    store = MessageStore.open(data_dir, config=StoreConfig())
    try:
        done = 0
        while done < args.records:
            n = min(args.batch, args.records - done)
            store.append_batch(list(traffic.batch(n)))
            done += n
            _tick(done, args.records)
    finally:
        store.close()


def generate_segments(args, traffic: Traffic, data_dir: Path) -> None:
    log_dir = data_dir / "commitlog"
    log_dir.mkdir(parents=True)
    segment_bytes = 256 * 1024 * 1024
    offsets: dict[str, int] = {}
    t0 = 1_714_521_600_000  # 2024-05-01T00:00Z
    step = 86_400_000 / args.records
    position, used, fh = 0, 0, None
    done = 0
    try:
        while done < args.records:
            n = min(args.batch, args.records - done)
            for message, lmqs in traffic.batch(n):
                dispatch = []
                for name in lmqs:
                    off = offsets.get(name, 0)
                    offsets[name] = off + 1
                    dispatch.append((name.encode(), off))
                raw = encode_record(
                    position=position,
                    store_ms=int(t0 + done * step),
                    message=message,
                    dispatch=dispatch,
                )
                if fh is None or used + len(raw) > segment_bytes:
                    if fh is not None:
                        fh.close()
                    fh = open(log_dir / f"{position:020d}.log", "wb")  # noqa: SIM115
                    used = 0
                fh.write(raw)
                used += len(raw)
                position += len(raw)
                done += 1
            _tick(done, args.records)
    finally:
        if fh is not None:
            fh.close()


def _tick(done: int, total: int) -> None:
    if done % max(1, total // 20) < 1000 or done == total:
        print(f"  generated {done:,}/{total:,}", file=sys.stderr, flush=True)


def read_bytes(log_dir: Path) -> float:
    """Seconds to read every segment's bytes in 16 MiB chunks."""
    t = time.perf_counter()
    for path in sorted(log_dir.glob("*.log")):
        with open(path, "rb", buffering=0) as fh:
            while fh.read(16 << 20):
                pass
    return time.perf_counter() - t


class PeakMemory:
    """Peak resident memory of this process's tree while the job runs, sampled every
    0.2 s with psutil: the JVM (driver and executors in local mode), the Python
    workers (largest one and all together) and this driver process."""

    def __init__(self) -> None:
        import threading

        self.peak = {"jvm": 0, "python workers": 0, "largest python worker": 0, "driver": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.2):
            now = {"jvm": 0, "python workers": 0, "largest python worker": 0}
            try:
                self.peak["driver"] = max(self.peak["driver"], me.memory_info().rss)
                children = me.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    kind = _kind(child.cmdline())
                    rss = child.memory_info().rss
                except psutil.Error:
                    continue
                if kind == "jvm":
                    now["jvm"] += rss
                elif kind == "python":
                    now["python workers"] += rss
                    now["largest python worker"] = max(now["largest python worker"], rss)
            for key, value in now.items():
                self.peak[key] = max(self.peak[key], value)

    def describe(self) -> str:
        return ", ".join(f"{key} {value / 2**20:,.0f} MiB" for key, value in self.peak.items())


def _kind(cmdline: list[str]) -> str:
    """``jvm``, ``python`` (PySpark's daemon and workers) or ``other`` (the launch
    scripts before they exec the JVM), from a process's command line. (Sorting by
    process name, the first version of this bench twice counted a process the size of
    the JVM as a Python worker; by command line no Python worker came near it.)"""
    if cmdline and os.path.basename(cmdline[0]) == "java":
        return "jvm"
    if any("pyspark" in arg for arg in cmdline[1:3]):
        return "python"
    return "other"


def machine() -> str:
    mem = ""
    try:
        import psutil

        mem = f", {psutil.virtual_memory().total / 2**30:.1f} GiB RAM"
    except ImportError:
        pass
    import pyspark

    return (
        f"{os.cpu_count()} CPUs{mem}, {platform.platform()}, {platform.processor() or '?'}, "
        f"Python {platform.python_version()}, pyspark {pyspark.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--devices", type=int, default=100_000)
    p.add_argument("--lmqs", type=int, default=1_000_000)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--max-topic-fanout", type=int, default=500)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--writer", choices=("store", "segments"), default="store")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--data-dir", type=Path, help="reuse/keep the generated log here")
    p.add_argument("--out", type=Path, help="job output (default: a temporary directory)")
    p.add_argument("--no-records-table", action="store_true", help="skip the per-record Parquet")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rows", action="store_true", help="the record-at-a-time decoder")
    p.add_argument("--include-sys", action="store_true")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeat), e.g. spark.driver.memory=4g",
    )
    args = p.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)

    tmp = Path(tempfile.mkdtemp(prefix="lmq-bench-"))
    data_dir = args.data_dir or tmp / "data"
    out = args.out or tmp / "out"
    try:
        if not (data_dir / "commitlog").is_dir():
            print(f"generating {args.records:,} records with the {args.writer} writer", flush=True)
            t = time.perf_counter()
            traffic = Traffic(args)
            if args.writer == "store":
                generate_with_store(args, traffic, data_dir)
            else:
                generate_segments(args, traffic, data_dir)
            gen = time.perf_counter() - t
            print(f"generated in {gen:.1f} s ({args.records / gen:,.0f} records/s)")
        log_bytes = sum(f.stat().st_size for f in (data_dir / "commitlog").glob("*.log"))
        print(f"log: {log_bytes / 2**20:,.1f} MiB in {data_dir / 'commitlog'}")
        disk_s = read_bytes(data_dir / "commitlog")
        print(
            f"reading the same bytes from disk (Python, one core): {disk_s:.1f} s "
            f"({log_bytes / 2**20 / disk_s:,.0f} MiB/s)"
        )
        load_before = os.getloadavg()

        from spark.job import JobConfig, build_session, quiet_pyspark_warnings, run

        quiet_pyspark_warnings()
        t_session = time.perf_counter()
        session = build_session(args.master, app_name="lmq-fanout-bench", conf=conf)
        session_s = time.perf_counter() - t_session
        stages: list[tuple[float, str]] = []

        def progress(message: str) -> None:
            stages.append((time.perf_counter(), message))
            print(f"  [{stages[-1][0] - stages[0][0]:7.1f} s] {message}", flush=True)

        memory = PeakMemory()
        try:
            t = time.perf_counter()
            with memory:
                result = run(
                    session,
                    JobConfig(
                        str(data_dir),
                        str(out),
                        write_records=not args.no_records_table,
                        include_sys=args.include_sys,
                        decoder="rows" if args.rows else "columnar",
                    ),
                    progress=progress,
                )
            total = time.perf_counter() - t
        finally:
            session.stop()
        s = result.summary
        print()
        print(f"machine: {machine()}")
        print(f"master: {args.master}; Spark session start {session_s:.1f} s (not counted)")
        if conf:
            print("conf: " + ", ".join(f"{k}={v}" for k, v in conf.items()))
        print(f"peak resident memory: {memory.describe()}")
        print(
            "load average (1, 5, 15 min) before "
            + ", ".join(f"{x:.1f}" for x in load_before)
            + "; after "
            + ", ".join(f"{x:.1f}" for x in os.getloadavg())
        )
        print(f"decoder: {'record at a time' if args.rows else 'columnar'}")
        print(
            f"records: {s['messages']:,}; devices {s['devices']:,}; LMQs {s['lmqs']:,}; "
            f"fan-out mean {s['fanout']['mean']:.2f}, p50 {s['fanout']['p50']:.0f}, "
            f"p99 {s['fanout']['p99']:.0f}, max {s['fanout']['max']}"
        )
        print(f"job: {total:.1f} s = {s['messages'] / total:,.0f} records/s end to end")
        print("where the time goes:")
        marks = [*stages, (t + total, "end")]
        for (t1, m1), (t2, _m2) in itertools.pairwise(marks):
            print(f"  {t2 - t1:7.1f} s  {m1}")
        print(f"summary: {result.summary_md}")
    finally:
        if args.data_dir is None or args.out is None:
            print(f"(temporary files in {tmp}; removing)")
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
