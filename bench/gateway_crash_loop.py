"""Gateway crash loop: SIGKILL a running gateway at random moments under mixed load.

    .venv/bin/python bench/gateway_crash_loop.py                  # 20 kills
    .venv/bin/python bench/gateway_crash_loop.py --kills 50 --seed 3 --data-dir /tmp/gcl

A gateway subprocess (``python -m cli.serve``, ``tests/gateway/gateway_process.py``)
serves, on one data directory, all at once:

- MQTT 3.1.1 QoS 1 publishers and QoS 2 publishers (raw clients on our own client
  machine, persistent sessions, a window of packets in flight). A message is recorded
  as acknowledged when its PUBACK (QoS 1) or PUBREC (QoS 2) arrives. After a kill each
  publisher reconnects with clean session = 0 and, as MQTT 4.4 requires, resends every
  unacknowledged PUBLISH with DUP = 1 and its original packet id, and the PUBREL of
  every message that got its PUBREC but not yet its PUBCOMP.
- AMQP 0-9-1 publishers (pika, publisher confirms) to the durable queue ``cl-amqp``; a
  message is recorded when ``basic_publish`` returns (= confirmed).
- A persistent MQTT subscriber (clean session = 0, one QoS 2 subscription ``cl/#``)
  receiving every MQTT message. It is a QoS 2 receiver of "method B" (MQTT 3.1.1 figure
  4.3): a QoS 2 message is delivered to the application when its PUBLISH first arrives
  and its packet id is kept until the PUBREL; a PUBLISH with a packet id still kept is a
  resend and is not delivered again. Its connection dies with the gateway; it
  reconnects with clean session = 0 (session present is checked) and carries on with
  whatever the gateway resends (PUBLISH or PUBREL).
- An AMQP consumer (manual acks) on ``cl-amqp``, which is also bound to ``amq.topic``
  with ``cl.#``: it receives every AMQP message and a copy of every MQTT message
  (cross-protocol routing).

The harness kills the gateway with SIGKILL after a random 1-3 s of load, opens the
store read-only while the gateway is down and records every LMQ's ``max_offset``, then
restarts the gateway on the same directory (timing the start until ``ready``) and the
clients reconnect by themselves. After the last kill the publishers complete their
flows, both consumers drain, and the harness checks:

- every acknowledged MQTT message (QoS 1 and 2) reached the MQTT subscriber and the AMQP
  queue; every confirmed AMQP message reached the AMQP consumer (lost = 0);
- every message published at QoS 2 was delivered exactly once to the QoS 2 subscriber
  (duplicates = 0), and no QoS 2 PUBLISH reused a packet id the subscriber still held
  for a different message (a method B receiver would drop it: counted as lost);
- an AMQP message delivered again carries ``redelivered``;
- no LMQ's max offset is ever lower than at the previous kill;
- the subscriber's session was present at every reconnect.

Prints kills, acknowledged messages per kind, lost, QoS 2 duplicates, offset
regressions and restart time (SIGKILL -> ``ready``) median and max.
``tests/test_gateway_crash_loop.py`` runs the same loop with a few kills.
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pika  # noqa: E402
import pika.exceptions  # noqa: E402

from protocol.mqtt import (  # noqa: E402
    NEED_DATA,
    Connack,
    Connect,
    Connection,
    ConnectionClosed,
    MQTTVersion,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Role,
    Suback,
    Subscribe,
    Subscription,
)
from tests.gateway.gateway_process import GatewayProcess  # noqa: E402

QUEUE = "cl-amqp"
FILTER = "cl/#"
SUBSCRIBER_ID = "cl-sub"
WINDOW = 16
V311 = MQTTVersion.V3_1_1


# -- where the gateway is now ----------------------------------------------------------


class Target:
    """The current gateway's ports; clients wait here for the next start after a kill."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.ports: dict[str, int] = {}
        self.gen = 0
        self.up = False

    def set_up(self, ports: dict[str, int]) -> None:
        with self.cond:
            self.ports = dict(ports)
            self.gen += 1
            self.up = True
            self.cond.notify_all()

    def set_down(self) -> None:
        with self.cond:
            self.up = False

    def wait(self, stop: threading.Event, timeout: float = 0.5) -> tuple[int, dict[str, int]]:
        """Block until the gateway is up (or ``stop``); returns its generation and ports."""
        with self.cond:
            while not self.up and not stop.is_set():
                self.cond.wait(timeout)
            return self.gen, dict(self.ports)


