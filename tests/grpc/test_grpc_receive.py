"""ReceiveMessage and AckMessage against a real ``lmq serve`` with raw grpc.aio stubs:
pops across the topic's queues, the stream's shape, long polling woken by a send,
redelivery after the invisible time with a growing delivery attempt, attempt ids,
the parameter checks, and one pop state shared with remoting's POP_MESSAGE."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb

from protocol.grpc import Code
from protocol.grpc.messages import body_digest
from protocol.remoting import RequestCode, ResponseCode
from tests.gateway.remoting.remoting_support import Client
from tests.grpc.grpc_msg_support import ack, grpc_gateway, message, parts, receive, send
from tests.grpc.test_grpc_send import create_topic


async def test_receive_pops_every_queue_and_streams_messages_stamp_status(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    create_topic(data, "orders", "--queues", "4")
    async with grpc_gateway(data) as (_gw, g):
        empty = await receive(g, "g1", "orders")
        msgs, stamp, status = parts(empty)
        assert (msgs, stamp, status.code) == ([], None, Code.MESSAGE_NOT_FOUND)
        ids = []
        for i in range(8):
            res = await send(g, message("orders", b"m%d" % i, tag="T", keys=(f"k{i}",)))
            ids.append(res.entries[0].message_id)
        # the request names queue 0; the pop covers all four
        before = int(time.time() * 1000)
        got, stamp, status = parts(await receive(g, "g1", "orders", queue_id=0))
        assert status.code == Code.OK
        assert stamp is not None and stamp >= before - 1000
        assert sorted(m.system_properties.message_id for m in got) == sorted(ids)
        assert {m.system_properties.queue_id for m in got} == {0, 1, 2, 3}
        for m in got:
            sp = m.system_properties
            assert sp.delivery_attempt == 1 and sp.receipt_handle
            assert sp.body_encoding == pb.IDENTITY
            assert sp.body_digest.type == pb.MD5
            assert sp.body_digest.checksum == body_digest(m.body, pb.MD5)
            assert sp.tag == "T" and list(sp.keys) == ["k" + m.body.decode()[1:]]
            assert m.topic.name == "orders"
        res = await ack(g, "g1", "orders", *got)
        assert res.status.code == Code.OK
        assert [e.status.code for e in res.entries] == [Code.OK] * 8


async def test_long_polling_is_woken_by_a_send(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        await send(g, message("lp", b"create the topic"))
        first, _, _ = parts(await receive(g, "g-lp", "lp"))
        await ack(g, "g-lp", "lp", *first)
        started = time.monotonic()
        waiting = asyncio.create_task(receive(g, "g-lp", "lp", poll=8))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await send(g, message("lp", b"wake up"))
        got, _, status = parts(await asyncio.wait_for(waiting, 5))
        assert status.code == Code.OK and [m.body for m in got] == [b"wake up"]
        assert time.monotonic() - started < 5
        # nothing more: an empty answer after the polling time
        started = time.monotonic()
        _, _, status = parts(await receive(g, "g-lp", "lp", poll=1))
        assert status.code == Code.MESSAGE_NOT_FOUND
        assert 0.9 <= time.monotonic() - started < 4


async def test_unacked_message_comes_back_with_a_growing_attempt(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        sent = await send(g, message("redo", b"again"))
        msg_id = sent.entries[0].message_id
        attempts = []
        for _ in range(3):
            got, _, status = parts(await receive(g, "g-redo", "redo", invisible=1, poll=4))
            assert status.code == Code.OK, status
            assert [m.system_properties.message_id for m in got] == [msg_id]
            attempts.append(got[0].system_properties.delivery_attempt)
            # hidden while invisible
            _, _, status = parts(await receive(g, "g-redo", "redo", invisible=1))
            assert status.code == Code.MESSAGE_NOT_FOUND
        assert attempts == [1, 2, 3]
        # an ack after the invisible time is too late; an ack in time settles it
        await asyncio.sleep(1.2)
        late = await ack(g, "g-redo", "redo", got[0])
        assert late.status.code == Code.INVALID_RECEIPT_HANDLE
        assert "expired" in late.entries[0].status.message
        got, _, _ = parts(await receive(g, "g-redo", "redo", invisible=5, poll=2))
        assert got[0].system_properties.delivery_attempt == 4
        assert (await ack(g, "g-redo", "redo", got[0])).status.code == Code.OK
        _, _, status = parts(await receive(g, "g-redo", "redo", invisible=1, poll=1.5))
        assert status.code == Code.MESSAGE_NOT_FOUND


async def test_attempt_id_repeats_the_same_messages(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        for i in range(3):
            await send(g, message("att", b"%d" % i))
        first, _, _ = parts(await receive(g, "g-att", "att", batch=2, attempt_id="A-1"))
        again, _, _ = parts(await receive(g, "g-att", "att", batch=2, attempt_id="A-1"))
        assert len(first) == 2
        assert [m.system_properties.receipt_handle for m in again] == \
            [m.system_properties.receipt_handle for m in first]
        other, _, _ = parts(await receive(g, "g-att", "att", batch=2, attempt_id="A-2"))
        assert len(other) == 1 and other[0].body not in {m.body for m in first}
        # another group's attempt with the same id is its own
        own, _, _ = parts(await receive(g, "g-att-2", "att", batch=5, attempt_id="A-1"))
        assert len(own) == 3


async def test_receive_checks(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        await send(g, message("chk", b"x"))
        cases = [
            (dict(batch=0), Code.BAD_REQUEST),
            (dict(invisible=0.5), Code.ILLEGAL_INVISIBLE_TIME),
            (dict(invisible=None), Code.ILLEGAL_INVISIBLE_TIME),
            (dict(invisible=13 * 3600), Code.ILLEGAL_INVISIBLE_TIME),
            (dict(poll=-1), Code.ILLEGAL_POLLING_TIME),
        ]
        for kwargs, code in cases:
            _, _, status = parts(await receive(g, "g-chk", "chk", **kwargs))  # type: ignore[arg-type]
            assert status.code == code, (kwargs, status)
        _, _, status = parts(await receive(g, "g-chk", "TBW102"))
        assert status.code == Code.ILLEGAL_TOPIC
        _, _, status = parts(await receive(g, "bad group!", "chk"))
        assert status.code == Code.ILLEGAL_CONSUMER_GROUP
        from rocketmq.grpc_protocol import service_pb2

        from tests.grpc.grpc_core_support import resource
        req = service_pb2.ReceiveMessageRequest(
            group=resource("g-chk"), message_queue=pb.MessageQueue(topic=resource("chk")),
            filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"),
            batch_size=1)
        req.invisible_duration.seconds = 10
        resp = [r async for r in g.stub.ReceiveMessage(req, metadata=g.md(), timeout=5)]
        assert parts(resp)[2].code == Code.ILLEGAL_FILTER_EXPRESSION
        # a batch above 32 is cut to 32, as the proxy cuts it
        for i in range(40):
            await send(g, message("many", b"%d" % i))
        got, _, _ = parts(await receive(g, "g-many", "many", batch=1000))
        assert len(got) == 32
        # the deadline bounds the long poll: the answer comes before the client gives up
        started = time.monotonic()
        _, _, status = parts(await receive(g, "g-many2", "empty-topic", poll=20, timeout=1.5))
        assert status.code == Code.MESSAGE_NOT_FOUND
        assert time.monotonic() - started < 1.5


async def test_tag_filter(tmp_path: Path) -> None:
    async with grpc_gateway(tmp_path / "data") as (_gw, g):
        for tag in ("a", "b", "c", "a"):
            await send(g, message("tags", tag.encode(), tag=tag))
        got, _, _ = parts(await receive(g, "g-tags", "tags", tags="a || c"))
        assert sorted(m.body for m in got) == [b"a", b"a", b"c"]


async def test_one_pop_state_with_remoting(tmp_path: Path) -> None:
    """A gRPC receive and a remoting POP_MESSAGE of one group pop the same queues: what
    one holds invisible the other does not get, and a message the gRPC consumer let go
    comes back to the remoting one."""
    async with grpc_gateway(tmp_path / "data") as (gw, g):
        for i in range(3):
            await send(g, message("shared", b"%d" % i))
        got, _, _ = parts(await receive(g, "g-shared", "shared", batch=2, invisible=1))
        assert len(got) == 2
        client = await Client.connect(gw.ports["unified"])
        try:
            fields = {"consumerGroup": "g-shared", "topic": "shared", "queueId": -1,
                      "maxMsgNums": 32, "invisibleTime": 30_000, "pollTime": 0,
                      "bornTime": int(time.time() * 1000), "initMode": 0}
            resp = await client.call(RequestCode.POP_MESSAGE, fields)
            assert resp.code == ResponseCode.SUCCESS
            assert resp.body.count(b"POP_CK") == 1  # only the third message
            await asyncio.sleep(1.3)  # the gRPC consumer's two come back
            resp = await client.call(RequestCode.POP_MESSAGE, fields)
            assert resp.code == ResponseCode.SUCCESS
            assert resp.body.count(b"POP_CK") == 2
        finally:
            await client.close()
