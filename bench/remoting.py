"""RocketMQ remoting scenarios (the gateway only; other brokers skip them).

* ``remoting_1to1`` -- one producer sends 100-byte messages with SEND_MESSAGE_V2,
  pipelined (at most ``window`` in flight end to end, like the MQTT QoS 1 scenario),
  to a topic of 8 queues; one push consumer (long-polling pulls, one per queue) takes
  them. Run it in the same ``python -m bench`` run as ``mqtt_qos1``: the store is the
  same, so the two rates compare the front ends.
* ``remoting_8q_4c`` -- the same with four push consumers of one group sharing the 8
  queues (two each, by the average allocation).
* ``remoting_topics`` -- 100,000 topics of 8 queues (800,000 LMQs; times ``--scale``),
  created by route queries (auto-create), then the gateway's RSS and open files and
  the latency of GET_ROUTEINFO_BY_TOPIC on existing topics.

The producer is a raw pipelined connection (frames built with ``protocol.remoting``);
the consumers are the project's client (``gateway.clients.PushConsumer``), so consuming
includes the client's decoding of the stored-message layout.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import time
from dataclasses import asdict
from typing import Any

import psutil

from bench.loadgen import Monitor, Publisher, pump
from bench.mqtt_wire import Stats
from bench.peers import Broker
from gateway.clients import PushConsumer, ReceivedMessage, RemotingClient, RemotingConnection
from protocol.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from protocol.remoting import messages as wire

_perf = time.perf_counter
_stamp = struct.Struct(">dQ")


def _address(b: Broker) -> str:
    port = getattr(b, "remoting_port", None)
    if not port:
        from bench.scenarios import Skip  # registered by bench.scenarios: import late

        raise Skip("no RocketMQ remoting listener")
    return f"127.0.0.1:{port}"


def uniq_prop(seq: int) -> str:
    return f"UNIQ_KEY\x01B{os.getpid():X}{seq:012X}\x02"


class RemotingSender(asyncio.Protocol):
    """A producer connection writing SEND_MESSAGE_V2 frames back to back; responses are
    counted (``confirmed`` for code 0, ``nacked`` otherwise), in any order."""

    def __init__(self, topic: str, queues: int, payload: int, *, uniq: bool = True) -> None:
        self.topic = topic
        self.uniq = uniq  # a UNIQ_KEY per message, as every RocketMQ producer sets one
        self.queues = queues
        self.pad = bytes(max(0, payload - _stamp.size))
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.confirmed = 0
        self.nacked = 0
        self.write_paused = False
        self.seq = itertools.count()
        self.opaque = itertools.count(1)
        self.props = wire.encode_properties({"WAIT": "true"})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        while (cmd := self.decoder.next_command()) is not None:
            if cmd.code == ResponseCode.SUCCESS:
                self.confirmed += 1
            else:
                self.nacked += 1

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False

    def build(self, n: int) -> bytes:
        frames = []
        now = _perf()
        born = str(int(time.time() * 1000))
        for _ in range(n):
            seq = next(self.seq)
            fields = {
                "a": "benchProducers", "b": self.topic, "c": "TBW102", "d": "4",
                "e": str(seq % self.queues), "f": "0", "g": born, "h": "0",
                "i": self.props + (uniq_prop(seq) if self.uniq else ""),
                "j": "0", "k": "false", "m": "false",
            }
            frames.append(
                RemotingCommand.request(
                    RequestCode.SEND_MESSAGE_V2, fields, _stamp.pack(now, seq) + self.pad,
                    opaque=next(self.opaque),
                ).encode()
            )
        return b"".join(frames)


async def _consumers(
    address: str, topic: str, n: int, stats: Stats
) -> tuple[list[RemotingClient], list[PushConsumer]]:
    clients, consumers = [], []

    async def handler(message: ReceivedMessage) -> None:
        t, _ = _stamp.unpack_from(message.body)
        lat = stats.latencies
        if len(lat) < stats.max_latency_samples:
            lat.append(_perf() - t)
        stats.delivered += 1
        if stats.on_progress is not None:
            stats.on_progress()

    for i in range(n):
        client = RemotingClient(address, client_id=f"bench@{os.getpid()}@{i}", timeout=10.0)
        consumer = PushConsumer(
            client, "benchConsumers", consume_from="last", rebalance_interval=2.0,
            commit_interval=1.0, pull_batch=64,
        )
        consumer.subscribe(topic, "*", handler)
        await consumer.start()
        clients.append(client)
        consumers.append(consumer)
    # every queue owned by exactly one consumer before the measurement starts
    deadline = _perf() + 30.0
    while _perf() < deadline:
        owned = [mq for c in consumers for mq in c.assigned if mq.topic == topic]
        mine = [[mq for mq in c.assigned if mq.topic == topic] for c in consumers]
        if len(owned) == len(set(owned)) == 8 and all(mine):
            break
        await asyncio.sleep(0.1)
    return clients, consumers


async def _pubsub(b: Broker, cfg: Any, n_consumers: int) -> dict[str, Any]:
    address = _address(b)
    topic = f"bench{n_consumers}c{int(time.time())}"
    stats = Stats()
    mon = Monitor(b.pid).start()
    async with RemotingClient(address) as setup:
        queues = len((await setup.route(topic)).write_queues)
    clients, consumers = await _consumers(address, topic, n_consumers, stats)
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    transport, sender = await loop.create_connection(
        lambda: RemotingSender(topic, queues, cfg.payload), host, int(port)
    )
    try:
        res = await pump(
            [Publisher(sender, sender.build)],
            stats,
            mon,
            fanout=1,
            duration=cfg.duration,
            warmup=cfg.warmup,
            window=cfg.window,
            batch=min(cfg.batch, cfg.window),
            confirm_window=cfg.window,
        )
        out = asdict(res)
        out.update(confirmed=sender.confirmed, nacked=sender.nacked, queues=queues,
                   consumers=n_consumers)
        return out
    finally:
        transport.close()
        for c in consumers:
            try:
                await c.close()
            except Exception as exc:  # the scenario's result stands; say why closing failed
                stats.errors.append(f"consumer close: {exc!r}")
        for cl in clients:
            await cl.close()
        await mon.stop()


async def remoting_1to1(b: Broker, cfg: Any) -> dict[str, Any]:
    return await _pubsub(b, cfg, 1)


async def remoting_8q_4c(b: Broker, cfg: Any) -> dict[str, Any]:
    return await _pubsub(b, cfg, 4)


def _open_files(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        return sum(q.num_fds() for q in [p, *p.children(recursive=True)])
    except psutil.NoSuchProcess:
        return -1


async def remoting_topics(b: Broker, cfg: Any) -> dict[str, Any]:
    address = _address(b)
    n = cfg.n(100_000)
    mon = Monitor(b.pid)
    await asyncio.sleep(0.5)
    rss0, files0 = mon.sample(), _open_files(b.pid)
    names = [f"rt{i}" for i in range(n)]
    t0 = _perf()
    created = 0
    errors = 0
    async with RemotingClient(address, timeout=60.0) as client:
        conns = [await client.connection(address)]
        for _ in range(3):  # four connections share the work
            conns.append(await RemotingConnection.open(address))
        sem = asyncio.Semaphore(64)

        async def create(i: int) -> None:
            nonlocal created, errors
            async with sem:
                r = await conns[i % len(conns)].invoke(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC,
                    {"topic": names[i], "acceptStandardJsonOnly": "true"},
                    timeout=60.0,
                )
                if r.code == 0:
                    created += 1
                else:
                    errors += 1

        for start in range(0, n, 5000):
            if _perf() - t0 > cfg.phase_cap:
                break
            await asyncio.gather(*(create(i) for i in range(start, min(n, start + 5000))))
            mon.sample()
        t_create = _perf() - t0
        await asyncio.sleep(1.0)
        rss1, files1 = mon.sample(), _open_files(b.pid)
        lat = []
        step = max(1, created // 2000)
        for i in range(0, created, step):
            t = _perf()
            await conns[0].call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": names[i]})
            lat.append(_perf() - t)
        for c in conns[1:]:
            await c.close()
    lat.sort()

    def q(f: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(len(lat) * f))] * 1000, 3) if lat else None

    return {
        "topics": created,
        "lmqs": created * 8,
        "errors": errors,
        "create_s": round(t_create, 3),
        "create_rate": round(created / t_create, 1) if t_create else 0,
        "rss_before_mb": round(rss0 / 2**20, 1),
        "rss_after_mb": round(rss1 / 2**20, 1),
        "kb_per_topic": round((rss1 - rss0) / 1024 / created, 2) if created else None,
        "open_files_before": files0,
        "open_files_after": files1,
        "route_p50_ms": q(0.5),
        "route_p99_ms": q(0.99),
        "route_samples": len(lat),
    }


SCENARIOS = {
    "remoting_1to1": remoting_1to1,
    "remoting_8q_4c": remoting_8q_4c,
    "remoting_topics": remoting_topics,
}

DESCRIPTIONS = {
    "remoting_1to1": "RocketMQ remoting send -> push consumer, 1 -> 1, topic of 8 queues",
    "remoting_8q_4c": "RocketMQ remoting send -> 4 push consumers of one group, 8 queues",
    "remoting_topics": "RocketMQ 100,000 topics of 8 queues: RSS, open files, route latency",
}
