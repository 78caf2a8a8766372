"""End to end: MQTT traffic through a real gateway, then `lmq analyze fanout` on its data.

Devices publish a planned traffic (known topics, counts, payload sizes, QoS) through a
gateway subprocess to subscribers whose filters overlap in known ways; the test waits
until every message is stored, stops the gateway and runs the analysis through the
``lmq`` command. Every figure of ``summary.json`` is then checked against the truth the
test counts from its own plan.

How the gateway stores it (gateway/mqtt/handler.py, gateway/topic_space.py): one record
per PUBLISH, origin = the client id, dispatched to one LMQ per *distinct subscription
filter* matching the topic (``mqtt:<filter>``). Two sessions on the same filter and a
``$share/g/<filter>`` group share that filter's LMQ, so they count once in a fan-out;
a publish nobody subscribes to has fan-out 0 and is still stored.

``$SYS``: the gateway itself publishes nine ``$SYS/broker/...`` retained messages at
start and every 10 s (origin ``$SYS``), which are records like any other. Their number
depends on timing and their payloads (uptime, byte counts) on the gateway's state, so
the test cannot plan them. It does know that none of its filters matches a ``$``-topic
(MQTT 4.7.2), so they have fan-out 0, one publisher, and come in whole rounds of nine
(a round is one loop turn, one append batch). The test reads the two unknowns, their
count and payload bytes, from the ``$SYS`` row of ``top_devices`` (checked to be whole
rounds within the time the gateway ran) and derives every other figure from them and
its plan: totals, percentiles over the planned fan-outs plus that many zeros, list
orders with ``$SYS`` ranked in, prefixes with ``$SYS`` and ``$SYS/broker``.

Fan-out change between the two halves of the stored time span: the traffic runs in
two phases (a new subscriber to ``sensors/garage/#`` joins in between) separated by a
pause long enough that the midpoint of the span must fall in it, which the test checks
from the wall-clock bounds it measured; so each planned record's half is known.
"""

from __future__ import annotations

import json
import math
import queue
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("paho.mqtt")
pq = pytest.importorskip("pyarrow.parquet")

from click.testing import CliRunner  # noqa: E402

from cli.analyze import AnalyzeEnv, find_java  # noqa: E402
from cli.main import main as lmq  # noqa: E402
from gateway.mqtt.frontend import VERSION  # noqa: E402

# The gateway test helpers. With --import-mode=importlib pytest registers tests/ and its
# subdirectories as the packages ``tests``, ``tests.spark``..., so the helpers import
# under the same names tests/gateway/conftest.py gives them (one module, one ``OPEN``
# list), whether pytest runs from the project root, from tests/ or on this file alone.
from tests.gateway.gateway_process import GatewayProcess  # noqa: E402
from tests.gateway.mqtt_clients import Paho, close_all  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOP = 5
SYS = "$SYS"
SYS_ROUND = 10  # topics per $SYS round (gateway/mqtt/frontend.py, _sys_loop)
SYS_INTERVAL_S = 10
DELIVERY_TIMEOUT = 30.0

#: Subscribers: client id -> (filter, MQTT 5?, subscription QoS, phases subscribed).
#: Overlaps on purpose: sensors/# twice (one LMQ) and again as a $share group (same
#: LMQ), sensors/+/temp ⊃ sensors/kitchen/temp, +/kitchen/+ across sensors/ and alerts/.
SUBSCRIBERS: dict[str, tuple[str, bool, int, str]] = {
    "sub-all": ("sensors/#", False, 1, "AB"),
    "sub-all-too": ("sensors/#", True, 0, "AB"),
    "sub-temp": ("sensors/+/temp", False, 2, "AB"),
    "sub-kitchen-temp": ("sensors/kitchen/temp", False, 1, "AB"),
    "sub-kitchen": ("+/kitchen/+", True, 1, "AB"),
    "sub-alerts": ("alerts/#", False, 2, "AB"),
    "sub-garage": ("sensors/garage/#", False, 1, "B"),  # joins between the phases
}
SHARED_FILTER = "sensors/#"
SHARED_MEMBERS = ("shared-1", "shared-2")  # $share/g/sensors/#, MQTT 5


@dataclass(frozen=True)
class Pub:
    device: str
    topic: str
    qos: int
    size: int
    phase: str  # "A" or "B"

    def payload(self, seq: int) -> bytes:
        return bytes((seq * 31 + k) % 256 for k in range(self.size))


