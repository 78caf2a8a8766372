"""The scenarios. Each is ``async def run(broker, cfg) -> dict`` and is bounded in time.

Sizes are the issue's full-scale figures times ``cfg.scale`` (at least 1 of anything).
Every result dict has the same keys where they apply (see ``loadgen.RunResult``), so
the report can put brokers side by side.
"""

from __future__ import annotations

import asyncio
import resource
import struct
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import amqp_wire as aw
from bench import mqtt_wire as mw
from bench.loadgen import Monitor, Publisher, gather_bounded, pump
from bench.peers import Broker

_perf = time.perf_counter


@dataclass
class Config:
    scale: float = 1.0
    duration: float = 10.0
    warmup: float = 2.0
    payload: int = 100
    window: int = 1000
    batch: int = 100
    phase_cap: float = 300.0  # bound of a connect/publish/drain phase

    def n(self, full: int, minimum: int = 1) -> int:
        return max(minimum, int(round(full * self.scale)))


class Skip(Exception):
    """The broker does not speak what the scenario needs."""


def _need_mqtt(b: Broker) -> int:
    if not b.mqtt_port:
        raise Skip("no MQTT listener")
    return b.mqtt_port


def _need_amqp(b: Broker) -> int:
    if not b.amqp_port:
        why = getattr(b, "amqp_error", "")
        raise Skip(f"AMQP listener failed to start: {why[-120:]}" if why else "no AMQP listener")
    return b.amqp_port


async def _connect_many(
    port: int,
    stats: mw.Stats,
    ids: list[str],
    *,
    clean: bool = True,
    record: bool = True,
    concurrency: int = 200,
    timeout: float = 60.0,
    track_ids: bool = False,
) -> tuple[list[mw.MqttConn], float]:
    hosts_every = 20_000  # one loopback source address per 20,000 connections (port range)
    t0 = _perf()
    factories = [
        (
            lambda i=i: mw.open_conn(
                port,
                stats,
                ids[i],
                clean,
                record,
                local_host=f"127.0.0.{1 + i // hosts_every}" if len(ids) > hosts_every else None,
                timeout=timeout,
                track_ids=track_ids,
            )
        )
        for i in range(len(ids))
    ]
    conns = await gather_bounded(factories, concurrency)
    return conns, _perf() - t0  # type: ignore[return-value]


def _close_all(conns: list[Any]) -> None:
    for c in conns:
        try:
            if hasattr(c, "disconnect"):
                c.disconnect()
            else:
                c.close()
        except Exception:
            pass


def _tpl_builder(tpls: list[mw.PublishTemplate], conn: mw.MqttConn):
    state = {"k": 0}

    def build(n: int) -> bytes:
        tpl = tpls[state["k"] % len(tpls)]
        state["k"] += 1
        out = mw.build_batch(tpl, n, conn.next_pid)
        if tpl.qos:
            conn.next_pid = (conn.next_pid - 1 + n) % 65535 + 1
        return out

    return build


async def _mqtt_pubsub(
    b: Broker,
    cfg: Config,
    *,
    qos: int,
    n_pubs: int,
    sub_filters: list[list[tuple[str, int]]],
    pub_topics: list[list[str]],
    fanout: float,
    window: int | None = None,
    batch: int | None = None,
) -> dict[str, Any]:
    port = _need_mqtt(b)
    stats = mw.Stats()
    mon = Monitor(b.pid).start()
    conns: list[mw.MqttConn] = []
    try:
        subs, t_sub = await asyncio.wait_for(
            _connect_many(port, stats, [f"s{i}" for i in range(len(sub_filters))]),
            cfg.phase_cap,
        )
        conns += subs
        await gather_bounded(
            [lambda s=s, f=f: s.subscribe(f) for s, f in zip(subs, sub_filters, strict=True)], 200
        )
        pubs_c, t_pub = await asyncio.wait_for(
            _connect_many(port, stats, [f"p{i}" for i in range(n_pubs)], record=False),
            cfg.phase_cap,
        )
        conns += pubs_c
        await asyncio.sleep(0.2)  # subscriptions settle (some brokers ack before they route)
        pubs = [
            Publisher(
                c, _tpl_builder([mw.PublishTemplate(t, qos, cfg.payload) for t in pub_topics[i]], c)
            )
            for i, c in enumerate(pubs_c)
        ]
        w = window or max(cfg.batch, min(cfg.window, int(10 * cfg.window / max(1.0, fanout))))
        res = await pump(
            pubs,
            stats,
            mon,
            fanout=fanout,
            duration=cfg.duration,
            warmup=cfg.warmup,
            window=w,
            batch=min(batch or cfg.batch, w),
            confirm_window=None,
        )
        out = asdict(res)
        out["connect_s"] = round(t_sub + t_pub, 3)
        return out
    finally:
        _close_all(conns)
        await mon.stop()


