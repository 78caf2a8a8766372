"""ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, acks with mixed results, and
dead letters after the group's retry limit, against a real ``lmq serve``."""

from __future__ import annotations

from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import MessageStore
from gateway.rocketmq.groups import GroupRegistry
from lmq.rocketmq import GroupConfig
from protocol.grpc import Code
from tests.grpc.grpc_core_support import resource
from tests.grpc.grpc_msg_support import (
    BOUND,
    Grpc,
    ack,
    duration,
    grpc_gateway,
    message,
    parts,
    receive,
    send,
)


async def change(g: Grpc, group: str, topic: str, handle: str, seconds: float) -> object:
    return await g.stub.ChangeInvisibleDuration(
        service_pb2.ChangeInvisibleDurationRequest(
            group=resource(group), topic=resource(topic), receipt_handle=handle,
            invisible_duration=duration(seconds), message_id="m"),
        metadata=g.md(), timeout=BOUND)


async def forward(g: Grpc, group: str, topic: str, handle: str) -> object:
    return await g.stub.ForwardMessageToDeadLetterQueue(
        service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=resource(group), topic=resource(topic), receipt_handle=handle,
            message_id="m", delivery_attempt=1, max_delivery_attempts=16),
        metadata=g.md(), timeout=BOUND)


async def test_change_invisible_duration_returns_the_new_handle(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        await send(g, message("cid", b"x"))
        got, _, _ = parts(await receive(g, "g-cid", "cid", invisible=30))
        old = got[0].system_properties.receipt_handle
        res = await change(g, "g-cid", "cid", old, 1)
        assert res.status.code == Code.OK, res  # type: ignore[attr-defined]
        new = res.receipt_handle  # type: ignore[attr-defined]
        assert new and new != old
        # visible again after the new (shorter) time, one attempt more
        again, _, status = parts(await receive(g, "g-cid", "cid", invisible=30, poll=4))
        assert status.code == Code.OK
        assert again[0].system_properties.delivery_attempt == 2
        # a nack (0 s) makes it visible at once; the new handle of that acks nothing now
        res = await change(g, "g-cid", "cid", again[0].system_properties.receipt_handle, 0)
        assert res.status.code == Code.OK  # type: ignore[attr-defined]
        third, _, _ = parts(await receive(g, "g-cid", "cid", invisible=30))
        assert third[0].system_properties.delivery_attempt == 3
        assert (await ack(g, "g-cid", "cid", third[0])).status.code == Code.OK
        # checks
        bad = await change(g, "g-cid", "cid", "not a handle", 5)
        assert bad.status.code == Code.INVALID_RECEIPT_HANDLE  # type: ignore[attr-defined]
        bad = await change(g, "g-cid", "cid", third[0].system_properties.receipt_handle, -1)
        assert bad.status.code == Code.ILLEGAL_INVISIBLE_TIME  # type: ignore[attr-defined]


async def test_ack_entries_have_their_own_status(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        await send(g, message("mix", b"x"))
        got, _, _ = parts(await receive(g, "g-mix", "mix"))
        res = await ack(g, "g-mix", "mix", got[0], handles=["garbage"])
        assert res.status.code == pb.MULTIPLE_RESULTS
        assert [e.status.code for e in res.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE]
        assert res.entries[0].receipt_handle == got[0].system_properties.receipt_handle
        empty = await ack(g, "g-mix", "mix")
        assert empty.status.code == Code.BAD_REQUEST


async def test_one_ack_settles_many_messages_of_several_queues(tmp_path: Path) -> None:
    # AckMessage acks its live entries in one store write: each entry keeps its status
    # (a repeated handle is OK: no longer in flight), and none of them comes back
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        for i in range(6):  # ungrouped sends go round the topic's queues
            await send(g, message("many", b"m%d" % i))
        got, _, _ = parts(await receive(g, "g-many", "many", invisible=1))
        assert len(got) == 6
        assert len({m.system_properties.queue_id for m in got}) > 1
        res = await ack(g, "g-many", "many", *got,
                        handles=["garbage", got[0].system_properties.receipt_handle])
        assert [e.status.code for e in res.entries] == [Code.OK] * 6 + [
            Code.INVALID_RECEIPT_HANDLE, Code.OK]
        assert [e.receipt_handle for e in res.entries][:6] == [
            m.system_properties.receipt_handle for m in got]
        # past their invisible time (1 s) nothing was revived: all six were acked
        again, _, status = parts(await receive(g, "g-many", "many", invisible=30, poll=2.5))
        assert again == [] and status.code == Code.MESSAGE_NOT_FOUND


async def test_forward_to_dead_letter_queue(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        sent = await send(g, message("dlq", b"poison", props={"k": "v"}))
        got, _, _ = parts(await receive(g, "g-dlq", "dlq", invisible=1))
        res = await forward(g, "g-dlq", "dlq", got[0].system_properties.receipt_handle)
        assert res.status.code == Code.OK, res  # type: ignore[attr-defined]
        # acked: not redelivered after the invisible time
        _, _, status = parts(await receive(g, "g-dlq", "dlq", poll=1.5))
        assert status.code == Code.MESSAGE_NOT_FOUND
        dead, _, _ = parts(await receive(g, "g-dlq-reader", "%DLQ%g-dlq"))
        assert [m.body for m in dead] == [b"poison"]
        assert dead[0].system_properties.message_id == sent.entries[0].message_id
        assert dict(dead[0].user_properties) == {"k": "v"}


async def test_dead_letter_after_the_groups_retry_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = MessageStore.open(data)
    GroupRegistry(store).create(GroupConfig("g-limit", retry_max_times=1))
    store.close()
    async with grpc_gateway(data) as (_gw, g):
        await send(g, message("limited", b"fails"))
        attempts = []
        for _ in range(2):
            got, _, _ = parts(await receive(g, "g-limit", "limited", invisible=1, poll=4))
            attempts.append(got[0].system_properties.delivery_attempt)
        assert attempts == [1, 2]
        # the third delivery would be the second retry: dead-lettered instead
        _, _, status = parts(await receive(g, "g-limit", "limited", invisible=1, poll=3))
        assert status.code == Code.MESSAGE_NOT_FOUND
        dead, _, _ = parts(await receive(g, "g-any", "%DLQ%g-limit", poll=2))
        assert [m.body for m in dead] == [b"fails"]
