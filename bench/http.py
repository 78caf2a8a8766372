"""HTTP publish and long-poll consume (issue 18), beside the gateway's own MQTT QoS 1
path and RabbitMQ's management HTTP API, in one run.

    .venv/bin/python -m bench.http --duration 5
    .venv/bin/python -m bench.http --duration 5 --brokers gateway     # no RabbitMQ

Every client is closed-loop on one keep-alive connection: it sends a request (or an MQTT
QoS 1 PUBLISH) and waits for its answer (PUBACK) before the next, so N clients have at
most N messages in flight. 100-byte bodies. Scenarios, each with 1 and 64 clients:

* ``gateway-http``: ``POST /v1/topics/bench/messages`` on the gateway's unified port (a
  201 once stored under ``--durability``);
* ``gateway-mqtt-qos1``: the same gateway, MQTT QoS 1 PUBLISH to ``bench/x`` (PUBACK
  once stored), nobody subscribed;
* ``rabbitmq-http``: RabbitMQ's ``POST /api/exchanges/%2F/amq.default/publish`` to a
  durable queue (the management plugin, as Debian ships it; answered ``routed: true``);
* then a drain of what the 1-client run published: the gateway's ``receive``
  (``max_messages`` 32) plus ``ack``, and RabbitMQ's ``POST /api/queues/%2F/bench/get``
  (count 32, ``ack_requeue_false``).

The load generator is this one Python process on the same 2 cores: the rates are what
this client reaches against each server, an upper bound set partly by the client. The
server's CPU seconds over the window are reported beside each rate.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.mqtt_wire import connect_packet
from bench.peers import Gateway, RabbitMQ, wait_accepts
from bench.report import machine

BODY = "x" * 100
_perf = time.perf_counter


class RabbitMQManagement(RabbitMQ):
    """Debian's RabbitMQ with its management plugin (the HTTP API) enabled as well."""

    name = "rabbitmq"

    def _prepare(self) -> None:
        from bench.peers import free_port

        super()._prepare()
        self.http_port = free_port()
        (self.data_dir / "enabled_plugins").write_text(
            "[rabbitmq_mqtt,rabbitmq_management].\n")
        with open(self.data_dir / "rabbitmq.conf", "a") as conf:
            conf.write(f"management.tcp.port = {self.http_port}\n"
                       "management.tcp.ip = 127.0.0.1\n")

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["RABBITMQ_ENABLED_PLUGINS"] = "rabbitmq_mqtt,rabbitmq_management"
        return env

    def _wait_ready(self) -> None:
        super()._wait_ready()
        wait_accepts(self.http_port, self.start_timeout, self.proc)


class HttpClient:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 port: int) -> None:
        self.reader = reader
        self.writer = writer
        self.port = port
        #: Times the server closed the keep-alive connection (reopened, request resent).
        self.reconnects = 0

    @classmethod
    async def open(cls, port: int) -> HttpClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, port)

    async def call(self, request: bytes) -> tuple[int, bytes]:
        try:
            return await self._call(request)
        except (asyncio.IncompleteReadError, ConnectionError):
            # a server that closes keep-alive connections after so many requests
            # (RabbitMQ's management listener, cowboy): reopen and send again
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.reconnects += 1
            return await self._call(request)

    async def _call(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        chunked = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
            return status, body
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def request(method: str, path: str, body: object, auth: str = "") -> bytes:
    raw = json.dumps(body).encode()
    extra = f"Authorization: Basic {auth}\r\n" if auth else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(raw)}\r\n{extra}\r\n").encode() + raw


async def closed_loop(clients: int, duration: float, one: Any) -> int:
    """Run ``clients`` loops of ``await one(i)`` for ``duration`` s; count successes."""
    done = 0
    stop = _perf() + duration

    async def loop(i: int) -> None:
        nonlocal done
        while _perf() < stop:
            if await one(i):
                done += 1

    await asyncio.gather(*(loop(i) for i in range(clients)))
    return done


