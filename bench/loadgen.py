"""The measuring loop shared by every throughput scenario, and the broker monitor.

``pump`` publishes as fast as the broker takes messages, with one bound: at most
``window`` messages in flight end to end (published but not yet delivered to every
subscriber that should get them). Without it a QoS 0 publisher on loopback outruns any
broker, and what gets measured is the size of the broker's queues, not its rate. If no
delivery arrives for ``stall`` seconds the outstanding messages are written off as lost
(QoS 0 brokers may drop) and publishing goes on.

A run has a warm-up (not counted), a measured window of ``duration`` seconds in which
publishes, deliveries, latencies and broker CPU are counted, and a drain of up to
``drain`` seconds in which deliveries still count towards the loss figure only.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from bench.mqtt_wire import Stats

_perf = time.perf_counter


class Monitor:
    """CPU seconds and RSS of a broker's process tree, sampled from the event loop."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.samples: list[tuple[float, int]] = []
        self._task: asyncio.Task[None] | None = None
        self.t0 = _perf()

    def _procs(self) -> list[psutil.Process]:
        try:
            p = psutil.Process(self.pid)
            return [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def rss(self) -> int:
        total = 0
        for p in self._procs():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self._procs():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def sample(self) -> int:
        r = self.rss()
        self.peak_rss = max(self.peak_rss, r)
        self.samples.append((round(_perf() - self.t0, 3), r))
        return r

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> Monitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.sample()


async def gather_bounded(
    factories: Sequence[Callable[[], object]], concurrency: int
) -> list[object]:
    """Run coroutine factories with at most ``concurrency`` at once, results in order."""
    sem = asyncio.Semaphore(concurrency)
    results: list[object] = [None] * len(factories)

    async def one(i: int) -> None:
        async with sem:
            results[i] = await factories[i]()  # type: ignore[misc]

    await asyncio.gather(*(one(i) for i in range(len(factories))))
    return results


@dataclass
class Publisher:
    """A connection able to send ``n`` messages: ``build(n)`` returns the bytes."""

    conn: object
    build: Callable[[int], bytes]
    sent: int = 0

    def unacked(self) -> int:
        c = self.conn
        if hasattr(c, "confirmed"):
            return self.sent - c.confirmed  # type: ignore[attr-defined]
        return 0


@dataclass
class RunResult:
    published: int = 0
    delivered: int = 0
    seconds: float = 0.0
    pub_rate: float = 0.0
    del_rate: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    cpu_pct: float = 0.0
    #: The load generator's own CPU over the measured window (100 = one core): near
    #: 100 the generator, not the broker, may be what limits the rate.
    gen_cpu_pct: float = 0.0
    peak_rss_mb: float = 0.0
    lost: int = 0
    stalls: int = 0
    extra: dict[str, object] = field(default_factory=dict)


def percentiles(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    s = sorted(values)
    n = len(s)
    return (
        round(s[n // 2] * 1000, 3),
        round(s[min(n - 1, int(n * 0.99))] * 1000, 3),
        round(s[-1] * 1000, 3),
    )


async def pump(
    pubs: list[Publisher],
    stats: Stats,
    monitor: Monitor,
    *,
    fanout: int,
    duration: float,
    warmup: float,
    window: int,
    batch: int,
    drain: float = 5.0,
    stall: float = 1.0,
    confirm_window: int | None = None,
) -> RunResult:
    """Publish round-robin over ``pubs`` for ``warmup + duration`` s; see module doc."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    published = 0
    written_off = 0.0
    state = {"waiting": False}
    low = window // 2

    def on_progress() -> None:
        if state["waiting"] and published - written_off - stats.delivered / fanout <= low:
            wake.set()

    stats.on_progress = on_progress
    t_start = _perf()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    snap: dict[str, float] = {}
    k = 0
    npubs = len(pubs)
    stalls = 0
    last_delivered = stats.delivered
    last_progress = _perf()
    try:
        while True:
            now = _perf()
            if not snap and now >= t_measure:
                snap = {
                    "t": now,
                    "pub": published,
                    "del": stats.delivered,
                    "lat": len(stats.latencies),
                    "cpu": monitor.cpu_seconds(),
                    "gen_cpu": time.process_time(),
                }
            if now >= t_end:
                break
            if stats.delivered != last_delivered:
                last_delivered = stats.delivered
                last_progress = now
            outstanding = published - written_off - stats.delivered / fanout
            room = int(window - outstanding)
            if room < min(batch, max(1, low)):
                if now - last_progress > stall:
                    written_off += outstanding
                    stalls += 1
                    last_progress = now
                    continue
                wake.clear()
                state["waiting"] = True
                try:
                    await asyncio.wait_for(wake.wait(), 0.05)
                except TimeoutError:
                    pass
                state["waiting"] = False
                continue
            pub = pubs[k % npubs]
            k += 1
            conn = pub.conn
            if conn.write_paused or (
                confirm_window is not None and pub.unacked() >= confirm_window
            ):  # type: ignore[attr-defined]
                if k % npubs == 0:
                    await asyncio.sleep(0.001)
                continue
            if conn.transport.is_closing():  # type: ignore[attr-defined]
                raise ConnectionError("a publisher connection was closed by the broker")
            n = min(batch, room)
            conn.transport.write(pub.build(n))  # type: ignore[attr-defined]
            pub.sent += n
            published += n
            if k % max(1, min(npubs, 8)) == 0:
                await asyncio.sleep(0)
        t_done = _perf()
        del_done = stats.delivered
        lat_end = len(stats.latencies)
        cpu_end = monitor.cpu_seconds()
        gen_cpu_end = time.process_time()
        # Drain: let in-flight messages land, for the loss count.
        deadline = _perf() + drain
        while _perf() < deadline and stats.delivered < published * fanout:
            await asyncio.sleep(0.02)
    finally:
        stats.on_progress = None
    if not snap:
        snap = {"t": t_start, "pub": 0, "del": 0, "lat": 0, "cpu": monitor.cpu_seconds(),
                "gen_cpu": time.process_time()}
    secs = t_done - snap["t"]
    res = RunResult()
    res.published = int(published - snap["pub"])
    res.delivered = int(del_done - snap["del"])
    res.seconds = round(secs, 3)
    res.pub_rate = round(res.published / secs, 1) if secs > 0 else 0.0
    res.del_rate = round(res.delivered / secs, 1) if secs > 0 else 0.0
    res.p50_ms, res.p99_ms, res.max_ms = percentiles(stats.latencies[int(snap["lat"]) : lat_end])
    res.cpu_pct = round((cpu_end - snap["cpu"]) / secs * 100, 1) if secs > 0 else 0.0
    res.gen_cpu_pct = round((gen_cpu_end - snap["gen_cpu"]) / secs * 100, 1) if secs > 0 else 0.0
    res.peak_rss_mb = round(monitor.peak_rss / 2**20, 1)
    res.lost = max(0, published * fanout - stats.delivered)
    res.stalls = stalls
    res.extra["total_published"] = published
    res.extra["window"] = window
    _ = loop
    return res


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else 0.0
