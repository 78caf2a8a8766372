"""Instructions the gateway spends per message, counted by callgrind: a figure that does
not move with the machine's load, for before/after comparisons of a door's hot path.

    .venv/bin/python -m bench.door_instructions http --messages 3200
    .venv/bin/python -m bench.door_instructions mqtt --messages 6400

The gateway (``cli.serve``, ``durability = "async"``) runs under ``valgrind
--tool=callgrind`` with instrumentation off; after a warm-up of 2,000 messages it is
switched on (``callgrind_control -i on``) for ``--messages`` messages, then off, and the
instructions counted are divided by the messages. Only user-space instructions of the
gateway process count (all its threads: the store's too); the kernel's socket work is
not in the figure.

* ``http``: 64 keep-alive HTTP/1.1 clients of ``h2load`` (``nghttp2-client``, C), each
  ``POST /v1/topics/bench/messages`` with a 100-byte body, one request in flight per
  client (as ``bench/http.py``'s closed loop);
* ``mqtt``: 64 MQTT 3.1.1 clients in one Python process, each publishing QoS 1 to
  ``bench/x`` (100 bytes) and waiting for the PUBACK before the next; nobody subscribed
  (as ``bench/http.py``'s MQTT runs).

Needs valgrind and h2load (Debian: ``valgrind``, ``nghttp2-client``). The gateway's
ports: ``--port`` (unified, HTTP) and the next one (MQTT).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from bench.mqtt_wire import connect_packet

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 64
WARMUP = 2000
T = TypeVar("T")


async def _mqtt_load(port: int, count: int) -> None:
    topic, payload = b"bench/x", b"x" * 100
    head = bytes([0x32, 2 + len(topic) + 2 + len(payload)]) + struct.pack(">H", len(topic))
    head += topic

    async def client(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(connect_packet(f"instr-{i}"))
        await reader.readexactly(4)
        for k in range(count // CLIENTS):
            writer.write(head + struct.pack(">H", k % 65535 + 1) + payload)
            if (await reader.readexactly(4))[0] != 0x40:
                raise RuntimeError("not a PUBACK")
        writer.close()

    await asyncio.gather(*(client(i) for i in range(CLIENTS)))


def _wait_accepts(port: int, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    start = time.monotonic()
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() - start > timeout:
                raise RuntimeError("the gateway did not start under valgrind") from None
            time.sleep(1)


@contextmanager
def callgrind_gateway(
    prefix: str, *, mqtt: int = 0, unified: int = 0, grpc: int = 0, ready: int
) -> Iterator[tuple[int, Path]]:
    """A gateway (``cli.serve``, async durability) under callgrind with instrumentation
    off, on the given ports (0: listener off): its pid and the directory callgrind dumps
    into, once ``ready`` accepts; stopped and its directory removed at the end (the
    dumps copied first into ``$LMQ_INSTR_KEEP`` when set, for callgrind_annotate)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--callgrind-out-file={tmp / 'callgrind.out'}", sys.executable, "-m", "cli.serve",
           "--data-dir", str(tmp / "data"), "--mqtt-port", str(mqtt), "--amqp-port", "0",
           "--unified-port", str(unified), "--grpc-port", str(grpc),
           "--durability", "async", "--log-level", "warning"]
    with open(tmp / "gateway.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_accepts(ready, proc)
        yield proc.pid, tmp
        keep = os.environ.get("LMQ_INSTR_KEEP")
        if keep:
            for dump in tmp.glob("callgrind.out*"):
                shutil.copy(dump, Path(keep) / dump.name)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def instrumented(pid: int) -> Iterator[None]:
    """Callgrind's instrumentation of process ``pid`` on for the block."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True, check=True)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True,
                       check=True)


def dumped_total(pid: int, directory: Path) -> int:
    """Dump process ``pid``'s counts into ``directory`` and return the instructions of
    every dump there (all its threads)."""
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    total = 0
    for dump in directory.glob("callgrind.out*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
                break
    return total


def counted(pid: int, directory: Path, work: Callable[[], T]) -> tuple[T, int]:
    """``work()``'s result and the instructions callgrind (process ``pid``, dumping into
    ``directory``) counted while it ran: instrumentation on, work, off, dump."""
    with instrumented(pid):
        result = work()
    return result, dumped_total(pid, directory)


def measure(kind: str, messages: int, port: int) -> float:
    """Instructions per message (see the module's docstring)."""
    mqtt_port = port + 1
    with callgrind_gateway("lmq-instr-", mqtt=mqtt_port, unified=port, ready=mqtt_port) as (
        pid, tmp,
    ):
        body = tmp / "body.json"
        body.write_text(json.dumps({"body": "x" * 100}))
        h2load = ["h2load", "--h1", "-c", str(CLIENTS), "-m", "1", "-d", str(body), "-H",
                  "Content-Type: application/json",
                  f"http://127.0.0.1:{port}/v1/topics/bench/messages"]

        def drive(count: int) -> None:
            if kind == "http":
                res = subprocess.run([*h2load, "-n", str(count)], capture_output=True,
                                     text=True, check=True).stdout
                if f"{count} 2xx" not in res:
                    raise RuntimeError(f"not every publish answered 2xx:\n{res}")
            else:
                asyncio.run(_mqtt_load(mqtt_port, count))

        drive(WARMUP)
        return counted(pid, tmp, lambda: drive(messages))[1] / messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["http", "mqtt"])
    ap.add_argument("--messages", type=int, default=3200, help="a multiple of 64")
    ap.add_argument("--port", type=int, default=25000, help="unified port (MQTT: +1)")
    args = ap.parse_args()
    per = measure(args.kind, args.messages, args.port)
    print(f"{args.kind}: {per:,.0f} instructions per message ({args.messages} messages)")


if __name__ == "__main__":
    main()