def cpu(pid: int) -> float:
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """The process tree's user and system CPU seconds so far."""
    proc = psutil.Process(pid)
    user = system = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            user += t.user
            system += t.system
        except psutil.Error:
            pass
    return user, system


async def measure(name: str, pid: int, clients: int, duration: float, one: Any
                  ) -> dict[str, Any]:
    await closed_loop(clients, min(1.0, duration / 4), one)  # warm-up
    (u0, s0), t0 = cpu_split(pid), _perf()
    n = await closed_loop(clients, duration, one)
    (u1, s1), elapsed = cpu_split(pid), _perf() - t0
    used = u1 - u0 + s1 - s0
    per = 1e6 / max(n, 1)
    row = {"scenario": name, "clients": clients, "messages": n,
           "msg_per_s": round(n / elapsed), "server_cpu_s": round(used, 2),
           "server_cpu_us_per_msg": round(used * per, 1),
           "server_sys_us_per_msg": round((s1 - s0) * per, 1)}
    print(f"{name:22} {clients:3} clients: {row['msg_per_s']:8} msg/s"
          f"  server CPU {used:5.2f} s over {elapsed:.1f} s"
          f" ({row['server_cpu_us_per_msg']} us/msg, of it system"
          f" {row['server_sys_us_per_msg']})", flush=True)
    return row


async def gateway_runs(gw: Gateway, duration: float, counts: tuple[int, ...] = (1, 64),
                       parts: str = "http,drain,mqtt") -> list[dict[str, Any]]:
    port = gw.remoting_port  # the unified port: HTTP is sniffed there
    assert port is not None and gw.mqtt_port is not None
    rows: list[dict[str, Any]] = []
    publish = request("POST", "/v1/topics/bench/messages", {"body": BODY})
    for clients in counts if "http" in parts else ():
        conns = [await HttpClient.open(port) for _ in range(clients)]

        async def one(i: int, conns: list[HttpClient] = conns) -> bool:
            status, _ = await conns[i].call(publish)
            return status == 201

        rows.append(await measure("gateway-http", gw.pid, clients, duration, one))
        rows[-1]["reconnects"] = sum(c.reconnects for c in conns)
        for c in conns:
            c.close()
    if "drain" in parts:
        rows.append(await _drain(port))
    if "mqtt" in parts:
        rows += await _mqtt_runs(gw, duration, counts)
    return rows


async def _drain(port: int) -> dict[str, Any]:
    """What the HTTP runs published, by ``receive`` 32 + ``ack`` until empty."""
    client = await HttpClient.open(port)
    receive = request("POST", "/v1/groups/bench/topics/bench/receive",
                      {"max_messages": 32, "wait_seconds": 1})
    got = 0
    t0 = _perf()
    while True:
        status, body = await client.call(receive)
        messages = json.loads(body)["messages"]
        if not messages:
            break
        got += len(messages)
        await client.call(request("POST", "/v1/groups/bench/ack", {
            "receipt_handles": [m["receipt_handle"] for m in messages]}))
    elapsed = _perf() - t0 - 1.0  # the last, empty, long poll
    row = {"scenario": "gateway-http-receive+ack", "clients": 1, "messages": got,
           "msg_per_s": round(got / max(elapsed, 1e-3))}
    print(f"gateway-http receive+ack: {row['msg_per_s']} msg/s ({got} messages)")
    client.close()
    return row


