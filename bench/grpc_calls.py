"""What one gRPC call costs the gateway: ``python -m bench.grpc_calls``.

Starts ``lmq serve`` (async durability, a free loopback gRPC port, everything else off),
then alternates, ``--rounds`` times, ``--seconds`` of:

* ``heartbeat``: ``Heartbeat`` calls (the gateway does nearly nothing: grpcio's asyncio
  server and the servicer's frame alone);
* ``send``: ``SendMessage`` with one 100 B NORMAL message (what the official clients
  send per message);

from ``--concurrency`` concurrent callers on one channel, and prints calls/s, the
gateway's CPU (from /proc) and its CPU per call. Medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc.aio
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from bench.peers import free_port
from bench.report import machine

METADATA = (("x-mq-client-id", "bench-calls"), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _round(port: int, kind: str, seconds: float, concurrency: int, pid: int
                 ) -> tuple[float, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        endpoints = pb.Endpoints(addresses=[pb.Address(host="127.0.0.1", port=port)])
        await stub.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="calls"),
                                                    endpoints=endpoints), metadata=METADATA)
        msg = pb.Message(topic=pb.Resource(name="calls"), body=b"x" * 100,
                         system_properties=pb.SystemProperties(message_type=pb.NORMAL))
        heartbeat = svc.HeartbeatRequest(client_type=pb.PRODUCER)
        calls = 0
        seq = 0
        end = time.perf_counter() + seconds

        async def caller() -> None:
            nonlocal calls, seq
            while time.perf_counter() < end:
                if kind == "heartbeat":
                    reply = await stub.Heartbeat(heartbeat, metadata=METADATA)
                else:
                    seq += 1
                    msg.system_properties.message_id = f"01{seq:030X}"
                    reply = await stub.SendMessage(svc.SendMessageRequest(messages=[msg]),
                                                   metadata=METADATA)
                if reply.status.code != pb.OK:
                    raise RuntimeError(f"{kind}: {reply.status}")
                calls += 1

        cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        return calls / elapsed, (_cpu_seconds(pid) - cpu0) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    mach = machine()
    print(f"machine: {mach['host']}, {mach['cpus']} cpus ({mach['cpu_model']}), "
          f"{mach['memory_gib']} GiB, python {mach['python']}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lmq-calls-") as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.serve", "--data-dir", f"{tmp}/data", "--mqtt-port",
             "0", "--amqp-port", "0", "--unified-port", "0", "--grpc-port", str(port),
             "--durability", "async", "--log-level", "warning"])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    asyncio.run(_round(port, "heartbeat", 0.2, 1, proc.pid))
                    break
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.2)
            results: dict[str, list[tuple[float, float]]] = {"heartbeat": [], "send": []}
            for _ in range(args.rounds):
                for kind in results:
                    results[kind].append(asyncio.run(
                        _round(port, kind, args.seconds, args.concurrency, proc.pid)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    for kind, runs in results.items():
        rates = [r for r, _ in runs]
        cpus = [c for _, c in runs]
        per_call = [1e6 * c / r for r, c in runs]
        print(f"{kind:9} calls/s {statistics.median(rates):8,.0f} "
              f"({' '.join(f'{r:,.0f}' for r in rates)})  gateway CPU "
              f"{100 * statistics.median(cpus):4.0f} %  CPU per call "
              f"{statistics.median(per_call):6.0f} us")


if __name__ == "__main__":
    main()
