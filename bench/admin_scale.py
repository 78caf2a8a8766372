"""Responsiveness of the admin API at scale (issue 31): p50 and p99 of its list calls
against a real ``lmq serve`` holding ``--lmqs`` LMQs (1,000,000 by default) with
``--connections`` MQTT connections open (10,000 by default). Not a test: run it by hand.

    .venv/bin/python -m bench.admin_scale [--lmqs 1000000] [--connections 10000]
        [--calls 200] [--data /tmp/admin-scale] [--port 21100]

The store is made once in ``--data`` (an LMQ is index metadata: made with
``create_lmq`` before the gateway starts, about 40 us each) and reused by later runs.
The connections are raw MQTT 3.1.1 CONNECTs without keep-alive from this process, in
batches. The calls, each ``--calls`` times over one keep-alive HTTP connection:

- ``lmqs page``: ``GET /v1/admin/lmqs?limit=100&cursor=C`` from random positions;
- ``lmqs prefix``: ``GET /v1/admin/lmqs?prefix=mqtt:site7/&limit=100``;
- ``connections page``: ``GET /v1/admin/connections?limit=100&sort=-bytes_in`` (a key
  per connection per call, a selection of 101) and its next pages;
- ``overview``.

Prints the figures with the load average (the machine is shared: say it next to them).
Ports ``--port`` .. ``--port + 2`` on 127.0.0.1; the gateway is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from broker_core import MessageStore
from gateway.admin.core import cursor_of

ROOT = Path(__file__).resolve().parents[1]


def make_store(data: Path, lmqs: int) -> list[str]:
    """The LMQ names (made in the store unless a previous run made them)."""
    names = [f"mqtt:site{i % 1000}/dev{i:07d}/temp" for i in range(lmqs)]
    marker = data / f"admin-scale-{lmqs}"
    if marker.exists():
        return names
    started = time.perf_counter()
    with MessageStore.open(data) as store:
        for i, name in enumerate(names):
            store.create_lmq(name)
            if i and i % 100_000 == 0:
                print(f"  {i:,} LMQs made", file=sys.stderr)
    marker.touch()
    print(f"made {lmqs:,} LMQs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return names


def start_gateway(
    data: Path, port: int, connections: int
) -> tuple[subprocess.Popen[str], int, int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.serve",
            "--data-dir",
            str(data),
            "--bind",
            "127.0.0.1",
            "--mqtt-port",
            str(port),
            "--amqp-port",
            "0",
            "--unified-port",
            str(port + 1),
            "--grpc-port",
            "0",
            "--admin-port",
            str(port + 2),
            "--log-level",
            "warning",
            "--max-connections",
            str(connections + 100),
        ],  # the admin calls' own too
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        if line.strip() == "ready":
            return proc, port, port + 2
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the gateway did not start")


def connect_packet(client_id: str) -> bytes:
    cid = client_id.encode()
    variable = b"\x00\x04MQTT\x04\x02\x00\x00"  # 3.1.1, clean session, no keep-alive
    payload = len(cid).to_bytes(2, "big") + cid
    body = variable + payload
    return b"\x10" + bytes([len(body)]) + body


async def open_connections(port: int, count: int, batch: int = 250) -> list[asyncio.StreamWriter]:
    writers: list[asyncio.StreamWriter] = []

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(connect_packet(f"bench-{i:05d}"))
        await writer.drain()
        ack = await reader.readexactly(4)
        assert ack[0] == 0x20 and ack[3] == 0, ack
        writers.append(writer)

    for start in range(0, count, batch):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + batch))))
    return writers


def timed(conn: http.client.HTTPConnection, path: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {body[:200]!r}")
    return elapsed, json.loads(body)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lmqs", type=int, default=1_000_000)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--data", type=Path, default=Path("/tmp/admin-scale"))
    parser.add_argument("--port", type=int, default=21100)
    args = parser.parse_args()
    names = make_store(args.data, args.lmqs)
    proc, mqtt_port, admin_port = start_gateway(args.data, args.port, args.connections)
    loop = asyncio.new_event_loop()
    try:
        started = time.perf_counter()
        writers = loop.run_until_complete(open_connections(mqtt_port, args.connections))
        print(
            f"{len(writers):,} MQTT connections in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        http_conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=60)
        rng = random.Random(7)
        results: dict[str, list[float]] = {}
        base = "/v1/admin"
        for _ in range(args.calls):
            after = names[rng.randrange(len(names))]
            cursor = cursor_of([after])
            ms, doc = timed(http_conn, f"{base}/lmqs?limit=100&cursor={cursor}")
            results.setdefault("lmqs page (limit 100, random cursor)", []).append(ms)
            ms, doc = timed(http_conn, f"{base}/lmqs?limit=100&prefix=mqtt:site7/")
            results.setdefault("lmqs prefix (limit 100)", []).append(ms)
            for sort in ("-bytes_in", "id"):
                ms, doc = timed(http_conn, f"{base}/connections?limit=100&sort={sort}")
                results.setdefault(f"connections first page (sort {sort})", []).append(ms)
                ms, _ = timed(
                    http_conn, f"{base}/connections?limit=100&sort={sort}&cursor={doc['next']}"
                )
                results.setdefault(f"connections next page (sort {sort})", []).append(ms)
            ms, _ = timed(http_conn, f"{base}/mqtt/sessions?limit=100")
            results.setdefault("mqtt sessions first page", []).append(ms)
            ms, _ = timed(http_conn, f"{base}/overview")
            results.setdefault("overview", []).append(ms)
        load = os.getloadavg()
        print(
            f"# {args.lmqs:,} LMQs, {len(writers):,} MQTT connections, {args.calls} calls"
            f" each; loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()}"
            " CPUs)"
        )
        print(f"{'call':44} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for name, values in results.items():
            print(
                f"{name:44} {statistics.median(values):8.1f} {percentile(values, 0.99):8.1f}"
                f" {max(values):8.1f}"
            )
        http_conn.close()
        for writer in writers:
            writer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        loop.close()


if __name__ == "__main__":
    main()