async def _mqtt_runs(gw: Gateway, duration: float, counts: tuple[int, ...]
                     ) -> list[dict[str, Any]]:
    rows = []
    topic = b"bench/x"
    head = bytes([0x32, 2 + len(topic) + 2 + 100]) + struct.pack(">H", len(topic)) + topic
    payload = BODY.encode()
    for clients in counts:
        conns_mqtt = []
        for i in range(clients):
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.mqtt_port)
            writer.write(connect_packet(f"bench-{clients}-{i}"))
            await reader.readexactly(4)
            conns_mqtt.append((reader, writer))
        pids = [0] * clients

        async def one_mqtt(i: int, conns_mqtt: list[Any] = conns_mqtt,
                           pids: list[int] = pids) -> bool:
            reader, writer = conns_mqtt[i]
            pids[i] = pids[i] % 65535 + 1
            writer.write(head + struct.pack(">H", pids[i]) + payload)
            ack = await reader.readexactly(4)
            return ack[0] == 0x40

        rows.append(await measure("gateway-mqtt-qos1", gw.pid, clients, duration, one_mqtt))
        for _, writer in conns_mqtt:
            writer.close()
    return rows


async def rabbit_runs(rmq: RabbitMQManagement, duration: float) -> list[dict[str, Any]]:
    port = rmq.http_port
    auth = base64.b64encode(b"guest:guest").decode()
    setup = await HttpClient.open(port)
    status, body = await setup.call(request("PUT", "/api/queues/%2F/bench",
                                            {"durable": True}, auth))
    assert status in (201, 204), (status, body)
    rows = []
    publish = request("POST", "/api/exchanges/%2F/amq.default/publish", {
        "properties": {"delivery_mode": 2}, "routing_key": "bench", "payload": BODY,
        "payload_encoding": "string"}, auth)
    for clients in (1, 64):
        conns = [await HttpClient.open(port) for _ in range(clients)]

        async def one(i: int, conns: list[HttpClient] = conns) -> bool:
            status, body = await conns[i].call(publish)
            return status == 200 and b'"routed":true' in body

        rows.append(await measure("rabbitmq-http", rmq.pid, clients, duration, one))
        rows[-1]["reconnects"] = sum(c.reconnects for c in conns)
        print(f"  (the server closed keep-alive connections {rows[-1]['reconnects']} times)")
        for c in conns:
            c.close()
    get = request("POST", "/api/queues/%2F/bench/get", {
        "count": 32, "ackmode": "ack_requeue_false", "encoding": "auto"}, auth)
    got = 0
    t0 = _perf()
    while True:
        status, body = await setup.call(get)
        batch = json.loads(body)
        if not batch:
            break
        got += len(batch)
    elapsed = _perf() - t0
    rows.append({"scenario": "rabbitmq-http-get", "clients": 1, "messages": got,
                 "msg_per_s": round(got / max(elapsed, 1e-3))})
    print(f"rabbitmq-http get: {rows[-1]['msg_per_s']} msg/s ({got} messages)")
    setup.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--brokers", default="gateway,rabbitmq")
    parser.add_argument("--durability", default="async")
    parser.add_argument("--clients", default="1,64",
                        help="comma list of client counts (the gateway's runs)")
    parser.add_argument("--parts", default="http,drain,mqtt",
                        help="the gateway's runs to make: http, drain, mqtt")
    args = parser.parse_args()
    counts = tuple(int(c) for c in args.clients.split(","))
    rows: list[dict[str, Any]] = []
    print("machine " + json.dumps(machine()))
    with tempfile.TemporaryDirectory(prefix="lmq-bench-http-") as tmp:
        work = Path(tmp)
        if "gateway" in args.brokers:
            gw = Gateway(work, durability=args.durability)
            gw.start()
            try:
                print(f"gateway {gw.version} durability={args.durability}")
                rows += asyncio.run(gateway_runs(gw, args.duration, counts, args.parts))
            finally:
                gw.stop()
        if "rabbitmq" in args.brokers:
            rmq = RabbitMQManagement(work)
            why = rmq.available()
            if why:
                print(f"rabbitmq skipped: {why}")
            else:
                rmq.start()
                try:
                    print(f"rabbitmq {rmq.version}")
                    rows += asyncio.run(rabbit_runs(rmq, args.duration))
                finally:
                    rmq.stop()
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
