"""The storage commands of the ``lmq`` CLI, run through click's runner on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core import Message, MessageStore, StoreError
from cli.context import parse_duration_ms
from cli.main import main


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with MessageStore.open(tmp_path) as s:
        for i in range(30):
            s.append(Message(topic="t", body=b"0123456789"), [f"dev/{i % 3}", "all"])
        s.commit_offset("g", "all", 10)
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_topics_list_and_json(data_dir):
    code, out = run("topics", "list", "--data-dir", str(data_dir), "--prefix", "dev/")
    assert code == 0 and "dev/0" in out and "all" not in out and "3 LMQ(s)" in out
    code, out = run("topics", "list", "--data-dir", str(data_dir), "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["name"]: r["messages"] for r in rows} == {
        "all": 30,
        "dev/0": 10,
        "dev/1": 10,
        "dev/2": 10,
    }


def test_topics_show(data_dir):
    code, out = run("topics", "show", "all", "--data-dir", str(data_dir))
    assert code == 0 and "messages:    30" in out and "g: offset 10, lag 20" in out
    code, out = run("topics", "show", "nope", "--data-dir", str(data_dir))
    assert code == 1 and "no LMQ named 'nope' or 'mqtt:nope'" in out and "Traceback" not in out
    assert "mqtt:<filter>" in out  # the error says how LMQs are named


def test_topics_show_takes_an_mqtt_filter_as_written(tmp_path):
    with MessageStore.open(tmp_path) as s:
        s.append(Message(topic="sensors/a", body=b"1"), ["mqtt:sensors/#"])
    code, out = run("topics", "show", "sensors/#", "--data-dir", str(tmp_path))
    assert code == 0 and "name:        mqtt:sensors/#" in out and "messages:    1" in out


def test_topics_clean_dry_run_then_real(data_dir):
    code, out = run("topics", "clean", "--prefix", "dev/", "--dry-run", "--data-dir", str(data_dir))
    assert code == 0 and "dry run: 3 LMQ(s), 30 messages" in out
    code, out = run("topics", "clean", "--prefix", "dev/1", "--data-dir", str(data_dir))
    assert code == 0 and "removed 1 LMQ(s): 10 messages" in out
    with MessageStore.open(data_dir) as s:
        assert s.lmq("dev/1") is None and s.lmq("dev/0").messages == 10


def test_topics_clean_idle(data_dir):
    code, out = run("topics", "clean", "--idle-longer-than", "1h", "--data-dir", str(data_dir))
    assert code == 0 and "removed 0 LMQ(s)" in out
    code, out = run("topics", "clean", "--data-dir", str(data_dir))
    assert code == 2 and "refusing to remove all" in out


def test_offsets_list_and_set(data_dir):
    code, out = run("offsets", "set", "g", "all", "--earliest", "--data-dir", str(data_dir))
    assert code == 0 and "10 -> 0" in out
    code, out = run("offsets", "set", "g", "all", "99", "--data-dir", str(data_dir))
    assert code == 1 and "past the end" in out
    code, out = run("offsets", "list", "--data-dir", str(data_dir))
    assert code == 0 and "1 offset(s)" in out


def test_store_verify_stats_rebuild(data_dir):
    code, out = run("store", "verify", "--data-dir", str(data_dir))
    assert code == 0 and out.strip().endswith("ok")
    code, out = run("store", "stats", "--json", "--data-dir", str(data_dir))
    stats = json.loads(out)
    assert stats["lmqs"] == 4
    code, out = run("store", "stats", "--data-dir", str(data_dir))
    lines = out.splitlines()
    assert len(lines) == len(stats)
    # every value starts in one column, after the longest name and two spaces
    column = max(map(len, stats)) + 2
    for line, (key, value) in zip(lines, stats.items(), strict=True):
        assert line[:column].rstrip() == key and line[column:] == str(value)
    code, out = run("store", "rebuild-index", "--data-dir", str(data_dir))
    assert code == 0 and "replayed 30 records (60 entries)" in out


def test_commands_work_beside_a_running_writer(data_dir):
    """Read commands open a snapshot and need no lock; writers get a clear message."""
    with MessageStore.open(data_dir):
        code, out = run("topics", "list", "--data-dir", str(data_dir))
        assert code == 0 and "4 LMQ(s)" in out
        code, out = run("store", "rebuild-index", "--data-dir", str(data_dir))
        assert code == 1 and "in use by another process (stop the gateway first)" in out
        # the Python API says it too (the README's MessageStore example)
        with pytest.raises(StoreError, match=r"in use by another process \(stop the gateway"):
            MessageStore.open(data_dir)


def test_missing_data_dir(tmp_path):
    code, out = run("store", "stats", "--data-dir", str(tmp_path / "none"))
    assert code == 1 and "holds no LMQ store" in out


@pytest.mark.parametrize(
    ("text", "ms"),
    [("7d", 604_800_000), ("12h", 43_200_000), ("30m", 1_800_000), ("45", 45_000), ("250ms", 250)],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms
