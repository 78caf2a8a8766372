"""Delayed messages over AMQP: the gateway's ``x-delayed-message`` exchange against what a
RabbitMQ user has, side by side in one run, by hand (not in CI).

    .venv/bin/python bench/delays.py                          # 100,000 pending, 60 s delay
    .venv/bin/python bench/delays.py --count 20000 --delay-ms 20000 --runs 3

Debian's RabbitMQ has no delayed-message plugin, so its users delay with message TTL
and dead-lettering: a queue per delay (``x-message-ttl`` = the delay,
``x-dead-letter-exchange`` = "", ``x-dead-letter-routing-key`` = the target queue),
messages published to it persistent and expiring into the target. The gateway gets
the same messages through its ``x-delayed-message`` exchange (``x-delayed-type``
direct) with an ``x-delay`` header, routed to the same target queue name.

Per broker: ``--count`` persistent messages of 100 bytes, published with publisher
confirms (a window of 100 unconfirmed, so a message waits little between its timestamp
and the broker) and all the same delay, so all of them are pending at once; a consumer
on the target queue (prefetch 1,000, acks) records each message's lateness = the time it
arrived minus (its publish time + the delay). Printed: publish rate, the broker's
resident memory (its whole process tree) before publishing and with everything pending,
its bytes on disk with everything pending, lateness p50 / p99 / max, and how many
arrived (any early arrival, lateness < 0, is counted too).
Each broker runs on its own data directory and loopback ports, started fresh and
stopped by PID. With ``--runs`` N the brokers alternate and the medians are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiormq  # noqa: E402
import psutil  # noqa: E402
from pamqp import commands as spec  # noqa: E402

from bench.peers import Broker, make  # noqa: E402
from bench.storage import machine  # noqa: E402

TARGET = "delayed.target"
PAD = b"x" * 92
WINDOW = 100


def _tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _declare(ch: aiormq.abc.AbstractChannel, kind: str, delay_ms: int) -> tuple[str, str]:
    """Declare the topology; returns (exchange, routing key) to publish to."""
    await ch.queue_declare(TARGET, durable=True)
    if kind == "rabbitmq":
        q = f"delay.{delay_ms}"
        await ch.queue_declare(q, durable=True, arguments={
            "x-message-ttl": delay_ms,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": TARGET,
        })
        return "", q
    await ch.exchange_declare("delayed", exchange_type="x-delayed-message", durable=True,
                              arguments={"x-delayed-type": "direct"})
    await ch.queue_bind(TARGET, "delayed", routing_key=TARGET)
    return "delayed", TARGET


async def _run_one(broker: Broker, kind: str, count: int, delay_ms: int) -> dict[str, Any]:
    url = f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/"
    rss_idle = _tree_rss(broker.pid)
    conn = await aiormq.connect(url)
    pub = await conn.channel()
    await pub.confirm_delivery()
    exchange, key = await _declare(pub, kind, delay_ms)
    sub_conn = await aiormq.connect(url)
    sub = await sub_conn.channel()
    await sub.basic_qos(prefetch_count=1000)
    lateness: list[int] = []
    done = asyncio.Event()

    async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
        now = time.time_ns() // 1_000_000
        (born,) = struct.unpack_from(">q", message.body)
        lateness.append(now - (born + delay_ms))
        assert message.delivery_tag is not None
        await message.channel.basic_ack(message.delivery_tag)
        if len(lateness) >= count:
            done.set()

    await sub.basic_consume(TARGET, on_message)
    headers: dict[str, Any] | None = {"x-delay": delay_ms} if kind != "rabbitmq" else None
    t0 = time.perf_counter()
    pending: set[asyncio.Future[Any]] = set()
    for _ in range(count):
        body = struct.pack(">q", time.time_ns() // 1_000_000) + PAD
        props = spec.Basic.Properties(delivery_mode=2, headers=headers)
        fut = asyncio.ensure_future(pub.basic_publish(body, exchange=exchange, routing_key=key,
                                                      properties=props))
        pending.add(fut)
        if len(pending) >= WINDOW:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for f in finished:
                f.result()
    for f in pending:
        await f
    publish_s = time.perf_counter() - t0
    arrived_during_publish = len(lateness)
    rss_pending = _tree_rss(broker.pid)
    disk_pending = _disk(broker.data_dir)
    try:
        await asyncio.wait_for(done.wait(), delay_ms / 1000 + 300)
    except TimeoutError:
        pass
    await conn.close()
    await sub_conn.close()
    values = sorted(lateness)
    n = len(values)
    return {
        "broker": kind,
        "count": count,
        "delay_ms": delay_ms,
        "publish_per_s": round(count / publish_s),
        "publish_s": round(publish_s, 2),
        "arrived_during_publish": arrived_during_publish,
        "rss_idle_mib": round(rss_idle / 2**20, 1),
        "rss_pending_mib": round(rss_pending / 2**20, 1),
        "disk_pending_mib": round(disk_pending / 2**20, 1),
        "arrived": n,
        "early": sum(1 for v in values if v < 0),
        "lateness_p50_ms": values[n // 2] if n else None,
        "lateness_p99_ms": values[min(n - 1, int(n * 0.99))] if n else None,
        "lateness_max_ms": values[-1] if n else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--delay-ms", type=int, default=60_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--brokers", default="gateway,rabbitmq")
    ap.add_argument("--durability", default="sync", help="the gateway's (default sync: "
                    "RabbitMQ confirms persistent messages once fsynced)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": machine(), "runs": []}
    print(json.dumps(out["machine"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="lmq-delays-") as tmp:
        for run in range(args.runs):
            order = args.brokers.split(",")
            if run % 2:
                order.reverse()
            for name in order:
                broker = make(name, Path(tmp) / f"{name}-{run}", args.durability)
                why = broker.available()
                if why:
                    print(f"{name}: unavailable: {why}", flush=True)
                    continue
                broker.start()
                out.setdefault("versions", {})[name] = broker.describe()
                try:
                    r = asyncio.run(_run_one(broker, name, args.count, args.delay_ms))
                finally:
                    broker.stop()
                r["run"] = run
                out["runs"].append(r)
                print(json.dumps(r), flush=True)
    print("\nmedians:")
    for name in args.brokers.split(","):
        rows = [r for r in out["runs"] if r["broker"] == name]
        if not rows:
            continue
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("publish_per_s", "rss_pending_mib", "disk_pending_mib",
                         "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms")
               if all(r[k] is not None for r in rows)}
        med["arrived"] = min(r["arrived"] for r in rows)
        med["early"] = max(r["early"] for r in rows)
        out.setdefault("medians", {})[name] = med
        print(f"  {name}: {json.dumps(med)}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
