"""``lmq transactions list / show`` through click's runner on a real store."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from broker_core import Message, MessageStore
from cli.main import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_list_and_show(tmp_path: Path):
    with MessageStore.open(tmp_path) as s:
        pending = s.append_half(Message(topic="orders", body=b"abc"), ["q1", "q2"], "pg-1")
        other = s.append_half(Message(topic="pay", body=b"x"), ["q3"], "pg-2")
        done = s.append_half(Message(topic="orders", body=b"y"), ["q1"], "pg-1")
        s.end_transaction(done.position, commit=True)
        gone = s.append_half(Message(topic="orders", body=b"z"), ["q1"], "pg-1")
        s.end_transaction(gone.position, commit=False)
    d = ("--data-dir", str(tmp_path))
    code, out = run("transactions", "list", *d)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-1] == "2 pending transaction(s)"
    assert lines[1].split()[:3] == [str(pending.position), "pg-1", "orders"]
    assert lines[2].split()[:3] == [str(other.position), "pg-2", "pay"]
    code, out = run("transactions", "list", "--group", "pg-2", "--json", *d)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["position"], r["lmqs"], r["checks"]) for r in rows] == [
        (other.position, ["q3"], 0)]
    assert rows[0]["pending_ms"] >= 0 and rows[0]["body_bytes"] == 1
    code, out = run("transactions", "show", str(pending.position), *d)
    assert code == 0 and "state:          pending" in out
    assert "lmqs:           q1, q2" in out and "producer group: pg-1" in out
    code, out = run("transactions", "show", str(done.position), "--json", *d)
    assert json.loads(out) == {"position": done.position, "state": "committed"}
    code, out = run("transactions", "show", str(gone.position), *d)
    assert "state:    rolled_back" in out
    code, out = run("transactions", "show", "999999", *d)
    assert code != 0 and "no transaction" in out
