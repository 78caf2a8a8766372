"""The Python remoting client against an in-process gateway: what ali-ons cannot do
(batch, lite pull, pop, ordered consumption with queue locks) and the push consumer's
group behaviour (rebalance across members, send-back redelivery, offsets)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gateway.clients import (
    Message,
    PopConsumer,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    RemotingClient,
)
from protocol.remoting import RequestCode
from protocol.remoting.bodies import LockBatchRequestBody, LockBatchResponseBody

from .remoting_support import port_of, running_gateway

BOUND = 20.0


def ns(gw) -> str:  # type: ignore[no-untyped-def]
    return f"127.0.0.1:{port_of(gw)}"


def owned(consumer: PushConsumer, topic: str) -> list[int]:
    """The queue ids of ``topic`` the consumer holds (not its retry topic's)."""
    return [mq.queue_id for mq in consumer.assigned if mq.topic == topic]


async def test_batch_send_and_lite_pull_and_offsets(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw, RemotingClient(ns(gw)) as client:
        producer = Producer(client, "pg")
        t0 = int(time.time() * 1000)
        batch = [Message("bt", f"b{i}".encode(), tags="x", keys=[f"k{i}"]) for i in range(5)]
        result = await producer.send_batch("bt", batch, queue_id=1)
        ids = result.msg_id.split(",")
        assert len(ids) == 5 and len(set(ids)) == 5
        assert result.queue.queue_id == 1
        pull = PullConsumer(client, "cg")
        mq = next(q for q in await pull.queues("bt") if q.queue_id == 1)
        first = await pull.lite_pull(mq, 0, max_nums=3)
        assert [m.body for m in first.messages] == [b"b0", b"b1", b"b2"]
        assert [m.msg_id for m in first.messages] == ids[:3]  # UNIQ_KEY kept per message
        assert [m.keys for m in first.messages] == ["k0", "k1", "k2"]
        assert first.next_begin_offset == 3 and first.max_offset == 5
        rest = await pull.pull(mq, first.next_begin_offset)
        assert [m.body for m in rest.messages] == [b"b3", b"b4"]
        # no commit yet, and the queue starts at 0: 0, as the broker answers then
        assert await pull.query_offset(mq) == 0
        await pull.update_offset(mq, 3)
        assert await pull.query_offset(mq) == 3
        assert await pull.min_offset(mq) == 0 and await pull.max_offset(mq) == 5
        assert await pull.search_offset(mq, t0) == 0
        assert await pull.search_offset(mq, int(time.time() * 1000) + 60_000) == 5
        assert t0 - 1000 <= await pull.earliest_store_time(mq) <= int(time.time() * 1000)


async def test_long_polling_pull_is_woken_by_a_send(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw, RemotingClient(ns(gw)) as client:
        pull = PullConsumer(client, "cg")
        mq = next(q for q in await pull.queues("lp") if q.queue_id == 0)

        async def later() -> None:
            await asyncio.sleep(0.5)
            await Producer(client, "pg").send("lp", b"wake", queue_id=0)

        task = asyncio.ensure_future(later())
        t0 = time.monotonic()
        result = await pull.pull(mq, 0, suspend_ms=10_000)
        waited = time.monotonic() - t0
        await task
        assert [m.body for m in result.messages] == [b"wake"]
        assert 0.4 <= waited < 5.0  # held, then woken, not the full 10 s
        t0 = time.monotonic()
        empty = await pull.pull(mq, 1, suspend_ms=800)
        assert empty.status == 19 and 0.6 <= time.monotonic() - t0 < 5.0


async def test_push_consumers_share_the_queues_and_rebalance(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        got: list[tuple[str, bytes]] = []

        def handler(name: str):  # type: ignore[no-untyped-def]
            async def handle(message: ReceivedMessage) -> None:
                got.append((name, message.body))

            return handle

        clients = [RemotingClient(ns(gw), client_id=f"c{i}") for i in range(2)]
        consumers = []
        try:
            for i, client in enumerate(clients):
                c = PushConsumer(client, "grp", consume_from="first", suspend_ms=1000,
                                 rebalance_interval=1.0, commit_interval=0.5)
                c.subscribe("rb", "*", handler(f"c{i}"))
                await c.start()
                consumers.append(c)
            deadline = time.monotonic() + BOUND
            while time.monotonic() < deadline:
                a, b = (set(owned(c, "rb")) for c in consumers)
                if len(a) == 4 and len(b) == 4 and not a & b:
                    break
                await asyncio.sleep(0.1)
            assert owned(consumers[0], "rb") == [0, 1, 2, 3]  # the average strategy
            assert owned(consumers[1], "rb") == [4, 5, 6, 7]
            async with RemotingClient(ns(gw)) as pc:
                producer = Producer(pc, "pg")
                for i in range(24):
                    await producer.send("rb", f"m{i}".encode())
            deadline = time.monotonic() + BOUND
            while len(got) < 24 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert sorted(b for _, b in got) == sorted(f"m{i}".encode() for i in range(24))
            assert {n for n, _ in got} == {"c0", "c1"}
            # one member leaves: the other takes every queue
            await consumers.pop().close()
            await clients[1].close()
            deadline = time.monotonic() + BOUND
            while len(owned(consumers[0], "rb")) < 8 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert owned(consumers[0], "rb") == list(range(8))
            async with RemotingClient(ns(gw)) as pc:
                await Producer(pc, "pg").send("rb", b"after", queue_id=7)
            deadline = time.monotonic() + BOUND
            while (("c0", b"after") not in got) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert ("c0", b"after") in got
            assert len(got) == 25  # nothing consumed twice: offsets were committed
        finally:
            for c in consumers:
                await c.close()
            for cl in clients:
                await cl.close()


async def test_failed_consume_comes_back_through_the_retry_topic(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw, RemotingClient(ns(gw)) as client:
        seen: list[ReceivedMessage] = []
        done = asyncio.Event()

        async def handle(message: ReceivedMessage) -> bool:
            seen.append(message)
            if message.body == b"bad" and message.reconsume_times == 0:
                return False
            if message.body == b"bad":
                done.set()
            return True

        consumer = PushConsumer(client, "sbgrp", consume_from="first", suspend_ms=1000)
        consumer.subscribe("sb", "*", handle)
        await consumer.start()
        try:
            await Producer(client, "pg").send("sb", b"bad", keys=["kb"])
            await asyncio.wait_for(done.wait(), 40.0)
        finally:
            await consumer.close()
        bad = [m for m in seen if m.body == b"bad"]
        assert [m.reconsume_times for m in bad] == [0, 1]
        assert bad[1].topic == "%RETRY%sbgrp"
        assert bad[1].properties.get("RETRY_TOPIC") == "sb"
        assert bad[1].msg_id == bad[0].msg_id  # the UNIQ_KEY travels with the copy


async def test_pop_ack_and_invisible_time(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw, RemotingClient(ns(gw)) as client:
        producer = Producer(client, "pg")
        for i in range(3):
            await producer.send("pp", f"p{i}".encode(), tags="t")
        pop = PopConsumer(client, "popgrp")
        got = await pop.pop("pp", max_nums=10, invisible_ms=1500)
        assert sorted(p.message.body for p in got) == [b"p0", b"p1", b"p2"]
        assert all(p.receipt.count(" ") >= 6 for p in got)  # ExtraInfo
        by_body = {p.message.body: p for p in got}
        await pop.ack(by_body[b"p0"])
        renewed = await pop.change_invisible_time(by_body[b"p1"], 10_000)
        assert renewed.receipt != by_body[b"p1"].receipt
        assert await pop.pop("pp", max_nums=10, invisible_ms=1500) == []  # all invisible
        await asyncio.sleep(2.0)
        again = await pop.pop("pp", max_nums=10, invisible_ms=60_000, poll_ms=2000)
        assert [p.message.body for p in again] == [b"p2"]  # p0 acked, p1 still hidden
        await pop.ack(again[0])
        await pop.ack(renewed)


async def test_orderly_consumer_holds_queue_locks_and_keeps_order(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        order: list[bytes] = []
        failed_once: set[bytes] = set()

        async def handle(message: ReceivedMessage) -> bool:
            if message.body == b"o3" and b"o3" not in failed_once:
                failed_once.add(b"o3")
                return False  # retried in place: o4 must not overtake it
            order.append(message.body)
            return True

        client = RemotingClient(ns(gw), client_id="orderly-a")
        consumer = PushConsumer(client, "ogrp", orderly=True, consume_from="first",
                                suspend_ms=1000, lock_interval=1.0)
        consumer.subscribe("ord", "*", handle)
        await consumer.start()
        try:
            assert owned(consumer, "ord") == list(range(8))
            # another client of the group cannot take the locks this one holds
            async with RemotingClient(ns(gw), client_id="orderly-b") as other:
                conn = await other.connection(ns(gw))
                body = LockBatchRequestBody("ogrp", "orderly-b", tuple(consumer.assigned))
                response = await conn.call(RequestCode.LOCK_BATCH_MQ, None, body.serialize())
                assert LockBatchResponseBody.parse(response.body).lock_ok_mq_set == ()
                producer = Producer(other, "pg")
                for i in range(6):
                    await producer.send("ord", f"o{i}".encode(), queue_id=2)
            deadline = time.monotonic() + BOUND
            while len(order) < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert order == [f"o{i}".encode() for i in range(6)]
        finally:
            await consumer.close()
            await client.close()
        # closing unlocked the queues: another client can lock them now
        async with RemotingClient(ns(gw), client_id="orderly-c") as third:
            conn = await third.connection(ns(gw))
            mqs = tuple((await third.route("ord")).read_queues)
            response = await conn.call(
                RequestCode.LOCK_BATCH_MQ, None,
                LockBatchRequestBody("ogrp", "orderly-c", mqs).serialize(),
            )
            assert len(LockBatchResponseBody.parse(response.body).lock_ok_mq_set) == 8
