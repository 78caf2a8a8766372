"""The connector against a Mosquitto bridge and a RabbitMQ shovel, in one run (issue 19):

    .venv/bin/python -m bench.connector_compare [--runs 3] [--backlog 10000]
        [--steady 5] [--rate 200] [--seconds 10] [--kills 3]

Three set-ups, each copying 100-byte messages from a source to a target on this machine,
measured the same way, alternated over ``--runs`` runs (run i starts with set-up i mod 3):

- ``gateway``: gateway a -> ``lmq connector run`` -> gateway b (RocketMQ remoting; the
  project's Producer at a, long-polling pull consumers per queue at b);
- ``mosquitto``: Mosquitto A with a bridge (``connection``, ``topic bench/# out 1``,
  ``cleansession false``, ``persistence true`` with the shipped autosave) -> Mosquitto B
  (persistence on too); paho QoS 1 publisher at A, persistent QoS 1 subscriber at B;
- ``rabbitmq``: one rabbitmq-server node of the bench's own (its ``enabled_plugins`` file
  lists ``rabbitmq_shovel``), vhosts ``va`` and ``vb``, durable queues ``qa`` and ``qb``, a
  dynamic shovel ``qa`` -> ``qb`` (``ack-mode on-confirm``) defined in ``va``; aiormq
  publisher with confirms (persistent messages) at ``va``, consumer with manual acks at
  ``vb``.

In all three the bridging process reaches the target through the same TCP relay, a
process of the bench's own (``tests/gateway/connector/cut_relay.py``); it costs every
set-up the same hop. Gateway b advertises the relay's address in its routes
(``--advertised-address``), so the connector's sends, not only its route lookups, go
through it. Figures per set-up and run:

- ``backlog``: the relay cut, ``--backlog`` messages published and acknowledged at the
  source, the relay restored: copies per second at the target from its first copy to
  its last (the reconnect before the first is not counted);
- ``steady``: publishers flat out for ``--steady`` seconds (8 in flight): messages the
  source acknowledged per second, and copies per second at the target from the first
  send to the last copy;
- ``delay``: ``--rate`` messages/s for ``--seconds`` s, the send time (``time.time()``)
  in the body; delay = the target consumer's receipt time minus it; p50, p99, max;
- ``kill``: ``--rate`` x (2 x ``--kills`` + 1) publishes at that rate, one at a time;
  before publish ``rate`` x (1 + 2k) the bridging process is killed with SIGKILL and
  restarted at once (k < ``--kills``; the same publishes for every set-up, however long
  a restart takes): the connector process; Mosquitto A (the
  bridge lives in the source broker, so the publisher loses its connection too and
  sends what was not PUBACKed again, under a new id); for RabbitMQ the shovel lives in
  the broker, so it is the node that is killed and restarted (publisher and consumer
  lose their connections; the publisher resends what was not confirmed, under a new id).
  Then everything drains; ``lost`` = ids the source acknowledged never seen at the
  target, ``duplicates`` = copies beyond the first, ``unacked_copied`` = ids sent but not
  acknowledged that arrived all the same (not a loss, not a duplicate). RabbitMQ's
  target queue is read once after the node is back (consumed and acked), not during.

Prints the machine, one JSON line per set-up and run, the medians and per-run ratios
(to the gateway), and writes everything to ``bench/results/``. Everything started is
stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.connector_peers import Connector, MosquittoBridge
from bench.peers import ROOT, Gateway, Mosquitto, RabbitMQ
from tests.gateway.connector.cut_relay import RelayProcess

BODY_SIZE = 100
QUEUES = 4
TOPIC = "bench"
SETUPS = ["gateway", "mosquitto", "rabbitmq"]


def body(mid: str) -> bytes:
    raw = f"{mid} {time.time():.6f} ".encode()
    return raw + b"x" * (BODY_SIZE - len(raw))


def parse(payload: bytes) -> tuple[str, float]:
    mid, sent, _ = payload.split(b" ", 2)
    return mid.decode(), float(sent)


class Received:
    """Every copy the target consumer got: (id, send time, receipt time); thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, float, float]] = []

    def add(self, payload: bytes) -> None:
        now = time.time()
        mid, sent = parse(payload)
        with self.lock:
            self.items.append((mid, sent, now))

    def of(self, prefix: str) -> list[tuple[str, float, float]]:
        with self.lock:
            return [x for x in self.items if x[0].startswith(prefix)]

    def ids(self, prefix: str) -> set[str]:
        return {x[0] for x in self.of(prefix)}


