"""SendMessage against a real ``lmq serve`` with raw grpc.aio stubs: the response entries,
durability of what it says is stored, batches, the topic and message checks with the
proxy's codes (DELAY: test_grpc_delay.py; TRANSACTION: test_grpc_transactions.py)."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

from click.testing import CliRunner
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import MessageStore
from cli.main import main
from lmq.rocketmq import queue_lmq
from protocol.grpc import Code
from tests.grpc.grpc_msg_support import grpc_gateway, message, parts, receive, send


def create_topic(data_dir: Path, name: str, *args: str) -> None:
    MessageStore.open(data_dir).close()
    result = CliRunner().invoke(
        main, ["topics", "create", "--data-dir", str(data_dir), name, *args])
    assert result.exit_code == 0, result.output


async def test_send_one_message_echoes_the_client_id_and_stores_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "orders", "--queues", "1")
    async with grpc_gateway(data) as (gw, g):
        first = await send(g, message("orders", b"one", tag="TagA", keys=("k1",),
                                      message_id="CLIENT-ID-1", props={"color": "red"}))
        second = await send(g, message("orders", b"two", message_id="CLIENT-ID-2"))
    assert first.status.code == Code.OK, first
    assert [e.message_id for e in first.entries] == ["CLIENT-ID-1"]
    assert first.entries[0].status.code == Code.OK
    assert (first.entries[0].offset, second.entries[0].offset) == (0, 1)
    # stopped gateway: the store holds both, in the remoting record format
    store = MessageStore.open(data)
    try:
        got = store.pull(queue_lmq("orders", 0), 0, 10).messages
        assert [m.record.body for m in got] == [b"one", b"two"]
        rec = got[0].record
        assert rec.tag == "TagA" and rec.topic == "orders"
        assert rec.properties["UNIQ_KEY"] == b"CLIENT-ID-1"
        assert rec.properties["KEYS"] == b"k1"
        props = dict(p.split("\x01", 1) for p in
                     rec.properties["rmq.props"].decode().split("\x02") if p)
        assert props["TAGS"] == "TagA" and props["color"] == "red"
        assert props["UNIQ_KEY"] == "CLIENT-ID-1"
    finally:
        store.close()


async def test_batch_is_stored_in_one_queue_and_gzip_inflated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "batch", "--queues", "4")
    async with grpc_gateway(data) as (_gw, g):
        bodies = [f"m{i}".encode() for i in range(5)]
        msgs = [message("batch", gzip.compress(b), body_encoding=pb.GZIP) for b in bodies]
        res = await send(g, *msgs)
        assert res.status.code == Code.OK, res
        assert [e.message_id for e in res.entries] == \
            [m.system_properties.message_id for m in msgs]
        offsets = [e.offset for e in res.entries]
        assert offsets == list(range(offsets[0], offsets[0] + 5))
        got, _, status = parts(await receive(g, "g-batch", "batch", batch=10))
        assert status.code == Code.OK
        assert sorted(m.body for m in got) == sorted(bodies)
        assert len({m.system_properties.queue_id for m in got}) == 1


async def test_fifo_group_always_lands_in_one_queue(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "fifo", "--queues", "4", "--type", "fifo")
    async with grpc_gateway(data) as (_gw, g):
        for i in range(6):
            res = await send(g, message("fifo", b"%d" % i, group="order-42", kind=pb.FIFO))
            assert res.status.code == Code.OK, res
        got, _, _ = parts(await receive(g, "g-fifo", "fifo", batch=32))
        assert [m.body for m in got] == [b"%d" % i for i in range(6)]
        assert {m.system_properties.queue_id for m in got} == \
            {got[0].system_properties.queue_id}
        assert {m.system_properties.message_group for m in got} == {"order-42"}
        assert {m.system_properties.message_type for m in got} == {pb.FIFO}
        # a NORMAL message to the FIFO topic does not match its type
        wrong = await send(g, message("fifo", b"x"))
        assert wrong.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, wrong


async def test_send_checks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "delayed", "--type", "delay")
    create_topic(data, "tx", "--type", "transaction")
    create_topic(data, "readonly", "--perm", "r")
    create_topic(data, "plain")  # NORMAL (auto-created topics are MIXED)
    config = tmp_path / "gw.toml"
    config.write_text("[store]\nmax_message_bytes = 1024\n")
    async with grpc_gateway(data, "--config", str(config)) as (_gw, g):
        cases = [
            ([], Code.MESSAGE_CORRUPTED),
            ([message("", b"x")], Code.ILLEGAL_TOPIC),
            ([message("bad topic!", b"x")], Code.ILLEGAL_TOPIC),
            ([message("TBW102", b"x")], Code.ILLEGAL_TOPIC),
            ([message("readonly", b"x")], Code.FORBIDDEN),
            ([message("t1", b"x"), message("t2", b"y")], Code.MESSAGE_CORRUPTED),
            ([message("t1", b"x" * 2000)], Code.MESSAGE_BODY_TOO_LARGE),
            ([message("t1", b"x", message_id="")], Code.ILLEGAL_MESSAGE_ID),
            ([message("t1", b"x", tag="a|b")], Code.ILLEGAL_MESSAGE_TAG),
            ([message("t1", b"x", props={"UNIQ_KEY": "forged"})],
             Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
            ([message("t1", b"x", kind=pb.FIFO)], Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
            ([message("plain", b"x", group="g", kind=pb.FIFO)],
             Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
            ([message("tx", b"x", kind=pb.TRANSACTION)] * 2, Code.UNSUPPORTED),  # alone only
            ([message("plain", b"x", kind=pb.TRANSACTION)],
             Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
            # a delayed transactional message is refused (docs/storage.md, how they compose)
            ([message("tx", b"x", kind=pb.TRANSACTION,
                      delivery_timestamp=Timestamp(seconds=int(time.time()) + 60))],
             Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
            ([message("t1", b"x")] * 1025, Code.PAYLOAD_TOO_LARGE),
        ]
        for msgs, code in cases:
            res = await send(g, *msgs)
            assert res.status.code == code, (msgs[:1], res.status)
            assert not res.entries
        # nothing of the refused sends was stored; t1 was auto-created by the checks
        ok = await send(g, message("t1", b"fine"))
        assert ok.status.code == Code.OK
        assert ok.entries[0].offset == 0