# -- a raw MQTT client -------------------------------------------------------------------


class Closed(Exception):
    pass


class RawMqtt:
    """A blocking socket driven by our own sans-IO client machine."""

    def __init__(self, port: int, client_id: str, *, clean: bool) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.machine = Connection(Role.CLIENT)
        try:
            self.send(Connect(client_id=client_id, protocol_version=V311, clean_start=clean,
                              keep_alive=60))
            ack = self.recv(5.0)
        except BaseException:
            self.close()
            raise
        if not isinstance(ack, Connack) or ack.reason_code:
            self.close()
            raise Closed(f"CONNACK {ack!r}")
        self.session_present = ack.session_present

    def send(self, packet: Any) -> None:
        try:
            self.sock.sendall(self.machine.send(packet))
        except OSError as exc:
            raise Closed(str(exc)) from exc

    def recv(self, timeout: float) -> Any:
        """The next packet, or None after ``timeout`` seconds without one."""
        self.sock.settimeout(timeout)
        while True:
            try:
                event = self.machine.next_event()
            except Exception as exc:  # a protocol error from a half-written packet
                raise Closed(repr(exc)) from exc
            if isinstance(event, ConnectionClosed):
                raise Closed("closed by the gateway")
            if event is not NEED_DATA:
                return event
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            except OSError as exc:
                raise Closed(str(exc)) from exc
            self.machine.receive_data(data)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# -- load ---------------------------------------------------------------------------------


