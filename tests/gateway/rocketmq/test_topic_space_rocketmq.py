"""RocketMQ topics in the one topic space: MQTT and AMQP publishes reach one queue LMQ
of the RocketMQ topic named by their first level; RocketMQ sends reach MQTT filters and
amq.topic queues. The TopicSpace on a real registry, then a real gateway with paho and
pika and direct reads of the rmq: LMQs."""

from __future__ import annotations

import zlib
from pathlib import Path

import pika
import pytest

from broker_core import MessageStore, StoreConfig
from gateway.rocketmq.topics import TopicRegistry
from gateway.topic_space import TopicSpace, rocketmq_queue_for
from lmq.rocketmq import Perm, TopicConfig

from ..amqp_support import ThreadGateway, drain, pika_connect
from ..mqtt_clients import Paho

CFG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)


@pytest.fixture
def registry(tmp_path: Path):
    with MessageStore.open(tmp_path / "data", CFG) as store:
        yield TopicRegistry(store, auto_create=False, default_queues=4)


def space_on(registry: TopicRegistry) -> TopicSpace:
    space = TopicSpace(registry.get)
    registry.add_listener(space.rocketmq_topics_changed)
    return space


def test_queue_is_crc32_of_the_full_topic_modulo_write_queues():
    config = TopicConfig("orders", read_queues=8, write_queues=4)
    for topic in ("orders", "orders/eu/42", "orders/us/1", "orders/x"):
        expected = zlib.crc32(topic.encode()) % 4
        assert rocketmq_queue_for(config, topic) == f"rmq:orders:{expected}"
    # a fixed value: stable across processes (not Python's salted str hash)
    assert zlib.crc32(b"orders/eu/42") == 3245694532
    assert rocketmq_queue_for(TopicConfig("orders", 8, 8), "orders/eu/42") == "rmq:orders:4"


def test_route_mqtt_adds_the_rocketmq_queue_of_the_first_level(registry):
    space = space_on(registry)
    space.add_filter("orders/#")
    assert space.route_mqtt("orders/eu/42") == ("mqtt:orders/#",)  # no topic yet
    registry.create(TopicConfig("orders", 4, 4))  # drops the memo
    queue = rocketmq_queue_for(registry.get("orders"), "orders/eu/42")
    assert list(space.route_mqtt("orders/eu/42")) == ["mqtt:orders/#", queue]
    assert list(space.route_mqtt("orders")) == [
        "mqtt:orders/#", rocketmq_queue_for(registry.get("orders"), "orders")]
    assert space.mqtt_matches("orders/eu/42") == ["mqtt:orders/#"]
    assert list(space.route_mqtt("ordersX/1")) == []
    assert list(space.route_mqtt("$SYS/orders")) == []
    registry.delete("orders")
    assert list(space.route_mqtt("orders/eu/42")) == ["mqtt:orders/#"]


def test_topics_without_write_permission_and_retry_topics_are_not_reached(registry):
    space = space_on(registry)
    registry.create(TopicConfig("ro", 2, 2, perm=Perm.READ))
    registry.create(TopicConfig("%RETRY%g", 1, 1))
    assert list(space.route_mqtt("ro/a")) == []
    assert list(space.route_mqtt("%RETRY%g/a")) == []
    assert space.route_rocketmq("%RETRY%g", "") == []
    assert space.is_rocketmq_queue("rmq:ro:1") and not space.is_rocketmq_queue("rmq:ro:2")
    assert not space.is_rocketmq_queue("rmq:nope:0") and not space.is_rocketmq_queue("mqtt:x")


def test_route_rocketmq_matches_the_joined_mqtt_name_without_the_rocketmq_queue(registry):
    space = space_on(registry)
    registry.create(TopicConfig("orders", 4, 4))
    space.add_filter("orders/+/42")
    space.add_filter("orders")
    space.set_amq_topic_router(lambda topic: ["amqp:/:q"] if topic == "orders/eu/42" else [])
    assert space.route_rocketmq("orders", "/eu/42") == ["mqtt:orders/+/42", "amqp:/:q"]
    assert space.route_rocketmq("orders", "eu/42") == ["mqtt:orders/+/42", "amqp:/:q"]
    assert space.route_rocketmq("orders", "") == ["mqtt:orders"]
    assert space.route_rocketmq("orders", "/eu/+") == []  # not a topic name
    # the memo of the same name, filled by an MQTT publish, holds the queue too
    queue = rocketmq_queue_for(registry.get("orders"), "orders/eu/42")
    assert list(space.route_mqtt("orders/eu/42")) == ["mqtt:orders/+/42", queue, "amqp:/:q"]
    assert space.route_rocketmq("orders", "/eu/42") == ["mqtt:orders/+/42", "amqp:/:q"]