def plan() -> list[Pub]:
    """The traffic, in publishing order per phase (devices interleaved)."""
    per_device: dict[str, list[Pub]] = defaultdict(list)

    def add(device, phase, n, topic, qos, size):
        for i in range(n):
            per_device[device].append(Pub(device, topic(i), qos(i), size(i), phase))

    # phase A
    add("dev-kitchen", "A", 30,
        lambda i: "sensors/kitchen/temp" if i % 3 == 0 else "sensors/kitchen/humidity",
        lambda i: i % 3, lambda i: 10 + (i * 7) % 23)  # fmt: skip
    add("dev-garage", "A", 24, lambda i: "sensors/garage/temp", lambda i: i % 2,
        lambda i: 100 + i)  # fmt: skip
    add("dev-alarm", "A", 16,
        lambda i: "alerts/kitchen/smoke" if i % 2 else "alerts/fire",
        lambda i: i % 3, lambda i: (5 * i) % 17)  # fmt: skip
    add("dev-attic", "A", 12, lambda i: "sensors/attic/temp", lambda i: 0,
        lambda i: 1000 + 3 * i)  # fmt: skip
    # nobody subscribes: QoS 1 so that the PUBACK says it is stored; one empty payload
    add("dev-silent", "A", 3, lambda i: "logs/debug", lambda i: 1, lambda i: i)
    # phase B
    add("dev-kitchen", "B", 10, lambda i: "sensors/kitchen/temp", lambda i: 1,
        lambda i: 10 + i)  # fmt: skip
    add("dev-garage", "B", 8,
        lambda i: "sensors/garage/door" if i % 2 else "sensors/garage/temp",
        lambda i: i % 3, lambda i: 50 + i)  # fmt: skip
    add("dev-alarm", "B", 4, lambda i: "alerts/fire", lambda i: 0, lambda i: 3)
    add("dev-attic", "B", 6, lambda i: "logs/attic", lambda i: 1 + i % 2, lambda i: 7)

    out: list[Pub] = []
    for phase in "AB":
        lists = [[p for p in ps if p.phase == phase] for ps in per_device.values()]
        for i in range(max(len(ps) for ps in lists)):
            out.extend(ps[i] for ps in lists if i < len(ps))
    return out


def matches(flt: str, topic: str) -> bool:
    """MQTT filter matching, including 4.7.2 ($-topics are not matched by a leading
    wildcard)."""
    if topic.startswith("$") and flt[:1] in ("+", "#"):
        return False
    f, t = flt.split("/"), topic.split("/")
    for i, part in enumerate(f):
        if part == "#":
            return True
        if i >= len(t) or (part != "+" and part != t[i]):
            return False
    return len(f) == len(t)


def filters_in(phase: str) -> set[str]:
    return {flt for flt, _v5, _q, phases in SUBSCRIBERS.values() if phase in phases} | {
        SHARED_FILTER
    }


def lmqs_of(pub: Pub) -> set[str]:
    """The LMQs a publish is dispatched to: one per distinct matching filter."""
    return {f"mqtt:{flt}" for flt in filters_in(pub.phase) if matches(flt, pub.topic)}


