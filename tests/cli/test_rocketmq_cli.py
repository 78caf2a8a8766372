"""``lmq topics create|show|delete``, ``lmq groups`` and ``lmq messages`` through click's
runner on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core import Message, MessageStore
from cli.main import main
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.topics import TopicRegistry
from lmq.rocketmq import GroupConfig, MessageType, TopicConfig
from protocol.remoting.messages import offset_msg_id


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with MessageStore.open(tmp_path) as s:
        s.append(Message(topic="x", body=b"x"), ["plain-lmq"])
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_create_show_change_delete(data_dir):
    d = ("--data-dir", str(data_dir))
    code, out = run("topics", "create", "orders", "--queues", "4", "--type", "fifo", *d)
    assert code == 0 and "created topic orders: 4 read / 4 write queues, perm rw, FIFO" in out
    with MessageStore.open(data_dir) as s:
        assert TopicRegistry(s, False, 8).get("orders") == TopicConfig(
            "orders", 4, 4, message_type=MessageType.FIFO)
        for i in range(3):
            s.append(Message(topic="orders/eu", body=b"m%d" % i), ["rmq:orders:1"])
    code, out = run("topics", "show", "orders", *d)
    assert code == 0 and "queues:       4 read, 4 write" in out and "FIFO" in out
    assert "    1         0         3         3" in out
    code, out = run("topics", "show", "orders", "--json", *d)
    data = json.loads(out)
    assert data["read_queues"] == 4 and data["perm"] == 6 and data["message_type"] == "FIFO"
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in data["queues"]] == [
        (0, 0, 0), (1, 0, 3), (2, 0, 0), (3, 0, 0)]
    # change: fewer write queues and read-only; the type is kept
    code, out = run("topics", "create", "orders", "--write-queues", "2", "--perm", "r", *d)
    assert code == 0 and "changed topic orders: 4 read / 2 write queues, perm r, FIFO" in out
    # dropping queue 1, which holds messages, is refused
    code, out = run("topics", "create", "orders", "--queues", "1", *d)
    assert code == 1 and "queue 1 of topic 'orders' holds 3 message(s)" in out
    code, out = run("topics", "delete", "orders", *d)
    assert code == 0 and "deleted topic orders: 4 queue(s), 3 message(s)" in out
    code, out = run("topics", "delete", "orders", *d)
    assert code == 1 and "no RocketMQ topic named 'orders'" in out
    with MessageStore.open(data_dir) as s:
        assert list(s.lmqs("rmq:")) == [] and s.lmq("plain-lmq") is not None


def test_mixed_topics(data_dir):
    """``--type mixed`` makes a MIXED topic (every message type); auto-created topics
    are MIXED unless the registry is strict (NORMAL), retry topics NORMAL."""
    d = ("--data-dir", str(data_dir))
    code, out = run("topics", "create", "any", "--type", "mixed", *d)
    assert code == 0 and "perm rw, MIXED" in out
    with MessageStore.open(data_dir) as s:
        config = TopicRegistry(s, False, 8).get("any")
        assert config is not None and config.message_type is MessageType.MIXED
        assert all(config.accepts(kind) for kind in MessageType)
        assert TopicRegistry(s, True, 8).ensure("auto").message_type is MessageType.MIXED
        strict = TopicRegistry(s, True, 8, auto_type=MessageType.NORMAL)
        normal = strict.ensure("strict")
        assert normal.message_type is MessageType.NORMAL
        assert not normal.accepts(MessageType.DELAY) and normal.accepts(MessageType.NORMAL)
        assert normal.accepted_types == (MessageType.NORMAL,)
        assert strict.ensure("%RETRY%g").message_type is MessageType.NORMAL


def test_create_checks_its_options(data_dir):
    d = ("--data-dir", str(data_dir))
    code, out = run("topics", "create", "a:b", *d)
    assert code == 1 and "contains characters other than" in out
    code, out = run("topics", "create", "TBW102", *d)
    assert code == 1 and "system topic" in out
    code, out = run("topics", "create", "t", "--queues", "2", "--read-queues", "1", *d)
    assert code == 2
    code, out = run("topics", "create", "t", "--perm", "x", *d)
    assert code == 2 and "give rw, r, w" in out
    code, out = run("topics", "create", "t", "--perm", "2", "--json", *d)
    assert code == 0 and json.loads(out)["perm_text"] == "w"
    assert len(json.loads(out)["queues"]) == 8


def test_show_keeps_the_lmq_view(data_dir):
    d = ("--data-dir", str(data_dir))
    code, out = run("topics", "show", "plain-lmq", *d)
    assert code == 0 and "messages:    1" in out
    code, out = run("topics", "show", "plain-lmq", "--json", *d)
    assert code == 0 and json.loads(out)["messages"] == 1
    # an LMQ and a topic of the same name: the topic wins, --lmq shows the LMQ
    run("topics", "create", "plain-lmq", "--queues", "1", *d)
    code, out = run("topics", "show", "plain-lmq", *d)
    assert code == 0 and "topic:        plain-lmq" in out
    code, out = run("topics", "show", "plain-lmq", "--lmq", *d)
    assert code == 0 and "name:        plain-lmq" in out
    code, out = run("topics", "show", "nothing", *d)
    assert code == 1 and "no LMQ named 'nothing'" in out
    # `topics list` still lists LMQs, the topic's queues among them
    code, out = run("topics", "list", "--json", *d)
    assert {json.loads(line)["name"] for line in out.splitlines()} == {
        "plain-lmq", "rmq:plain-lmq:0"}


def test_groups_list_and_show(data_dir):
    d = ("--data-dir", str(data_dir))
    with MessageStore.open(data_dir) as s:
        TopicRegistry(s, False, 8).create(TopicConfig("t", 2, 2))
        GroupRegistry(s).create(GroupConfig("g1", retry_max_times=5))
        GroupRegistry(s).create(GroupConfig("idle"))
        for i in range(5):
            s.append(Message(topic="t", body=b"%d" % i), [f"rmq:t:{i % 2}"])
        s.commit_offset("g1", "rmq:t:0", 1)  # max 3: lag 2
        s.commit_offset("g1", "rmq:t:1", 2)  # max 2: lag 0
        s.commit_offset("unconfigured", "rmq:t:0", 0)
        s.commit_offset("mqtt-session", "plain-lmq", 0)  # not a RocketMQ queue
    code, out = run("groups", "list", *d)
    assert code == 0 and "3 group(s)" in out and "mqtt-session" not in out
    code, out = run("groups", "list", "--json", *d)
    rows = {r["group"]: r for r in map(json.loads, out.splitlines())}
    assert rows["g1"]["lag"] == 2 and rows["g1"]["retry_max_times"] == 5
    assert rows["g1"]["topics"] == ["t"] and rows["g1"]["queues"] == 2
    assert rows["idle"]["queues"] == 0 and rows["unconfigured"]["configured"] is False
    assert rows["unconfigured"]["lag"] == 3
    code, out = run("groups", "show", "g1", *d)
    assert code == 0 and "total lag: 2" in out and "retry max 5" in out
    code, out = run("groups", "show", "g1", "--json", *d)
    data = json.loads(out)
    assert [(q["queue_id"], q["offset"], q["max_offset"], q["lag"]) for q in data["queues"]] == [
        (0, 1, 3, 2), (1, 2, 2, 0)]
    code, out = run("groups", "show", "nobody", *d)
    assert code == 1 and "no consumer group named 'nobody'" in out


def test_messages_show_by_offset_msg_id_and_uniq_key_and_find_by_key(data_dir):
    d = ("--data-dir", str(data_dir))
    uniq = "7F0000010B5418B4AAC2550000000001"
    with MessageStore.open(data_dir) as s:
        TopicRegistry(s, False, 8).create(TopicConfig("orders", 2, 2))
        first = s.append(Message(
            topic="orders/eu/42", body=b"hello", tag="TagA",
            properties={"KEYS": b"order-1 cust-7", "UNIQ_KEY": uniq.encode()}),
            ["rmq:orders:1", "mqtt:orders/#"])
        s.append(Message(topic="orders", body=b"\xff\x00", properties={"KEYS": b"order-1"}),
                 ["rmq:orders:0"])
    msg_id = offset_msg_id(("10.0.0.5", 10911), first.position)
    code, out = run("messages", "show", msg_id, *d)
    assert code == 0 and "offsetMsgId of 10.0.0.5:10911" in out
    assert "queue:      orders #1 offset 0" in out and "lmq:        mqtt:orders/# offset 0" in out
    assert "body:       5 bytes: hello" in out and "property:   KEYS=order-1 cust-7" in out
    code, out = run("messages", "show", uniq, "--json", *d)
    (data,) = [json.loads(line) for line in out.splitlines()]
    assert data["found_by"] == "UNIQ_KEY" and data["position"] == first.position
    assert data["topic"] == "orders/eu/42" and data["tag"] == "TagA"
    assert data["body"] == "hello" and data["queues"] == [
        {"topic": "orders", "queue_id": 1, "queue_offset": 0}]
    # a key of KEYS is not a message id
    code, out = run("messages", "show", "order-1", *d)
    assert code == 1 and "no message with offsetMsgId or UNIQ_KEY" in out
    # a well-formed offsetMsgId at a position where no record starts
    code, out = run("messages", "show", offset_msg_id(("10.0.0.5", 10911), 3), *d)
    assert code == 1
    code, out = run("messages", "find", "--topic", "orders", "--key", "order-1", *d)
    assert code == 0 and "2 message(s)" in out and "binary; --json shows it" in out
    code, out = run("messages", "find", "--topic", "orders", "--key", "order-1", "--json",
                    "--max", "1", *d)
    (data,) = [json.loads(line) for line in out.splitlines()]
    assert data["body_base64"] == "/wA=" and data["topic"] == "orders"
    code, out = run("messages", "find", "--topic", "other", "--key", "order-1", *d)
    assert code == 0 and "0 message(s)" in out