class Worker(threading.Thread):
    def __init__(self, name: str, target: Target, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.target = target
        self.stop = stop  # the end of the run: give up
        self.finish = threading.Event()  # publish nothing new, complete what is in flight
        self.connects = 0
        self.errors: list[str] = []
        self.done = threading.Event()

    def wait_next(self, used_gen: int) -> tuple[int, dict[str, int]]:
        """After a failure: the next gateway generation (or a short pause if the same
        gateway is still up, e.g. a refused connection during its start)."""
        gen, ports = self.target.wait(self.stop)
        if gen == used_gen:
            time.sleep(0.1)
            gen, ports = self.target.wait(self.stop)
        return gen, ports


class MqttPublisher(Worker):
    """QoS 1 or 2 publisher with a window, persistent session, DUP resends after a kill."""

    def __init__(self, name: str, qos: int, target: Target, stop: threading.Event) -> None:
        super().__init__(name, target, stop)
        self.qos = qos
        self.topic = f"cl/q{qos}/{name}"
        self.acked: list[str] = []
        self.seq = 0
        self.next_pid = 1
        #: packet id -> [payload, "publish" | "pubrel"], in send order
        self.inflight: collections.OrderedDict[int, list[str]] = collections.OrderedDict()
        self.resent_publish = 0
        self.resent_pubrel = 0
        self.extra_acks = 0

    def _pid(self) -> int:
        while True:
            pid = self.next_pid
            self.next_pid = pid % 65535 + 1
            if pid not in self.inflight:
                return pid

    def run(self) -> None:
        gen = 0
        first = True
        try:
            while not self.stop.is_set():
                gen, ports = (
                    self.target.wait(self.stop) if first else self.wait_next(gen)
                )
                first = False
                if self.stop.is_set():
                    break
                try:
                    c = RawMqtt(ports["mqtt"], self.name, clean=False)
                except (OSError, Closed):
                    continue
                self.connects += 1
                try:
                    if self._session(c):
                        break
                except Closed:
                    pass
                finally:
                    c.close()
        finally:
            self.done.set()

    def _session(self, c: RawMqtt) -> bool:
        """Serve one connection; True when finished (nothing in flight after finish)."""
        for pid, (payload, stage) in list(self.inflight.items()):
            if stage == "publish":
                c.send(Publish(topic=self.topic, payload=payload.encode(), qos=self.qos,
                               dup=True, packet_id=pid))
                self.resent_publish += 1
            else:
                c.send(Pubrel(pid))
                self.resent_pubrel += 1
        idle_since = time.monotonic()
        while not self.stop.is_set():
            if self.finish.is_set() and not self.inflight:
                return True
            while not self.finish.is_set() and len(self.inflight) < WINDOW:
                self.seq += 1
                payload = f"q{self.qos}:{self.name}:{self.seq}"
                pid = self._pid()
                self.inflight[pid] = [payload, "publish"]
                c.send(Publish(topic=self.topic, payload=payload.encode(), qos=self.qos,
                               packet_id=pid))
            ev = c.recv(1.0)
            if ev is None:
                if self.inflight and time.monotonic() - idle_since > 10:
                    self.errors.append(f"no ack for 10 s with {len(self.inflight)} in flight")
                    return False  # reconnect and resend
                continue
            idle_since = time.monotonic()
            pid = getattr(ev, "packet_id", None)
            entry = self.inflight.get(pid) if pid is not None else None
            if isinstance(ev, Puback) and self.qos == 1:
                if entry is None:
                    self.extra_acks += 1
                    continue
                if ev.reason_code:
                    self.errors.append(f"PUBACK {ev.reason_code:#x}")
                    continue
                self.acked.append(entry[0])
                del self.inflight[pid]
            elif isinstance(ev, Pubrec) and self.qos == 2:
                if entry is None:
                    self.extra_acks += 1
                    c.send(Pubrel(ev.packet_id))  # MQTT: answer every PUBREC
                    continue
                if entry[1] == "publish":
                    self.acked.append(entry[0])
                    entry[1] = "pubrel"
                c.send(Pubrel(ev.packet_id))
            elif isinstance(ev, Pubcomp) and self.qos == 2:
                if entry is None or entry[1] != "pubrel":
                    self.extra_acks += 1
                    continue
                del self.inflight[pid]
            else:
                self.errors.append(f"unexpected {ev!r}")
        return False


class MqttSubscriber(Worker):
    """The persistent QoS 2 subscriber (method B receiver)."""

    def __init__(self, target: Target, stop: threading.Event) -> None:
        super().__init__(SUBSCRIBER_ID, target, stop)
        self.lock = threading.Lock()
        #: payload -> PUBLISH packets received for it (whatever the receiver made of them)
        self.seen: collections.Counter[str] = collections.Counter()
        #: payload -> times delivered to the application
        self.delivered: collections.Counter[str] = collections.Counter()
        #: payload -> times released by PUBREL (what a "method A" receiver would deliver)
        self.released: collections.Counter[str] = collections.Counter()
        #: QoS 2 packet ids we sent PUBREC for and whose PUBREL has not come: pid -> payload
        self.held: dict[int, str] = {}
        self.dup_flags = 0
        self.resends_recognised = 0
        #: a QoS 2 PUBLISH with a held packet id but another message (pid, held, new)
        self.pid_reuse: list[tuple[int, str, str]] = []
        #: the same QoS 2 message again under another packet id (pid, payload, dup flag)
        self.new_pid_resends: list[tuple[int, str, bool]] = []
        #: of those, messages we still held under their first packet id (its PUBREL had
        #: not come): the gateway resent an unfinished flow under a new packet id
        self.held_resent_new_pid = 0
        self.session_missing = 0
        self.pubrel_unknown = 0
        self.last_delivery = time.monotonic()
        self.subscribed = threading.Event()

    def run(self) -> None:
        gen = 0
        first = True
        try:
            while not self.stop.is_set():
                gen, ports = self.target.wait(self.stop) if first else self.wait_next(gen)
                if self.stop.is_set():
                    break
                try:
                    c = RawMqtt(ports["mqtt"], SUBSCRIBER_ID, clean=False)
                except (OSError, Closed):
                    first = False
                    continue
                self.connects += 1
                try:
                    if first or not c.session_present:
                        if not first:
                            self.session_missing += 1
                        c.send(Subscribe(1, (Subscription(FILTER, qos=2),)))
                    first = False
                    self._serve(c)
                except Closed:
                    pass
                finally:
                    c.close()
        finally:
            self.done.set()

    def _serve(self, c: RawMqtt) -> None:
        while not self.stop.is_set():
            ev = c.recv(0.5)
            if ev is None:
                continue
            if isinstance(ev, Suback):
                if ev.reason_codes != (2,):
                    self.errors.append(f"SUBACK {ev.reason_codes}")
                self.subscribed.set()
            elif isinstance(ev, Publish):
                payload = ev.payload.decode()
                with self.lock:
                    self.seen[payload] += 1
                    self.last_delivery = time.monotonic()
                if ev.dup:
                    self.dup_flags += 1
                if ev.qos == 2:
                    held = self.held.get(ev.packet_id)
                    if held is not None:
                        # a resend: not delivered again (method B)
                        if held == payload:
                            self.resends_recognised += 1
                        else:
                            self.pid_reuse.append((ev.packet_id, held, payload))
                    else:
                        with self.lock:
                            if self.delivered[payload]:
                                self.new_pid_resends.append((ev.packet_id, payload, ev.dup))
                                if payload in self.held.values():
                                    self.held_resent_new_pid += 1
                            self.delivered[payload] += 1
                            self.last_delivery = time.monotonic()
                        self.held[ev.packet_id] = payload
                    c.send(Pubrec(ev.packet_id))
                else:
                    with self.lock:
                        self.delivered[payload] += 1
                        self.last_delivery = time.monotonic()
                    if ev.qos == 1:
                        c.send(Puback(ev.packet_id))
            elif isinstance(ev, Pubrel):
                payload = self.held.pop(ev.packet_id, None)
                if payload is None:
                    self.pubrel_unknown += 1  # a resent PUBREL whose PUBCOMP was lost
                else:
                    with self.lock:
                        self.released[payload] += 1
                c.send(Pubcomp(ev.packet_id))
            else:
                self.errors.append(f"unexpected {ev!r}")


def _amqp(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, connection_attempts=1, socket_timeout=5,
        blocked_connection_timeout=10, heartbeat=0))