class Setup:
    """One source -> bridge -> target chain: started, measured, stopped."""

    name = ""
    got: Received
    relay: RelayProcess

    async def start(self, work: Path) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def publish(self, mids: list[str], *, inflight: int) -> list[str]:
        """Publish flat out with ``inflight`` unacknowledged at most; the ids acked.
        (Here: ``inflight`` workers, each awaiting one :meth:`publish_one` at a time.)"""
        acked: list[str] = []
        it = iter(mids)

        async def worker() -> None:
            for mid in it:
                if await self.publish_one(mid):
                    acked.append(mid)

        await asyncio.gather(*(worker() for _ in range(inflight)))
        return acked

    async def publish_one(self, mid: str) -> bool:
        """Publish one; True once the source acknowledged it, False if it failed (the
        source is down: the caller moves on to a new id)."""
        raise NotImplementedError

    async def kill_bridge(self) -> None:
        raise NotImplementedError

    async def before_kills(self) -> None:
        pass

    async def after_kills(self) -> None:
        pass


# -- gateway -> connector -> gateway ------------------------------------------------------


class AdvertisedGateway(Gateway):
    """A gateway whose route replies name ``advertised`` as the broker address."""

    advertised = ""

    def _command(self) -> tuple[list[str], dict[str, str]]:
        cmd, env = super()._command()
        if self.advertised:
            cmd += ["--advertised-address", self.advertised]
        return cmd, env


class GatewaySetup(Setup):
    name = "gateway"

    async def start(self, work: Path) -> None:
        from gateway.clients import Producer, RemotingClient

        self.got = Received()
        self.a, self.b = Gateway(work / "a"), AdvertisedGateway(work / "b")
        self.a.start()
        self.b.start()
        self.relay = RelayProcess(self.b.remoting_port or 0)
        # b's routes name the relay as the broker address: the connector's sends go
        # through it too, not only its route lookups
        self.b.advertised = f"127.0.0.1:{self.relay.port}"
        self.b.stop()
        self.b.start(fresh=False)
        rules = work / "rules.toml"
        rules.write_text(
            f'heartbeat_interval = 0\nretry_initial = 0.05\nretry_max = 0.5\n'
            f'[clusters.a]\nkind = "gateway"\nendpoints = ["127.0.0.1:{self.a.remoting_port}"]\n'
            f'[clusters.b]\nkind = "gateway"\nendpoints = ["127.0.0.1:{self.relay.port}"]\n'
            f'[[rules]]\nname = "bench"\nsource = "a"\ntopic = "{TOPIC}"\ntarget = "b"\n'
            'start = "earliest"\nbatch_size = 32\n'
        )  # fmt: skip
        self.conn = Connector(rules, work / "connector.log")
        self.conn.start()
        self.client = RemotingClient(f"127.0.0.1:{self.a.remoting_port}", timeout=5.0)
        self.producer = Producer(self.client, "bench-producers", timeout=5.0)
        self.turn = 0
        self.stop_reading = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        from gateway.clients import PullConsumer, RemotingClient

        async with RemotingClient(f"127.0.0.1:{self.b.remoting_port}", timeout=5.0) as client:
            consumer = PullConsumer(client, "bench-readers", timeout=5.0)
            while True:
                try:
                    queues = (await client.route(TOPIC, refresh=True)).read_queues
                    if queues:
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.02)

            async def one(mq: Any) -> None:
                offset = 0
                while not self.stop_reading.is_set():
                    try:
                        result = await consumer.pull(mq, offset, max_nums=256, suspend_ms=500)
                    except Exception:
                        await asyncio.sleep(0.05)
                        continue
                    for m in result.messages:
                        self.got.add(m.body)
                    if result.messages:
                        offset = result.next_begin_offset

            await asyncio.gather(*(one(mq) for mq in queues))

    async def publish_one(self, mid: str) -> bool:
        q = self.turn % QUEUES
        self.turn += 1
        try:
            await self.producer.send(TOPIC, body(mid), queue_id=q)
            return True
        except Exception:
            return False

    async def kill_bridge(self) -> None:
        await asyncio.to_thread(self.conn.kill)
        await asyncio.to_thread(self.conn.start)

    async def stop(self) -> None:
        self.stop_reading.set()
        self.reader.cancel()
        await self.client.close()
        self.conn.stop()
        self.relay.stop()
        self.b.stop()
        self.a.stop()