def test_amq_topic_routing_keys_reach_the_rocketmq_queue(registry):
    space = space_on(registry)
    registry.create(TopicConfig("orders", 4, 4))
    queue = rocketmq_queue_for(registry.get("orders"), "orders/eu/42")
    assert space.route_amq_topic("orders.eu.42") == [queue]
    assert space.route_amq_topic("orders.*.42") == []


def test_no_rocketmq_lookup_leaves_routing_as_it_was():
    space = TopicSpace()
    space.add_filter("a/#")
    assert space.route_mqtt("a/b") == ("mqtt:a/#",)
    assert space.rocketmq_queue("a/b") is None and not space.is_rocketmq_queue("rmq:a:0")


# -- a real gateway ----------------------------------------------------------------------


def create_topic(gw: ThreadGateway, config: TopicConfig) -> None:
    gw.run(gw.gateway.ctx.rocketmq_topics.create, config)


def queue_records(gw: ThreadGateway, lmq: str) -> list[tuple[str, bytes]]:
    info = gw.store.lmq(lmq)
    if info is None:
        return []
    pulled = gw.store.pull(lmq, 0, max_count=1000)
    return [(m.record.topic, m.record.body) for m in pulled.messages]


def test_mqtt_publishes_land_in_one_queue_per_device_topic_in_order(gw: ThreadGateway):
    create_topic(gw, TopicConfig("orders", 4, 4))
    sub = Paho(gw.mqtt_port, "sub")
    sub.subscribe("orders/#", qos=1)
    pub = Paho(gw.mqtt_port, "pub")
    topics = ["orders/eu/42", "orders/us/7", "orders"]
    for i in range(5):
        for topic in topics:
            pub.publish(topic, b"%s %d" % (topic.encode(), i), qos=1)
    assert len(sub.get_n(15)) == 15
    config = TopicConfig("orders", 4, 4)
    for topic in topics:
        lmq = rocketmq_queue_for(config, topic)
        mine = [body for t, body in queue_records(gw, lmq) if t == topic]
        assert mine == [b"%s %d" % (topic.encode(), i) for i in range(5)]
    total = sum(gw.store.lmq(f"rmq:orders:{q}").messages for q in range(4))
    assert total == 15


def test_mqtt_only_topics_create_no_rocketmq_topic(gw: ThreadGateway):
    pub = Paho(gw.mqtt_port, "fleet")
    for i in range(20):
        pub.publish(f"fleet{i}/status", b"ok", qos=1)
    assert list(gw.store.lmqs("rmq:")) == []
    assert gw.run(gw.gateway.ctx.rocketmq_topics.names) == []


def test_topic_created_and_deleted_while_publishing(gw: ThreadGateway):
    pub = Paho(gw.mqtt_port, "pub2")
    pub.publish("late/a", b"before", qos=1)  # memoised with no RocketMQ queue
    create_topic(gw, TopicConfig("late", 1, 1))
    pub.publish("late/a", b"after", qos=1)
    assert queue_records(gw, "rmq:late:0") == [("late/a", b"after")]
    gw.run(gw.gateway.ctx.rocketmq_topics.delete, "late")
    pub.publish("late/a", b"deleted", qos=1)
    assert gw.store.lmq("rmq:late:0") is None


def test_amqp_amq_topic_publish_reaches_the_rocketmq_queue(gw: ThreadGateway):
    create_topic(gw, TopicConfig("orders", 2, 2))
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("mirror")
    ch.queue_bind("mirror", "amq.topic", "orders.#")
    ch.basic_publish("amq.topic", "orders.eu.42", b"from amqp",
                     pika.BasicProperties(delivery_mode=2))
    assert [body for _, _, body in drain(ch, "mirror")] == [b"from amqp"]
    lmq = rocketmq_queue_for(TopicConfig("orders", 2, 2), "orders/eu/42")
    records = queue_records(gw, lmq)
    assert [body for _, body in records] == [b"from amqp"]
    conn.close()