def _close(conn: pika.BlockingConnection | None) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass


class AmqpPublisher(Worker):
    """basic.publish with confirms to the durable queue; records confirmed bodies."""

    def __init__(self, name: str, target: Target, stop: threading.Event) -> None:
        super().__init__(name, target, stop)
        self.acked: list[str] = []
        self.nacked = 0
        self.seq = 0

    def run(self) -> None:
        gen = 0
        first = True
        try:
            while not self.stop.is_set() and not self.finish.is_set():
                gen, ports = self.target.wait(self.stop) if first else self.wait_next(gen)
                first = False
                conn = None
                try:
                    conn = _amqp(ports["amqp"])
                    self.connects += 1
                    ch = conn.channel()
                    ch.confirm_delivery()
                    while not self.stop.is_set() and not self.finish.is_set():
                        self.seq += 1
                        body = f"a:{self.name}:{self.seq}"
                        try:
                            ch.basic_publish("", QUEUE, body.encode(),
                                             pika.BasicProperties(delivery_mode=2))
                        except pika.exceptions.NackError:
                            self.nacked += 1
                            continue
                        self.acked.append(body)  # returned = confirmed
                except Exception:
                    pass  # the gateway died under us (or was not up yet)
                finally:
                    _close(conn)
        finally:
            self.done.set()


