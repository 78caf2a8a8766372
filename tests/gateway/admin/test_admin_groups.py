"""The admin API's consumer groups and messages against a running ``lmq serve`` with a
real client moving messages (the HTTP JSON API over its socket, with ``requests``):
a FIFO group's message in flight, its blocked message group and the release that moves
it on; messages found by id and by key; a reset to a time seen by the consumer; a group
deleted; the message types a topic made over the API takes (MIXED, TRANSACTION, DELAY);
idle LMQs cleaned for real; the store's statistics. Each change is in the audit log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from cli.main import main

from ..gateway_process import GatewayProcess
from .support import TIMEOUT, AdminClient, admin_gateway, audit_lines


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = admin_gateway(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


class JsonApi:
    """The gateway's HTTP JSON API (``/v1/``), the client that moves the messages."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/v1"
        self.session = requests.Session()

    def publish(self, topic: str, *entries: dict[str, Any]) -> requests.Response:
        return self.session.post(
            f"{self.base}/topics/{topic}/messages",
            json={"messages": list(entries)},
            timeout=TIMEOUT,
        )

    def receive(self, group: str, topic: str, **doc: Any) -> list[dict[str, Any]]:
        response = self.session.post(
            f"{self.base}/groups/{group}/topics/{topic}/receive", json=doc, timeout=TIMEOUT
        )
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    def ack(self, group: str, *messages: dict[str, Any]) -> None:
        handles = [m["receipt_handle"] for m in messages]
        response = self.session.post(
            f"{self.base}/groups/{group}/ack", json={"receipt_handles": handles}, timeout=TIMEOUT
        )
        assert response.status_code == 200, response.text


