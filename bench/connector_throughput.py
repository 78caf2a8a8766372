"""Replication throughput and end-to-end delay of the message connector between two
gateways on this machine (issue 19), run by hand:

    .venv/bin/python -m bench.connector_throughput [--backlog 20000] [--rate 500]
        [--seconds 10] [--runs 3] [--batch-size 32]

Per run: two fresh ``lmq serve`` processes (a, b) and ``lmq connector run``.

- **backlog**: ``--backlog`` messages (100-byte bodies, 4 queues) are sent to a in
  batches first; the connector then starts from ``earliest``; the time from its ``ready``
  to b holding them all gives messages/s.
- **delay**: with the connector caught up, a producer sends ``--rate`` messages/s for
  ``--seconds`` seconds, each with its send time in a property; the delay of a message
  is b's store timestamp of its copy minus that time (one clock: same machine). p50,
  p99 and max.

Prints one JSON line per run and the medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.clients import Message, Producer, PullConsumer, RemotingClient  # noqa: E402
from tests.gateway.connector.connector_support import ConnectorProcess, rules_text  # noqa: E402
from tests.gateway.gateway_process import GatewayProcess  # noqa: E402

QUEUES = 4
BODY = b"x" * 100


async def preload(port: int, topic: str, count: int) -> None:
    async with RemotingClient(f"127.0.0.1:{port}", timeout=10) as client:
        producer = Producer(client, "bench-producers", timeout=10)
        sent = 0
        while sent < count:
            q = (sent // 64) % QUEUES
            n = min(64, count - sent)
            batch = [Message(topic, BODY) for _ in range(n)]
            await producer.send_batch(topic, batch, queue_id=q)
            sent += n


async def stored(port: int, topic: str) -> int:
    async with RemotingClient(f"127.0.0.1:{port}", timeout=10) as client:
        consumer = PullConsumer(client, "bench-readers", timeout=10)
        try:
            queues = (await client.route(topic, refresh=True)).read_queues
        except Exception:
            return 0
        return sum([await consumer.max_offset(mq) for mq in queues])


async def paced(port: int, topic: str, rate: float, seconds: float) -> int:
    async with RemotingClient(f"127.0.0.1:{port}", timeout=10) as client:
        producer = Producer(client, "bench-producers", timeout=10)
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds:
            due = start + sent / rate
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            sent_ms = time.time() * 1000
            await producer.send(
                topic, BODY, properties={"t0": f"{sent_ms:.3f}"}, queue_id=sent % QUEUES
            )
            sent += 1
        return sent


async def delays(port: int, topic: str) -> list[float]:
    out: list[float] = []
    async with RemotingClient(f"127.0.0.1:{port}", timeout=10) as client:
        consumer = PullConsumer(client, "bench-delay-readers", timeout=10)
        for mq in (await client.route(topic, refresh=True)).read_queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=256)
                if not result.messages:
                    break
                for m in result.messages:
                    if "t0" in m.properties:
                        out.append(m.store_timestamp - float(m.properties["t0"]))
                offset = result.next_begin_offset
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def one_run(args: argparse.Namespace) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="connector-bench-"))
    a = GatewayProcess(tmp / "a").start()
    b = GatewayProcess(tmp / "b").start()
    conn = None
    try:
        a_port, b_port = a.ports["unified"], b.ports["unified"]
        await preload(a_port, "backlog", args.backlog)
        rules = tmp / "rules.toml"
        rules.write_text(
            rules_text(
                a_port, b_port,
                f'[[rules]]\nname = "backlog"\nsource = "a"\ntopic = "backlog"\ntarget = "b"\n'
                f'start = "earliest"\nbatch_size = {args.batch_size}\n'
                f'[[rules]]\nname = "live"\nsource = "a"\ntopic = "live"\ntarget = "b"\n'
                f'start = "earliest"\nbatch_size = {args.batch_size}\n',
            )
        )  # fmt: skip
        conn = ConnectorProcess(rules).start()
        t0 = time.monotonic()
        while await stored(b_port, "backlog") < args.backlog:
            await asyncio.sleep(0.05)
        backlog_s = time.monotonic() - t0
        sent = await paced(a_port, "live", args.rate, args.seconds)
        deadline = time.monotonic() + 30
        while await stored(b_port, "live") < sent and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        d = await delays(b_port, "live")
        return {
            "backlog_msgs_per_s": round(args.backlog / backlog_s, 1),
            "delay_p50_ms": round(pct(d, 50), 2),
            "delay_p99_ms": round(pct(d, 99), 2),
            "delay_max_ms": round(max(d), 2),
            "live_sent": sent,
            "live_copied": len(d),
        }
    finally:
        if conn is not None:
            conn.stop()
        b.stop()
        a.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    results = []
    for _ in range(args.runs):
        result = await one_run(args)
        print(json.dumps(result), flush=True)
        results.append(result)
    medians = {
        k: statistics.median(r[k] for r in results)
        for k in ("backlog_msgs_per_s", "delay_p50_ms", "delay_p99_ms", "delay_max_ms")
    }
    print(json.dumps({"medians": medians, "runs": args.runs}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
