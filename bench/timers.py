"""Durable timers (delayed messages) in the store, by hand (not in CI).

    .venv/bin/python bench/timers.py                       # everything, default sizes
    .venv/bin/python bench/timers.py --only pending --pending 10000000
    .venv/bin/python bench/timers.py --only steady,burst --burst 1000000 --json out.json

Parts (issue 17's timer figures):

- ``pending``: N delayed messages pending (due in a day) against the same N messages
  stored undelayed (dispatched to one LMQ: "none pending"). For each: schedule rate,
  bytes on disk, and, in a fresh process that reopens the store, the reopen time and its
  resident memory (the pending timers live in RocksDB, not in memory: that is the claim
  measured). Then the fire rate: ``fire_timers`` over ``--fire`` of the pending timers,
  one page per log write, in the reopened store.
- ``steady``: 10,000 timers due per second for ``--seconds`` seconds, scheduled ahead
  (two seconds before they are due), fired by the gateway's own firing loop
  (:class:`gateway.rocketmq.timer_service.TimerFiring` on an asyncio loop) and read by
  a consumer woken by the store's listener: lateness = the time the consumer read a
  message minus its due time, p50 / p99 / max.
- ``burst``: ``--burst`` timers (1,000,000) due in the same millisecond, scheduled
  first; the same loop and consumer: lateness p50 / p99 / max and how long the whole
  burst took to fire.

Everything runs in one process on the asyncio loop as in the gateway (``fire_timers``
runs on the loop thread, one page per turn). Bodies are 100 bytes carrying their due
time. Results go to stdout and, with ``--json FILE``, to a file; the machine is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bench.storage import machine  # noqa: E402
from broker_core import Message, MessageStore, StoreConfig, UnknownLmq  # noqa: E402
from broker_core.clock import now_ms  # noqa: E402
from gateway.rocketmq.timer_service import TimerFiring  # noqa: E402

LMQ = "timerbench"
PAD = b"x" * 92
CHUNK = 1000


def _body(due: int) -> bytes:
    return struct.pack(">q", due) + PAD


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _pcts(values: list[int]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    values.sort()
    n = len(values)
    return {
        "n": n,
        "p50_ms": values[n // 2],
        "p99_ms": values[min(n - 1, int(n * 0.99))],
        "max_ms": values[-1],
        "min_ms": values[0],
    }


# -- pending ------------------------------------------------------------------------------

def _fill(path: Path, n: int, delayed: bool) -> dict[str, Any]:
    due = now_ms() + 24 * 3600 * 1000
    msg = Message(topic="bench", body=_body(due))
    t0 = time.perf_counter()
    with MessageStore.open(path, StoreConfig()) as s:
        for base in range(0, n, CHUNK):
            k = min(CHUNK, n - base)
            if delayed:
                s.append_delayed_batch([(msg, (LMQ,), due)] * k, wait=False)
            else:
                s.append_batch([(msg, (LMQ,))] * k, wait=False)
        pending = s.timers.pending()
    took = time.perf_counter() - t0
    return {"count": n, "per_s": round(n / took), "pending": pending, "disk_bytes": _disk(path)}


_REOPEN = """
import json, sys, time, gc, psutil
sys.path.insert(0, {root!r})
from broker_core import MessageStore, StoreConfig
rss0 = psutil.Process().memory_info().rss
t0 = time.perf_counter()
s = MessageStore.open({path!r}, StoreConfig())
took = time.perf_counter() - t0
gc.collect()
out = {{"reopen_s": round(took, 3), "rss_bytes": psutil.Process().memory_info().rss,
        "rss_before_open_bytes": rss0, "pending": s.timers.pending()}}
if {fire}:
    page = s.config.timer_page
    t0 = time.perf_counter()
    fired = s.fire_timers(now=2**62, max_count={fire})
    took = time.perf_counter() - t0
    out["fired"] = fired
    out["fire_per_s"] = round(fired / took)
    out["rss_after_fire_bytes"] = psutil.Process().memory_info().rss
