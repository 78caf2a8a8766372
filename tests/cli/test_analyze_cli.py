"""`lmq analyze fanout` on a data directory whose every figure the test counts itself.

Traffic: devices publish on topics; subscribers hold MQTT filters with known overlaps;
each filter is one LMQ and a publish is dispatched to every filter matching its topic
(the mapping of DESIGN.md). The test computes each summary figure independently.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("pyspark")

from click.testing import CliRunner  # noqa: E402

from broker_core.record import HEADER_SIZE, Message, Protocol, RecordType  # noqa: E402
from cli.analyze import AnalyzeEnv, analyze, find_java  # noqa: E402

pytestmark = [
    pytest.mark.spark,
]

T0_MS = 1_714_564_800_000  # 2024-05-01T12:00:00Z
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FILTERS = [
    "home/+/temp",
    "home/#",
    "home/kitchen/temp",
    "office/#",
    "+/+/temp",
    "office/floor1/+",
    "#",
    "alerts/fire",
    "nobody/listens",
]
TOPICS = [
    "home/kitchen/temp",
    "home/kitchen/humidity",
    "home/garage/temp",
    "office/floor1/temp",
    "office/floor2/co2",
    "alerts/fire",
    "plant/line/temp",
    "misc",
]


def matches(flt: str, topic: str) -> bool:
    f, t = flt.split("/"), topic.split("/")
    for i, part in enumerate(f):
        if part == "#":
            return True
        if i >= len(t) or (part != "+" and part != t[i]):
            return False
    return len(f) == len(t)


def pct(values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def iso(ms: int) -> str:
    return (
        (EPOCH + timedelta(milliseconds=ms))
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def publish_traffic(writer, n: int = 400) -> None:
    devices = [f"sensor-{k:02d}" for k in range(9)]
    for i in range(n):
        # skewed: low-numbered devices and topics publish more
        device = devices[(i * i + i // 3) % 9 % (1 + i % 9)]
        topic = TOPICS[(i // 2 + (i % 5) * (i % 3)) % len(TOPICS)]
        lmqs = [f"mqtt/{f}" for f in FILTERS if matches(f, topic)]
        if device == "sensor-00" and i > n // 2:  # this device starts a busier topic
            topic, lmqs = (
                "home/kitchen/temp",
                [f"mqtt/{f}" for f in FILTERS if matches(f, "home/kitchen/temp")],
            )
        writer.append(
            Message(
                topic=topic,
                body=bytes((i * 7) % 64),
                origin=device,
                qos=i % 2,
                protocol=Protocol.MQTT,
            ),
            lmqs,
            T0_MS + i * 450,  # 400 records over 3 minutes
        )
    writer.append(
        Message(topic="", body=b""), ["mqtt/nobody/listens"], T0_MS, RecordType.LMQ_REMOVAL
    )


def truth(messages, top: int) -> dict:
    fan = [len(m.lmqs) for m in messages]
    by_device: dict[str, list] = defaultdict(list)
    by_topic: dict[str, list] = defaultdict(list)
    for m in messages:
        by_device[m.message.origin].append(m)
        by_topic[m.message.topic].append(m)

    def agg(ms):
        return {
            "messages": len(ms),
            "bytes": sum(len(m.message.body) for m in ms),
            "mean_fanout": sum(len(m.lmqs) for m in ms) / len(ms),
            "max_fanout": max(len(m.lmqs) for m in ms),
            "devices": len({m.message.origin for m in ms}),
        }

    def top_of(groups, key, fields):
        rows = [{key: k, **agg(v)} for k, v in groups.items()]
        rows.sort(key=lambda r: (-r["messages"], r[key]))
        return [{f: r[f] for f in (key, *fields)} for r in rows[:top]]

    prefixes = {}
    for depth in (1, 2):
        groups: dict[str, list] = defaultdict(list)
        for m in messages:
            groups["/".join(m.message.topic.split("/")[:depth])].append(m)
        prefixes[str(depth)] = top_of(
            groups, "prefix", ("messages", "bytes", "mean_fanout", "devices")
        )

    first = min(m.store_ms for m in messages)
    last = max(m.store_ms for m in messages)
    t_first = EPOCH + timedelta(milliseconds=first)
    end = EPOCH + timedelta(milliseconds=last + 1)
    mid = t_first + (end - t_first) / 2
    halves = defaultdict(lambda: {"before": [], "after": []})
    for m in messages:
        t = EPOCH + timedelta(milliseconds=m.store_ms)
        halves[m.message.origin]["before" if t < mid else "after"].append(len(m.lmqs))
    changes = []
    for device, h in halves.items():
        if h["before"] and h["after"]:
            b = sum(h["before"]) / len(h["before"])
            a = sum(h["after"]) / len(h["after"])
            changes.append(
                {
                    "device": device,
                    "messages_before": len(h["before"]),
                    "mean_fanout_before": b,
                    "messages_after": len(h["after"]),
                    "mean_fanout_after": a,
                    "change": a - b,
                }
            )
    changes.sort(key=lambda c: (-abs(c["change"]), c["device"]))

    return {
        "messages": len(messages),
        "devices": len(by_device),
        "lmqs": len({q for m in messages for q in m.lmqs}),
        "bytes": sum(len(m.message.body) for m in messages),
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
            by_device, "device", ("messages", "bytes", "mean_fanout", "max_fanout")
        ),
        "top_topics": top_of(by_topic, "topic", ("messages", "bytes", "mean_fanout", "devices")),
        "top_prefixes": prefixes,
        "fanout_changes": changes[:top],
        "first_store_time": iso(first),
        "last_store_time": iso(last),
    }


@pytest.fixture
def env(spark_session):
    @contextmanager
    def session(_master):
        yield spark_session  # shared; the fixture stops it

    return AnalyzeEnv(find_java=lambda: "/usr/bin/java", session=session)


def run_cli(env, *args):
    return CliRunner().invoke(analyze, ["fanout", *args], obj=env)


def test_every_summary_figure_matches_the_traffic(env, segment_writer, tmp_path):
    w = segment_writer(segment_bytes=8192)
    publish_traffic(w)
    out = tmp_path / "out"
    result = run_cli(env, "--data-dir", str(w.data_dir), "--out", str(out), "--top", "5")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(out / "summary.md")
    assert "[analyze] reading" in result.output  # progress was shown

    summary = json.loads((out / "summary.json").read_text())
    expected = truth(w.messages(), top=5)
    for key in ("messages", "devices", "lmqs", "bytes", "deliveries"):
        assert summary[key] == expected[key], key
    assert summary["fanout"] == pytest.approx(expected["fanout"])
    for key in ("top_devices", "top_topics", "fanout_changes"):
        assert summary[key] == [pytest.approx(row) for row in expected[key]], key
    assert summary["fanout_changes"], "the data has devices in both halves"
    assert summary["top_prefixes"] == {
        depth: [pytest.approx(row) for row in rows]
        for depth, rows in expected["top_prefixes"].items()
    }
    assert summary["window"]["first_store_time"] == expected["first_store_time"]
    assert summary["window"]["last_store_time"] == expected["last_store_time"]
    log = summary["log"]
    assert log["segments"] == len(w.segments())
    assert log["bytes"] == sum(p.stat().st_size for p in w.segments()) == w.base
    assert log["control_records"] == 1
    assert log["skipped_bytes"] == log["tail_bytes"] == 0 and log["problems"] == []

    assert (out / "summary.md").read_text().startswith("# LMQ device fan-out summary")
    for chart in ("fanout_histogram", "top_devices", "traffic_per_minute"):
        assert (out / "charts" / f"{chart}.png").read_bytes()[:4] == b"\x89PNG"
    dates = sorted(p.name for p in (out / "tables" / "records").iterdir() if p.is_dir())
    assert dates == ["date=2024-05-01"]


def test_time_window_and_corrupt_segment(env, segment_writer, tmp_path):
    w = segment_writer(segment_bytes=8192)
    publish_traffic(w, n=200)
    victim = w.messages()[50]
    seg = max(p for p in w.segments() if int(p.stem) <= victim.position)
    with open(seg, "r+b") as fh:
        fh.seek(victim.position - int(seg.stem) + HEADER_SIZE + 1)
        fh.write(b"\xff\xfe")
    size = w.messages()[51].position - victim.position
    since, until = T0_MS + 10_000, T0_MS + 60_000

    out = tmp_path / "out"
    result = run_cli(
        env,
        "--data-dir", str(w.data_dir),
        "--out", str(out),
        "--since", iso(since),
        "--until", str(until),
    )  # fmt: skip
    assert result.exit_code == 1
    message = result.output.strip().splitlines()[-1]
    assert message.startswith("Error: corrupt commit log: skipped")
    assert f"skipped {size} bytes" in message and f"position {victim.position}" in message
    summary = json.loads((out / "summary.json").read_text())
    kept = [m for m in w.messages() if m is not victim and since <= m.store_ms < until]
    assert summary["messages"] == len(kept)
    assert summary["log"]["skipped_bytes"] == size
    assert summary["window"]["since"] == iso(since)


def test_no_segments_is_a_one_line_error(env, tmp_path):
    (tmp_path / "data" / "commitlog").mkdir(parents=True)
    result = run_cli(env, "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert result.output.startswith("Error: no commit-log segments")
    assert len(result.output.strip().splitlines()) == 1


def test_missing_java_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    assert find_java() is None
    result = CliRunner().invoke(
        analyze, ["fanout", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: Java not found: Spark needs a Java 17+ runtime; install one or set JAVA_HOME"
    )


def test_bad_time_is_a_usage_error(env, tmp_path):
    result = run_cli(env, "--data-dir", str(tmp_path), "--out", str(tmp_path), "--since", "soon")
    assert result.exit_code == 2
    assert "not a time" in result.output