def test_fifo_in_flight_blocked_release_and_messages_found(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    client = JsonApi(gw.ports["unified"])
    made = api.call("PUT", "/topics/fifoT", {"queues": 1, "message_type": "FIFO"})
    assert made.status_code == 201, made.text
    sent = client.publish(
        "fifoT",
        *({"body": f"a:{n}", "message_group": "a", "keys": [f"k-a{n}"]} for n in range(3)),
        {"body": "b:0", "message_group": "b"},
    )
    assert sent.status_code == 200, sent.text
    ids = [r["message_id"] for r in sent.json()["results"]]
    # found by id (the UNIQ_KEY a client was given) and by key, read-only
    [by_id] = api.get(f"/messages/{ids[1]}")["items"]
    assert by_id["body"] == "a:1" and by_id["topic"] == "fifoT"
    assert by_id["queues"] == [{"topic": "fifoT", "queue_id": 0, "queue_offset": 1}]
    [by_key] = api.get("/messages", topic="fifoT", key="k-a2")["items"]
    assert by_key["body"] == "a:2" and by_key["found_by"] == "key"
    assert api.get("/messages", topic="fifoT", key="k-none")["items"] == []
    # the heads of both message groups popped; b's acked, a's left in flight
    first = client.receive("GID_fifo", "fifoT", ordered=True, invisible_seconds=1)
    assert [m["body"] for m in first] == ["a:0", "b:0"]
    client.ack("GID_fifo", first[1])
    group = api.get("/groups/GID_fifo")
    assert group["in_flight"] == 1 and [q["in_flight"] for q in group["queues"]] == [1]
    assert group["blocked_message_groups"] == []
    # a:0 not acked comes back (its invisible time ran out): message group a is blocked
    again: list[dict[str, Any]] = []
    for _ in range(20):
        again = client.receive(
            "GID_fifo", "fifoT", ordered=True, invisible_seconds=60, wait_seconds=1
        )
        if again:
            break
    assert [(m["body"], m["delivery_count"]) for m in again] == [("a:0", 2)]
    [blocked] = api.get("/groups/GID_fifo")["blocked_message_groups"]
    assert blocked["message_group"] == "a" and blocked["topic"] == "fifoT"
    assert blocked["deliveries"] >= 2 and blocked["waiting"] == 2, blocked
    # released: its head goes to the group's dead-letter topic, the group moves on
    bad = api.call("POST", "/groups/GID_fifo/release", {"topic": "fifoT"})
    assert bad.status_code == 400 and bad.json()["field"] == "message_group"
    none = api.call("POST", "/groups/GID_fifo/release", {"topic": "fifoT", "message_group": "z"})
    assert none.status_code == 404 and none.json()["field"] == "message_group"
    assert api.call("GET", "/topics/%25DLQ%25GID_fifo").status_code == 404  # none made
    released = api.call(
        "POST", "/groups/GID_fifo/release", {"topic": "fifoT", "message_group": "a"}
    )
    assert released.status_code == 200, released.text
    assert released.json()["dead_letter_topic"] == "%DLQ%GID_fifo"
    assert released.json()["offset"] == 0
    after = client.receive("GID_fifo", "fifoT", ordered=True, wait_seconds=5)
    assert [m["body"] for m in after] == ["a:1"]
    assert api.get("/groups/GID_fifo")["blocked_message_groups"] == []
    peeked = api.get("/lmqs/rmq:%25DLQ%25GID_fifo:0/messages")["items"]
    assert [m["body"] for m in peeked] == ["a:0"]
    assert api.get("/topics/%25DLQ%25GID_fifo")["name"] == "%DLQ%GID_fifo"
    actions = [(a["action"], a["status"]) for a in audit_lines(gw.data_dir)]
    assert actions == [
        ("topic.put", 201),
        ("group.release", 400),
        ("group.release", 404),
        ("group.release", 200),
    ]
    api.close()


def test_types_reset_to_a_time_delete_clean_and_store(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    client = JsonApi(gw.ports["unified"])
    # the types a topic made over the API takes at once
    for name, kind in (("mixT", "MIXED"), ("txnT", "TRANSACTION"), ("delT", "DELAY")):
        made = api.call("PUT", f"/topics/{name}", {"queues": 1, "message_type": kind})
        assert made.status_code == 201 and made.json()["message_type"] == kind, made.text
    for entry in (
        {"body": "plain"},
        {"body": "ordered", "message_group": "g"},
        {"body": "later", "delay_ms": 60_000},
        {"body": "half", "transaction": True},
    ):
        assert client.publish("mixT", entry).status_code == 200, entry
    assert 400 <= client.publish("txnT", {"body": "plain"}).status_code < 500
    assert client.publish("txnT", {"body": "half", "transaction": True}).status_code == 200
    assert 400 <= client.publish("delT", {"body": "plain"}).status_code < 500
    assert client.publish("delT", {"body": "later", "delay_ms": 60_000}).status_code == 200
    # a reset to a time: the consumer gets what was stored from then on, again
    made = api.call("PUT", "/topics/timeT", {"queues": 1})
    assert made.status_code == 201
    assert client.publish("timeT", *({"body": f"t{n}"} for n in range(3))).status_code == 200
    got: list[dict[str, Any]] = []
    while len(got) < 3:
        got += client.receive("GID_time", "timeT", wait_seconds=5)
    client.ack("GID_time", *got)
    assert api.get("/groups/GID_time")["lag"] == 0
    since = {m["body"]: m["store_ms"] for m in got}["t1"]
    bad = api.call("POST", "/groups/GID_time/reset", {"topic": "timeT", "timestamp_ms": -1})
    assert bad.status_code == 400 and bad.json()["field"] == "timestamp_ms"
    reset = api.call("POST", "/groups/GID_time/reset", {"topic": "timeT", "timestamp_ms": since})
    assert reset.status_code == 200, reset.text
    [queue] = reset.json()["queues"]
    assert queue["old_offset"] == 3 and queue["offset"] <= 1
    again: list[dict[str, Any]] = []
    while not {"t1", "t2"} <= {m["body"] for m in again}:
        batch = client.receive("GID_time", "timeT", wait_seconds=5)
        assert batch
        again += batch
    client.ack("GID_time", *again)
    # deleted: the group and its offsets are gone
    deleted = api.call("DELETE", "/groups/GID_time")
    assert deleted.status_code == 200 and deleted.json()["offsets_removed"] == 1
    assert api.call("GET", "/groups/GID_time").status_code == 404
    assert api.call("DELETE", "/groups/GID_time").status_code == 404
    # idle LMQs cleaned for real (a topic's queues nobody writes to)
    assert api.call("PUT", "/topics/idleT", {"queues": 3}).status_code == 201
    cleaned = api.call("POST", "/lmqs/clean", {"prefix": "rmq:idleT:"})
    assert cleaned.status_code == 200, cleaned.text
    assert cleaned.json()["removed"]["lmqs"] == 3
    assert api.get("/lmqs", prefix="rmq:idleT:")["items"] == []
    # the store's statistics: the two delayed messages and the two halves above
    stats = api.get("/store")
    assert stats["segments"] >= 1 and stats["log_bytes"] > 0, stats
    assert (stats["timers_pending"], stats["transactions_pending"]) == (2, 2), stats
    actions = [a["action"] for a in audit_lines(gw.data_dir)]
    assert actions.count("group.reset") == 2 and actions.count("group.delete") == 2
    assert actions[-1] == "lmq.clean"
    api.close()


def test_in_flight_messages_listed_paged_and_shrink_on_ack(gw: GatewayProcess) -> None:
    """A real consumer pops three messages and acks none: the group's in-flight list on
    the queue names each (offset, message id, deliveries, invisible until), paged; one
    acked, the list shrinks. Reading it changes nothing: the messages stay in flight."""
    api = AdminClient(gw.ports["admin"])
    client = JsonApi(gw.ports["unified"])
    made = api.call("PUT", "/topics/flyT", {"queues": 1})
    assert made.status_code == 201, made.text
    sent = client.publish("flyT", *({"body": f"m{n}"} for n in range(3)))
    assert sent.status_code == 200, sent.text
    ids = [r["message_id"] for r in sent.json()["results"]]
    popped: list[dict[str, Any]] = []
    for _ in range(10):
        popped += client.receive(
            "GID_fly", "flyT", max_messages=3, invisible_seconds=300, wait_seconds=1
        )
        if len(popped) == 3:
            break
    assert sorted(m["body"] for m in popped) == ["m0", "m1", "m2"]
    [queue] = api.get("/groups/GID_fly")["queues"]
    lmq = queue["lmq"]
    listed = api.get("/groups/GID_fly/inflight", lmq=lmq)
    assert [(i["offset"], i["message_id"], i["deliveries"]) for i in listed["items"]] == [
        (0, ids[0], 1),
        (1, ids[1], 1),
        (2, ids[2], 1),
    ]
    assert listed["next"] is None and listed["group"] == "GID_fly"
    assert all(i["invisible_until_ms"] > i["popped_ms"] for i in listed["items"])
    # paged: two, then the rest after the next offset
    first = api.get("/groups/GID_fly/inflight", lmq=lmq, limit=2)
    assert [i["offset"] for i in first["items"]] == [0, 1] and first["next"] == 1
    rest = api.get("/groups/GID_fly/inflight", lmq=lmq, limit=2, after=first["next"])
    assert [i["offset"] for i in rest["items"]] == [2] and rest["next"] is None
    # the CLI shows the same beside the running gateway (and offline, below)
    assert cli_in_flight(gw.data_dir, "GID_fly", 2) == ([0, 1], True)
    # one acked: the list shrinks; the group's count agrees
    client.ack("GID_fly", next(m for m in popped if m["body"] == "m1"))
    after_ack = api.get("/groups/GID_fly/inflight", lmq=lmq)
    assert [i["offset"] for i in after_ack["items"]] == [0, 2]
    assert api.get("/groups/GID_fly")["in_flight"] == 2
    # bad input names its field; unknown group or LMQ: 404
    for params, status, field in (
        ({}, 400, "lmq"),
        ({"lmq": lmq, "limit": "0"}, 400, "limit"),
        ({"lmq": lmq, "after": "x"}, 400, "after"),
        ({"lmq": "rmq:noSuchT:0"}, 404, "lmq"),
    ):
        bad = api.call("GET", "/groups/GID_fly/inflight", **params)
        assert bad.status_code == status and bad.json()["field"] == field, (params, bad.text)
    unknown = api.call("GET", "/groups/GID_none/inflight", lmq=lmq)
    assert unknown.status_code == 404 and unknown.json()["field"] == "group"
    api.close()
    assert gw.stop() == 0
    assert cli_in_flight(gw.data_dir, "GID_fly", 10) == ([0, 2], False)
    text = CliRunner().invoke(
        main, ["groups", "show", "GID_fly", "--in-flight", "10", "--data-dir", str(gw.data_dir)]
    )
    assert text.exit_code == 0, text.output
    assert "flyT queue 0:" in text.output and ids[2] in text.output and ids[1] not in text.output


def cli_in_flight(data_dir: Path, group: str, n: int) -> tuple[list[int], bool]:
    """``lmq groups show GROUP --in-flight N --json``: the offsets in flight on the
    group's one queue, and whether more follow."""
    result = CliRunner().invoke(
        main,
        ["groups", "show", group, "--in-flight", str(n), "--json", "--data-dir", str(data_dir)],
    )
    assert result.exit_code == 0, result.output
    [queue] = json.loads(result.output)["queues"]
    return [m["offset"] for m in queue["in_flight_messages"]], queue["in_flight_more"]