s.close()
print(json.dumps(out))
"""


def _reopen(path: Path, fire: int) -> dict[str, Any]:
    code = _REOPEN.format(root=str(ROOT), path=str(path), fire=fire)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_pending(tmp: Path, n: int, fire: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for name, delayed in (("none_pending", False), ("pending", True)):
        d = tmp / name
        filled = _fill(d, n, delayed)
        print(f"  {name}: stored {n:,} at {filled['per_s']:,}/s, "
              f"{filled['disk_bytes'] / 2**20:,.0f} MiB on disk", flush=True)
        opened = _reopen(d, fire if delayed else 0)
        print(f"  {name}: reopen {opened['reopen_s']} s, "
              f"RSS {opened['rss_bytes'] / 2**20:,.0f} MiB", flush=True)
        if delayed:
            print(f"  fired {opened['fired']:,} at {opened['fire_per_s']:,}/s, "
                  f"RSS after {opened['rss_after_fire_bytes'] / 2**20:,.0f} MiB", flush=True)
        res[name] = {**filled, **opened}
        shutil.rmtree(d, ignore_errors=True)
    return res


# -- lateness -----------------------------------------------------------------------------

class _Consumer:
    """Reads the LMQ as messages land (woken by the store's listener on the loop thread)
    and records each message's lateness twice: when it became readable (the listener's
    call for the fire that dispatched it: ``dispatch`` lateness, the timers' own figure)
    and when this consumer read it (``read`` lateness: adds the consumer's own pace)."""

    def __init__(self, store: MessageStore, expect: int) -> None:
        self.store = store
        self.expect = expect
        self.offset = 0
        self.lateness: list[int] = []
        self.first_ms = 0
        self.last_ms = 0
        self.wake = asyncio.Event()
        #: seconds since the first arrival -> the worst lateness read in that second
        self.worst_by_second: dict[int, int] = {}
        #: (next offset after a fire's dispatch, when) per listener call, in order
        self.marks: list[tuple[int, int]] = []
        store.add_listener(LMQ, self._dispatched)

    def _dispatched(self, _name: str, next_offset: int) -> None:
        self.marks.append((next_offset, now_ms()))
        self.wake.set()

    def dispatch_lateness(self) -> list[int]:
        """Per message read: the time of the first listener call that covered its
        offset, minus its due time."""
        out = []
        ends = [end for end, _ in self.marks]
        offset = 0
        while True:
            got = self.store.pull(LMQ, offset, 1024).messages
            if not got:
                return out
            for m in got:
                (due,) = struct.unpack_from(">q", m.body)
                out.append(self.marks[bisect.bisect_right(ends, m.offset)][1] - due)
            offset = got[-1].offset + 1

    async def run(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while len(self.lateness) < self.expect and loop.time() < deadline:
            try:
                got = self.store.pull(LMQ, self.offset, 256).messages
            except UnknownLmq:  # nothing fired yet: the LMQ is made by its first entry
                got = []
            if not got:
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), 1.0)
                except TimeoutError:
                    pass
                continue
            now = now_ms()
            if not self.first_ms:
                self.first_ms = now
            self.last_ms = now
            for m in got:
                (due,) = struct.unpack_from(">q", m.body)
                self.lateness.append(now - due)
            self.offset = got[-1].offset + 1
            worst = max(now - struct.unpack_from(">q", m.body)[0] for m in got)
            second = (now - self.first_ms) // 1000
            self.worst_by_second[second] = max(worst, self.worst_by_second.get(second, 0))
            await asyncio.sleep(0)  # let the firing loop and producer run


async def _steady(path: Path, rate: int, seconds: int, lead_ms: int) -> dict[str, Any]:
    with MessageStore.open(path, StoreConfig()) as s:
        loop = asyncio.get_running_loop()
        firing = TimerFiring(s, loop)
        firing.start()
        total = rate * seconds
        consumer = _Consumer(s, total)
        task = asyncio.create_task(consumer.run(loop.time() + seconds + 60))
        start = now_ms() + lead_ms
        tick = 0.05  # schedule every 50 ms what falls due 50 ms later, lead_ms ahead
        per_tick = int(rate * tick)
        sent = 0
        t0 = loop.time()
        while sent < total:
            k = min(per_tick, total - sent)
            items = []
            for i in range(k):
                due = start + (sent + i) * 1000 // rate
                items.append((Message(topic="bench", body=_body(due)), (LMQ,), due))
            s.append_delayed_batch(items, wait=False)
            firing.arm(items[0][2])
            sent += k
            await asyncio.sleep(max(0.0, t0 + (sent / rate) - loop.time()))
        await task
        firing.stop()
        return {"rate_per_s": rate, "seconds": seconds, "lead_ms": lead_ms,
                "worst_by_second_ms": [consumer.worst_by_second.get(i, 0) for i in
                                       range(max(consumer.worst_by_second, default=-1) + 1)],
                "read": _pcts(consumer.lateness),
                **_pcts(consumer.dispatch_lateness())}


async def _burst(path: Path, n: int) -> dict[str, Any]:
    with MessageStore.open(path, StoreConfig()) as s:
        loop = asyncio.get_running_loop()
        # Schedule first; the due time must fall after the last one is stored, so it is
        # picked from a probe of the scheduling rate with a wide margin (printed).
        t0 = time.perf_counter()
        probe_due = now_ms() + 3_600_000
        msg_probe = Message(topic="bench", body=_body(probe_due))
        for _ in range(10):  # (the probe's timers stay pending, an hour away)
            s.append_delayed_batch([(msg_probe, (LMQ,), probe_due)] * CHUNK, wait=False)
        per_s = 10 * CHUNK / (time.perf_counter() - t0)
        due = now_ms() + int(n / per_s * 1000 * 2.5) + 5000
        msg = Message(topic="bench", body=_body(due))
        t0 = time.perf_counter()
        for base in range(0, n, CHUNK):
            s.append_delayed_batch([(msg, (LMQ,), due)] * min(CHUNK, n - base), wait=False)
        sched_s = time.perf_counter() - t0
        left_ms = due - now_ms()
        gc.collect()
        rss_pending = psutil.Process().memory_info().rss
        firing = TimerFiring(s, loop)
        firing.start()
        consumer = _Consumer(s, n)
        await consumer.run(loop.time() + max(0, left_ms) / 1000 + 600)
        firing.stop()
        fired_s = (consumer.marks[-1][1] - due) / 1000 if consumer.marks else 0.0
        return {"count": n, "schedule_s": round(sched_s, 2), "margin_ms_before_due": left_ms,
                "rss_pending_bytes": rss_pending,
                "drain_s": round(fired_s, 2), "fire_per_s": round(n / max(0.001, fired_s)),
                "read": _pcts(consumer.lateness),
                **_pcts(consumer.dispatch_lateness())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="pending,steady,burst")
    ap.add_argument("--pending", type=int, default=10_000_000)
    ap.add_argument("--fire", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--burst", type=int, default=1_000_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dir", type=Path, default=None,
                    help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    out: dict[str, Any] = {"machine": machine()}
    print(json.dumps(out["machine"]), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="lmq-timers-", dir=args.dir))
    try:
        if "steady" in only:
            r = asyncio.run(_steady(tmp / "steady", args.rate, args.seconds, 2000))
            print(f"steady {args.rate:,}/s for {args.seconds} s: lateness p50 {r['p50_ms']} ms, "
                  f"p99 {r['p99_ms']} ms, max {r['max_ms']} ms, min {r['min_ms']} ms "
                  f"(n={r['n']:,}); read by the consumer: p50 {r['read']['p50_ms']} ms, "
                  f"p99 {r['read']['p99_ms']} ms, max {r['read']['max_ms']} ms", flush=True)
            print(f"  worst lateness per second: {r['worst_by_second_ms']}", flush=True)
            out["steady"] = r
            shutil.rmtree(tmp / "steady", ignore_errors=True)
        if "burst" in only:
            r = asyncio.run(_burst(tmp / "burst", args.burst))
            print(f"burst {args.burst:,} due at once: lateness p50 {r['p50_ms']} ms, "
                  f"p99 {r['p99_ms']} ms, max {r['max_ms']} ms; drained in {r['drain_s']} s "
                  f"({r['fire_per_s']:,}/s); scheduled in {r['schedule_s']} s, "
                  f"{r['margin_ms_before_due']} ms before due; min lateness {r['min_ms']} ms; "
                  f"read by the consumer: p50 {r['read']['p50_ms']} ms, "
                  f"max {r['read']['max_ms']} ms", flush=True)
            out["burst"] = r
            shutil.rmtree(tmp / "burst", ignore_errors=True)
        if "pending" in only:
            print(f"pending: {args.pending:,} delayed vs undelayed", flush=True)
            out["pending"] = bench_pending(tmp, args.pending, args.fire)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
