"""Sends and pulls over real sockets: send V1/V2, the stored-message layout of pulled
messages, tag filtering, offsets moved, long polling woken by a send (and its
timeout), atomic batches, commit-offset on pull."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker_core import StoreConfig
from lmq.rocketmq import MessageType, TopicConfig
from protocol.remoting import RequestCode, ResponseCode

from .remoting_support import Client, port_of, running_gateway
from .rocketmq_messages import batch_body, decode_pulled, properties


def send_fields(topic: str, queue_id: int, props: str, group: str = "PG") -> dict[str, Any]:
    return {"a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0,
            "g": int(time.time() * 1000), "h": 0, "i": props, "j": 0, "k": False}


def pull_fields(topic: str, queue_id: int, offset: int, group: str = "CG",
                expression: str = "*", suspend_ms: int = 0, max_nums: int = 32,
                commit: int | None = None) -> dict[str, Any]:
    sys_flag = 0x4 | (0x2 if suspend_ms else 0) | (0x1 if commit is not None else 0)
    return {"consumerGroup": group, "topic": topic, "queueId": queue_id,
            "queueOffset": offset, "maxMsgNums": max_nums, "sysFlag": sys_flag,
            "commitOffset": commit if commit is not None else 0,
            "suspendTimeoutMillis": suspend_ms, "subscription": expression,
            "subVersion": 1, "expressionType": "TAG"}


async def test_send_then_pull_in_the_stored_layout(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        props = properties(TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="ABCDEF0123", color="red")
        sent = await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("orders", 3, props),
                          body=b"hello")
        assert sent.ext_fields["queueId"] == "3"
        assert sent.ext_fields["queueOffset"] == "0"
        msg_id = sent.ext_fields["msgId"]
        assert len(msg_id) == 32
        # SEND_MESSAGE (V1 field names) to the same queue
        v1 = {"producerGroup": "PG", "topic": "orders", "defaultTopic": "TBW102",
              "defaultTopicQueueNums": 4, "queueId": 3, "sysFlag": 0,
              "bornTimestamp": 1, "flag": 7, "properties": properties(TAGS="TagB")}
        sent2 = await c.ok(RequestCode.SEND_MESSAGE, v1, body=b"world")
        assert sent2.ext_fields["queueOffset"] == "1"

        pulled = await c.ok(RequestCode.PULL_MESSAGE, pull_fields("orders", 3, 0))
        assert pulled.ext_fields["nextBeginOffset"] == "2"
        assert pulled.ext_fields["maxOffset"] == "2"
        assert pulled.ext_fields["minOffset"] == "0"
        messages = decode_pulled(pulled.body)
        assert [m.body for m in messages] == [b"hello", b"world"]
        # counted on its connection (the admin API's connections list): 2 in, 2 out
        [conn] = [x for x in gw.state.connections.values() if x.protocol == "remoting"]
        assert (conn.messages_in, conn.messages_out) == (2, 2)
        first, second = messages
        assert first.topic == "orders" and first.queue_id == 3 and first.queue_offset == 0
        assert first.properties["UNIQ_KEY"] == "ABCDEF0123"
        assert first.properties["KEYS"] == "k1 k2"
        assert first.properties["color"] == "red"
        assert second.flag == 7 and second.born_ms == 1
        # msgId = store host + port + physical offset
        assert int(msg_id[-16:], 16) == first.physical_offset
        assert first.store_host.endswith(f":{port_of(gw)}")
        assert first.body_crc == __import__("zlib").crc32(b"hello") & 0x7FFFFFFF

        # tag filtering, server side; nextBeginOffset past the filtered message
        only_b = await c.ok(RequestCode.PULL_MESSAGE,
                            pull_fields("orders", 3, 0, expression="TagB || TagC"))
        assert [m.body for m in decode_pulled(only_b.body)] == [b"world"]
        assert only_b.ext_fields["nextBeginOffset"] == "2"
        await c.close()


async def test_pull_offsets_moved_and_not_found(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("t1", 0, ""), body=b"x")
        beyond = await c.call(RequestCode.PULL_MESSAGE, pull_fields("t1", 0, 5))
        assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
        assert beyond.ext_fields["nextBeginOffset"] == "1"
        at_end = await c.call(RequestCode.PULL_MESSAGE, pull_fields("t1", 0, 1))
        assert at_end.code == ResponseCode.PULL_NOT_FOUND
        assert at_end.ext_fields["nextBeginOffset"] == "1"
        missing = await c.call(RequestCode.PULL_MESSAGE, pull_fields("nosuch", 0, 0))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        bad_queue = await c.call(RequestCode.PULL_MESSAGE, pull_fields("t1", 8, 0))
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR
        # a send without a required field, or with a non-numeric one
        no_topic = {k: v for k, v in send_fields("t1", 0, "").items() if k != "b"}
        missing = await c.call(RequestCode.SEND_MESSAGE_V2, no_topic, body=b"x")
        assert missing.code == ResponseCode.INVALID_PARAMETER
        assert "topic" in (missing.remark or "")
        bad = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("t1", 0, "") | {"e": "x"},
                           body=b"x")
        assert bad.code == ResponseCode.INVALID_PARAMETER
        wrong_queue = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("t1", 8, ""),
                                   body=b"x")
        assert wrong_queue.code == ResponseCode.SYSTEM_ERROR
        system = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("TBW102", 0, ""),
                              body=b"x")
        assert system.code == ResponseCode.NO_PERMISSION
        await c.close()


async def test_long_poll_woken_by_a_send_and_timing_out(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        consumer = await Client.connect(port_of(gw))
        producer = await Client.connect(port_of(gw))
        await producer.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "lp"})
        started = time.monotonic()
        _, pending = consumer.request(
            RequestCode.PULL_MESSAGE, pull_fields("lp", 1, 0, suspend_ms=10_000))
        await asyncio.sleep(0.3)
        assert not pending.done()  # suspended, not answered at once
        await producer.ok(RequestCode.SEND_MESSAGE_V2, send_fields("lp", 1, ""), body=b"wake")
        answer = await asyncio.wait_for(pending, 5)
        elapsed = time.monotonic() - started
        assert answer.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_pulled(answer.body)] == [b"wake"]
        assert elapsed < 3  # woken by the send, not by the 10 s timeout

        # a send to another queue does not answer it; the timeout does
        started = time.monotonic()
        _, pending = consumer.request(
            RequestCode.PULL_MESSAGE, pull_fields("lp", 1, 1, suspend_ms=700))
        await producer.ok(RequestCode.SEND_MESSAGE_V2, send_fields("lp", 2, ""), body=b"other")
        answer = await asyncio.wait_for(pending, 5)
        assert answer.code == ResponseCode.PULL_NOT_FOUND
        assert answer.ext_fields["nextBeginOffset"] == "1"
        assert 0.6 <= time.monotonic() - started < 3
        # a filtered-out send keeps it waiting; a matching one answers it
        _, pending = consumer.request(
            RequestCode.PULL_MESSAGE,
            pull_fields("lp", 1, 1, expression="Wanted", suspend_ms=10_000))
        await producer.ok(RequestCode.SEND_MESSAGE_V2,
                          send_fields("lp", 1, properties(TAGS="Other")), body=b"no")
        await asyncio.sleep(0.3)
        assert not pending.done()
        await producer.ok(RequestCode.SEND_MESSAGE_V2,
                          send_fields("lp", 1, properties(TAGS="Wanted")), body=b"yes")
        answer = await asyncio.wait_for(pending, 5)
        assert [m.body for m in decode_pulled(answer.body)] == [b"yes"]
        assert answer.ext_fields["nextBeginOffset"] == "3"
        await consumer.close()
        await producer.close()


async def test_batch_is_atomic(tmp_path: Path) -> None:
    async with running_gateway(
        tmp_path / "data", store=StoreConfig(max_message_bytes=64 * 1024)
    ) as gw:
        gw.ctx.rocketmq.topics.create(TopicConfig("batched"))  # NORMAL
        c = await Client.connect(port_of(gw))
        good = batch_body([(b"m1", properties(UNIQ_KEY="U1")), (b"m2", properties(UNIQ_KEY="U2")),
                           (b"m3", properties(UNIQ_KEY="U3", TAGS="T"))])
        fields = send_fields("batched", 0, "") | {"m": True}
        sent = await c.ok(RequestCode.SEND_BATCH_MESSAGE, fields, body=good)
        assert len(sent.ext_fields["msgId"].split(",")) == 3
        assert sent.ext_fields["queueOffset"] == "0"
        # one FIFO (sharding key) message in a batch to a NORMAL topic: none stored
        bad = batch_body([(b"n1", ""), (b"n2", properties(__SHARDINGKEY="k")), (b"n3", "")])
        refused = await c.call(RequestCode.SEND_BATCH_MESSAGE, fields, body=bad)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert "message 1" in (refused.remark or "")
        # a message over the size limit: none stored
        huge = batch_body([(b"ok", ""), (b"x" * (gw.ctx.store.config.max_message_bytes + 1), "")])
        refused = await c.call(RequestCode.SEND_BATCH_MESSAGE, fields, body=huge)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        # a torn batch body: none stored
        torn = await c.call(RequestCode.SEND_BATCH_MESSAGE, fields, body=good[:-3])
        assert torn.code == ResponseCode.MESSAGE_ILLEGAL
        top = await c.ok(RequestCode.GET_MAX_OFFSET, {"topic": "batched", "queueId": 0})
        assert top.ext_fields["offset"] == "3"
        pulled = await c.ok(RequestCode.PULL_MESSAGE, pull_fields("batched", 0, 0))
        assert [m.body for m in decode_pulled(pulled.body)] == [b"m1", b"m2", b"m3"]
        assert [m.properties["UNIQ_KEY"] for m in decode_pulled(pulled.body)] == ["U1", "U2", "U3"]
        await c.close()


async def test_pull_commits_offset_and_message_type_checks(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        for i in range(3):
            await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("co", 0, ""), body=b"%d" % i)
        await c.ok(RequestCode.PULL_MESSAGE, pull_fields("co", 0, 2, commit=2))
        q = await c.ok(RequestCode.QUERY_CONSUMER_OFFSET,
                       {"consumerGroup": "CG", "topic": "co", "queueId": 0})
        assert q.ext_fields["offset"] == "2"
        # "co" was auto-created MIXED: every type is accepted; NORMAL topics check it
        assert gw.ctx.rocketmq.topics.get("co").message_type is MessageType.MIXED
        await c.ok(RequestCode.SEND_MESSAGE_V2,
                   send_fields("co", 0, properties(__SHARDINGKEY="k")), body=b"fifo")
        gw.ctx.rocketmq.topics.create(TopicConfig("co"))  # now NORMAL
        for props, kind in ((properties(DELAY="3"), "DELAY"), (properties(TRAN_MSG="true"),
                            "TRANSACTION"), (properties(__SHARDINGKEY="k"), "FIFO")):
            refused = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("co", 0, props),
                                   body=b"x")
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL, kind
            assert kind in (refused.remark or "")
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("co", 0, ""), body=b"plain")
        # a plain message (no type property, no transaction flag) is NORMAL: refused by
        # a topic of another type, accepted again once the topic is MIXED
        gw.ctx.rocketmq.topics.create(TopicConfig("co", message_type=MessageType.FIFO))
        refused = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("co", 0, ""), body=b"x")
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert "NORMAL" in (refused.remark or "") and "FIFO" in (refused.remark or "")
        gw.ctx.rocketmq.topics.create(TopicConfig("co", message_type=MessageType.MIXED))
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("co", 0, ""), body=b"plain")
        await c.close()


async def test_shutdown_answers_suspended_pulls(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "bye"})
        _, pending = c.request(
            RequestCode.PULL_MESSAGE, pull_fields("bye", 0, 0, suspend_ms=30_000))
        await asyncio.sleep(0.2)
        assert not pending.done()
        started = time.monotonic()
        stopping = asyncio.ensure_future(gw.stop())
        answer = await asyncio.wait_for(pending, 5)
        assert answer.code == ResponseCode.PULL_NOT_FOUND
        assert answer.ext_fields["nextBeginOffset"] == "0"
        await asyncio.wait_for(c.closed.wait(), 5)
        await asyncio.wait_for(stopping, 10)
        assert time.monotonic() - started < 2  # not the 2 s shutdown timeout
        await c.close()


async def test_topic_changes_apply_to_the_next_send(tmp_path: Path) -> None:
    from lmq.rocketmq import Perm, TopicConfig

    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("ro", 5, ""), body=b"1")
        # an operator makes the topic read-only, then shrinks its write queues
        gw.ctx.rocketmq_topics.create(TopicConfig("ro", perm=int(Perm.READ)))
        refused = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("ro", 5, ""), body=b"2")
        assert refused.code == ResponseCode.NO_PERMISSION
        gw.ctx.rocketmq_topics.create(TopicConfig("ro", read_queues=8, write_queues=2))
        refused = await c.call(RequestCode.SEND_MESSAGE_V2, send_fields("ro", 5, ""), body=b"3")
        assert refused.code == ResponseCode.SYSTEM_ERROR
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields("ro", 1, ""), body=b"4")
        await c.close()
