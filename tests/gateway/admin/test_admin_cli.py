"""The ``lmq`` CLI against a running gateway (through its admin API, found by the
address it records in the data directory) and against the same data directory stopped
(the store opened directly): same output, same exit codes, one-line errors. Starts on
a data directory no gateway ever opened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import main

from .support import admin_gateway, audit_lines


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"LMQ_SERVER": None})
    return result.exit_code, result.output


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "never-opened"


def operations(d: tuple[str, ...], suffix: str) -> list[tuple[int, str]]:
    """The same operator commands, run online or offline; their (code, output)."""
    topic = f"cliT{suffix}"
    return [
        run("topics", "create", topic, "--queues", "3", *d),
        run("topics", "create", topic, "--write-queues", "2", "--type", "fifo", *d),
        run("topics", "create", "TBW102", *d),
        run("topics", "create", topic, "--perm", "x", *d),
        run("groups", "reset", "GID_cli", topic, "--earliest", *d),
        run("groups", "delete", "GID_nobody", *d),
        run("topics", "clean", "--prefix", f"rmq:{topic}:", "--dry-run", *d),
        run("topics", "delete", topic, *d),
        run("topics", "delete", topic, *d),
    ]


EXPECTED = [
    (0, "created topic cliT{s}: 3 read / 3 write queues, perm rw, NORMAL\n"),
    (0, "changed topic cliT{s}: 3 read / 2 write queues, perm rw, FIFO\n"),
    (1, "Error: 'TBW102' is a RocketMQ system topic\n"),
    (2, None),
    (
        0,
        "GID_cli on cliT{s} queue 0: - -> 0\nGID_cli on cliT{s} queue 1: - -> 0\n"
        "GID_cli on cliT{s} queue 2: - -> 0\n",
    ),
    (1, "Error: no consumer group named 'GID_nobody'\n"),
    (
        0,
        "would remove rmq:cliT{s}:0 (0 messages)\nwould remove rmq:cliT{s}:1 (0 messages)\n"
        "would remove rmq:cliT{s}:2 (0 messages)\n"
        "dry run: 3 LMQ(s), 0 messages, 0 B would be removed\n",
    ),
    (0, "deleted topic cliT{s}: 3 queue(s), 0 message(s)\n"),
    (1, "Error: no RocketMQ topic named 'cliT{s}'\n"),
]


def check(results: list[tuple[int, str]], suffix: str) -> None:
    for (code, out), (want_code, want) in zip(results, EXPECTED, strict=True):
        assert code == want_code, out
        if want is not None:
            assert out == want.format(s=suffix)
        else:
            assert "give rw, r, w" in out


def json_operations(d: tuple[str, ...], suffix: str) -> list[tuple[int, object]]:
    """The changes again with ``--json``, the topic named without ``suffix``: their
    (code, parsed document or one-line error)."""
    topic = f"jsonT{suffix}"
    runs = [
        run("topics", "create", topic, "--queues", "2", "--json", *d),
        run("groups", "reset", "GID_json", topic, "--earliest", "--json", *d),
        run("offsets", "set", "GID_json", f"rmq:{topic}:1", "--latest", "--json", *d),
        run("groups", "release", "GID_json", topic, "g", "--json", *d),
        run("topics", "clean", "--prefix", f"rmq:{topic}:1", "--dry-run", "--json", *d),
        run("groups", "delete", "GID_json", "--json", *d),
        run("topics", "delete", topic, "--json", *d),
    ]
    return [
        (
            code,
            timeless(json.loads(out.replace(suffix, ""))) if code == 0 else out.replace(suffix, ""),
        )
        for code, out in runs
    ]


def timeless(doc: Any) -> Any:
    """``doc`` without its times (``*_ms``), which differ from run to run."""
    if isinstance(doc, dict):
        return {k: timeless(v) for k, v in doc.items() if not k.endswith("_ms")}
    if isinstance(doc, list):
        return [timeless(v) for v in doc]
    return doc


def test_cli_online_and_offline_alike(data: Path) -> None:
    d = ("--data-dir", str(data))
    # offline on a directory no gateway opened: a topic prepared before the first start
    code, out = run("topics", "create", "early", "--queues", "2", *d)
    assert (code, out) == (0, "created topic early: 2 read / 2 write queues, perm rw, NORMAL\n")
    code, out = run("status", *d)
    assert code == 1 and out.startswith("Error: lmq status needs a running gateway")
    gw = admin_gateway(data).start()
    try:
        check(operations(d, "On"), "On")
        # they went through the API (the audit log), the store being the gateway's
        assert {a["action"] for a in audit_lines(data)} >= {
            "topic.put",
            "group.reset",
            "group.delete",
            "lmq.clean",
            "topic.delete",
        }
        code, out = run("status", "--json", *d)
        assert code == 0 and json.loads(out)["status"] == "ok"
        code, out = run("connections", "list", "--json", *d)
        assert code == 0
        code, out = run("topics", "create", "early", "--json", *d)  # kept from offline
        assert code == 0 and json.loads(out)["read_queues"] == 2
        code, out = run("status", "--server", "http://127.0.0.1:1", *d)
        assert code == 1 and out.count("\n") == 1 and "127.0.0.1:1" in out
        # offsets set goes through the API too: same lines, same refusals
        online = offsets(d, "G_on")
        assert audit_lines(data)[-1]["action"] == "offset.set"
        json_online = json_operations(d, "On")
        # a command with no online form says so in one line, and works once stopped
        code, out = run("store", "rebuild-index", *d)
        assert code == 1 and out.count("\n") == 1 and "works offline only" in out, out
    finally:
        gw.stop()
    before = len(audit_lines(data))
    check(operations(d, "Off"), "Off")
    assert offsets(d, "G_off") == [(c, o.replace("G_on", "G_off")) for c, o in online]
    assert len(audit_lines(data)) == before  # offline: the store itself
    json_offline = json_operations(d, "Off")
    assert json_offline == json_online
    assert [code for code, _ in json_online] == [0, 0, 0, 1, 0, 0, 0]
    assert (
        json_online[3][1] == "Error: message group 'g' of 'GID_json' has no message out on jsonT\n"
    )
    assert json_online[5][1] == {"name": "GID_json", "deleted": True, "offsets_removed": 2}
    code, out = run("store", "rebuild-index", *d)
    assert code == 0 and out.startswith("rebuilt: "), out


def offsets(d: tuple[str, ...], group: str) -> list[tuple[int, str]]:
    """``lmq offsets set`` on the topic made offline, checked; its (code, output)."""
    results = [
        run("offsets", "set", group, "rmq:early:0", "--latest", *d),
        run("offsets", "set", group, "rmq:early:0", "0", *d),
        run("offsets", "set", group, "rmq:early:0", "5", *d),
        run("offsets", "set", group, "rmq:nowhere:0", "--earliest", *d),
        run("offsets", "set", group, "rmq:early:0", *d),
    ]
    assert results[1][1].endswith(" -> 0\n") and results[1][0] == 0
    assert results[2] == (1, "Error: offset 5 is past the end of 'rmq:early:0' (next offset 0)\n")
    assert results[3] == (1, "Error: no LMQ named 'rmq:nowhere:0'\n")
    assert results[4][0] == 2 and "give exactly one of OFFSET" in results[4][1]
    return results
