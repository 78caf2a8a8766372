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

* ``remoting_1to1_client`` -- ``remoting_1to1`` consumed by the project's client
  (``gateway.clients.PushConsumer``: every message decoded into a ``ReceivedMessage``
  and handed to an async handler), which measures the client as much as the gateway.

The producer is a raw pipelined connection (:class:`bench.remoting_wire.RawSender`:
frames from a template the codec made). The consumers of ``remoting_1to1`` and
``remoting_8q_4c`` are members of one consumer group (HEART_BEAT through the project's
client) pulling over raw connections (:class:`bench.remoting_wire.RawPuller`: one
long-polling pull in flight per queue, the offset committed with each pull, every
message counted and its queue, offset and sequence checked), so the generator's
share of a core stays well below the gateway's (``gen_cpu_pct``).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict
from typing import Any

import psutil

from bench.loadgen import Monitor, Publisher, pump
from bench.mqtt_wire import Stats
from bench.peers import Broker
from bench.remoting_wire import STAMP, RawPuller, RawSender, heartbeat_body, summarize
from gateway.clients import (
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    RemotingClient,
    RemotingConnection,
)
from protocol.remoting import RequestCode
from protocol.remoting.bodies import ConsumerListBody
from protocol.remoting.client import allocate_averagely

_perf = time.perf_counter
GROUP = "benchConsumers"
PULL_BATCH = 64  # messages a pull asks for (what the PushConsumer variant asks too)


def _address(b: Broker) -> str:
    port = getattr(b, "remoting_port", None)
    if not port:
        from bench.scenarios import Skip  # registered by bench.scenarios: import late

        raise Skip("no RocketMQ remoting listener")
    return f"127.0.0.1:{port}"


async def _consumers(
    address: str, topic: str, n: int, stats: Stats
) -> tuple[list[RemotingClient], list[PushConsumer]]:
    clients, consumers = [], []

    async def handler(message: ReceivedMessage) -> None:
        t, _ = STAMP.unpack_from(message.body)
        lat = stats.latencies
        if len(lat) < stats.max_latency_samples:
            lat.append(_perf() - t)
        stats.delivered += 1
        if stats.on_progress is not None:
            stats.on_progress()

    for i in range(n):
        client = RemotingClient(address, client_id=f"bench@{os.getpid()}@{i}", timeout=10.0)
        consumer = PushConsumer(
            client, GROUP, consume_from="last", rebalance_interval=2.0,
            commit_interval=1.0, pull_batch=PULL_BATCH,
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


def _raw_group(topic: str) -> str:
    """One consumer group per run (its topic is new too): no member of an earlier
    scenario in it, so the allocation is exactly over this run's consumers."""
    return f"{GROUP}-{topic}"


async def _raw_consumers(
    address: str, topic: str, n: int, stats: Stats
) -> tuple[list[RemotingClient], list[RawPuller], list[asyncio.Transport]]:
    """``n`` members of one consumer group (HEART_BEAT through the project's client,
    so the gateway knows the group), each pulling its share of the topic's queues by the
    average allocation over a raw connection of its own (:class:`RawPuller`)."""
    pid = os.getpid()
    group = _raw_group(topic)
    clients = [RemotingClient(address, client_id=f"bench@{pid}@{i}", timeout=10.0)
               for i in range(n)]
    for client in clients:
        conn = await client.connection(address)
        await conn.call(RequestCode.HEART_BEAT, None,
                        heartbeat_body(client.client_id, group, topic))
    ours = sorted(c.client_id for c in clients)
    deadline = _perf() + 30.0
    ids: list[str] = []
    while _perf() < deadline:  # the group as the gateway sees it: exactly these members
        response = await conn.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                   {"consumerGroup": group})
        ids = sorted(ConsumerListBody.parse(response.body).consumer_id_list)
        if ids == ours:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(f"consumer group {group}: members {ids}, expected {ours}")
    queues = list((await clients[0].route(topic)).read_queues)
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    pullers, transports = [], []
    for client in clients:
        mine = allocate_averagely(queues, ids, client.client_id)
        puller_api = PullConsumer(client, group)
        starts = {mq.queue_id: await puller_api.max_offset(mq) for mq in mine}
        transport, puller = await loop.create_connection(
            lambda starts=starts: RawPuller(topic, group, starts, len(queues), stats,
                                            batch=PULL_BATCH), host, int(port))
        pullers.append(puller)
        transports.append(transport)
    return clients, pullers, transports


