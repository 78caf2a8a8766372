"""lmq.rocketmq: names, queue LMQs, the MQTT mapping and the persisted configs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmq.names import validate_topic_name
from lmq.rocketmq import (
    GroupConfig,
    InvalidName,
    MessageType,
    TopicConfig,
    dlq_topic,
    join_mqtt_topic,
    parse_queue_lmq,
    queue_lmq,
    retry_topic,
    split_mqtt_topic,
    validate_group,
    validate_topic,
)

rmq_names = st.text(alphabet="%|abcXYZ019_-", min_size=1, max_size=40)


@pytest.mark.parametrize("name", ["orders", "%RETRY%g1", "a|b", "A-b_9", "x" * 127])
def test_valid_topics(name: str) -> None:
    assert validate_topic(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "a:b", "a b", "é", "x" * 128, "a.b"])
def test_invalid_topics(name: str) -> None:
    with pytest.raises(InvalidName):
        validate_topic(name)


def test_group_length_limit() -> None:
    assert validate_group("g" * 255)
    with pytest.raises(InvalidName):
        validate_group("g" * 256)


def test_retry_and_dlq() -> None:
    assert retry_topic("G") == "%RETRY%G"
    assert dlq_topic("G") == "%DLQ%G"


@given(rmq_names, st.integers(0, 1023))
def test_queue_lmq_round_trip(topic: str, queue: int) -> None:
    assert parse_queue_lmq(queue_lmq(topic, queue)) == (topic, queue)


@pytest.mark.parametrize(
    "lmq", ["mqtt:a/b", "amqp:/:q", "rmq:", "rmq:t", "rmq:t:", "rmq::1", "rmq:t:x"]
)
def test_parse_queue_lmq_rejects_other_lmqs(lmq: str) -> None:
    assert parse_queue_lmq(lmq) is None


@pytest.mark.parametrize(
    ("mqtt", "topic", "second"),
    [
        ("orders/eu/42", "orders", "/eu/42"),
        ("orders", "orders", ""),
        ("orders/", "orders", "/"),
        ("a//b", "a", "//b"),
        ("/x", "", "/x"),
    ],
)
def test_split_mqtt_topic(mqtt: str, topic: str, second: str) -> None:
    assert split_mqtt_topic(mqtt) == (topic, second)


@given(rmq_names, st.lists(st.text(alphabet="ab/é", max_size=5), max_size=4))
def test_split_join_inverse(first: str, rest: list[str]) -> None:
    mqtt = "/".join([first, *rest])
    validate_topic_name(mqtt)
    assert join_mqtt_topic(*split_mqtt_topic(mqtt)) == mqtt


def test_join_tolerates_second_topic_without_slash() -> None:
    assert join_mqtt_topic("orders", "eu/42") == "orders/eu/42"


def test_topic_config_round_trip_and_defaults() -> None:
    cfg = TopicConfig("orders", read_queues=4, write_queues=2, message_type=MessageType.FIFO)
    assert TopicConfig.decode(cfg.encode()) == cfg
    assert cfg.queue_count == 4
    assert cfg.lmqs() == [f"rmq:orders:{q}" for q in range(4)]
    assert TopicConfig.decode(b'{"name": "t", "future": 1}') == TopicConfig("t")


@pytest.mark.parametrize("kwargs", [{"read_queues": 0}, {"write_queues": 1025}, {"perm": 8}])
def test_topic_config_rejects(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        TopicConfig("t", **kwargs)


def test_group_config_round_trip() -> None:
    cfg = GroupConfig("G", retry_max_times=3)
    assert GroupConfig.decode(cfg.encode()) == cfg
    with pytest.raises(ValueError):
        GroupConfig.decode(b"[1]")