# -- MQTT throughput ----------------------------------------------------------------------


async def mqtt_qos0(b: Broker, cfg: Config) -> dict[str, Any]:
    return await _mqtt_pubsub(
        b, cfg, qos=0, n_pubs=1, sub_filters=[[("b/1", 0)]], pub_topics=[["b/1"]], fanout=1
    )


async def mqtt_qos1(b: Broker, cfg: Config) -> dict[str, Any]:
    return await _mqtt_pubsub(
        b, cfg, qos=1, n_pubs=1, sub_filters=[[("b/1", 1)]], pub_topics=[["b/1"]], fanout=1
    )


def _fanout(qos: int):
    async def run(b: Broker, cfg: Config) -> dict[str, Any]:
        n = cfg.n(100)
        return await _mqtt_pubsub(
            b,
            cfg,
            qos=qos,
            n_pubs=1,
            sub_filters=[[("fan/t", qos)]] * n,
            pub_topics=[["fan/t"]],
            fanout=n,
            batch=max(1, min(cfg.batch, 1000 // n)),
        )

    return run


async def mqtt_fanin(b: Broker, cfg: Config) -> dict[str, Any]:
    n = cfg.n(1000)
    return await _mqtt_pubsub(
        b,
        cfg,
        qos=0,
        n_pubs=n,
        sub_filters=[[("fi/+", 0)]],
        pub_topics=[[f"fi/{i}"] for i in range(n)],
        fanout=1,
        batch=max(1, min(cfg.batch, 10)),
    )


async def mqtt_topics(b: Broker, cfg: Config) -> dict[str, Any]:
    """N subscribers on ``ts/<g>/<i>`` (g = i mod W) and W wildcard ones on ``ts/<g>/+``:
    every publish reaches its own subscriber and one wildcard subscriber."""
    n, w = cfg.n(10_000), cfg.n(100)
    filters = [[(f"ts/{i % w}/{i}", 0)] for i in range(n)] + [[(f"ts/{g}/+", 0)] for g in range(w)]
    topics = [f"ts/{i % w}/{i}" for i in range(n)]
    out = await _mqtt_pubsub(
        b,
        cfg,
        qos=0,
        n_pubs=1,
        sub_filters=filters,
        pub_topics=[topics],
        fanout=2,
        batch=1,
        window=cfg.window,
    )
    out["subscribers"] = n + w
    return out


# -- MQTT connections ---------------------------------------------------------------------


async def mqtt_connections(b: Broker, cfg: Config) -> dict[str, Any]:
    port = _need_mqtt(b)
    want = cfg.n(50_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = hard - 500
    n = min(want, cap)
    stats = mw.Stats()
    mon = Monitor(b.pid)
    await asyncio.sleep(0.5)
    rss0 = mon.sample()
    cpu0 = mon.cpu_seconds()
    conns: list[mw.MqttConn] = []
    try:
        ok = 0
        t0 = _perf()
        deadline = t0 + cfg.phase_cap
        errors: dict[str, int] = {}
        step = 500
        for start in range(0, n, step):
            if _perf() > deadline:
                break
            ids = [f"idle{i}" for i in range(start, min(n, start + step))]
            res = await asyncio.gather(
                *(
                    mw.open_conn(
                        port,
                        stats,
                        cid,
                        local_host=f"127.0.0.{1 + (start + j) // 20_000}",
                        timeout=30,
                    )
                    for j, cid in enumerate(ids)
                ),
                return_exceptions=True,
            )
            for r in res:
                if isinstance(r, BaseException):
                    errors[type(r).__name__] = errors.get(type(r).__name__, 0) + 1
                else:
                    conns.append(r)
                    ok += 1
            if errors and sum(errors.values()) > max(50, n // 20):
                break
            mon.sample()
        t_conn = _perf() - t0
        cpu1 = mon.cpu_seconds()
        await asyncio.sleep(2.0)  # idle
        rss1 = mon.sample()
        return {
            "requested": want,
            "fd_cap": cap,
            "connected": ok,
            "errors": errors,
            "connect_s": round(t_conn, 3),
            "connect_rate": round(ok / t_conn, 1) if t_conn else 0,
            "rss_before_mb": round(rss0 / 2**20, 1),
            "rss_after_mb": round(rss1 / 2**20, 1),
            "kb_per_conn": round((rss1 - rss0) / 1024 / ok, 2) if ok else None,
            "cpu_pct": round((cpu1 - cpu0) / t_conn * 100, 1) if t_conn else 0,
            "peak_rss_mb": round(mon.peak_rss / 2**20, 1),
        }
    finally:
        _close_all(conns)


# -- MQTT offline backlog and kill -9 -----------------------------------------------------

_seq = struct.Struct(">HdQ")


async def _backlog(b: Broker, cfg: Config, kill9: bool) -> dict[str, Any]:
    port = _need_mqtt(b)
    n_sess = cfg.n(1000)
    n_msgs = cfg.n(1_000_000 if not kill9 else 100_000)
    stats = mw.Stats()
    mon = Monitor(b.pid).start()
    out: dict[str, Any] = {"sessions": n_sess, "messages": n_msgs}
    ids = [f"bl{i}" for i in range(n_sess)]
    try:
        # 1. persistent sessions subscribe, then go away
        sess, _ = await _connect_many(port, stats, ids, clean=False)
        await gather_bounded(
            [lambda s=s, i=i: s.subscribe([(f"bl/{i}", 1)]) for i, s in enumerate(sess)], 200
        )
        _close_all(sess)
        await asyncio.sleep(0.5)
        out["rss_idle_mb"] = round(mon.sample() / 2**20, 1)
        # 2. publish the backlog, QoS 1, at most `window` unacknowledged
        pub = await mw.open_conn(port, stats, "blpub", record=False)
        heads = [mw.PublishTemplate(f"bl/{i}", 1, cfg.payload).head for i in range(n_sess)]
        pad = bytes(max(0, cfg.payload - 16))
        sent = 0
        t0 = _perf()
        deadline = t0 + cfg.phase_cap
        pid = 1
        while sent < n_msgs and _perf() < deadline:
            if pub.transport is None or pub.transport.is_closing():
                raise ConnectionError("publisher closed by the broker")
            if sent - pub.acked >= cfg.window or pub.write_paused:
                await asyncio.sleep(0.001)
                continue
            n = min(cfg.batch, n_msgs - sent)
            now = _perf()
            parts = []
            for j in range(sent, sent + n):
                parts.append(heads[j % n_sess])
                parts.append(_seq.pack(pid, now, j))
                parts.append(pad)
                pid = pid + 1 if pid < 65535 else 1
            pub.transport.write(b"".join(parts))
            sent += n
            await asyncio.sleep(0)
        while pub.acked < sent and _perf() < deadline + 10:
            await asyncio.sleep(0.01)
        t_pub = _perf() - t0
        acked = pub.acked
        out.update(
            published=sent,
            acked=acked,
            publish_s=round(t_pub, 3),
            pub_rate=round(acked / t_pub, 1) if t_pub else 0,
        )
        await asyncio.sleep(0.5)
        out["rss_backlog_mb"] = round(mon.sample() / 2**20, 1)
        out["peak_rss_mb"] = round(mon.peak_rss / 2**20, 1)
        pub.disconnect()
        await asyncio.sleep(0.2)
        # 3. crash and restart
        if kill9:
            await mon.stop()
            await asyncio.get_running_loop().run_in_executor(None, b.kill9)
            t_k = _perf()
            await asyncio.get_running_loop().run_in_executor(None, lambda: b.start(fresh=False))
            while True:  # serving = a CONNECT gets its CONNACK
                try:
                    probe = await mw.open_conn(port, mw.Stats(), "probe", timeout=5)
                    probe.disconnect()
                    break
                except (OSError, TimeoutError, ConnectionError):
                    if _perf() - t_k > cfg.phase_cap:
                        raise
                    await asyncio.sleep(0.05)
            out["restart_to_serve_s"] = round(_perf() - t_k, 3)
            mon = Monitor(b.pid).start()
        # 4. reconnect and drain (the broker's CPU time per drained message is the
        # figure least disturbed by a busy machine)
        cpu0 = mon.cpu_seconds()
        t0 = _perf()
        sess, _ = await _connect_many(port, stats, ids, clean=False, record=False, track_ids=True)
        out["sessions_present"] = sum(1 for s in sess if s.session_present)
        out["reconnect_s"] = round(_perf() - t0, 3)
        out["reconnect_cpu_s"] = round(mon.cpu_seconds() - cpu0, 3)

        def unique() -> int:
            return sum(len(s.seen_ids or ()) for s in sess)

        last_n, last_t = -1, _perf()
        while unique() < acked and _perf() - t0 < cfg.phase_cap:
            await asyncio.sleep(0.05)
            n_now = unique()
            if n_now != last_n:
                last_n, last_t = n_now, _perf()
            elif _perf() - last_t > 5.0:
                break
        t_drain = (last_t if unique() < acked else _perf()) - t0
        cpu_drain = mon.cpu_seconds() - cpu0
        # A message counts once, and only in the session it was published for.
        right = set()
        misrouted = 0
        for i, s in enumerate(sess):
            for j in s.seen_ids or ():
                if j % n_sess == i:
                    right.add(j)
                else:
                    misrouted += 1
        drained = len(right)
        out.update(
            drained=drained,
            drain_s=round(t_drain, 3),
            drain_rate=round(drained / t_drain, 1) if t_drain > 0 else 0,
            drain_cpu_us=round(cpu_drain / drained * 1e6, 3) if drained else 0,
            lost=max(0, acked - drained),
            duplicates=stats.delivered - unique(),
            misrouted=misrouted,
        )
        _close_all(sess)
        out["peak_rss_mb"] = round(max(mon.peak_rss / 2**20, out["peak_rss_mb"]), 1)
        return out
    finally:
        await mon.stop()


async def mqtt_backlog(b: Broker, cfg: Config) -> dict[str, Any]:
    return await _backlog(b, cfg, kill9=False)


async def mqtt_kill9(b: Broker, cfg: Config) -> dict[str, Any]:
    return await _backlog(b, cfg, kill9=True)


# -- AMQP -----------------------------------------------------------------------------------


async def _amqp_run(
    b: Broker,
    cfg: Config,
    *,
    exchange: str,
    kind: str | None,
    queues: list[str],
    bindings: list[tuple[str, str]],
    routing_keys: list[str],
    fanout: int,
) -> dict[str, Any]:
    port = _need_amqp(b)
    stats = mw.Stats()
    mon = Monitor(b.pid).start()
    conns: list[aw.AmqpConn] = []
    try:
        setup = await aw.open_amqp(port, stats, record=False)
        conns.append(setup)
        if kind:
            await setup.exchange_declare(exchange, kind)
        for q in queues:
            await setup.queue_declare(q)
        for q, key in bindings:
            await setup.queue_bind(q, exchange, key)
        for i, q in enumerate(queues):
            c = await aw.open_amqp(port, stats)
            conns.append(c)
            await c.qos(1000)
            await c.consume(q, f"ct{i}")
        pub = await aw.open_amqp(port, stats, record=False)
        conns.append(pub)
        await pub.confirm_select()
        tpls = [aw.AmqpPublishTemplate(exchange, rk, cfg.payload) for rk in routing_keys]
        state = {"k": 0}

        def build(n: int) -> bytes:
            tpl = tpls[state["k"] % len(tpls)]
            state["k"] += 1
            return aw.build_amqp_batch(tpl, n)

        w = max(cfg.batch, min(cfg.window, int(10 * cfg.window / fanout)))
        res = await pump(
            [Publisher(pub, build)],
            stats,
            mon,
            fanout=fanout,
            duration=cfg.duration,
            warmup=cfg.warmup,
            window=w,
            batch=min(cfg.batch, w) if len(tpls) == 1 else 1,
            confirm_window=w,
        )
        out = asdict(res)
        out["confirmed"] = pub.confirmed
        out["nacked"] = pub.nacked
        if stats.errors:
            out["errors"] = stats.errors[:3]
        return out
    finally:
        _close_all(conns)
        await mon.stop()


async def amqp_1to1(b: Broker, cfg: Config) -> dict[str, Any]:
    q = f"bench.q.{int(time.time())}"
    return await _amqp_run(
        b, cfg, exchange="", kind=None, queues=[q], bindings=[], routing_keys=[q], fanout=1
    )


async def amqp_fanout(b: Broker, cfg: Config) -> dict[str, Any]:
    n = 10
    qs = [f"bench.fan.{i}" for i in range(n)]
    return await _amqp_run(
        b,
        cfg,
        exchange="bench.fanout",
        kind="fanout",
        queues=qs,
        bindings=[(q, "") for q in qs],
        routing_keys=["x"],
        fanout=n,
    )


async def amqp_topic(b: Broker, cfg: Config) -> dict[str, Any]:
    """1,000 bindings ``t.<i>.*`` spread over 10 queues; each publish matches one."""
    n = cfg.n(1000)
    qs = [f"bench.top.{i}" for i in range(10)]
    binds = [(qs[i % 10], f"t.{i}.*") for i in range(n)]
    return await _amqp_run(
        b,
        cfg,
        exchange="bench.topic",
        kind="topic",
        queues=qs,
        bindings=binds,
        routing_keys=[f"t.{i}.x" for i in range(n)],
        fanout=1,
    )


SCENARIOS = {
    "mqtt_qos0": mqtt_qos0,
    "mqtt_qos1": mqtt_qos1,
    "mqtt_fanout_qos0": _fanout(0),
    "mqtt_fanout_qos1": _fanout(1),
    "mqtt_fanin": mqtt_fanin,
    "mqtt_topics": mqtt_topics,
    "mqtt_connections": mqtt_connections,
    "mqtt_backlog": mqtt_backlog,
    "mqtt_kill9": mqtt_kill9,
    "amqp_1to1": amqp_1to1,
    "amqp_fanout": amqp_fanout,
    "amqp_topic": amqp_topic,
}

DESCRIPTIONS = {
    "mqtt_qos0": "MQTT QoS 0, 1 publisher -> 1 subscriber",
    "mqtt_qos1": "MQTT QoS 1, 1 publisher -> 1 subscriber",
    "mqtt_fanout_qos0": "MQTT QoS 0 fan-out, 1 publisher -> 100 subscribers of one topic",
    "mqtt_fanout_qos1": "MQTT QoS 1 fan-out, 1 publisher -> 100 subscribers of one topic",
    "mqtt_fanin": "MQTT QoS 0 fan-in, 1,000 publishers -> 1 wildcard subscriber",
    "mqtt_topics": "MQTT topic scale, 10,000 own-topic + 100 wildcard subscribers",
    "mqtt_connections": "MQTT 50,000 idle connections (capped by RLIMIT_NOFILE)",
    "mqtt_backlog": "MQTT offline backlog, 1,000 sessions, 1,000,000 QoS 1 messages, then drain",
    "mqtt_kill9": "MQTT backlog of 100,000 QoS 1 messages, kill -9, restart, drain",
    "amqp_1to1": "AMQP 1 -> 1, publisher confirms, consumer acks, prefetch 1000",
    "amqp_fanout": "AMQP fanout exchange -> 10 queues",
    "amqp_topic": "AMQP topic exchange with 1,000 bindings",
}

# The RocketMQ remoting and gRPC scenarios live in their own modules; registered here so
# `python -m bench --scenarios` lists them.
from bench import grpc as _grpc  # noqa: E402
from bench import remoting as _remoting  # noqa: E402

SCENARIOS.update(_remoting.SCENARIOS)
DESCRIPTIONS.update(_remoting.DESCRIPTIONS)
SCENARIOS.update(_grpc.SCENARIOS)
DESCRIPTIONS.update(_grpc.DESCRIPTIONS)