# -- mosquitto A (bridge) -> mosquitto B ---------------------------------------------------


class BridgeA(MosquittoBridge):
    """Mosquitto A with its bridge to B (through the relay), persistence on."""

    name = "mosquitto-a"
    persistence = True

    def _prepare(self) -> None:
        Mosquitto._prepare(self)
        conf = self.data_dir / "mosquitto.conf"
        conf.write_text(conf.read_text() + "\n".join([
            "connection to-b",
            f"address 127.0.0.1:{self.remote_port}",
            f"topic {TOPIC}/# out 1",
            "cleansession false",
            "restart_timeout 1",
            "bridge_protocol_version mqttv311",
        ]) + "\n")  # fmt: skip


class MosquittoB(Mosquitto):
    name = "mosquitto-b"
    persistence = True


class MqttPublisher:
    """A paho client at A; reconnects when A died."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.c = self._connect()

    def _connect(self) -> mqtt.Client:
        deadline = time.monotonic() + 30
        while True:
            c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv311)
            c.max_inflight_messages_set(1000)
            c.max_queued_messages_set(0)
            try:
                c.connect("127.0.0.1", self.port, keepalive=30)
                c.loop_start()
                return c
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def reconnect(self) -> None:
        self.c.loop_stop()
        self.c = self._connect()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


class MosquittoSetup(Setup):
    name = "mosquitto"

    async def start(self, work: Path) -> None:
        self.got = Received()
        self.bb = MosquittoB(work)
        assert self.bb.available() is None, "mosquitto is not installed"
        self.bb.start()
        self.relay = RelayProcess(self.bb.mqtt_port or 0)
        self.aa = BridgeA(work, self.relay.port)
        self.aa.available()
        self.aa.start()
        self.sub = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id="bench-sub",
            clean_session=False,
            protocol=mqtt.MQTTv311,
        )
        self.sub.on_message = lambda c, u, m: self.got.add(bytes(m.payload))
        self.sub.on_connect = lambda c, u, f, rc, p=None: c.subscribe(f"{TOPIC}/#", qos=1)
        self.sub.max_inflight_messages_set(1000)
        self.sub.connect("127.0.0.1", self.bb.mqtt_port or 0)
        self.sub.loop_start()
        self.pub = MqttPublisher(self.aa.mqtt_port or 0)

    def _publish_sync(self, mid: str) -> bool:
        try:
            info = self.pub.c.publish(f"{TOPIC}/1", body(mid), qos=1)
            info.wait_for_publish(3)
            if info.is_published():
                return True
        except (RuntimeError, ValueError):
            pass
        self.pub.reconnect()  # unknown whether A got it: a new id next time
        return False

    async def publish_one(self, mid: str) -> bool:
        return await asyncio.to_thread(self._publish_sync, mid)

    async def publish(self, mids: list[str], *, inflight: int) -> list[str]:
        def run() -> list[str]:
            window: list[tuple[str, mqtt.MQTTMessageInfo]] = []
            acked: list[str] = []
            for mid in mids:
                window.append((mid, self.pub.c.publish(f"{TOPIC}/1", body(mid), qos=1)))
                if len(window) >= inflight:
                    m, info = window.pop(0)
                    info.wait_for_publish(10)
                    if info.is_published():
                        acked.append(m)
            for m, info in window:
                info.wait_for_publish(10)
                if info.is_published():
                    acked.append(m)
            return acked

        return await asyncio.to_thread(run)

    async def kill_bridge(self) -> None:
        self.aa.kill9()
        await asyncio.to_thread(self.aa.start, False)

    async def stop(self) -> None:
        self.pub.close()
        self.sub.disconnect()
        self.sub.loop_stop()
        self.aa.stop()
        self.relay.stop()
        self.bb.stop()


# -- RabbitMQ: vhost va -> shovel -> vhost vb -----------------------------------------------


class ShovelNode(RabbitMQ):
    """A RabbitMQ node of the bench's own with ``rabbitmq_shovel`` enabled (its own
    ``enabled_plugins`` file), AMQP only."""

    name = "rabbitmq-shovel"
    speaks_mqtt = False

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "RABBITMQ_ENABLED_PLUGINS": "rabbitmq_shovel"}

    def _prepare(self) -> None:
        super()._prepare()
        d = self.data_dir
        (d / "enabled_plugins").write_text("[rabbitmq_shovel].\n")
        (d / "rabbitmq.conf").write_text("\n".join([
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}",
            "loopback_users = none",
            "vm_memory_high_watermark.relative = 0.6",
            "disk_free_limit.absolute = 50MB",
            "log.console = false",
        ]) + "\n")  # fmt: skip

    def _wait_ready(self) -> None:
        from bench.peers import wait_accepts

        assert self.amqp_port
        wait_accepts(self.amqp_port, self.start_timeout, self.proc)

    def ctl(self, *args: str) -> str:
        env = {**os.environ, **self._env_cache}
        out = subprocess.run(
            [str(self.CTL), "-n", self.node, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if out.returncode:
            raise RuntimeError(f"rabbitmqctl {args}: {out.stdout} {out.stderr}")
        return out.stdout


class RabbitSetup(Setup):
    name = "rabbitmq"

    async def start(self, work: Path) -> None:
        self.got = Received()
        self.node = ShovelNode(work)
        assert self.node.available() is None, "rabbitmq-server is not installed"
        self.node.start()
        self.relay = RelayProcess(self.node.amqp_port or 0)
        for vhost in ("va", "vb"):
            self.node.ctl("add_vhost", vhost)
            self.node.ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        await self._declare()
        self.node.ctl("set_parameter", "-p", "va", "shovel", "qa-to-qb", json.dumps({
            "src-protocol": "amqp091", "src-uri": "amqp:///va", "src-queue": "qa",
            "dest-protocol": "amqp091",
            "dest-uri": f"amqp://guest:guest@127.0.0.1:{self.relay.port}/vb",
            "dest-queue": "qb", "ack-mode": "on-confirm",
        }))  # fmt: skip
        self.pub_conn: Any = None
        self.pub_ch: Any = None
        self.consumer: asyncio.Future[None] | None = asyncio.ensure_future(self._consume())

    def url(self, vhost: str) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.node.amqp_port}/{vhost}"

    async def _declare(self) -> None:
        import aiormq

        for vhost, queue in (("va", "qa"), ("vb", "qb")):
            c = await aiormq.connect(self.url(vhost))
            ch = await c.channel()
            await ch.queue_declare(queue, durable=True)
            await c.close()

    async def _consume(self) -> None:
        import aiormq

        c = await aiormq.connect(self.url("vb"))
        try:
            ch = await c.channel()
            await ch.basic_qos(prefetch_count=1000)

            async def on(m: Any) -> None:
                self.got.add(m.body)
                await ch.basic_ack(m.delivery.delivery_tag)

            await ch.basic_consume("qb", on)
            await asyncio.Future()
        finally:
            await c.close()

    async def _channel(self) -> Any:
        import aiormq

        if self.pub_ch is None or self.pub_ch.is_closed:
            deadline = time.monotonic() + 120
            while True:
                try:
                    self.pub_conn = await aiormq.connect(self.url("va"))
                    self.pub_ch = await self.pub_conn.channel(publisher_confirms=True)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        return self.pub_ch

    async def publish_one(self, mid: str) -> bool:
        from pamqp import commands as spec

        try:
            ch = await self._channel()
            confirm = await asyncio.wait_for(
                ch.basic_publish(
                    body(mid),
                    routing_key="qa",
                    properties=spec.Basic.Properties(delivery_mode=2, message_id=mid),
                ),
                5,
            )
            return isinstance(confirm, spec.Basic.Ack)
        except Exception:
            self.pub_ch = None
            return False

    async def publish(self, mids: list[str], *, inflight: int) -> list[str]:
        await self._channel()
        return await super().publish(mids, inflight=inflight)

    async def before_kills(self) -> None:
        assert self.consumer is not None
        self.consumer.cancel()
        self.consumer = None

    async def kill_bridge(self) -> None:
        self.node.kill9()
        self.pub_ch = None
        await asyncio.to_thread(self.node.start, False)

    async def after_kills(self) -> None:
        self.consumer = asyncio.ensure_future(self._consume_retrying())

    async def _consume_retrying(self) -> None:
        while True:
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.cancel()
        if self.pub_conn is not None:
            try:
                await asyncio.wait_for(self.pub_conn.close(), 5)
            except Exception:
                pass
        self.relay.stop()
        self.node.stop()


# -- the measurement, the same for every set-up -------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def settle(got: Received, prefix: str, quiet: float, timeout: float) -> None:
    """Until no new copy of ``prefix`` arrived for ``quiet`` s (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = len(got.of(prefix))
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        await asyncio.sleep(0.1)


async def paced(
    setup: Setup, prefix: str, rate: float, count: int, before: Callable[[int], Any] | None = None
) -> list[str]:
    """``count`` publishes, one at a time, at ``rate``/s (a publish that fell behind goes
    at once); a failed one's id is never reused. ``before(i)`` is awaited before the
    ``i``-th. Returns the ids the source acknowledged."""
    acked: list[str] = []
    start = time.monotonic()
    for i in range(count):
        if before is not None:
            await before(i)
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        mid = f"{prefix}{i}"
        if await setup.publish_one(mid):
            acked.append(mid)
    return acked


async def measure(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    got = setup.got
    out: dict[str, Any] = {"setup": setup.name}
    # warm-up: the chain is up end to end, the target's consumer attached
    ok = await setup.publish_one("W0")
    assert ok and await wait_for(lambda: "W0" in got.ids("W"), 60), f"{setup.name}: no warm-up"

    # backlog
    setup.relay.cut()
    mids = [f"B{i}" for i in range(args.backlog)]
    acked = await setup.publish(mids, inflight=8)
    setup.relay.restore()
    await wait_for(lambda: len(got.ids("B")) >= len(acked), 300)
    items = got.of("B")
    first, last = min(x[2] for x in items), max(x[2] for x in items)
    out["backlog_acked"] = len(acked)
    out["backlog_copied"] = len(got.ids("B"))
    out["backlog_msgs_per_s"] = round((len(items) - 1) / (last - first), 1)

    # steady: publishing flat out for --steady seconds
    t0 = time.time()
    acked_s: list[str] = []
    n = 0

    async def flat_out() -> None:
        nonlocal n
        while time.time() - t0 < args.steady:
            chunk = [f"S{n + i}" for i in range(200)]
            n += 200
            acked_s.extend(await setup.publish(chunk, inflight=8))

    await flat_out()
    t1 = time.time()
    await wait_for(lambda: len(got.ids("S")) >= len(acked_s), 300)
    items = got.of("S")
    out["steady_published_per_s"] = round(len(acked_s) / (t1 - t0), 1)
    out["steady_copied_per_s"] = round(len(items) / (max(x[2] for x in items) - t0), 1)

    # delay at a fixed rate
    acked_d = await paced(setup, "D", args.rate, int(args.rate * args.seconds))
    await wait_for(lambda: len(got.ids("D")) >= len(acked_d), 60)
    d = [(recv - sent) * 1000 for _, sent, recv in got.of("D")]
    out["delay_sent"] = len(acked_d)
    out["delay_p50_ms"] = round(pct(d, 50), 2)
    out["delay_p99_ms"] = round(pct(d, 99), 2)
    out["delay_max_ms"] = round(max(d), 2)

    # kill -9 of the bridging process under load
    await setup.before_kills()
    kills_at = {int(args.rate * (1.0 + 2.0 * k)) for k in range(args.kills)}

    async def maybe_kill(i: int) -> None:
        if i in kills_at:
            await setup.kill_bridge()

    attempts = int(args.rate * (2.0 * args.kills + 1.0))
    acked_k = await paced(setup, "K", args.rate, attempts, maybe_kill)
    await setup.after_kills()
    acked_set = set(acked_k)
    await wait_for(lambda: acked_set <= got.ids("K"), 60)
    await settle(got, "K", quiet=2.0, timeout=30)
    items = got.of("K")
    seen = [x[0] for x in items]
    distinct = set(seen)
    out["kill_kills"] = args.kills
    out["kill_attempts"] = attempts
    out["kill_acked"] = len(acked_set)
    out["kill_lost"] = len(acked_set - distinct)
    out["kill_duplicates"] = len(seen) - len(distinct)
    out["kill_unacked_copied"] = len(distinct - acked_set)
    return out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["mem_gb"] = round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1)
        info["load_at_start"] = os.getloadavg()
    except OSError:
        pass
    for name, cls in (("mosquitto", Mosquitto), ("rabbitmq", RabbitMQ)):
        b = cls(Path("/tmp"))
        b.available()
        info[name] = b.version
    info["gateway"] = Gateway(Path("/tmp")).version
    return info


FIGURES = [
    "backlog_msgs_per_s",
    "steady_published_per_s",
    "steady_copied_per_s",
    "delay_p50_ms",
    "delay_p99_ms",
    "delay_max_ms",
    "kill_acked",
    "kill_lost",
    "kill_duplicates",
    "kill_unacked_copied",
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=10000)
    parser.add_argument("--steady", type=float, default=5.0, help="s of flat-out publishing")
    parser.add_argument("--rate", type=float, default=200.0, help="publishes/s for the delay")
    parser.add_argument("--seconds", type=float, default=10.0, help="s of the delay phase")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--only", default=",".join(SETUPS))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lmq-bench-connector-compare"))
    args = parser.parse_args()
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)  # its reconnect noise
    names = args.only.split(",")
    info = machine()
    print(
        json.dumps({"machine": info, "args": {k: str(v) for k, v in vars(args).items()}}),
        flush=True,
    )
    classes: dict[str, type[Setup]] = {
        "gateway": GatewaySetup,
        "mosquitto": MosquittoSetup,
        "rabbitmq": RabbitSetup,
    }
    results: list[dict[str, Any]] = []
    for run in range(args.runs):
        order = names[run % len(names) :] + names[: run % len(names)]
        for name in order:
            setup = classes[name]()
            work = args.workdir / f"run{run}" / name
            work.mkdir(parents=True, exist_ok=True)
            try:
                await setup.start(work)
                result = await measure(setup, args)
            finally:
                await setup.stop()
            result["run"] = run
            print(json.dumps(result), flush=True)
            results.append(result)
    medians = {
        name: {k: statistics.median(r[k] for r in results if r["setup"] == name) for k in FIGURES}
        for name in names
    }
    ratios: dict[str, dict[str, list[float]]] = {}
    if "gateway" in names:
        for name in names:
            if name == "gateway":
                continue
            ratios[f"gateway/{name}"] = {
                k: [
                    round(g[k] / o[k], 2) if o[k] else float("nan")
                    for g, o in zip(
                        [r for r in results if r["setup"] == "gateway"],
                        [r for r in results if r["setup"] == name],
                        strict=True,
                    )
                ]
                for k in (
                    "backlog_msgs_per_s",
                    "steady_copied_per_s",
                    "delay_p50_ms",
                    "delay_p99_ms",
                )
            }
    print(json.dumps({"medians": medians}), flush=True)
    print(json.dumps({"ratios": ratios}), flush=True)
    out = ROOT / "bench" / "results" / f"connector-compare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {"machine": info, "results": results, "medians": medians, "ratios": ratios}, indent=1
        )
        + "\n"
    )
    print(f"written {out.relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
