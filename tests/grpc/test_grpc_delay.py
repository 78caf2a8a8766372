"""DELAY messages over gRPC against a real ``lmq serve``: stored at once as the store's
durable timers, received only from their delivery time on, recalled by the handle the
send returned; a delivery time past the maximum delay is ILLEGAL_DELIVERY_TIME."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import MessageStore
from protocol.grpc import Code
from tests.grpc.grpc_core_support import BOUND, resource
from tests.grpc.grpc_msg_support import grpc_gateway, message, parts, receive, send
from tests.grpc.test_grpc_send import create_topic


def at(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def delayed(topic: str, body: bytes, due_ms: int, **kw: object) -> pb.Message:
    return message(topic, body, kind=pb.DELAY, delivery_timestamp=at(due_ms), **kw)


async def test_delayed_message_is_received_from_its_delivery_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "later", "--type", "delay", "--queues", "1")
    async with grpc_gateway(data) as (_gw, g):
        due = int(time.time() * 1000) + 1500
        res = await send(g, delayed("later", b"d1", due, message_id="DELAY-1"))
        assert res.status.code == Code.OK, res
        assert res.entries[0].message_id == "DELAY-1"
        assert res.entries[0].recall_handle.startswith("lmq:")
        msgs, _, _ = parts(await receive(g, "G", "later", poll=0))
        assert msgs == []  # not before its time
        got: list[pb.Message] = []
        for _ in range(30):
            got, _, _ = parts(await receive(g, "G", "later", poll=1))
            if got:
                break
        assert [m.body for m in got] == [b"d1"]
        assert int(time.time() * 1000) >= due
        assert got[0].system_properties.message_id == "DELAY-1"


async def test_recall_cancels_a_pending_delayed_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "later", "--type", "delay", "--queues", "1")
    async with grpc_gateway(data) as (_gw, g):
        due = int(time.time() * 1000) + 1000
        keep = await send(g, delayed("later", b"keep", due))
        drop = await send(g, delayed("later", b"drop", due, message_id="DROP-1"))

        async def recall(topic: str, handle: str) -> service_pb2.RecallMessageResponse:
            return await g.stub.RecallMessage(
                service_pb2.RecallMessageRequest(topic=resource(topic), recall_handle=handle),
                metadata=g.md(), timeout=BOUND)

        handle = drop.entries[0].recall_handle
        assert (await recall("other", handle)).status.code == Code.NOT_FOUND
        assert (await recall("later", "garbage")).status.code == Code.ILLEGAL_MESSAGE_ID
        res = await recall("later", handle)
        assert res.status.code == Code.OK, res
        assert res.message_id == "DROP-1"
        assert (await recall("later", handle)).status.code == Code.NOT_FOUND
        await asyncio.sleep(1.5)
        got: list[pb.Message] = []
        for _ in range(10):
            got, _, _ = parts(await receive(g, "G", "later", poll=1))
            if got:
                break
        assert [m.body for m in got] == [b"keep"]
        # a delivered message can no longer be recalled
        fired = await recall("later", keep.entries[0].recall_handle)
        assert fired.status.code == Code.NOT_FOUND
    store = MessageStore.open(data)
    try:
        assert store.timers.pending() == 0
    finally:
        store.close()


async def test_delivery_time_checks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "later", "--type", "delay")
    create_topic(data, "plain")
    async with grpc_gateway(data) as (_gw, g):
        now = int(time.time() * 1000)
        too_far = await send(g, delayed("later", b"x", now + 41 * 24 * 3600 * 1000))
        assert too_far.status.code == Code.ILLEGAL_DELIVERY_TIME, too_far
        wrong_topic = await send(g, delayed("plain", b"x", now + 1000))
        assert wrong_topic.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        ok = await send(g, delayed("later", b"x", now + 39 * 24 * 3600 * 1000))
        assert ok.status.code == Code.OK
    store = MessageStore.open(data)
    try:
        assert store.timers.pending("later") == 1
    finally:
        store.close()


async def test_recall_by_the_handle_after_retention_relocated_the_message(tmp_path: Path) -> None:
    """The recall handle names the position the send returned; retention moved the
    record since (broker_core.timers relocation): the recall still finds and cancels it."""
    from broker_core import Message, StoreConfig

    data = tmp_path / "data"
    create_topic(data, "later", "--type", "delay", "--queues", "1")
    async with grpc_gateway(data) as (_gw, g):
        due = int(time.time() * 1000) + 3_600_000
        sent = await send(g, delayed("later", b"far", due, message_id="FAR-1"))
        assert sent.status.code == Code.OK, sent
    handle = sent.entries[0].recall_handle
    first = int(handle.removeprefix("lmq:"))
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024,
                      retention_bytes=128 * 1024)
    with MessageStore.open(data, cfg) as store:
        for _ in range(8):
            store.append_batch([(Message("filler", b"x" * 1000), ["filler"])] * 50)
        assert store.apply_retention().timers_relocated == 1
        assert store.log_start > first
    async with grpc_gateway(data) as (_gw, g):
        res = await g.stub.RecallMessage(
            service_pb2.RecallMessageRequest(topic=resource("later"), recall_handle=handle),
            metadata=g.md(), timeout=BOUND)
        assert res.status.code == Code.OK, res
        assert res.message_id == "FAR-1"
    with MessageStore.open(data) as store:
        assert store.timers.pending() == 0
