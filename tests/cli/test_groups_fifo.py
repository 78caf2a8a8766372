"""``lmq groups show`` lists a group's blocked FIFO message groups (beside a store open
for writing, as beside a running gateway); ``lmq groups release`` moves one on, its
head to the group's dead-letter topic."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from broker_core import Message, MessageStore
from broker_core.clock import now_ms
from cli.main import main
from lmq.rocketmq import queue_lmq

KEY = "__SHARDINGKEY"
LMQ = queue_lmq("orders", 1)


def fill(store: MessageStore) -> None:
    store.append_batch([
        (Message(topic="orders", body=f"{g}:{n}".encode(), properties={KEY: g.encode()}),
         [LMQ]) for n in range(3) for g in ("a", "b")])


def test_show_and_release_a_blocked_message_group(tmp_path: Path) -> None:
    data = tmp_path / "data"
    runner = CliRunner()
    with MessageStore.open(data) as store:
        fill(store)
        t = now_ms()
        first = store.pop.pop_fifo("GID", LMQ, 10, 1, KEY, now=t)
        assert [p.message.record.body for p in first] == [b"a:0", b"b:0"]
        store.pop.ack(first[1].receipt)
        # a:0's invisible time (1 ms) runs out; it comes back once and runs out again
        again = store.pop.pop_fifo("GID", LMQ, 10, 1, KEY, now=t + 10_000)
        got = {p.message.record.body: p for p in again}
        assert sorted(got) == [b"a:0", b"b:1"]  # b:1 promoted by the ack, a:0 back
        store.pop.ack(got[b"b:1"].receipt)
        # shown while the store is open for writing
        result = runner.invoke(main, ["groups", "show", "GID", "--data-dir", str(data),
                                      "--json"])
    assert result.exit_code == 0, result.output
    blocked = json.loads(result.output)["blocked_message_groups"]
    assert [(b["message_group"], b["topic"], b["queue_id"], b["offset"], b["deliveries"],
             b["waiting"]) for b in blocked] == [("a", "orders", 1, 0, 2, 2)]
    text = runner.invoke(main, ["groups", "show", "GID", "--data-dir", str(data)])
    assert "blocked message groups (FIFO): 1" in text.output
    result = runner.invoke(main, ["groups", "release", "GID", "orders", "a",
                                  "--data-dir", str(data)])
    assert result.exit_code == 0, result.output
    assert "offset 0 moved to %DLQ%GID" in result.output
    missing = runner.invoke(main, ["groups", "release", "GID", "orders", "zz",
                                   "--data-dir", str(data)])
    assert missing.exit_code != 0 and "no message out" in missing.output
    with MessageStore.open(data) as store:
        dlq = store.pull(queue_lmq("%DLQ%GID", 0), 0, 10).messages
        assert [m.record.body for m in dlq] == [b"a:0"]
        nxt = store.pop.pop_fifo("GID", LMQ, 10, 60_000, KEY)
        assert [p.message.record.body for p in nxt] == [b"a:1", b"b:2"]
        assert store.pop.blocked_groups() == []
