"""Delayed messages over remoting against a real ``lmq serve`` subprocess, with the
project's remoting client: ``DELAY`` levels, ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` /
``TIMER_DELIVER_MS`` and Aliyun's ``__STARTDELIVERTIME`` are stored at once and pulled
only once due (never before, each once); the broker's precedence (a level wins over the
timer properties; SEC over MS over DELIVER); a delay past the maximum or an unreadable
one is refused with MESSAGE_ILLEGAL; a due time in the past is delivered at once;
SEND_BATCH_MESSAGE with delays is one append (all or none) and a batch mixing
``__SHARDINGKEY``s keeps each key's order."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway.clients import Message, Producer, PullConsumer, RemotingClient, RemotingError
from protocol.remoting import ResponseCode
from tests.grpc.test_grpc_send import create_topic

from ..gateway_process import GatewayProcess

BOUND = 20.0


def namesrv(gw: GatewayProcess) -> str:
    return f"127.0.0.1:{gw.ports['unified']}"


async def pulled(client: RemotingClient, topic: str) -> list[tuple[bytes, float]]:
    consumer = PullConsumer(client, "CG_delay")
    mq = (await consumer.queues(topic))[0]
    result = await consumer.pull(mq, 0, max_nums=64)
    return [(m.body, m.store_timestamp) for m in result.messages]


async def collect(client: RemotingClient, topic: str, want: int,
                  seconds: float) -> dict[bytes, float]:
    """body -> wall-clock second it was first seen in the queue."""
    seen: dict[bytes, float] = {}
    deadline = time.time() + seconds
    while len(seen) < want and time.time() < deadline:
        for body, _ in await pulled(client, topic):
            seen.setdefault(body, time.time())
        await asyncio.sleep(0.05)
    return seen


async def test_delay_properties_deliver_at_due_and_not_before(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "dly", "--type", "delay", "--queues", "1")
    gw = GatewayProcess(data).start()
    try:
        async with RemotingClient(namesrv(gw)) as client:
            p = Producer(client, "PG_delay")
            start = time.time()
            now_ms = int(start * 1000)
            sent = {
                b"level1": {"DELAY": "1"},  # 1 s
                # a level wins over the timer properties (the broker drops them)
                b"level1-over-timer": {"DELAY": "1", "TIMER_DELAY_SEC": "600"},
                b"sec": {"TIMER_DELAY_SEC": "2"},
                # SEC wins over MS, MS over DELIVER (the broker's order)
                b"sec-over-ms": {"TIMER_DELAY_SEC": "2", "TIMER_DELAY_MS": "1"},
                b"ms": {"TIMER_DELAY_MS": "1500", "TIMER_DELIVER_MS": str(now_ms + 1)},
                b"deliver": {"TIMER_DELIVER_MS": str(now_ms + 2500)},
                b"aliyun": {"__STARTDELIVERTIME": str(now_ms + 2500)},
            }
            dues = {b"level1": 1.0, b"level1-over-timer": 1.0, b"sec": 2.0,
                    b"sec-over-ms": 2.0, b"ms": 1.5, b"deliver": 2.5, b"aliyun": 2.5}
            for body, props in sent.items():
                result = await p.send("dly", body, properties=props)
                assert result.queue_offset == 0  # assigned when it fires
            # a due time already past is delivered at once
            await p.send("dly", b"past", properties={"TIMER_DELIVER_MS": str(now_ms - 5000)})
            early = await pulled(client, "dly")
            assert [b for b, _ in early] == [b"past"]
            seen = await collect(client, "dly", len(sent) + 1, BOUND)
            assert set(seen) == {*sent, b"past"}
            for body, due in dues.items():
                # never before its due time (the pull saw it at or after the due)
                assert seen[body] - start >= due - 0.05, (body, seen[body] - start)
            # each once, and nothing else fires later
            await asyncio.sleep(0.5)
            bodies = [b for b, _ in await pulled(client, "dly")]
            assert sorted(bodies) == sorted([*sent, b"past"])
    finally:
        gw.stop()


async def test_refused_delays(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "dly2", "--type", "delay", "--queues", "1")
    create_topic(data, "plain2", "--queues", "1")
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\nmax_timer_delay_ms = 60000\n")
    gw = GatewayProcess(data, "--config", str(config)).start()
    try:
        async with RemotingClient(namesrv(gw)) as client:
            p = Producer(client, "PG_delay")
            for props, words in (({"TIMER_DELAY_SEC": "61"}, "max delay 60000ms"),
                                 ({"__STARTDELIVERTIME": str(int(time.time() * 1000)
                                                             + 120_000)}, "max delay"),
                                 ({"TIMER_DELAY_MS": "soon"}, "not an integer"),
                                 ({"DELAY": "x"}, "not an integer")):
                with pytest.raises(RemotingError) as refused:
                    await p.send("dly2", b"x", properties=props)
                assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL, props
                assert words in (refused.value.remark or ""), refused.value.remark
            # a level past the maximum is refused by the store (the broker has no such
            # check; with the default 40 days no level comes near it)
            with pytest.raises(RemotingError) as refused:
                await p.send("dly2", b"level18", properties={"DELAY": "18"})  # 2 h
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "maximum delay" in (refused.value.remark or "")
            # a delayed send to a topic of another type is refused, as before
            with pytest.raises(RemotingError) as refused:
                await p.send("plain2", b"x", properties={"DELAY": "1"})
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert await pulled(client, "dly2") == []
    finally:
        gw.stop()


async def test_batches_with_delays_and_sharding_keys(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "dlyb", "--type", "delay", "--queues", "1")
    create_topic(data, "fifob", "--type", "fifo", "--queues", "1")
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\nmax_timer_delay_ms = 60000\n")
    gw = GatewayProcess(data, "--config", str(config)).start()
    try:
        async with RemotingClient(namesrv(gw)) as client:
            p = Producer(client, "PG_batch")
            start = time.time()
            batch = [Message("dlyb", b"b%d" % i, properties={"TIMER_DELAY_MS": str(ms)})
                     for i, ms in enumerate((1200, 600, 1200))]
            result = await p.send_batch("dlyb", batch)
            assert len(result.offset_msg_id.split(",")) == 3
            assert await pulled(client, "dlyb") == []
            seen = await collect(client, "dlyb", 3, BOUND)
            assert seen[b"b1"] - start >= 0.55 and seen[b"b0"] - start >= 1.15
            bodies = [b for b, _ in await pulled(client, "dlyb")]
            # fired in due order; b0 and b2 (the same due) in the batch's order
            assert bodies == [b"b1", b"b0", b"b2"]
            # one bad message refuses the whole batch: nothing stored
            bad = [Message("dlyb", b"ok", properties={"TIMER_DELAY_MS": "100"}),
                   Message("dlyb", b"far", properties={"TIMER_DELAY_SEC": "3600"})]
            with pytest.raises(RemotingError) as refused:
                await p.send_batch("dlyb", bad)
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "message 1 of the batch" in (refused.value.remark or "")
            await asyncio.sleep(0.5)
            assert len(await pulled(client, "dlyb")) == 3
            # several sharding keys in one batch: each key's order is kept
            keyed = [Message("fifob", f"{key}-{n}".encode(),
                             properties={"__SHARDINGKEY": key})
                     for n in range(5) for key in ("a", "b", "c")]
            await p.send_batch("fifob", keyed)
            got = [b.decode() for b, _ in await pulled(client, "fifob")]
            for key in ("a", "b", "c"):
                assert [g for g in got if g.startswith(key)] == [f"{key}-{n}" for n in range(5)]
    finally:
        gw.stop()
