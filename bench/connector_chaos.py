"""Chaos for the message connector between two gateways (issue 19), run by hand:

    .venv/bin/python -m bench.connector_chaos [--rounds 20] [--queues 4] [--phases ...]

Two ``lmq serve`` processes (a, b) on loopback, ``lmq connector run`` copying topic
``chaos`` from a to b, and a producer sending to a without pause. Phases, each
``--rounds`` times while the load runs:

- ``connector``: kill -9 of the connector, restarted at once;
- ``source``: kill -9 of gateway a (the producer retries with NEW bodies, so only sends
  that a acknowledged count), restarted on its port;
- ``target``: kill -9 of gateway b, restarted on its port;
- ``freeze``: gateway b stopped (SIGSTOP: its connections hang) for a second, then
  continued (SIGCONT);
- ``cut``: the network to b cut: the connector reaches b only through a TCP relay the
  bench owns (tests/gateway/connector/cut_relay.py, run as its own process), which
  drops every connection and refuses new ones for ``--cut`` seconds, then forwards.

Then the load stops and the run waits for b to catch up (until b gains nothing for a
minute), and checks: every message a
acknowledged is at b exactly once; nothing at b twice; per source queue the copies are
in send order. Prints one JSON line per phase and a summary; exit status 1 on a
violation. Everything started is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.clients import Producer, PullConsumer, RemotingClient  # noqa: E402
from tests.gateway.connector.connector_support import (  # noqa: E402
    ConnectorProcess,
    rules_text,
)
from tests.gateway.connector.cut_relay import RelayProcess  # noqa: E402
from tests.gateway.gateway_process import GatewayProcess  # noqa: E402

TOPIC = "chaos"
HEARTBEAT = "__LMQ_HEARTBEAT"


class Load:
    """Sends ``<queue>-<seq>`` to queue ids round robin until stopped; remembers what the
    source acknowledged."""

    def __init__(self, port: int, queues: int) -> None:
        self.port = port
        self.queues = queues
        self.acked: set[str] = set()
        self.attempts = 0
        self.failures = 0
        self._stop = asyncio.Event()
        self._seq = [0] * queues

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            try:
                async with RemotingClient(f"127.0.0.1:{self.port}", timeout=2.0) as client:
                    producer = Producer(client, "chaos-producers", timeout=2.0)
                    while not self._stop.is_set():
                        q = turn % self.queues
                        turn += 1
                        body = f"{q}-{self._seq[q]}"
                        self._seq[q] += 1  # a failed attempt's number is never reused
                        self.attempts += 1
                        await producer.send(TOPIC, body.encode(), queue_id=q)
                        self.acked.add(body)
                        if turn % 50 == 0:
                            await asyncio.sleep(0.01)  # a steady stream, not a flood
            except Exception:
                self.failures += 1
                await asyncio.sleep(0.05)


async def read_target(port: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    async with RemotingClient(f"127.0.0.1:{port}", timeout=10.0) as client:
        consumer = PullConsumer(client, "chaos-readers", timeout=10.0)
        route = await client.route(TOPIC, refresh=True)
        for mq in route.read_queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=256)
                if not result.messages:
                    break
                out += [
                    (mq.queue_id, m.body.decode())
                    for m in result.messages
                    if HEARTBEAT not in m.properties
                ]
                offset = result.next_begin_offset
    return out


def check(got: list[tuple[int, str]], acked: set[str]) -> dict[str, int]:
    bodies = [b for _, b in got]
    seen: set[str] = set()
    duplicates = 0
    for b in bodies:
        if b in seen:
            duplicates += 1
        seen.add(b)
    missing = len(acked - seen)
    order = 0
    last: dict[str, int] = {}
    for _, b in got:
        q, _, n = b.partition("-")
        if int(n) <= last.get(q, -1):
            order += 1
        last[q] = int(n)
    return {
        "acked": len(acked),
        "at_target": len(bodies),
        "duplicates": duplicates,
        "missing": missing,
        "out_of_order": order,
        "unacked_but_copied": len(seen - acked),
    }


async def catch_up(port: int, acked: set[str], stall: float) -> list[tuple[int, str]]:
    """Read b until it holds every acknowledged message, or gained none for ``stall`` s."""
    last, since = -1, time.monotonic()
    while True:
        got = await read_target(port)
        if acked <= {b for _, b in got}:
            return got
        if len(got) != last:
            last, since = len(got), time.monotonic()
        elif time.monotonic() - since > stall:
            return got
        await asyncio.sleep(2.0)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument(
        "--phases", nargs="+", default=["connector", "source", "target", "freeze", "cut"],
        choices=["connector", "source", "target", "freeze", "cut"],
    )  # fmt: skip
    parser.add_argument("--cut", type=float, default=1.5, help="s the link to b is cut")
    parser.add_argument(
        "--routes-only", action="store_true",
        help="the cut reaches only the connector's route lookups (its name-server "
        "connection to b), not its sends: b's routes name b's own port",
    )  # fmt: skip
    parser.add_argument("--pause", type=float, default=0.5, help="s of load between faults")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="connector-chaos-"))
    a = GatewayProcess(tmp / "a").start()
    b = GatewayProcess(tmp / "b").start()
    a.extra = ("--unified-port", str(a.ports["unified"]))
    a_port, b_port = a.ports["unified"], b.ports["unified"]
    relay = RelayProcess(b_port)  # the connector's only way to b (a process of its own)
    # b's routes must name the relay as the broker address too, or the connector would
    # send to b's own port directly and a cut would only reach its route lookups (which
    # is what --routes-only does)
    b.extra = ("--unified-port", str(b_port))
    if not args.routes_only:
        b.extra += ("--advertised-address", f"127.0.0.1:{relay.port}")
    b.stop()
    b.start()
    rules = tmp / "rules.toml"
    rules.write_text(
        rules_text(
            a_port, relay.port,
            f'[[rules]]\nname = "chaos"\nsource = "a"\ntopic = "{TOPIC}"\ntarget = "b"\n'
            'start = "earliest"\n',
            heartbeat=1.0,
        )
    )  # fmt: skip
    conn = ConnectorProcess(rules).start()
    load = Load(a_port, args.queues)
    task = asyncio.ensure_future(load.run())
    failed = False
    started = time.monotonic()
    try:
        for phase in args.phases:
            t0 = time.monotonic()
            for _ in range(args.rounds):
                await asyncio.sleep(args.pause)
                if phase == "connector":
                    conn.kill()
                    conn = ConnectorProcess(rules).start()
                elif phase == "source":
                    a.kill()
                    a.start()
                elif phase == "target":
                    b.kill()
                    b.start()
                elif phase == "freeze":
                    assert b.proc is not None
                    os.kill(b.proc.pid, signal.SIGSTOP)
                    await asyncio.sleep(1.0)
                    os.kill(b.proc.pid, signal.SIGCONT)
                elif phase == "cut":
                    relay.cut()
                    await asyncio.sleep(args.cut)
                    relay.restore()
            print(json.dumps({
                "phase": phase, "rounds": args.rounds, "seconds": round(time.monotonic() - t0, 1),
                "acked_so_far": len(load.acked), "producer_failures": load.failures,
            }), flush=True)  # fmt: skip
        load.stop()
        await asyncio.wait_for(task, 30)
        got = await catch_up(b_port, load.acked, stall=60)
        result = check(got, load.acked)
        result["seconds"] = round(time.monotonic() - started, 1)
        result["status"] = {
            k: conn.status()["chaos"][k] for k in ("state", "errors", "retries", "duplicates")
        }
        failed = bool(result["duplicates"] or result["missing"] or result["out_of_order"])
        if failed:
            # what is missing, per source queue (first and last sequence numbers), and the
            # connector's log, kept with the data dirs for whoever looks into it
            missing: dict[str, list[int]] = {}
            for body in load.acked - {b for _, b in got}:
                q, _, n = body.partition("-")
                missing.setdefault(q, []).append(int(n))
            result["missing_per_queue"] = {
                q: [len(ns), min(ns), max(ns)] for q, ns in sorted(missing.items())
            }
            result["status_queues"] = conn.status()["chaos"].get("queues")
            (tmp / "connector.log").write_text("".join(conn.output))
            result["kept"] = str(tmp)
        print(json.dumps(result), flush=True)
    finally:
        load.stop()
        task.cancel()
        conn.stop()
        relay.stop()
        if b.proc is not None:
            os.kill(b.proc.pid, signal.SIGCONT)
        b.stop()
        a.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
