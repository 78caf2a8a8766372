"""TopicRegistry and GroupRegistry on a real store in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.topics import QueueInUse, TopicRegistry, check_name
from lmq.rocketmq import GroupConfig, InvalidName, MessageType, Perm, TopicConfig

CFG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data: Path):
    s = MessageStore.open(data, CFG)
    yield s
    s.close()


def test_create_makes_the_queue_lmqs_and_persists_the_config(data: Path):
    with MessageStore.open(data, CFG) as s:
        reg = TopicRegistry(s, auto_create=False, default_queues=8)
        changed: list[str] = []
        reg.add_listener(changed.append)
        cfg = reg.create(TopicConfig("orders", 4, 4, message_type=MessageType.FIFO))
        assert reg.get("orders") == cfg and "orders" in reg and reg.names() == ["orders"]
        assert [i.name for i in s.lmqs("rmq:orders:")] == [f"rmq:orders:{q}" for q in range(4)]
        assert changed == ["orders"]
    with MessageStore.open(data, CFG) as s:
        reg = TopicRegistry(s, auto_create=False, default_queues=8)
        assert reg.get("orders") == TopicConfig("orders", 4, 4, message_type=MessageType.FIFO)


def test_load_recreates_queue_lmqs_an_index_rebuild_forgot(data: Path):
    with MessageStore.open(data, CFG) as s:
        TopicRegistry(s, False, 8).create(TopicConfig("t", 2, 2))
        s.append(Message(topic="t", body=b"x"), ["rmq:t:1"])
        s.rebuild_index()
        # the empty queue 0 is index metadata only: the rebuild forgot it
        assert s.lmq("rmq:t:0") is None and s.lmq("rmq:t:1").messages == 1
        TopicRegistry(s, False, 8)
        assert s.lmq("rmq:t:0") is not None and s.lmq("rmq:t:1").messages == 1


def test_growing_keeps_messages_and_shrinking_only_drops_empty_queues(store):
    reg = TopicRegistry(store, auto_create=False, default_queues=8)
    reg.create(TopicConfig("t", 2, 2))
    store.append(Message(topic="t", body=b"a"), ["rmq:t:1"])
    reg.create(TopicConfig("t", 6, 6))
    assert len(list(store.lmqs("rmq:t:"))) == 6 and store.lmq("rmq:t:1").messages == 1
    # 6 -> 3: queues 3..5 are empty and go
    reg.create(TopicConfig("t", 3, 3))
    assert [i.name for i in store.lmqs("rmq:t:")] == ["rmq:t:0", "rmq:t:1", "rmq:t:2"]
    # 3 -> 1 would drop queue 1, which holds a message: refused, nothing changed
    with pytest.raises(QueueInUse, match="queue 1"):
        reg.create(TopicConfig("t", 1, 1))
    assert reg.get("t") == TopicConfig("t", 3, 3)
    assert store.lmq("rmq:t:2") is not None
    # fewer write queues but as many read queues: nothing is dropped
    reg.create(TopicConfig("t", read_queues=3, write_queues=1))
    assert len(list(store.lmqs("rmq:t:"))) == 3


def test_ensure_auto_creates_only_when_allowed(store):
    off = TopicRegistry(store, auto_create=False, default_queues=4)
    assert off.ensure("plain") is None and off.get("plain") is None
    assert off.ensure("%RETRY%g1") == TopicConfig("%RETRY%g1", 1, 1)
    assert off.ensure("%DLQ%g1") == TopicConfig("%DLQ%g1", 1, 1)
    on = TopicRegistry(store, auto_create=True, default_queues=4)
    # auto-created topics are MIXED (every message type), NORMAL in the strict mode
    assert on.ensure("plain") == TopicConfig("plain", 4, 4, message_type=MessageType.MIXED)
    assert len(list(store.lmqs("rmq:plain:"))) == 4
    assert on.ensure("TBW102") is None and on.ensure("rmq_sys_x") is None
    assert on.ensure("a%b") is None  # % is for retry and DLQ topics only
    with pytest.raises(InvalidName):
        on.ensure("a/b")
    with pytest.raises(InvalidName):
        on.ensure("")
    # an existing topic is returned as it is, whatever its queue count
    on.create(TopicConfig("five", 5, 5, perm=Perm.READ))
    assert on.ensure("five") == TopicConfig("five", 5, 5, perm=Perm.READ)


def test_delete_removes_config_lmqs_and_offsets_and_not_other_topics(data: Path):
    with MessageStore.open(data, CFG) as s:
        reg = TopicRegistry(s, False, 8)
        reg.create(TopicConfig("t", 2, 2))
        reg.create(TopicConfig("t2", 1, 1))
        s.append(Message(topic="t", body=b"a"), ["rmq:t:0", "rmq:t2:0"])
        s.commit_offset("g", "rmq:t:0", 1)
        changed: list[str] = []
        reg.add_listener(changed.append)
        assert reg.delete("t") is True and changed == ["t"]
        assert reg.get("t") is None and list(s.lmqs("rmq:t:")) == []
        assert list(s.offsets("rmq:t:0")) == []
        assert s.lmq("rmq:t2:0").messages == 1
        assert reg.delete("t") is False
    with MessageStore.open(data, CFG) as s:
        assert TopicRegistry(s, False, 8).names() == ["t2"]


def test_delete_finishes_an_interrupted_delete(store):
    # LMQs of a topic whose configuration is already gone (a crash mid-delete)
    store.create_lmq("rmq:gone:0")
    reg = TopicRegistry(store, False, 8)
    assert reg.delete("gone") is True and store.lmq("rmq:gone:0") is None


def test_unreadable_config_is_skipped(store):
    store.put_meta("rmq/topic/bad", b"not json")
    store.put_meta("rmq/topic/ok", TopicConfig("ok", 1, 1).encode())
    assert TopicRegistry(store, False, 8).names() == ["ok"]


def test_check_name_refuses_system_topics():
    assert check_name("orders") == "orders"
    with pytest.raises(InvalidName):
        check_name("TBW102")
    with pytest.raises(InvalidName):
        check_name("a:b")


def test_default_queues_is_checked(store):
    with pytest.raises(ValueError):
        TopicRegistry(store, True, 0)


def test_group_registry(data: Path):
    with MessageStore.open(data, CFG) as s:
        groups = GroupRegistry(s, auto_create=True)
        assert groups.ensure("g1") == GroupConfig("g1")
        groups.create(GroupConfig("g2", retry_max_times=3))
        assert groups.names() == ["g1", "g2"] and "g2" in groups and len(groups) == 2
        with pytest.raises(InvalidName):
            groups.ensure("bad group")
    with MessageStore.open(data, CFG) as s:
        groups = GroupRegistry(s, auto_create=False)
        assert groups.get("g2") == GroupConfig("g2", retry_max_times=3)
        assert groups.ensure("g3") is None and groups.get("g3") is None
        assert groups.delete("g1") is True and groups.delete("g1") is False
    with MessageStore.open(data, CFG) as s:
        assert GroupRegistry(s).names() == ["g2"]