def pct(values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Spark's percentile)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_iso_ms(text: str) -> int:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(dt.timestamp() * 1000)


# -- driving the gateway ---------------------------------------------------------------


@dataclass
class Run:
    """What happened, as the test measured it (wall-clock ms, the gateway's clock too)."""

    started: int  # before the gateway process was started
    a_end: int  # every phase A record stored (delivered or acknowledged) by then
    b_start: int  # no phase B record stored before this
    stopped: int  # the gateway had exited
    received: dict[str, Counter]  # subscriber (shared group: "$share/g") -> topics
    exit_code: int


def expected_deliveries(pubs: list[Pub], phase: str) -> dict[str, Counter]:
    want: dict[str, Counter] = {}
    for cid, (flt, _v5, _qos, phases) in SUBSCRIBERS.items():
        if phase in phases:
            want[cid] = Counter(p.topic for p in pubs if p.phase == phase and matches(flt, p.topic))
    want["$share/g"] = Counter(
        p.topic for p in pubs if p.phase == phase and matches(SHARED_FILTER, p.topic)
    )
    return want


def drain(clients: dict[str, list[Paho]], want: dict[str, Counter]) -> dict[str, Counter]:
    """Wait until each subscriber (or group) got its expected number of messages; then
    make sure nothing more arrives. Returns the topics received."""
    got: dict[str, Counter] = {}
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    for name, expected in want.items():
        topics: Counter = Counter()
        members = clients[name]
        while sum(topics.values()) < sum(expected.values()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: got {dict(topics)}, want {dict(expected)}")
            for member in members:
                try:
                    topics[member.get(timeout=0.05).topic] += 1
                except queue.Empty:
                    pass
        got[name] = topics
    time.sleep(0.3)
    for name, members in clients.items():
        for member in members:
            assert member.messages.empty(), f"{name} received more than planned"
    return got


def drive(data_dir, pubs: list[Pub]) -> Run:
    started = now_ms()
    gw = GatewayProcess(data_dir).start()
    try:
        port = gw.mqtt_port
        subs: dict[str, list[Paho]] = {}

        def subscribe(cid: str) -> None:
            flt, v5, qos, _phases = SUBSCRIBERS[cid]
            client = Paho(port, cid, v5=v5)
            codes = client.subscribe(flt, qos)
            assert [int(getattr(c, "value", c)) for c in codes] == [qos], (cid, codes)
            subs[cid] = [client]

        for cid, (_f, _v, _q, phases) in SUBSCRIBERS.items():
            if phases.startswith("A"):
                subscribe(cid)
        subs["$share/g"] = []
        for cid in SHARED_MEMBERS:
            member = Paho(port, cid, v5=True)
            member.subscribe(f"$share/g/{SHARED_FILTER}", 1)
            subs["$share/g"].append(member)
        devices = {
            d: Paho(port, d, v5=(d == "dev-kitchen")) for d in sorted({p.device for p in pubs})
        }

        def publish(phase: str) -> None:
            for seq, p in enumerate(pubs):
                if p.phase == phase:
                    # returns once written (QoS 0) / PUBACK'd / PUBCOMP'd: acks follow the append
                    devices[p.device].publish(p.topic, p.payload(seq), qos=p.qos)

        publish("A")
        received = drain(subs, expected_deliveries(pubs, "A"))
        a_end = now_ms()

        subscribe("sub-garage")
        # The analysis splits the stored time span [first, last] at its midpoint. first
        # >= started and last >= b_start, so b_start >= 2 * a_end - started puts the
        # midpoint after a_end; phase B is short, so it stays before b_start (checked).
        time.sleep(max(0.0, (2 * a_end - started + 1000 - now_ms()) / 1000))
        b_start = now_ms()
        publish("B")
        for name, topics in drain(subs, expected_deliveries(pubs, "B")).items():
            received.setdefault(name, Counter()).update(topics)
        for client in [c for cs in subs.values() for c in cs] + list(devices.values()):
            client.disconnect()
    finally:
        exit_code = gw.stop()
        close_all()
    return Run(started, a_end, b_start, now_ms(), received, exit_code)


# -- the truth -------------------------------------------------------------------------


def traffic_aggs(rows: Iterable[tuple[int, int]]) -> dict:
    """(payload size, fan-out) pairs -> messages, bytes, mean and max fan-out."""
    rows = list(rows)
    return {
        "messages": len(rows),
        "bytes": sum(s for s, _ in rows),
        "mean_fanout": sum(f for _, f in rows) / len(rows),
        "max_fanout": max(f for _, f in rows),
    }


def top_of(groups: dict[str, dict], key: str, fields: tuple[str, ...]) -> list[dict]:
    rows = [{key: k, **v} for k, v in groups.items()]
    rows.sort(key=lambda r: (-r["messages"], r[key]))
    return [{f: r[f] for f in (key, *fields)} for r in rows[:TOP]]


def truth(pubs: list[Pub], sys_messages: int, sys_bytes: int) -> dict:
    """Every summary figure but the window and the fan-out changes, from the plan plus
    the number and payload bytes of the $SYS records (none: left out)."""
    fan = [len(lmqs_of(p)) for p in pubs] + [0] * sys_messages
    sys_group = {
        "messages": sys_messages,
        "bytes": sys_bytes,
        "mean_fanout": 0.0,
        "max_fanout": 0,
        "devices": 1,
    }

    def grouped(key) -> dict[str, dict]:
        rows: dict[str, list[Pub]] = defaultdict(list)
        for p in pubs:
            rows[key(p)].append(p)
        return {
            k: {
                **traffic_aggs((p.size, len(lmqs_of(p))) for p in ps),
                "devices": len({p.device for p in ps}),
            }
            for k, ps in rows.items()
        }

    with_sys = bool(sys_messages)
    devices = grouped(lambda p: p.device) | ({SYS: sys_group} if with_sys else {})
    topics = grouped(lambda p: p.topic)  # $SYS topics: checked to rank below the top
    prefixes = {
        "1": grouped(lambda p: p.topic.split("/")[0]) | ({SYS: sys_group} if with_sys else {}),
        "2": grouped(lambda p: "/".join(p.topic.split("/")[:2]))
        | ({f"{SYS}/broker": sys_group} if with_sys else {}),
    }
    return {
        "messages": len(pubs) + sys_messages,
        "devices": len(devices),
        "lmqs": len(set().union(*(lmqs_of(p) for p in pubs))),
        "bytes": sum(p.size for p in pubs) + sys_bytes,
        "deliveries": sum(fan),
        "fanout": {
            "mean": sum(fan) / len(fan),
            "p50": pct(fan, 0.5),
            "p90": pct(fan, 0.9),
            "p99": pct(fan, 0.99),
            "min": min(fan),
            "max": max(fan),
        },
        "top_devices": top_of(
            devices, "device", ("messages", "bytes", "mean_fanout", "max_fanout")
        ),
        "top_topics": top_of(topics, "topic", ("messages", "bytes", "mean_fanout", "devices")),
        "top_prefixes": {
            depth: top_of(groups, "prefix", ("messages", "bytes", "mean_fanout", "devices"))
            for depth, groups in prefixes.items()
        },
    }


def fanout_changes(pubs: list[Pub], sys_row: dict | None) -> list[dict]:
    """Phase A is before the midpoint, phase B after it (the test checks that)."""
    halves: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"A": [], "B": []})
    for p in pubs:
        halves[p.device][p.phase].append(len(lmqs_of(p)))
    rows = []
    for device, h in halves.items():
        if h["A"] and h["B"]:
            before, after = sum(h["A"]) / len(h["A"]), sum(h["B"]) / len(h["B"])
            rows.append(
                {
                    "device": device,
                    "messages_before": len(h["A"]),
                    "mean_fanout_before": before,
                    "messages_after": len(h["B"]),
                    "mean_fanout_after": after,
                    "change": after - before,
                }
            )
    if sys_row is not None:
        rows.append(sys_row)
    rows.sort(key=lambda r: (-abs(r["change"]), r["device"]))
    return rows[:TOP]