class AmqpConsumer(Worker):
    """Consumes ``cl-amqp`` with manual acks, across kills."""

    def __init__(self, target: Target, stop: threading.Event) -> None:
        super().__init__("cl-amqp-consumer", target, stop)
        self.lock = threading.Lock()
        self.received: collections.Counter[str] = collections.Counter()
        self.redelivered_flagged = 0
        #: bodies delivered again without the redelivered flag
        self.unflagged_again: list[str] = []
        self.last_delivery = time.monotonic()

    def run(self) -> None:
        gen = 0
        first = True
        try:
            while not self.stop.is_set():
                gen, ports = self.target.wait(self.stop) if first else self.wait_next(gen)
                first = False
                conn = None
                try:
                    conn = _amqp(ports["amqp"])
                    self.connects += 1
                    ch = conn.channel()
                    ch.basic_qos(prefetch_count=200)
                    ch.basic_consume(QUEUE, self._on_message)
                    while not self.stop.is_set():
                        conn.process_data_events(time_limit=0.5)
                except Exception:
                    pass
                finally:
                    _close(conn)
        finally:
            self.done.set()

    def _on_message(self, ch: Any, method: Any, _props: Any, body: bytes) -> None:
        text = body.decode()
        with self.lock:
            if self.received[text]:
                if method.redelivered:
                    self.redelivered_flagged += 1
                else:
                    self.unflagged_again.append(text)
            elif method.redelivered:
                self.redelivered_flagged += 1
            self.received[text] += 1
            self.last_delivery = time.monotonic()
        ch.basic_ack(method.delivery_tag)


# -- offsets ------------------------------------------------------------------------------


def lmq_offsets(data_dir: Path) -> dict[str, int]:
    """Every LMQ's max offset, from a read-only snapshot of the store (gateway down)."""
    from broker_core import MessageStore

    store = MessageStore.open_read_only(data_dir)
    try:
        return {info.name: info.max_offset for info in store.lmqs()}
    finally:
        store.close()


def stored_bodies(data_dir: Path, lmq: str) -> collections.Counter[str]:
    """How many times each body is stored in ``lmq`` (read-only, gateway stopped)."""
    from broker_core import MessageStore

    store = MessageStore.open_read_only(data_dir)
    counts: collections.Counter[str] = collections.Counter()
    try:
        offset = 0
        while True:
            result = store.pull(lmq, offset, max_count=1024)
            for msg in result.messages:
                counts[bytes(msg.record.body).decode()] += 1
            if not result.messages or result.next_offset >= result.max_offset:
                break
            offset = result.next_offset
    finally:
        store.close()
    return counts


# -- the loop -----------------------------------------------------------------------------


