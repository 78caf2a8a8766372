"""Responsiveness of the admin API and the console at scale (issue 31): p50 and p99 of
every admin list call and of the console's page data calls against a real ``lmq
serve`` holding ``--lmqs`` LMQs (1,000,000 by default) while ``--connections`` MQTT
clients (10,000 by default) are connected and publishing. Not a test: run it by hand.

    .venv/bin/python -m bench.admin_scale [--lmqs 1000000] [--connections 10000]
        [--holders 2] [--publish-rate 200] [--calls 100] [--data /tmp/31-admin-scale]
        [--port 21100]

The store is made once in ``--data`` (an LMQ is index metadata: made with
``create_lmq`` before the gateway starts) and reused by later runs. After the start,
``--topics`` RocketMQ topics of 8 queues and ``--groups`` consumer groups with offsets
on them are made over the admin API (idempotent).

The clients live in ``--holders`` other processes (this module with ``--hold``; a
process may not open more than 20,000 files here): each opens its share of MQTT 3.1.1
connections (clean session, no keep-alive), subscribes each to its own device topic
and publishes QoS 0 on them, ``--publish-rate`` messages a second over all holders,
reading what the gateway delivers back. The calls, ``--calls`` times each, interleaved,
each kind over its own keep-alive HTTP connection:

- the admin API on the admin port, as the CLI and scripts call it (``limit=100``):
  LMQs (a page from a random position, a prefix, a substring filter), topics,
  connections (by id, by bytes in, their next pages, a filter), MQTT sessions (by name,
  by subscriptions), groups (by name, by lag), AMQP vhosts, queues, exchanges and
  bindings, users, the overview and its history;
- the console's page data calls on the unified port, as ``table.js`` and the overview
  page make them (``limit=50``, the page's default sort; the overview with the
  history since its last sample).

Prints the machine, its load average before and after, the gateway's memory and open
files, and p50 / p99 / max per call. Ports ``--port`` .. ``--port + 3`` on 127.0.0.1;
the gateway and the holders are stopped by their PIDs.
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
from typing import Any
from urllib.parse import urlencode

from bench import report
from broker_core import MessageStore
from gateway.admin.core import cursor_of

ROOT = Path(__file__).resolve().parents[1]


def device(i: int) -> str:
    return f"site{i % 1000}/dev{i:07d}/temp"


def make_store(data: Path, lmqs: int) -> list[str]:
    """The LMQ names (made in the store unless a previous run made them)."""
    names = [f"mqtt:{device(i)}" for i in range(lmqs)]
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


def start_gateway(data: Path, port: int, connections: int) -> subprocess.Popen[str]:
    """``lmq serve``: MQTT on ``port``, unified ``port + 1``, admin ``port + 2``, AMQP
    ``port + 3``; returns once it printed ``ready``."""
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
            "--unified-port",
            str(port + 1),
            "--admin-port",
            str(port + 2),
            "--amqp-port",
            str(port + 3),
            "--grpc-port",
            "0",
            "--log-level",
            "warning",
            "--max-connections",
            str(connections + 100),  # the admin calls' own too
        ],
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
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the gateway did not start")


# -- the client holders (other processes) ---------------------------------------------


def _packet(kind: int, body: bytes) -> bytes:
    n, length = len(body), bytearray()
    while True:
        n, digit = divmod(n, 128)
        length.append(digit | (0x80 if n else 0))
        if not n:
            break
    return bytes([kind]) + bytes(length) + body


def _text(s: str) -> bytes:
    raw = s.encode()
    return len(raw).to_bytes(2, "big") + raw


async def hold(port: int, first: int, count: int, rate: float) -> None:
    """Open ``count`` MQTT connections (client ids and device topics from ``first``),
    each subscribed to its own topic; publish ``rate`` QoS 0 messages a second over
    them until stdin closes."""
    writers: list[asyncio.StreamWriter] = []
    readers: list[asyncio.Task[None]] = []

    async def drain(reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        connect = b"\x00\x04MQTT\x04\x02\x00\x00" + _text(f"bench-{i:07d}")  # no keep-alive
        writer.write(_packet(0x10, connect))
        writer.write(_packet(0x82, (1).to_bytes(2, "big") + _text(device(i)) + b"\x00"))
        await writer.drain()
        ack = await reader.readexactly(4)
        assert ack[0] == 0x20 and ack[3] == 0, ack
        await reader.readexactly(5)  # SUBACK
        writers.append(writer)
        readers.append(asyncio.create_task(drain(reader)))

    for start in range(first, first + count, 250):
        await asyncio.gather(*(one(i) for i in range(start, min(first + count, start + 250))))
    print(f"ready {len(writers)}", flush=True)
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)
    payload = b'{"t":21.5}'
    n = 0
    while not closed.done():
        started = loop.time()
        for _ in range(max(1, int(rate / 10))):  # a tenth of a second's worth
            i = n % len(writers)
            writers[i].write(_packet(0x30, _text(device(first + i)) + payload))
            n += 1
        await asyncio.sleep(max(0.0, 0.1 - (loop.time() - started)))
    for writer in writers:
        writer.close()
    for task in readers:
        task.cancel()


def start_holders(port: int, connections: int, holders: int, rate: float) -> list[Any]:
    procs = []
    share = connections // holders
    for h in range(holders):
        count = share if h < holders - 1 else connections - share * (holders - 1)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.admin_scale",
                    "--hold",
                    str(port),
                    str(h * share),
                    str(count),
                    str(rate / holders),
                ],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
        )
    opened = 0
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"a client holder failed: {line!r}")
        opened += int(line.split()[1])
    return procs


# -- the calls -------------------------------------------------------------------------


class Caller:
    """One keep-alive HTTP connection per kind of call (as a console tab or a script
    keeps one), timing each call."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conns: dict[str, http.client.HTTPConnection] = {}
        self.results: dict[str, list[float]] = {}

    def call(
        self, name: str, path: str, method: str = "GET", body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        conn = self.conns.get(name)
        if conn is None:
            conn = self.conns[name] = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=120
            )
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        started = time.perf_counter()
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status >= 300:
            raise SystemExit(f"{method} {path}: {response.status} {raw[:300]!r}")
        self.results.setdefault(name, []).append(elapsed)
        return json.loads(raw) if raw else {}

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def prepare(admin: Caller, topics: int, groups: int) -> None:
    """RocketMQ topics and consumer groups with offsets (idempotent), not timed."""
    for t in range(topics):
        admin.call(
            "prepare",
            f"/v1/admin/topics/bench-topic-{t:04d}",
            "PUT",
            {"queues": 8, "message_type": "NORMAL"},
        )
    for g in range(groups):
        admin.call(
            "prepare",
            f"/v1/admin/groups/bench-group-{g:04d}/reset",
            "POST",
            {"topic": f"bench-topic-{g % topics:04d}", "position": "earliest"},
        )
    admin.results.pop("prepare", None)


