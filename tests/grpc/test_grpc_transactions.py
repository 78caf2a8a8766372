"""TRANSACTION messages over gRPC against a real ``lmq serve``: a half message is not
received until EndTransaction commits it, never after a rollback; ending is idempotent
and a conflicting end is refused; a producer's Telemetry stream gets a
RecoverOrphanedTransactionCommand for a half left open, and its answer settles it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from protocol.grpc import Code
from protocol.grpc.messages import body_digest
from tests.grpc.grpc_core_support import BOUND, resource
from tests.grpc.grpc_msg_support import Grpc, grpc_gateway, message, parts, receive, send
from tests.grpc.test_grpc_frontend import Telemetry, producer_settings
from tests.grpc.test_grpc_send import create_topic


async def end(g: Grpc, topic: str, message_id: str, transaction_id: str, resolution: int,
              source: int = pb.SOURCE_CLIENT) -> service_pb2.EndTransactionResponse:
    return await g.stub.EndTransaction(
        service_pb2.EndTransactionRequest(
            topic=resource(topic), message_id=message_id, transaction_id=transaction_id,
            resolution=resolution, source=source),
        metadata=g.md(), timeout=BOUND)


async def received(g: Grpc, group: str, topic: str, want: int) -> list[pb.Message]:
    got: list[pb.Message] = []
    for _ in range(20):
        msgs, _, _ = parts(await receive(g, group, topic, poll=0.5))
        got += msgs
        if len(got) >= want:
            break
    return got


async def test_commit_delivers_rollback_never_and_ends_are_idempotent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "tx", "--type", "transaction", "--queues", "2")
    async with grpc_gateway(data) as (_gw, g):
        sent = {}
        for body in (b"commit-me", b"roll-me-back"):
            res = await send(g, message("tx", body, kind=pb.TRANSACTION, message_id=body.decode()))
            assert res.status.code == Code.OK, res
            entry = res.entries[0]
            assert entry.message_id == body.decode() and entry.transaction_id.startswith("lmq-tx:")
            sent[body] = entry
        # half messages are not delivered
        msgs, _, status = parts(await receive(g, "G", "tx", poll=0))
        assert msgs == [] and status.code == Code.MESSAGE_NOT_FOUND
        c, r = sent[b"commit-me"], sent[b"roll-me-back"]
        committed = await end(g, "tx", c.message_id, c.transaction_id, pb.COMMIT)
        assert committed.status.code == Code.OK
        rolled_back = await end(g, "tx", r.message_id, r.transaction_id, pb.ROLLBACK)
        assert rolled_back.status.code == Code.OK
        got = await received(g, "G", "tx", 1)
        assert [m.body for m in got] == [b"commit-me"]
        assert got[0].system_properties.message_type == pb.TRANSACTION
        assert got[0].system_properties.message_id == "commit-me"
        # a repeated end is OK and delivers nothing again; a conflicting one is refused
        for entry, resolution in ((c, pb.COMMIT), (r, pb.ROLLBACK)):
            again = await end(g, "tx", entry.message_id, entry.transaction_id, resolution,
                              pb.SOURCE_SERVER_CHECK)
            assert again.status.code == Code.OK
        for entry, resolution, earlier in ((c, pb.ROLLBACK, "committed"),
                                           (r, pb.COMMIT, "rolled_back")):
            clash = await end(g, "tx", entry.message_id, entry.transaction_id, resolution)
            assert clash.status.code == Code.PRECONDITION_FAILED
            assert earlier in clash.status.message
        msgs, _, _ = parts(await receive(g, "G2", "tx", poll=0.5))
        assert [m.body for m in msgs] == [b"commit-me"]  # one copy, for a new group too
        # bad ids, another topic, no resolution
        for tid, topic, resolution, code in (
            ("nope", "tx", pb.COMMIT, Code.INVALID_TRANSACTION_ID),
            ("lmq-tx:12345678", "tx", pb.COMMIT, Code.INVALID_TRANSACTION_ID),
            (c.transaction_id, "tx", pb.TRANSACTION_RESOLUTION_UNSPECIFIED, Code.BAD_REQUEST),
        ):
            res = await end(g, topic, "x", tid, resolution)
            assert res.status.code == code, (tid, res)
        half = await send(g, message("tx", b"open", kind=pb.TRANSACTION))
        wrong_topic = await end(g, "elsewhere", "x", half.entries[0].transaction_id, pb.COMMIT)
        assert wrong_topic.status.code == Code.INVALID_TRANSACTION_ID
        # a batch of transactional messages is refused whole
        batch = await send(g, message("tx", b"a", kind=pb.TRANSACTION),
                           message("tx", b"b", kind=pb.TRANSACTION))
        assert batch.status.code == Code.UNSUPPORTED


async def test_check_back_on_the_producers_telemetry_stream(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "txc", "--type", "transaction", "--queues", "1")
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\ntxn_first_check_ms = 300\ntxn_check_interval_ms = 60000\n")
    async with grpc_gateway(data, "--config", str(config)) as (_gw, g):
        t = Telemetry(g.stub, g.client_id)
        try:
            t.send(producer_settings("txc"))
            assert (await t.next()).status.code == Code.OK
            res = await send(g, message("txc", b"left-open", kind=pb.TRANSACTION,
                                        message_id="OPEN-1", tag="T"))
            tid = res.entries[0].transaction_id
            deadline = asyncio.get_running_loop().time() + 15
            command = None
            while asyncio.get_running_loop().time() < deadline:
                reply = await t.next(timeout=15)
                if reply.HasField("recover_orphaned_transaction_command"):
                    command = reply.recover_orphaned_transaction_command
                    break
            assert command is not None, "no check-back within 15 s"
            assert command.transaction_id == tid
            msg = command.message
            assert msg.body == b"left-open" and msg.topic.name == "txc"
            assert msg.system_properties.message_id == "OPEN-1"
            assert msg.system_properties.tag == "T"
            assert msg.system_properties.body_digest.checksum == body_digest(b"left-open",
                                                                             pb.MD5)
            # the producer's checker answers: committed, and delivered
            answer = await end(g, "txc", "OPEN-1", tid, pb.COMMIT, pb.SOURCE_SERVER_CHECK)
            assert answer.status.code == Code.OK
            got = await received(g, "G", "txc", 1)
            assert [m.body for m in got] == [b"left-open"]
        finally:
            t.close()