@dataclass(slots=True)
class Figures:
    kills: int = 0
    acked_q1: int = 0
    acked_q2: int = 0
    acked_amqp: int = 0
    lost_mqtt_q1: int = 0
    lost_mqtt_q2: int = 0
    lost_amqp: int = 0
    lost_cross: int = 0  # acknowledged MQTT messages missing from the AMQP queue
    q2_duplicates: int = 0
    q1_duplicates: int = 0
    q2_released_twice: int = 0  # method A view: released by PUBREL more than once
    q2_stored_twice: int = 0  # inbound: a QoS 2 message appended more than once
    q2_stored: int = 0
    pid_reuse: int = 0
    q2_dropped_by_receiver: int = 0  # method B: never delivered because of pid reuse
    new_pid_resends: int = 0
    held_resent_new_pid: int = 0
    amqp_redelivered: int = 0
    amqp_unflagged_again: int = 0
    offset_regressions: int = 0
    session_missing: int = 0
    lmqs: int = 0
    restart_s: list[float] = field(default_factory=list)
    duration_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.lost_mqtt_q1 + self.lost_mqtt_q2 + self.lost_amqp + self.lost_cross

    def summary(self) -> str:
        rs = self.restart_s or [0.0]
        return "\n".join([
            f"kills                          {self.kills} ({self.duration_s:.0f} s run)",
            f"acknowledged MQTT QoS 1        {self.acked_q1} (PUBACK)",
            f"acknowledged MQTT QoS 2        {self.acked_q2} (PUBREC)",
            f"confirmed AMQP                 {self.acked_amqp} (basic.ack)",
            f"lost                           {self.lost} (MQTT QoS 1 {self.lost_mqtt_q1},"
            f" QoS 2 {self.lost_mqtt_q2}, AMQP {self.lost_amqp},"
            f" MQTT->AMQP queue {self.lost_cross})",
            f"QoS 2 duplicates               {self.q2_duplicates} (method B receiver;"
            f" released twice by PUBREL: {self.q2_released_twice})",
            f"QoS 2 stored twice (inbound)   {self.q2_stored_twice}"
            f" ({self.q2_stored} QoS 2 records in the subscriber's LMQ)",
            f"QoS 2 resent under new pid     {self.new_pid_resends} (of which"
            f" {self.held_resent_new_pid} still held under their first id)",
            f"QoS 2 packet id reused while held {self.pid_reuse} (messages a method B"
            f" receiver never delivers: {self.q2_dropped_by_receiver})",
            f"QoS 1 duplicates (allowed)     {self.q1_duplicates}",
            f"AMQP redelivered (flagged)     {self.amqp_redelivered};"
            f" delivered again unflagged {self.amqp_unflagged_again}",
            f"LMQ offset regressions         {self.offset_regressions} ({self.lmqs} LMQs)",
            f"subscriber session missing     {self.session_missing}",
            f"restart (SIGKILL -> ready)     median {statistics.median(rs) * 1000:.0f} ms,"
            f" max {max(rs) * 1000:.0f} ms ({len(self.restart_s)} restarts)",
        ] + [f"problem: {p}" for p in self.problems] + [f"note: {n}" for n in self.notes])


def _setup(ports: dict[str, int]) -> None:
    conn = _amqp(ports["amqp"])
    try:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        ch.queue_bind(QUEUE, "amq.topic", "cl.#")
    finally:
        _close(conn)