def q(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def run_calls(admin: Caller, console: Caller, names: list[str], calls: int) -> None:
    rng = random.Random(7)
    a = "/v1/admin"
    since = 0
    for _ in range(calls):
        cursor = cursor_of([names[rng.randrange(len(names))]])
        admin.call("lmqs, random position", f"{a}/lmqs?{q(limit=100, cursor=cursor)}")
        admin.call("lmqs, prefix", f"{a}/lmqs?{q(limit=100, prefix='mqtt:site7/')}")
        admin.call("lmqs, filter", f"{a}/lmqs?{q(limit=100, filter='dev00012')}")
        doc = admin.call("topics", f"{a}/topics?{q(limit=100)}")
        for sort in ("id", "-bytes_in"):
            doc = admin.call(
                f"connections, sort {sort}", f"{a}/connections?{q(limit=100, sort=sort)}"
            )
            admin.call(
                f"connections, sort {sort}, next page",
                f"{a}/connections?{q(limit=100, sort=sort, cursor=doc['next'])}",
            )
        admin.call("connections, filter", f"{a}/connections?{q(limit=100, filter='bench-00012')}")
        for sort in ("name", "-subscriptions"):
            admin.call(
                f"mqtt sessions, sort {sort}", f"{a}/mqtt/sessions?{q(limit=100, sort=sort)}"
            )
        admin.call("groups", f"{a}/groups?{q(limit=100)}")
        admin.call("groups, sort -lag", f"{a}/groups?{q(limit=100, sort='-lag')}")
        for kind in ("vhosts", "queues", "exchanges", "bindings"):
            admin.call(f"amqp {kind}", f"{a}/amqp/{kind}?{q(limit=100)}")
        admin.call("users", f"{a}/users?{q(limit=100)}")
        admin.call("overview", f"{a}/overview")
        admin.call("overview history (all)", f"{a}/overview/history")
        # the console's pages (table.js: limit 50, the page's sort; the overview page)
        console.call("console overview", f"{a}/overview")
        hist = console.call("console overview history", f"{a}/overview/history?{q(since=since)}")
        if hist.get("samples"):
            since = hist["samples"][-1]["t"]
        for page, sort in (
            ("connections", "id"),
            ("mqtt/sessions", "name"),
            ("topics", "name"),
            ("lmqs", "name"),
            ("groups", "name"),
            ("amqp/queues", "name"),
            ("amqp/exchanges", "name"),
            ("amqp/bindings", "source"),
            ("users", "name"),
        ):
            console.call(f"console {page}", f"{a}/{page}?{q(limit=50, sort=sort)}")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]


