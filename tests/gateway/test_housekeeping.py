"""Housekeeping on a real in-process gateway: retention and the idle-LMQ TTL, which must
spare LMQs still in use (subscribed MQTT filters, AMQP queues, RocketMQ topic queues)."""

from __future__ import annotations

import asyncio
import time

from broker_core import Message, StoreConfig
from gateway.config import GatewayConfig
from gateway.housekeeping import run_once
from gateway.server import Gateway
from lmq.rocketmq import TopicConfig


async def test_idle_ttl_spares_lmqs_in_use_and_retention_runs(tmp_path):
    store_cfg = StoreConfig(
        segment_bytes=128 * 1024,
        max_message_bytes=64 * 1024,
        lmq_ttl_ms=1,
        retention_bytes=256 * 1024,
    )
    gw = Gateway(
        GatewayConfig(
            data_dir=tmp_path, mqtt_port=0, amqp_port=0, unified_port=0, grpc_port=0,
            store=store_cfg)
    )
    await gw.start()
    try:
        store = gw.ctx.store
        gw.topic_space.add_filter("subscribed/#")
        gw.ctx.rocketmq_topics.create(TopicConfig("rtopic", 1, 1))
        names = ("mqtt:subscribed/#", "mqtt:nobody/#", "amqp:/:orders", "plain", "rmq:rtopic:0",
                 "rmq:gone:0")
        for name in names:
            store.append(Message(topic="t", body=b"x"), [name])
        for _ in range(60):
            store.append(Message(topic="t", body=b"y" * 10_000), ["bulk-holder"])
        segments = len(store.log.segments())
        time.sleep(0.01)
        await asyncio.to_thread(run_once, store, gw.topic_space)
        assert store.lmq("mqtt:nobody/#") is None  # idle and unsubscribed: removed
        assert store.lmq("plain") is None
        assert store.lmq("mqtt:subscribed/#") is not None
        assert store.lmq("amqp:/:orders") is not None
        assert store.lmq("rmq:rtopic:0") is not None  # a RocketMQ topic's queue
        assert store.lmq("rmq:gone:0") is None  # no such topic
        assert len(store.log.segments()) < segments  # retention by size ran
        assert store.log.size_bytes <= 256 * 1024 + 128 * 1024
    finally:
        await gw.stop()
