"""The asyncio clients over real sockets: aiormq (confirms, returns, qos, headers with
exact types) and aio-pika (defaults: confirms + mandatory; message.process(); the queue
iterator; connect_robust re-declaring its topology after a gateway restart)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aio_pika
import aiormq
import pytest

from ..amqp_support import BOUND, ThreadGateway


async def test_aiormq_confirms_returns_and_raw_headers(gw: ThreadGateway) -> None:
    conn = await asyncio.wait_for(aiormq.connect(gw.url), BOUND)
    try:
        ch = await conn.channel()  # publisher confirms on by default
        declared = await ch.queue_declare("aq", auto_delete=False)
        assert declared.queue == "aq"
        headers = {"int": 5, "text": "v", "float": 0.5, "nested": {"a": [1, "b"]}}
        ack = await ch.basic_publish(
            b"hello", routing_key="aq",
            properties=aiormq.spec.Basic.Properties(headers=headers, delivery_mode=2))
        assert isinstance(ack, aiormq.spec.Basic.Ack)
        with pytest.raises(aiormq.exceptions.PublishError) as info:
            await ch.basic_publish(b"lost", exchange="amq.direct", routing_key="nowhere",
                                   mandatory=True)
        assert "NO_ROUTE" in str(info.value)
        await ch.basic_qos(prefetch_count=1)
        got: asyncio.Queue[aiormq.abc.DeliveredMessage] = asyncio.Queue()
        await ch.basic_consume("aq", got.put)
        message = await asyncio.wait_for(got.get(), BOUND)
        assert message.body == b"hello"
        assert message.header.properties.headers == headers
        assert message.header.properties.delivery_mode == 2
        await ch.basic_ack(message.delivery.delivery_tag)
    finally:
        await conn.close()


async def test_aiormq_channel_numbers_and_channel_max_as_rabbitmq(gw: ThreadGateway) -> None:
    """channel_max bounds how many channels are open, not their numbers: aiormq may open
    channel 65535 (its test_bad_channel), and one channel more than channel_max is
    refused with 530 NOT_ALLOWED, closing the connection (its test_no_free_channels).
    A passive declare of the default exchange is 403 (its test_channel_closed_reuse)."""
    conn = await asyncio.wait_for(aiormq.connect(gw.url), BOUND)
    try:
        high = await conn.channel(65535)
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
            await high.queue_bind("no-such-queue", "no-such-exchange")
        reuse = await conn.channel(1)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await reuse.exchange_declare("", passive=True)
    finally:
        await conn.close()
    conn = await asyncio.wait_for(aiormq.connect(gw.url), BOUND)
    try:
        channel_max = conn.connection_tune.channel_max
        await asyncio.wait_for(
            asyncio.gather(*(conn.channel(n + 1) for n in range(channel_max))), 60)
        with pytest.raises(aiormq.exceptions.ConnectionNotAllowed):
            await asyncio.wait_for(conn.channel(), BOUND)
    finally:
        await conn.close()


async def test_aio_pika_process_and_iterator(gw: ThreadGateway) -> None:
    conn = await asyncio.wait_for(aio_pika.connect(gw.url), BOUND)
    async with conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=5)
        x = await ch.declare_exchange("events", aio_pika.ExchangeType.TOPIC)
        q = await ch.declare_queue("", exclusive=True)
        await q.bind(x, "user.*")
        for i in range(3):
            await x.publish(aio_pika.Message(f"e{i}".encode()), routing_key="user.created")
        strict = await conn.channel(on_return_raises=True)
        with pytest.raises(aio_pika.exceptions.DeliveryError):  # mandatory by default
            await strict.default_exchange.publish(aio_pika.Message(b"x"), routing_key="no-queue")
        received = []
        async with q.iterator() as it:
            async for message in it:
                async with message.process():
                    received.append(message.body)
                if len(received) == 3:
                    break
        assert received == [b"e0", b"e1", b"e2"]
        # reject with requeue inside process(): comes back redelivered
        await x.publish(aio_pika.Message(b"again"), routing_key="user.x")
        first = await q.get(timeout=BOUND)
        await first.reject(requeue=True)
        second = await q.get(timeout=BOUND)
        assert second.body == b"again" and second.redelivered
        await second.ack()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_aio_pika_connect_robust_across_restart(tmp_path: Path) -> None:
    port = _free_port()
    gateway = ThreadGateway(tmp_path / "data", amqp_port=port)
    await asyncio.to_thread(gateway.start)
    try:
        conn = await asyncio.wait_for(aio_pika.connect_robust(
            f"amqp://guest:guest@127.0.0.1:{port}/", reconnect_interval=0.2), BOUND)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("robust", durable=True)
            await ch.default_exchange.publish(
                aio_pika.Message(b"before", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="robust")
            reconnected = asyncio.Event()
            conn.reconnect_callbacks.add(lambda *_: reconnected.set())
            await asyncio.to_thread(gateway.restart)
            await asyncio.wait_for(reconnected.wait(), BOUND)
            await ch.default_exchange.publish(aio_pika.Message(b"after"), routing_key="robust")
            bodies = []
            for _ in range(2):
                message = await q.get(timeout=BOUND)
                bodies.append(message.body)
                await message.ack()
            assert bodies == [b"before", b"after"]
    finally:
        await asyncio.to_thread(gateway.stop)