def machine() -> str:
    m = report.machine()
    return (
        f"{m['host']}: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB,"
        f" Python {m['python']}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--hold":
        port, first, count, rate = sys.argv[2:6]
        asyncio.run(hold(int(port), int(first), int(count), float(rate)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lmqs", type=int, default=1_000_000)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--holders", type=int, default=2)
    parser.add_argument("--publish-rate", type=float, default=200.0)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--data", type=Path, default=Path("/tmp/31-admin-scale"))
    parser.add_argument("--port", type=int, default=21100)
    args = parser.parse_args()
    names = make_store(args.data, args.lmqs)
    started = time.perf_counter()
    proc = start_gateway(args.data, args.port, args.connections)
    print(f"gateway ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    holders: list[Any] = []
    admin, console = Caller(args.port + 2), Caller(args.port + 1)
    try:
        started = time.perf_counter()
        holders = start_holders(args.port, args.connections, args.holders, args.publish_rate)
        print(
            f"{args.connections:,} MQTT connections in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        prepare(admin, args.topics, args.groups)
        time.sleep(11)  # two history samples: the overview's rates are measured
        before = load()
        started = time.perf_counter()
        run_calls(admin, console, names, args.calls)
        took = time.perf_counter() - started
        overview = admin.call("final", "/v1/admin/overview")
        admin.results.pop("final")
        rates = overview["rates"]
        print(f"# {machine()}")
        print(
            f"# gateway: {overview['store']['lmqs']:,} LMQs,"
            f" {overview['connections']['total']:,} connections"
            f" ({overview['connections']['by_protocol']}), MQTT in {rates['in'].get('mqtt')}"
            f" and out {rates['out'].get('mqtt')} messages/s; RSS"
            f" {overview['process']['rss_bytes'] / 2**20:.0f} MiB,"
            f" {overview['process']['open_files']:,} open files;"
            f" {args.topics} topics, {args.groups} groups"
        )
        print(
            f"# {args.calls} calls of each kind in {took:.0f} s; load average before"
            f" {before}, after {load()}"
        )
        print(f"{'call':36} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for caller in (admin, console):
            for name, values in caller.results.items():
                print(
                    f"{name:36} {statistics.median(values):8.1f}"
                    f" {percentile(values, 0.99):8.1f} {max(values):8.1f}"
                )
    finally:
        admin.close()
        console.close()
        for holder in holders:
            try:
                holder.stdin.close()
                holder.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                holder.kill()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
