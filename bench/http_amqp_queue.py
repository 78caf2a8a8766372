"""Draining an AMQP queue over the JSON API (issue 18), beside draining it over AMQP,
on one gateway.

    .venv/bin/python -m bench.http_amqp_queue --messages 20000 --runs 3

Each run fills the durable queue ``bench`` with ``--messages`` 100-byte messages (pika,
publisher confirms), then drains it once by each path, one client each, closed-loop:

* ``http``: ``POST /v1/amqp/%2F/queues/bench/receive`` (``max_messages`` 32) then
  ``POST .../ack`` with the 32 handles, on one keep-alive connection (the raw client of
  bench/http.py), until a receive finds nothing;
* ``amqp``: a pika consumer with prefetch 32, acking each batch of 32 with
  ``multiple``.

The load generator runs on the same cores as the gateway; the rates are what this one
client reaches. Medians of the runs are printed, with every run's figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import pika

from bench.http import HttpClient, request
from bench.peers import Gateway

BODY = b"x" * 100
_perf = time.perf_counter


def fill(port: int, count: int) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare("bench", durable=True)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        ch.basic_publish("", "bench", BODY, props)
    conn.close()


async def drain_http(port: int) -> tuple[int, float]:
    client = await HttpClient.open(port)
    receive = request("POST", "/v1/amqp/%2F/queues/bench/receive", {"max_messages": 32})
    got = 0
    t0 = _perf()
    while True:
        _status, body = await client.call(receive)
        messages = json.loads(body)["messages"]
        if not messages:
            break
        got += len(messages)
        status, _ = await client.call(request(
            "POST", "/v1/amqp/%2F/queues/bench/ack",
            {"receipt_handles": [m["receipt_handle"] for m in messages]}))
        assert status == 200, status
    elapsed = _perf() - t0
    client.close()
    return got, elapsed


def drain_amqp(port: int, count: int) -> tuple[int, float]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=32)
    got = 0
    t0 = _perf()

    def on(ch: object, m: object, _p: object, _b: bytes) -> None:
        nonlocal got
        got += 1
        if got % 32 == 0 or got == count:
            ch.basic_ack(m.delivery_tag, multiple=True)  # type: ignore[attr-defined]

    ch.basic_consume("bench", on)
    while got < count:
        conn.process_data_events(time_limit=0.1)
    elapsed = _perf() - t0
    conn.close()
    return got, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--durability", default="async")
    args = parser.parse_args()
    rates: dict[str, list[int]] = {"http": [], "amqp": []}
    with tempfile.TemporaryDirectory(prefix="lmq-bench-httpq-") as tmp:
        gw = Gateway(Path(tmp), durability=args.durability)
        gw.start()
        try:
            assert gw.amqp_port and gw.remoting_port
            print(f"gateway {gw.version} durability={args.durability}")
            for run in range(args.runs):
                for path in ("http", "amqp"):
                    fill(gw.amqp_port, args.messages)
                    if path == "http":
                        got, elapsed = asyncio.run(drain_http(gw.remoting_port))
                    else:
                        got, elapsed = drain_amqp(gw.amqp_port, args.messages)
                    assert got == args.messages, (path, got)
                    rates[path].append(round(got / elapsed))
                    print(f"run {run + 1} {path:4}: {rates[path][-1]:7} msg/s", flush=True)
        finally:
            gw.stop()
    for path, values in rates.items():
        print(f"median {path:4}: {statistics.median(values):7.0f} msg/s  runs {values}")


if __name__ == "__main__":
    main()
