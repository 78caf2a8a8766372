"""The pop service (gateway/rocketmq/pop_service.py) and receipts (pop_receipts.py) on a
real store: receipts rebuilt from ExtraInfo, across queues and across a restart, long
polling woken by an append and by a revive, dead letters after the retry limit, and
send-back (gateway/rocketmq/sendback.py) through the persistent schedule."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker_core import Message, MessageStore, StoreConfig
from broker_core.clock import now_ms
from gateway.publisher import Publisher
from gateway.remoting.messages import PROPS, RECONSUME, decode_properties
from gateway.rocketmq.pop_receipts import ExtraInfo, pop_retry_topic, store_receipt, visible_at
from gateway.rocketmq.pop_service import OffsetOutOfRange, PopService
from gateway.rocketmq.schedule import PROP_REAL_TOPIC, ScheduleService, level_lmq
from gateway.rocketmq.sendback import (
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RETRY_TOPIC,
    MessageNotFound,
    SendBackService,
)
from lmq.rocketmq import queue_lmq
from protocol.remoting.messages import offset_msg_id

QUEUES = 4


class Env:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.shift = 0
        self.store: MessageStore
        self.pop: PopService
        self.schedule: ScheduleService
        self.sendback: SendBackService
        self.publisher: Publisher

    def clock(self) -> int:
        return now_ms() + self.shift

    def open(self, max_times: int = 16) -> None:
        loop = asyncio.get_running_loop()
        self.store = MessageStore.open(self.data, StoreConfig())
        for q in range(QUEUES):
            self.store.create_lmq(queue_lmq("orders", q))
        self.publisher = Publisher(self.store, loop)
        self.pop = PopService(
            self.store, loop, self.publisher.submit,
            queue_count=lambda t: QUEUES if t == "orders" else (1 if t.startswith("%") else None),
            max_times=lambda _g: max_times, broker_name="gw",
        )
        self.schedule = ScheduleService(self.store, self.publisher.submit, loop, clock=self.clock)
        self.schedule.start()
        self.sendback = SendBackService(self.store, self.schedule, self.publisher.submit)

    def close(self) -> None:
        self.pop.stop()
        self.schedule.stop()
        self.store.close()

    async def send(self, body: bytes, queue: int, **props: bytes) -> int:
        result = await self.publisher.submit(
            Message(topic="orders/eu", body=body, properties=props or None, tag="T"),
            [queue_lmq("orders", queue)],
        )
        return result.position


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env(tmp_path / "data")
    e.open()
    try:
        yield e
    finally:
        e.close()


async def test_receipt_maps_to_the_stores_in_flight_key(env: Env) -> None:
    await env.send(b"x", 3)
    item = env.pop.pop_now("g", "orders", 3, 1, 30_000).items[0]
    info = ExtraInfo.parse(item.extra_info)
    assert (info.queue_id, info.queue_offset, info.retry) == (3, 0, "0")
    assert visible_at(info) == info.pop_time + 30_000
    # the receipt the store handed out is exactly the one rebuilt from ExtraInfo
    receipt = store_receipt("g", "orders", 3, 0, visible_at(info))
    env.store.pop.ack(receipt)
    assert env.store.pop.inflight_count("g") == 0
    assert pop_retry_topic("orders", "g") == "%RETRY%g_orders"


async def test_pop_all_queues_one_pop_time_and_ack_by_extra_info(env: Env) -> None:
    for q in range(QUEUES):
        await env.send(f"m{q}".encode(), q)
    result = env.pop.pop_now("g", "orders", -1, 32, 30_000)
    assert sorted(i.message.body for i in result.items) == [b"m0", b"m1", b"m2", b"m3"]
    infos = [ExtraInfo.parse(i.extra_info) for i in result.items]
    assert {i.pop_time for i in infos} == {result.pop_time}
    assert sorted(i.queue_id for i in infos) == [0, 1, 2, 3]
    assert all(i.retry == "0" and i.broker_name == "gw" for i in infos)
    assert result.start_offset_info.count(";") == 3 and result.rest_num == 0
    assert env.store.pop.inflight_count("g") == 4
    for item, info in zip(result.items, infos, strict=True):
        assert env.pop.ack("g", "orders", info.queue_id, item.message.offset, item.extra_info)
    assert env.store.pop.inflight_count("g") == 0
    # acked twice: not in flight any more, answered as a success that changes nothing
    item = result.items[0]
    assert not env.pop.ack("g", "orders", item.source.queue_id, 0, item.extra_info)
    with pytest.raises(OffsetOutOfRange):
        env.pop.ack("g", "orders", 0, 99, item.extra_info)
    with pytest.raises(ValueError):
        env.pop.ack("g", "orders", 9, 0, item.extra_info)


async def test_rotating_start_queue(env: Env) -> None:
    for q in range(QUEUES):
        for n in range(2):
            await env.send(f"{q}-{n}".encode(), q)
    firsts = [env.pop.pop_now("g", "orders", -1, 1, 30_000).items[0].source.queue_id
              for _ in range(QUEUES)]
    assert sorted(firsts) == [0, 1, 2, 3]


async def test_receipt_from_before_a_restart_still_acks(env: Env) -> None:
    await env.send(b"x", 2)
    item = env.pop.pop_now("g", "orders", 2, 1, 60_000).items[0]
    env.close()
    env.open()
    assert env.store.pop.inflight_count("g") == 1
    assert env.pop.ack("g", "orders", 2, item.message.offset, item.extra_info)
    assert env.store.pop.inflight_count("g") == 0


async def test_change_invisible_time_and_redelivery_counts(env: Env) -> None:
    await env.send(b"x", 1)
    item = env.pop.pop_now("g", "orders", 1, 1, 60_000).items[0]
    assert item.reconsume_times == 0
    old = ExtraInfo.parse(item.extra_info)
    pop_time, invisible = env.pop.change_invisible_time(
        "g", "orders", 1, item.message.offset, item.extra_info, 200
    )
    assert invisible == 200 and pop_time >= old.pop_time
    # the old receipt is void
    with pytest.raises(Exception, match="not in flight"):
        env.pop.change_invisible_time("g", "orders", 1, 0, item.extra_info, 1000)
    # a pop waiting on the queue is woken when the message becomes visible again
    started = time.monotonic()
    again = await asyncio.wait_for(env.pop.pop("g", "orders", 1, 1, 60_000, 5_000), 10)
    assert 0.1 < time.monotonic() - started < 3.0
    assert [i.message.body for i in again.items] == [b"x"]
    assert again.items[0].reconsume_times == 1


async def test_long_poll_woken_by_append_and_timeout(env: Env) -> None:
    started = time.monotonic()
    empty = await env.pop.pop("g", "orders", -1, 4, 30_000, 300)
    assert empty.items == [] and time.monotonic() - started >= 0.29
    waiting = asyncio.ensure_future(env.pop.pop("g", "orders", -1, 4, 30_000, 10_000))
    await asyncio.sleep(0.1)
    assert env.pop.polling[("g", "orders", -1)] == 1
    t0 = time.monotonic()
    await env.send(b"late", 3)
    got = await asyncio.wait_for(waiting, 5)
    assert [i.message.body for i in got.items] == [b"late"]
    assert time.monotonic() - t0 < 1.0
    assert not env.pop.polling


async def test_dead_letter_after_retry_max_times(tmp_path: Path) -> None:
    e = Env(tmp_path / "data")
    e.open(max_times=1)
    try:
        await e.send(b"poison", 0)
        for expected in (0, 1):
            item = e.pop.pop_now("g", "orders", 0, 1, 50).items[0]
            assert item.reconsume_times == expected
            await asyncio.sleep(0.08)
        # third delivery would be reconsumeTimes 2 > 1: dead-lettered instead
        got = await e.pop.pop("g", "orders", 0, 1, 30_000, 0)
        assert got.items == []
        dlq = e.store.pull(queue_lmq("%DLQ%g", 0), 0, 10).messages
        assert [m.body for m in dlq] == [b"poison"]
        assert dlq[0].record.properties[RECONSUME] == b"2"
        assert e.store.pop.inflight_count("g") == 0 and e.pop.dead_lettered == 1
    finally:
        e.close()


async def test_send_back_goes_through_the_schedule_to_retry(env: Env) -> None:
    position = await env.send(b"fail", 0, KEYS=b"k")
    out = await env.sendback.send_back("g", position, store_host=("10.0.0.1", 8080))
    assert out.topic == "%RETRY%g" and out.level == 3 and out.reconsume_times == 1
    held = env.store.pull(level_lmq(3), 0, 1).messages[0].record
    assert held.properties[PROP_REAL_TOPIC] == b"%RETRY%g"
    env.shift = 10_500
    env.schedule.rearm()
    retry = queue_lmq("%RETRY%g", 0)
    deadline = time.monotonic() + 5
    while env.store.lmq(retry) is None or env.store.lmq(retry).max_offset == 0:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    rec = env.store.pull(retry, 0, 1).messages[0].record
    assert rec.body == b"fail" and rec.topic == "orders/eu" and rec.tag == "T"
    rmq = decode_properties(rec.properties[PROPS].decode())
    assert rmq[PROP_RETRY_TOPIC] == "orders" and rmq["TAGS"] == "T"
    assert rmq["mqttSecondTopic"] == "/eu"
    assert rec.properties[RECONSUME] == b"1"
    assert rec.properties["KEYS"] == b"k"
    origin = offset_msg_id(("10.0.0.1", 8080), position)
    assert rmq[PROP_ORIGIN_MESSAGE_ID] == origin
    # sent back again from the retry topic: level 3 + 1, origin and retry topic kept
    retried_at = env.store.pull(retry, 0, 1).messages[0].record.position
    again = await env.sendback.send_back("g", retried_at)
    assert again.level == 4 and again.reconsume_times == 2
    held = env.store.pull(level_lmq(4), 0, 1).messages[0].record
    rmq = decode_properties(held.properties[PROPS].decode())
    assert rmq[PROP_ORIGIN_MESSAGE_ID] == origin and rmq[PROP_RETRY_TOPIC] == "orders"


async def test_send_back_to_dlq_and_bad_positions(env: Env) -> None:
    position = await env.send(b"fail", 0, **{PROPS: b"", RECONSUME: b"3"})
    out = await env.sendback.send_back("g", position, max_reconsume_times=3)
    assert out.dead_lettered and out.topic == "%DLQ%g" and out.reconsume_times == 4
    dlq = env.store.pull(queue_lmq("%DLQ%g", 0), 0, 1).messages[0].record
    assert dlq.body == b"fail" and "DELAY" not in dlq.properties
    direct = await env.sendback.send_back("g", position, delay_level=-1)
    assert direct.dead_lettered
    level = await env.sendback.send_back("g", position, delay_level=1, max_reconsume_times=16)
    assert level.level == 1 and not level.dead_lettered
    for bad in (position + 1, 10**9, -5):
        with pytest.raises(MessageNotFound):
            await env.sendback.send_back("g", bad)