def gateway_crash_loop(
    data_dir: Path,
    kills: int = 20,
    seed: int = 1,
    min_s: float = 1.0,
    max_s: float = 3.0,
    q1_publishers: int = 2,
    q2_publishers: int = 2,
    amqp_publishers: int = 2,
    drain_timeout: float = 120.0,
    log: Any = None,
) -> Figures:
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # every kill is a lost stream
    rnd = random.Random(seed)
    fig = Figures()
    target = Target()
    stop = threading.Event()
    gw = GatewayProcess(data_dir)
    started = time.monotonic()
    gw.start()
    workers: list[Worker] = []
    try:
        _setup(gw.ports)
        target.set_up(gw.ports)
        sub = MqttSubscriber(target, stop)
        sub.start()
        if not sub.subscribed.wait(10):
            raise RuntimeError("the subscriber did not get its SUBACK")
        consumer = AmqpConsumer(target, stop)
        consumer.start()
        pubs: list[Worker] = (
            [MqttPublisher(f"p1-{i}", 1, target, stop) for i in range(q1_publishers)]
            + [MqttPublisher(f"p2-{i}", 2, target, stop) for i in range(q2_publishers)]
            + [AmqpPublisher(f"pa-{i}", target, stop) for i in range(amqp_publishers)]
        )
        workers = [sub, consumer, *pubs]
        for p in pubs:
            p.start()
        previous: dict[str, int] = {}
        for k in range(kills):
            time.sleep(rnd.uniform(min_s, max_s))
            target.set_down()
            t0 = time.monotonic()
            gw.kill()
            fig.kills += 1
            offsets = lmq_offsets(data_dir)
            for name, old in previous.items():
                new = offsets.get(name)
                if new is None or new < old:
                    fig.offset_regressions += 1
                    fig.problems.append(f"kill {k + 1}: LMQ {name} max offset {old} -> {new}")
            previous = offsets
            gw.ports = {}
            gw.start()
            fig.restart_s.append(time.monotonic() - t0)
            target.set_up(gw.ports)
            if log:
                n1 = sum(len(p.acked) for p in pubs if getattr(p, "qos", 0) == 1)
                n2 = sum(len(p.acked) for p in pubs if getattr(p, "qos", 0) == 2)
                na = sum(len(p.acked) for p in pubs if isinstance(p, AmqpPublisher))
                log(f"kill {k + 1}/{kills}: restart {fig.restart_s[-1] * 1000:.0f} ms,"
                    f" acked q1 {n1} q2 {n2} amqp {na}, {len(offsets)} LMQs")
        # a last stretch of load on the last gateway, then complete every flow
        time.sleep(rnd.uniform(min_s, max_s))
        for p in pubs:
            p.finish.set()
        for p in pubs:
            if not p.done.wait(60):
                fig.problems.append(f"{p.name} could not complete its flows in 60 s")
        _drain(sub, consumer, pubs, drain_timeout)
        stop.set()
        for w in workers:
            w.join(10)
        gw.stop()
        offsets = lmq_offsets(data_dir)
        for name, old in previous.items():
            new = offsets.get(name)
            if new is None or new < old:
                fig.offset_regressions += 1
                fig.problems.append(f"final: LMQ {name} max offset {old} -> {new}")
        fig.lmqs = len(offsets)
        fig.duration_s = time.monotonic() - started
        _account(fig, sub, consumer, pubs)
        stored = stored_bodies(data_dir, "mqtt:" + FILTER)
        q2 = _expected(pubs)[1]
        fig.q2_stored = sum(n for body, n in stored.items() if body.startswith("q2:"))
        fig.q2_stored_twice = sum(1 for m in q2 if stored[m] > 1)
        missing = [m for m in q2 | _expected(pubs)[0] if not stored[m]]
        if missing:
            fig.problems.append(f"{len(missing)} acknowledged MQTT messages not in the store,"
                                f" e.g. {missing[:3]}")
    finally:
        stop.set()
        gw.kill()
    return fig


def _expected(pubs: list[Worker]) -> tuple[set[str], set[str], set[str]]:
    q1 = {m for p in pubs if isinstance(p, MqttPublisher) and p.qos == 1 for m in p.acked}
    q2 = {m for p in pubs if isinstance(p, MqttPublisher) and p.qos == 2 for m in p.acked}
    amqp = {m for p in pubs if isinstance(p, AmqpPublisher) for m in p.acked}
    return q1, q2, amqp


def _drain(sub: MqttSubscriber, consumer: AmqpConsumer, pubs: list[Worker],
           timeout: float) -> None:
    """Wait until both consumers have everything acknowledged and 3 s of quiet."""
    q1, q2, amqp = _expected(pubs)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sub.lock:
            mqtt_ok = (q1 | q2) <= sub.seen.keys()
            quiet = time.monotonic() - sub.last_delivery > 3
        with consumer.lock:
            amqp_ok = (q1 | q2 | amqp) <= consumer.received.keys()
            quiet = quiet and time.monotonic() - consumer.last_delivery > 3
        if mqtt_ok and amqp_ok and quiet:
            return
        time.sleep(0.5)