def lmq_fan_in(pubs: list[Pub]) -> dict[str, tuple[int, int]]:
    """LMQ -> (messages dispatched to it, distinct publishers)."""
    messages: Counter = Counter()
    publishers: dict[str, set] = defaultdict(set)
    for p in pubs:
        for q in lmqs_of(p):
            messages[q] += 1
            publishers[q].add(p.device)
    return {q: (n, len(publishers[q])) for q, n in messages.items()}


# -- the test --------------------------------------------------------------------------


@pytest.fixture
def env(spark_session):
    """The real Java lookup; the session is the suite's local[2] one (the command would
    otherwise stop it on exit, and getOrCreate would hand it back anyway)."""

    @contextmanager
    def session(master):
        assert master == "local[2]"
        yield spark_session

    return AnalyzeEnv(find_java=find_java, session=session)


def test_fanout_summary_of_real_mqtt_traffic(env, tmp_path):
    pubs = plan()
    data = tmp_path / "data"
    run = drive(data, pubs)
    assert run.exit_code == 0

    # every planned message reached exactly the subscribers whose filter matches it
    for name in run.received:
        want = expected_deliveries(pubs, "A").get(name, Counter())
        want = want + expected_deliveries(pubs, "B").get(name, Counter())
        assert run.received[name] == want, name

    out = tmp_path / "out"
    result = CliRunner().invoke(
        lmq,
        ["analyze", "fanout", "--data-dir", str(data), "--out", str(out),
         "--master", "local[2]", "--top", str(TOP), "--include-sys"],
        obj=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(out / "summary.md")
    summary = json.loads((out / "summary.json").read_text())

    # -- the $SYS records: count and bytes from the summary, checked for plausibility
    sys_rows = [d for d in summary["top_devices"] if d["device"] == SYS]
    assert len(sys_rows) == 1, summary["top_devices"]
    sys_messages, sys_bytes = sys_rows[0]["messages"], sys_rows[0]["bytes"]
    rounds, partial = divmod(sys_messages, SYS_ROUND)
    assert partial == 0 and 1 <= rounds <= (run.stopped - run.started) // 1000 // 10 + 1
    assert sys_bytes > rounds * len(f"lmq-gateway {VERSION}")  # the version message alone
    # $SYS topics have `rounds` messages each: fewer than the planned topics listed
    planned_topics = Counter(p.topic for p in pubs)
    assert rounds < sorted(planned_topics.values(), reverse=True)[TOP - 1]

    expected = truth(pubs, sys_messages, sys_bytes)
    for key in ("messages", "devices", "lmqs", "bytes", "deliveries"):
        assert summary[key] == expected[key], key
    assert summary["fanout"] == pytest.approx(expected["fanout"])
    for key in ("top_devices", "top_topics"):
        assert summary[key] == [pytest.approx(row) for row in expected[key]], key
    assert summary["top_prefixes"] == {
        depth: [pytest.approx(row) for row in rows]
        for depth, rows in expected["top_prefixes"].items()
    }

    # -- the stored time span lies within what the test measured, and its midpoint in
    # the pause between the phases, so the before/after halves are phase A/phase B
    window = summary["window"]
    assert window["since"] is None and window["until"] is None
    first = parse_iso_ms(window["first_store_time"])
    last = parse_iso_ms(window["last_store_time"])
    assert run.started <= first <= run.a_end
    assert run.b_start <= last <= run.stopped
    end = last + 1
    mid = first + (end - first) / 2
    assert run.a_end < mid <= run.b_start, "phase B ran too long for the timeline"

    changes = summary["fanout_changes"]
    sys_change = next((c for c in changes if c["device"] == SYS), None)
    if sys_change is not None:  # a $SYS round in each half: fan-out 0 both times
        assert sys_change["messages_before"] + sys_change["messages_after"] == sys_messages
        assert sys_change["messages_before"] % SYS_ROUND == 0
        assert sys_change["mean_fanout_before"] == sys_change["mean_fanout_after"] == 0
        assert sys_change["change"] == 0
    assert changes == [pytest.approx(row) for row in fanout_changes(pubs, sys_change)]

    # -- the account of the log: everything read, nothing skipped
    segments = sorted((data / "commitlog").glob("*.log"))
    log = summary["log"]
    assert log["segments"] == len(segments) >= 1
    assert log["bytes"] == log["record_bytes"] == sum(p.stat().st_size for p in segments)
    assert log["tasks"] >= log["segments"]
    assert log["control_records"] == log["filtered_records"] == log["sys_records"] == 0
    assert log["skipped_bytes"] == log["tail_bytes"] == 0 and log["problems"] == []

    # -- one LMQ per distinct filter: sensors/# serves two sessions and the $share group
    fan_in = pq.read_table(out / "tables" / "lmq_fan_in").to_pylist()
    assert {r["lmq"]: (r["messages"], r["publishers"]) for r in fan_in} == lmq_fan_in(pubs)
    assert (out / "summary.md").read_text().startswith("# LMQ device fan-out summary")

    # -- by default the $SYS records are left out of device analytics, and counted
    out = tmp_path / "out-default"
    result = CliRunner().invoke(
        lmq,
        ["analyze", "fanout", "--data-dir", str(data), "--out", str(out),
         "--master", "local[2]", "--top", str(TOP)],
        obj=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plain = json.loads((out / "summary.json").read_text())
    expected = truth(pubs, 0, 0)
    for key in ("messages", "devices", "lmqs", "bytes", "deliveries"):
        assert plain[key] == expected[key], key
    assert plain["fanout"] == pytest.approx(expected["fanout"])
    for key in ("top_devices", "top_topics"):
        assert plain[key] == [pytest.approx(row) for row in expected[key]], key
    assert plain["top_prefixes"] == {
        depth: [pytest.approx(row) for row in rows]
        for depth, rows in expected["top_prefixes"].items()
    }
    assert plain["log"]["sys_records"] == sys_messages
    assert plain["log"]["record_bytes"] == log["record_bytes"]
