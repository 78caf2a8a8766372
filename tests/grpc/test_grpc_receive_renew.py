"""Receives on an in-process gateway (its store and the gRPC front end's state are
inspectable): auto-renewal of a push consumer's messages with the consumer's original
handle still settling them, and messages of a stream that ends before the consumer got
them made visible again at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from gateway.config import AUTO
from gateway.grpc import receipts, receive
from gateway.grpc.call import Call
from gateway.grpc.receipts import parse_handle
from protocol.grpc import Code
from tests.gateway.remoting.remoting_support import port_of, running_gateway
from tests.grpc.grpc_core_support import resource
from tests.grpc.grpc_msg_support import Grpc, ack, message, parts, send
from tests.grpc.grpc_msg_support import receive as receive_call


async def test_auto_renew_keeps_messages_invisible_until_acked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data", grpc_port=AUTO) as gw:
        g = Grpc(port_of(gw, "grpc"))
        try:
            store = gw.store
            assert store is not None
            await send(g, message("push", b"a"))
            await send(g, message("push", b"b"))
            got, _, _ = parts(await receive_call(
                g, "g-push", "push", invisible=None, auto_renew=True))
            assert len(got) == 2
            # the gateway's default invisible time, not one the consumer chose
            assert {m.system_properties.invisible_duration.seconds for m in got} == {60}
            renewer = gw.front_ends["grpc"].services.consume.renewer
            assert len(renewer) == 2
            before = {m.system_properties.receipt_handle: parse_handle(
                m.system_properties.receipt_handle, "g-push", "push").visible_at
                for m in got}
            # renew now (as if their invisible time were about to end), a clock tick after
            # the pop, so that the renewed invisible time ends later than the first
            await asyncio.sleep(0.005)
            monkeypatch.setattr(receipts, "RENEW_AHEAD_MS", 120_000)
            assert renewer.renew_due() == 2
            # the store's in-flight keys moved: the old visible times revive nothing
            assert store.pop.revive(now=max(before.values()) + 1) == 0
            assert store.pop.inflight_count("g-push") == 2
            # the consumer acks with the handles it was given: both settled
            res = await ack(g, "g-push", "push", *got)
            assert [e.status.code for e in res.entries] == [Code.OK, Code.OK]
            assert store.pop.inflight_count("g-push") == 0
            assert len(renewer) == 0
        finally:
            await g.close()


async def test_stream_closed_early_makes_messages_visible_again(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", grpc_port=AUTO) as gw:
        g = Grpc(port_of(gw, "grpc"))
        try:
            store = gw.store
            assert store is not None
            for i in range(3):
                await send(g, message("early", b"%d" % i))
            front = gw.front_ends["grpc"].services
            req = service_pb2.ReceiveMessageRequest(
                group=resource("g-early"),
                message_queue=pb.MessageQueue(topic=resource("early")),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=32)
            req.invisible_duration.seconds = 60
            req.long_polling_timeout.seconds = 0
            stream = receive.receive_message(Call(front, "ReceiveMessage", None), req)  # type: ignore[arg-type]
            first = await stream.__anext__()
            assert first.HasField("message")
            assert store.pop.inflight_count("g-early") == 3
            await stream.aclose()  # the consumer went away after one message
            assert store.pop.inflight_count("g-early") == 0
            got, _, status = parts(await receive_call(g, "g-early", "early"))
            assert status.code == Code.OK and len(got) == 3
            assert {m.system_properties.delivery_attempt for m in got} == {2}
        finally:
            await g.close()


async def test_shutdown_ends_a_waiting_receive(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", grpc_port=AUTO) as gw:
        g = Grpc(port_of(gw, "grpc"))
        try:
            await send(g, message("quiet", b"x"))
            parts(await receive_call(g, "g-quiet", "quiet"))  # takes the one message
            waiting = asyncio.create_task(
                receive_call(g, "g-quiet", "quiet", poll=15, timeout=20))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            started = time.monotonic()
            await gw.stop()
            _, _, status = parts(await asyncio.wait_for(waiting, 10))
            assert status.code == Code.MESSAGE_NOT_FOUND
            assert time.monotonic() - started < 5
        finally:
            await g.close()