def _account(fig: Figures, sub: MqttSubscriber, consumer: AmqpConsumer,
             pubs: list[Worker]) -> None:
    q1, q2, amqp = _expected(pubs)
    fig.acked_q1, fig.acked_q2, fig.acked_amqp = len(q1), len(q2), len(amqp)
    for p in pubs:
        if isinstance(p, MqttPublisher):
            if len(p.acked) != len(set(p.acked)):
                fig.problems.append(f"{p.name}: a message was acknowledged twice")
            if p.inflight:
                fig.problems.append(f"{p.name}: {len(p.inflight)} flows never completed")
            fig.notes.append(
                f"{p.name}: {p.connects} connects, resent {p.resent_publish} PUBLISH (DUP)"
                f" and {p.resent_pubrel} PUBREL, {p.extra_acks} acks for nothing in flight"
            )
        for e in p.errors[:3]:
            fig.problems.append(f"{p.name}: {e}")
    with sub.lock:
        seen = collections.Counter(sub.seen)
        delivered = collections.Counter(sub.delivered)
        released = collections.Counter(sub.released)
    # lost = never sent to the subscriber at all; a QoS 2 message the subscriber dropped
    # because its packet id was still held for another message is counted in pid_reuse
    fig.lost_mqtt_q1 = len(q1 - seen.keys())
    fig.lost_mqtt_q2 = len(q2 - seen.keys())
    fig.q2_dropped_by_receiver = len(q2 - delivered.keys())
    fig.q2_duplicates = sum(1 for m in q2 if delivered[m] > 1)
    fig.q1_duplicates = sum(1 for m in q1 if delivered[m] > 1)
    fig.q2_released_twice = sum(1 for m in q2 if released[m] > 1)
    fig.pid_reuse = len(sub.pid_reuse)
    fig.new_pid_resends = len(sub.new_pid_resends)
    fig.held_resent_new_pid = sub.held_resent_new_pid
    fig.session_missing = sub.session_missing
    unpublished = {m for m in delivered if m not in q1 | q2}
    fig.notes.append(
        f"subscriber: {sub.connects} connects, {sum(seen.values())} PUBLISH received,"
        f" {sum(delivered.values())} deliveries (method B),"
        f" {sub.dup_flags} with DUP, {sub.resends_recognised} QoS 2 resends recognised by"
        f" packet id, {sub.pubrel_unknown} PUBREL for no held id, {len(sub.held)} ids still"
        f" held, {len(unpublished)} messages never acknowledged to their publisher"
    )
    for pid, held, new in sub.pid_reuse[:3]:
        fig.notes.append(f"packet id {pid} held for {held} was reused for {new}")
    for pid, payload, dup in sub.new_pid_resends[:3]:
        fig.notes.append(f"{payload} delivered again as packet id {pid} (DUP={int(dup)})")
    for e in sub.errors[:3]:
        fig.problems.append(f"subscriber: {e}")
    with consumer.lock:
        received = collections.Counter(consumer.received)
    fig.lost_amqp = len(amqp - received.keys())
    fig.lost_cross = len((q1 | q2) - received.keys())
    fig.amqp_redelivered = consumer.redelivered_flagged
    # only messages stored once count: an MQTT QoS 1 resend may legitimately be a
    # second record (at least once), delivered as a message of its own
    once = amqp | q2
    unflagged = [b for b in consumer.unflagged_again if b in once]
    fig.amqp_unflagged_again = len(unflagged)
    for body in unflagged[:3]:
        fig.notes.append(f"AMQP {body} delivered again without redelivered")
    fig.notes.append(
        f"AMQP consumer: {consumer.connects} connects, {sum(received.values())} deliveries"
        f" of {len(received)} messages"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-s", type=float, default=1.0)
    parser.add_argument("--max-s", type=float, default=3.0)
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gw-crash-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        fig = gateway_crash_loop(data_dir, kills=args.kills, seed=args.seed,
                                 min_s=args.min_s, max_s=args.max_s,
                                 log=lambda s: print(s, flush=True))
    print(fig.summary())
    ok = (fig.lost == 0 and fig.q2_duplicates == 0 and fig.pid_reuse == 0
          and fig.q2_stored_twice == 0
          and fig.offset_regressions == 0 and fig.amqp_unflagged_again == 0
          and fig.session_missing == 0 and not fig.problems)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
