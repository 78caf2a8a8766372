"""PullMessage, UpdateOffset, GetOffset and QueryOffset against a real ``lmq serve``: a
pull consumer's loop on one queue, offsets shared with remoting's
QUERY_CONSUMER_OFFSET, long-polling pulls, and the refused transaction RPCs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code
from protocol.remoting import RequestCode, ResponseCode
from tests.gateway.remoting.remoting_support import Client
from tests.grpc.grpc_core_support import resource
from tests.grpc.grpc_msg_support import BOUND, Grpc, duration, grpc_gateway, message, send
from tests.grpc.test_grpc_send import create_topic


def mq(topic: str, qid: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(topic=resource(topic), id=qid)


async def pull(g: Grpc, group: str, topic: str, offset: int, *, qid: int = 0,
               batch: int = 32, poll: float = 0) -> tuple[list[pb.Message], int, Any]:
    req = service_pb2.PullMessageRequest(
        group=resource(group), message_queue=mq(topic, qid), offset=offset, batch_size=batch,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        long_polling_timeout=duration(poll))
    out = [r async for r in g.stub.PullMessage(req, metadata=g.md(), timeout=BOUND)]
    assert out[-1].HasField("status") and sum(r.HasField("status") for r in out) == 1
    nexts = [r.next_offset for r in out if r.HasField("next_offset")]
    # an answer carries a next offset; a refused pull only its status
    ok = out[-1].status.code in (Code.OK, Code.MESSAGE_NOT_FOUND)
    assert len(nexts) == (1 if ok else 0), out
    return [r.message for r in out if r.HasField("message")], (nexts or [-1])[0], out[-1].status


async def test_pull_consumer_loop_and_offsets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "pull", "--queues", "1")
    async with grpc_gateway(data) as (gw, g):
        before = int(time.time() * 1000)
        for i in range(5):
            await send(g, message("pull", b"%d" % i))
        msgs, nxt, status = await pull(g, "g-pull", "pull", 0, batch=3)
        assert status.code == Code.OK
        assert [m.body for m in msgs] == [b"0", b"1", b"2"] and nxt == 3
        assert [m.system_properties.queue_offset for m in msgs] == [0, 1, 2]
        assert not any(m.system_properties.HasField("receipt_handle") for m in msgs)
        res = await g.stub.UpdateOffset(service_pb2.UpdateOffsetRequest(
            group=resource("g-pull"), message_queue=mq("pull"), offset=nxt),
            metadata=g.md(), timeout=BOUND)
        assert res.status.code == Code.OK
        got = await g.stub.GetOffset(service_pb2.GetOffsetRequest(
            group=resource("g-pull"), message_queue=mq("pull")), metadata=g.md(), timeout=BOUND)
        assert (got.status.code, got.offset) == (Code.OK, 3)
        # the same committed offset remoting's QUERY_CONSUMER_OFFSET reads
        client = await Client.connect(gw.ports["unified"])
        try:
            resp = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": "g-pull", "topic": "pull", "queueId": 0})
            assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "3"
        finally:
            await client.close()
        msgs, nxt, _ = await pull(g, "g-pull", "pull", nxt)
        assert [m.body for m in msgs] == [b"3", b"4"] and nxt == 5
        # at the end: empty, or woken by an append while long polling
        msgs, nxt2, status = await pull(g, "g-pull", "pull", nxt)
        assert (msgs, nxt2, status.code) == ([], 5, Code.MESSAGE_NOT_FOUND)
        waiting = asyncio.create_task(pull(g, "g-pull", "pull", nxt, poll=8))
        await asyncio.sleep(0.4)
        await send(g, message("pull", b"late"))
        msgs, _, status = await asyncio.wait_for(waiting, 5)
        assert [m.body for m in msgs] == [b"late"] and status.code == Code.OK
        # QueryOffset
        for policy, expected in ((pb.BEGINNING, 0), (pb.END, 6)):
            q = await g.stub.QueryOffset(service_pb2.QueryOffsetRequest(
                message_queue=mq("pull"), query_offset_policy=policy),
                metadata=g.md(), timeout=BOUND)
            assert (q.status.code, q.offset) == (Code.OK, expected)
        stamp = Timestamp(seconds=before // 1000 - 60)
        q = await g.stub.QueryOffset(service_pb2.QueryOffsetRequest(
            message_queue=mq("pull"), query_offset_policy=pb.TIMESTAMP, timestamp=stamp),
            metadata=g.md(), timeout=BOUND)
        assert (q.status.code, q.offset) == (Code.OK, 0)
        future = Timestamp(seconds=int(time.time()) + 3600)
        q = await g.stub.QueryOffset(service_pb2.QueryOffsetRequest(
            message_queue=mq("pull"), query_offset_policy=pb.TIMESTAMP, timestamp=future),
            metadata=g.md(), timeout=BOUND)
        assert (q.status.code, q.offset) == (Code.OK, 6)


async def test_offset_checks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "chk", "--queues", "2")
    async with grpc_gateway(data) as (_gw, g):
        await send(g, message("chk", b"x"))
        _, _, status = await pull(g, "g", "chk", 99)
        assert status.code == Code.ILLEGAL_OFFSET
        _, _, status = await pull(g, "g", "chk", 0, qid=7)
        assert status.code == Code.BAD_REQUEST
        res = await g.stub.UpdateOffset(service_pb2.UpdateOffsetRequest(
            group=resource("g"), message_queue=mq("chk"), offset=-1),
            metadata=g.md(), timeout=BOUND)
        assert res.status.code == Code.ILLEGAL_OFFSET
        # a group that never committed on a queue that still starts at 0: offset 0
        got = await g.stub.GetOffset(service_pb2.GetOffsetRequest(
            group=resource("fresh"), message_queue=mq("chk", 1)), metadata=g.md(),
            timeout=BOUND)
        assert (got.status.code, got.offset) == (Code.OK, 0)


async def test_foreign_transaction_ids_and_recall_handles(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        # EndTransaction is served (tests/grpc/test_grpc_transactions.py): "tx-1" is not
        # a transaction id of this gateway
        end = await g.stub.EndTransaction(service_pb2.EndTransactionRequest(
            topic=resource("t"), message_id="m", transaction_id="tx-1",
            resolution=pb.COMMIT, source=pb.SOURCE_CLIENT), metadata=g.md(), timeout=BOUND)
        assert end.status.code == Code.INVALID_TRANSACTION_ID and "tx-1" in end.status.message
        # RecallMessage is served (tests/grpc/test_grpc_delay.py): "h" is not a handle
        recall = await g.stub.RecallMessage(service_pb2.RecallMessageRequest(
            topic=resource("t"), recall_handle="h"), metadata=g.md(), timeout=BOUND)
        assert recall.status.code == Code.ILLEGAL_MESSAGE_ID
