"""A no-op gRPC call's gateway CPU with a C load generator: ``python -m bench.grpc_h2load``.

Starts ``lmq serve`` (async durability, a free loopback gRPC port, everything else off),
warms up, then sends ``--calls`` ``Heartbeat`` calls with Debian's ``h2load``
(package ``nghttp2-client``: ``--connections`` HTTP/2 connections x ``--streams``
concurrent streams; the request is a 5-byte-framed ``HeartbeatRequest`` with RocketMQ's
metadata), and prints calls/s and the gateway's CPU per call (from /proc). ``--rpc send``
sends ``SendMessage`` calls instead, each with one 100 B NORMAL message to topic
``calls`` (the official clients' pattern; every call the same bytes, so one message id
for all, which the gateway stores as it comes). Unlike
``bench.grpc_calls`` (grpcio's Python client, which is the limit there), the generator
here is not: the gateway's CPU is.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from bench.grpc_calls import _cpu_seconds
from bench.peers import free_port
from bench.report import machine

SERVICE = "/apache.rocketmq.v2.MessagingService/"
HEADERS = (
    "content-type:application/grpc",
    "te:trailers",
    "x-mq-client-id:h2load",
    "x-mq-language:PYTHON",
    "x-mq-protocol:v2",
)


def _h2load(
    port: int, body: Path, calls: int, connections: int, streams: int, rpc: str = "Heartbeat"
) -> str:
    cmd = ["h2load", "-n", str(calls), "-c", str(connections), "-m", str(streams), "-d", str(body)]
    for header in HEADERS:
        cmd += ["-H", header]
    cmd.append(f"http://127.0.0.1:{port}{SERVICE}{rpc}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    done = re.search(r"(\d+) succeeded, (\d+) failed", out)
    if done is None or int(done.group(2)):
        raise RuntimeError(f"h2load: calls failed:\n{out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--rpc", choices=["heartbeat", "send"], default="heartbeat")
    args = ap.parse_args()
    if shutil.which("h2load") is None:
        sys.exit("h2load not found: apt-get install nghttp2-client")
    mach = machine()
    print(
        f"machine: {mach['host']}, {mach['cpus']} cpus ({mach['cpu_model']}), "
        f"load {os.getloadavg()[0]:.1f}, python {mach['python']}"
    )
    port = free_port()
    if args.rpc == "send":
        rpc = "SendMessage"
        message = pb.Message(
            topic=pb.Resource(name="calls"),
            body=b"x" * 100,
            system_properties=pb.SystemProperties(
                message_type=pb.NORMAL, message_id="01" + "AB" * 15
            ),
        )
        request = svc.SendMessageRequest(messages=[message]).SerializeToString()
    else:
        rpc = "Heartbeat"
        request = svc.HeartbeatRequest(client_type=pb.PRODUCER).SerializeToString()
    with tempfile.TemporaryDirectory(prefix="lmq-h2load-") as tmp:
        body = Path(tmp) / "heartbeat.bin"
        body.write_bytes(b"\x00" + len(request).to_bytes(4, "big") + request)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli.serve",
                "--data-dir",
                f"{tmp}/data",
                "--mqtt-port",
                "0",
                "--amqp-port",
                "0",
                "--unified-port",
                "0",
                "--grpc-port",
                str(port),
                "--durability",
                "async",
                "--log-level",
                "warning",
            ]
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    _h2load(port, body, 2_000, 2, args.streams, rpc)  # warm-up
                    break
                except (subprocess.CalledProcessError, RuntimeError):
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.2)
            cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
            _h2load(port, body, args.calls, args.connections, args.streams, rpc)
            elapsed = time.perf_counter() - t0
            cpu = _cpu_seconds(proc.pid) - cpu0
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(
        f"{rpc} calls/s {args.calls / elapsed:,.0f}  gateway CPU "
        f"{100 * cpu / elapsed:.0f} %  CPU per call {1e6 * cpu / args.calls:.1f} us  "
        f"(load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