async def _close_raw(clients: list[RemotingClient], pullers: list[RawPuller],
                     transports: list[asyncio.Transport], topic: str, stats: Stats) -> None:
    """Stop pulling, commit each queue's offset and unregister, as a consumer's close."""
    for puller, transport in zip(pullers, transports, strict=True):
        puller.closing = True
        transport.close()
    for client, puller in zip(clients, pullers, strict=True):
        try:
            api = PullConsumer(client, _raw_group(topic))
            route = await client.route(topic)
            by_id = {mq.queue_id: mq for mq in route.read_queues}
            for queue_id, offset in puller.offsets().items():
                await api.update_offset(by_id[queue_id], offset)
            conn = await client.connection(next(iter(route.brokers.values())))
            await conn.call(RequestCode.UNREGISTER_CLIENT,
                            {"clientID": client.client_id, "consumerGroup": _raw_group(topic)})
        except Exception as exc:  # the scenario's result stands; say why closing failed
            stats.errors.append(f"consumer close: {exc!r}")
        await client.close()


async def _pubsub(b: Broker, cfg: Any, n_consumers: int, *, raw: bool = True) -> dict[str, Any]:
    address = _address(b)
    topic = f"bench{n_consumers}c{'r' if raw else 'p'}{int(time.time())}"
    stats = Stats()
    mon = Monitor(b.pid).start()
    async with RemotingClient(address) as setup:
        queues = len((await setup.route(topic)).write_queues)
    pullers: list[RawPuller] = []
    transports: list[asyncio.Transport] = []
    consumers: list[PushConsumer] = []
    if raw:
        clients, pullers, transports = await _raw_consumers(address, topic, n_consumers, stats)
    else:
        clients, consumers = await _consumers(address, topic, n_consumers, stats)
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    transport, sender = await loop.create_connection(
        lambda: RawSender(topic, queues, cfg.payload), host, int(port)
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
                   consumers=n_consumers, consumer="raw" if raw else "gateway.clients")
        if raw:
            out.update(summarize(pullers))
        if stats.errors:
            out["errors"] = stats.errors[:20]
        return out
    finally:
        transport.close()
        if raw:
            await _close_raw(clients, pullers, transports, topic, stats)
        for c in consumers:
            try:
                await c.close()
            except Exception as exc:  # the scenario's result stands; say why closing failed
                stats.errors.append(f"consumer close: {exc!r}")
        if not raw:
            for cl in clients:
                await cl.close()
        await mon.stop()


async def remoting_1to1(b: Broker, cfg: Any) -> dict[str, Any]:
    return await _pubsub(b, cfg, 1)


async def remoting_8q_4c(b: Broker, cfg: Any) -> dict[str, Any]:
    return await _pubsub(b, cfg, 4)


async def remoting_1to1_client(b: Broker, cfg: Any) -> dict[str, Any]:
    return await _pubsub(b, cfg, 1, raw=False)


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
    "remoting_1to1_client": remoting_1to1_client,
    "remoting_topics": remoting_topics,
}

DESCRIPTIONS = {
    "remoting_1to1": "RocketMQ remoting send -> push consumer, 1 -> 1, topic of 8 queues",
    "remoting_8q_4c": "RocketMQ remoting send -> 4 push consumers of one group, 8 queues",
    "remoting_1to1_client": "remoting_1to1 consumed by the project's client (PushConsumer)",
    "remoting_topics": "RocketMQ 100,000 topics of 8 queues: RSS, open files, route latency",
}
