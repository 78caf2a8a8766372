"""The connector against real MQTT and AMQP peers under kill -9, by hand (issue 19):

    python -m bench.connector_peers [--kills 20] [--messages 3000] [--only mqtt,amqp,bridge]

Scenarios (each: a publisher at a steady rate, the bridging process SIGKILLed ``--kills``
times at random moments 0.4-1.2 s apart and restarted, then everything drained):

* ``mqtt``: mosquitto -> ``lmq connector run`` -> a gateway. Loss = messages the broker
  PUBACKed to the publisher that the gateway never stored; duplicates = stored more than
  once (the dedup window should leave none); order = inversions in the gateway's queue.
* ``amqp``: rabbitmq-server queue -> ``lmq connector run`` -> a gateway (message-id set).
* ``amqp-out``: a gateway -> ``lmq connector run`` -> a rabbitmq-server queue (publisher
  confirms): loss and duplicates in the queue, where nothing can dedupe.
* ``mqtt2mqtt``: mosquitto A -> ``lmq connector run`` -> mosquitto B, the connector
  SIGKILLed: loss and duplicates at a persistent subscriber of B (MQTT cannot dedupe).
* ``*-outage``: the same two with the link to B cut for 4 s (a TCP proxy; B and its
  subscriber stay up) and the first kill inside that cut: a bridge's buffer is largest
  then.
* ``bridge``: what a Mosquitto bridge does with the same chaos: mosquitto A (the bridge,
  ``topic sensors/# out 1``, ``cleansession false``, persistence off as shipped) ->
  mosquitto B, A SIGKILLed and restarted (the bridging process); the publisher to A
  retries what was not PUBACKed. Loss and duplicates counted at a persistent subscriber of B.

Prints one JSON object per scenario and writes them to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.peers import ROOT, Gateway, Mosquitto, RabbitMQ
from tests.gateway.connector.connector_support import ConnectorProcess, peer_rules, pull_all
from tests.gateway.connector.cut_relay import CutRelay


class Connector(ConnectorProcess):
    """``lmq connector run`` (tests/gateway/connector/connector_support.py's harness),
    its output written to ``log`` when it stops or is killed."""

    def __init__(self, rules: Path, log: Path) -> None:
        super().__init__(rules)
        self.log = log

    def _close(self) -> None:
        self.log.write_text("".join(self.output))
        super()._close()


class MosquittoBridge(Mosquitto):
    name = "mosquitto-bridge"

    def __init__(self, workdir: Path, remote_port: int) -> None:
        super().__init__(workdir)
        self.remote_port = remote_port

    def _prepare(self) -> None:
        super()._prepare()
        conf = self.data_dir / "mosquitto.conf"
        conf.write_text(conf.read_text() + "\n".join([
            "connection to-b",
            f"address 127.0.0.1:{self.remote_port}",
            "topic sensors/# out 1",
            "cleansession false",
            "restart_timeout 1",
            "bridge_protocol_version mqttv311",
        ]) + "\n")


class Publisher(threading.Thread):
    """QoS 1 publishes of ``m0``..``m{n-1}`` at ``rate``/s; a publish not PUBACKed (the
    broker died) is retried on a new connection, so every message is PUBACKed once."""

    def __init__(self, port: int, n: int, rate: float, topic: str = "sensors/1") -> None:
        super().__init__(daemon=True)
        self.port, self.n, self.rate, self.topic = port, n, rate, topic
        self.acked = 0
        self.retries = 0

    def _client(self) -> mqtt.Client:
        while True:
            c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv311)
            try:
                c.connect("127.0.0.1", self.port, keepalive=30)
                c.loop_start()
                return c
            except OSError:
                time.sleep(0.1)

    def run(self) -> None:
        c = self._client()
        t0 = time.perf_counter()
        i = 0
        while i < self.n:
            try:
                info = c.publish(self.topic, f"m{i}".encode(), qos=1)
                info.wait_for_publish(3)
                published = info.is_published()
            except (RuntimeError, ValueError):  # not connected: the broker died
                published = False
            if published:
                self.acked += 1
                i += 1
                delay = t0 + i / self.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                continue
            # Unknown whether the broker got it before it died: sent again on a new
            # connection (a duplicate then is the publisher's, counted in retries).
            self.retries += 1
            c.loop_stop()
            c = self._client()
        c.disconnect()
        c.loop_stop()


def _counts(bodies: list[bytes], n: int) -> dict[str, Any]:
    numbers = [int(b[1:]) for b in bodies]
    distinct = set(numbers)
    inversions = sum(1 for a, b in zip(numbers, numbers[1:], strict=False) if b < a)
    first = list(dict.fromkeys(numbers))
    first_inversions = sum(1 for a, b in zip(first, first[1:], strict=False) if b < a)
    missing = sorted(set(range(n)) - distinct)
    runs: list[list[int]] = []
    for m in missing:
        if runs and runs[-1][1] == m - 1:
            runs[-1][1] = m
        else:
            runs.append([m, m])
    return {"expected": n, "received": len(numbers), "lost": n - len(distinct & set(range(n))),
            "duplicates": len(numbers) - len(distinct), "order_inversions": inversions,
            "first_receipt_inversions": first_inversions,
            "missing_runs": [f"m{a}-m{b}" if a != b else f"m{a}" for a, b in runs[:10]]}


def _chaos(kill: Any, start: Any, kills: int) -> None:
    for _ in range(kills):
        time.sleep(random.uniform(0.4, 1.2))
        kill()
        start()


def _drain_gateway(namesrv: str, topic: str, n: int, timeout: float) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        bodies = [m.body for m in sorted(asyncio.run(pull_all(namesrv, topic, max_nums=256)),
                                         key=lambda m: (m.queue_id, m.queue_offset))]
        if len(set(bodies)) >= n or time.monotonic() > deadline:
            return bodies
        time.sleep(0.5)


def run_mqtt(work: Path, kills: int, n: int, rate: float) -> dict[str, Any]:
    gw, mosq = Gateway(work), Mosquitto(work)
    assert mosq.available() is None
    gw.start()
    mosq.start()
    rules = peer_rules(work / "mqtt.toml", f'[clusters.mosq]\nkind = "mqtt"\nendpoints = '
                       f'["127.0.0.1:{mosq.mqtt_port}"]\nclient_id = "bench"\n',
                       '[[rules]]\nname = "in"\nsource = "mosq"\nfilter = "sensors/#"\n'
                       'target = "gw"\nbatch_size = 32\nwait_ms = 100\n', gw.remoting_port or 0)
    conn = Connector(rules, work / "connector-mqtt.log")
    try:
        conn.start()
        time.sleep(2.0)  # the session and its subscription exist (nothing to await here)
        pub = Publisher(mosq.mqtt_port or 0, n, rate)
        t0 = time.perf_counter()
        pub.start()
        _chaos(conn.kill, conn.start, kills)
        pub.join()
        bodies = _drain_gateway(f"127.0.0.1:{gw.remoting_port}", "sensors", n, 60)
        took = time.perf_counter() - t0
    finally:
        conn.stop()
        gw.stop()
        mosq.stop()
    return {"scenario": "mqtt -> connector -> gateway", "kills": kills, "seconds": round(took, 1),
            "publisher_retries": pub.retries, **_counts(bodies, n)}


def run_amqp(work: Path, kills: int, n: int, rate: float) -> dict[str, Any]:
    import aiormq
    from pamqp import commands as spec

    gw, rabbit = Gateway(work), RabbitMQ(work)
    assert rabbit.available() is None
    gw.start()
    rabbit.start()
    url = f"amqp://guest:guest@127.0.0.1:{rabbit.amqp_port}/"

    async def declare() -> None:
        c = await aiormq.connect(url)
        ch = await c.channel()
        await ch.queue_declare("jobs", durable=True)
        await c.close()

    async def publish() -> None:
        c = await aiormq.connect(url)
        ch = await c.channel()
        t0 = time.perf_counter()
        for i in range(n):
            await ch.basic_publish(f"m{i}".encode(), routing_key="jobs",
                                   properties=spec.Basic.Properties(delivery_mode=2,
                                                                    message_id=f"job-{i}"))
            delay = t0 + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await c.close()

    rules = peer_rules(work / "amqp.toml", f'[clusters.rabbit]\nkind = "amqp"\nendpoints = '
                       f'["127.0.0.1:{rabbit.amqp_port}"]\nprefetch = 200\n',
                       '[[rules]]\nname = "in"\nsource = "rabbit"\nqueue = "jobs"\n'
                       'target = "gw"\ntarget_topic = "jobs"\nbatch_size = 32\nwait_ms = 100\n',
                       gw.remoting_port or 0)
    conn = Connector(rules, work / "connector-amqp.log")
    try:
        asyncio.run(declare())
        conn.start()
        t0 = time.perf_counter()
        publisher = threading.Thread(target=lambda: asyncio.run(publish()), daemon=True)
        publisher.start()
        _chaos(conn.kill, conn.start, kills)
        publisher.join()
        bodies = _drain_gateway(f"127.0.0.1:{gw.remoting_port}", "jobs", n, 60)
        took = time.perf_counter() - t0
    finally:
        conn.stop()
        gw.stop()
        rabbit.stop()
    return {"scenario": "rabbitmq -> connector -> gateway", "kills": kills,
            "seconds": round(took, 1), **_counts(bodies, n)}


def run_amqp_out(work: Path, kills: int, n: int, rate: float) -> dict[str, Any]:
    """A gateway -> ``lmq connector run`` -> a rabbitmq-server queue (publisher confirms),
    the connector SIGKILLed: loss and duplicates in the queue (AMQP cannot dedupe)."""
    import aiormq
    from pamqp import commands as spec

    from gateway.clients.remoting import Producer, RemotingClient

    gw, rabbit = Gateway(work), RabbitMQ(work)
    assert rabbit.available() is None
    gw.start()
    rabbit.start()
    url = f"amqp://guest:guest@127.0.0.1:{rabbit.amqp_port}/"
    namesrv = f"127.0.0.1:{gw.remoting_port}"

    async def declare() -> None:
        c = await aiormq.connect(url)
        ch = await c.channel()
        await ch.queue_declare("out", durable=True)
        await c.close()

    async def publish() -> None:
        async with RemotingClient(namesrv) as client:
            producer = Producer(client, "bench-out")
            t0 = time.perf_counter()
            for i in range(n):
                await producer.send("out", f"m{i}".encode())
                delay = t0 + (i + 1) / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)

    async def drain(deadline: float) -> list[bytes]:
        got: list[bytes] = []
        c = await aiormq.connect(url)
        ch = await c.channel()
        while time.monotonic() < deadline:
            msg = await ch.basic_get("out", no_ack=True)
            if not isinstance(msg.delivery, spec.Basic.GetOk):  # GetEmpty: nothing there
                if len({b for b in got if b.startswith(b"m")}) >= n:
                    break
                await asyncio.sleep(0.2)
                continue
            got.append(bytes(msg.body))
        await c.close()
        return got

    rules = peer_rules(work / "amqp-out.toml", f'[clusters.rabbit]\nkind = "amqp"\n'
                       f'endpoints = ["127.0.0.1:{rabbit.amqp_port}"]\nexchange = ""\n',
                       '[[rules]]\nname = "out"\nsource = "gw"\ntopic = "out"\n'
                       'target = "rabbit"\ntarget_topic = "out"\nbatch_size = 32\n'
                       'wait_ms = 100\n', gw.remoting_port or 0)
    conn = Connector(rules, work / "connector-amqp-out.log")
    try:
        asyncio.run(declare())
        # the topic exists before the rule starts ("latest" then covers every send)
        asyncio.run(_send_one(namesrv))
        conn.start()
        time.sleep(2.0)  # the rule resolves "latest" before the first send counts
        t0 = time.perf_counter()
        publisher = threading.Thread(target=lambda: asyncio.run(publish()), daemon=True)
        publisher.start()
        _chaos(conn.kill, conn.start, kills)
        publisher.join()
        drained = asyncio.run(drain(time.monotonic() + 60))
        bodies = [b for b in drained if b.startswith(b"m")]
        others = len(drained) - len(bodies)
        took = time.perf_counter() - t0
    finally:
        conn.stop()
        gw.stop()
        rabbit.stop()
    return {"scenario": "gateway -> connector -> rabbitmq", "kills": kills,
            "seconds": round(took, 1), "not_ours": others, **_counts(bodies, n)}


async def _send_one(namesrv: str) -> None:
    from gateway.clients.remoting import Producer, RemotingClient

    async with RemotingClient(namesrv) as client:
        await Producer(client, "bench-out").send("out", b"warm-up")


def _subscriber(port: int, got: list[bytes], lock: threading.Lock) -> mqtt.Client:
    """A persistent QoS 1 subscriber of B (paho reconnects it when B comes back)."""
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-sub", clean_session=False,
                      protocol=mqtt.MQTTv311)

    def on_message(c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        with lock:
            got.append(bytes(m.payload))

    def on_connect(c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        c.subscribe("sensors/#", qos=1)

    sub.on_message = on_message
    sub.on_connect = on_connect
    sub.reconnect_delay_set(0.2, 1)
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    return sub


def _drain_list(got: list[bytes], lock: threading.Lock, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with lock:
            if len(set(got)) >= n:
                return
        time.sleep(0.5)


def run_a_to_b(work: Path, kills: int, n: int, rate: float, *, bridge: bool,
               outage: bool) -> dict[str, Any]:
    """mosquitto A -> (the connector | A's own bridge) -> mosquitto B; the bridging
    process (the connector | A) SIGKILLed ``kills`` times. With ``outage``, the link to B
    (a proxy: B and its subscriber stay up) is cut from 2 s to 6 s into the run and the
    first kill falls inside the cut, as a bridge's buffer is largest then."""
    b = Mosquitto(work / "b")
    assert b.available() is None
    b.start()
    link = CutRelay(b.mqtt_port or 0)  # the bridging process reaches B through it
    a: Mosquitto = MosquittoBridge(work / "a", link.port) if bridge else Mosquitto(work / "a")
    a.available()
    a.start()
    got: list[bytes] = []
    lock = threading.Lock()
    sub = _subscriber(b.mqtt_port or 0, got, lock)
    conn: Connector | None = None
    try:
        if bridge:
            kill, start = a.kill9, (lambda: a.start(fresh=False))
        else:
            rules = peer_rules(work / "m2m.toml", f'[clusters.a]\nkind = "mqtt"\nendpoints = '
                           f'["127.0.0.1:{a.mqtt_port}"]\nclient_id = "bench"\n'
                           f'[clusters.b]\nkind = "mqtt"\nendpoints = '
                           f'["127.0.0.1:{link.port}"]\n',
                           '[[rules]]\nname = "a-to-b"\nsource = "a"\nfilter = "sensors/#"\n'
                           'target = "b"\nbatch_size = 32\nwait_ms = 100\n', None)
            conn = Connector(rules, work / "connector-m2m.log")
            conn.start()
            kill, start = conn.kill, conn.start
        time.sleep(2.0)  # subscribed / bridge connected (nothing to await here)
        pub = Publisher(a.mqtt_port or 0, n, rate)
        t0 = time.perf_counter()
        pub.start()
        if outage:
            time.sleep(2.0)
            link.cut()
            time.sleep(2.0)
            kill()
            start()
            time.sleep(2.0)
            link.restore()
            kills -= 1
        _chaos(kill, start, kills)
        pub.join()
        _drain_list(got, lock, n, 30)
        took = time.perf_counter() - t0
    finally:
        if conn is not None:
            conn.stop()
        sub.loop_stop()
        sub.disconnect()
        a.stop()
        link.stop()
        b.stop()
    with lock:
        bodies = list(got)
    name = "mosquitto bridge (A -> B)" if bridge else "mosquitto A -> connector -> mosquitto B"
    return {"scenario": name + (", link to B cut 4 s" if outage else ""),
            "kills": kills + outage,
            "seconds": round(took, 1), "publisher_retries": pub.retries, **_counts(bodies, n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=200.0, help="publishes a second")
    parser.add_argument(
        "--only", default="mqtt,amqp,mqtt2mqtt,bridge,mqtt2mqtt-outage,bridge-outage")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lmq-bench-connector-peers"))
    args = parser.parse_args()
    results = []
    for name in args.only.split(","):
        work = args.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        runs: dict[str, Any] = {
            "mqtt": run_mqtt, "amqp": run_amqp, "amqp-out": run_amqp_out,
            "mqtt2mqtt": partial(run_a_to_b, bridge=False, outage=False),
            "bridge": partial(run_a_to_b, bridge=True, outage=False),
            "mqtt2mqtt-outage": partial(run_a_to_b, bridge=False, outage=True),
            "bridge-outage": partial(run_a_to_b, bridge=True, outage=True),
        }
        result = runs[name](work, args.kills, args.messages, args.rate)
        print(json.dumps(result), flush=True)
        results.append(result)
    out = ROOT / "bench" / "results" / f"connector-peers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
