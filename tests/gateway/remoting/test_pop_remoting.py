"""The pop family and send-back over real sockets against an in-process gateway: POP
across queues with POP_CK receipts, ACK / BATCH_ACK / CHANGE_MESSAGE_INVISIBLETIME by
receipt (also after a restart), long polling woken by a publish, PEEK, NOTIFICATION,
POLLING_INFO, orderly pop (FIFO topics only), CONSUMER_SEND_MSG_BACK through the schedule and to
the DLQ. Bodies are read with a decoder of RocketMQ's stored-message layout written
here from the reference (not the gateway's encoder)."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker_core import Message
from gateway.server import Gateway
from lmq.rocketmq import MessageType, TopicConfig, queue_lmq
from protocol.remoting import RequestCode, ResponseCode

from .remoting_support import Client, port_of, running_gateway

GROUP = "pop-group"
TOPIC = "orders"


@dataclass
class Ext:
    queue_id: int
    queue_offset: int
    physical_offset: int
    reconsume_times: int
    body: bytes
    topic: str
    properties: dict[str, str]


def decode_exts(data: bytes) -> list[Ext]:
    """RocketMQ's MessageDecoder layout, MAGIC v1 (rocketmq-remoting.md section 1)."""
    out = []
    pos = 0
    while pos < len(data):
        total, magic, _crc, qid, _flag, qoff, phys, sysflag, _born = struct.unpack_from(
            ">iiiiiqqiq", data, pos)
        assert magic == -626843481
        p = pos + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        p += (16 if sysflag & 0x10 else 4) + 4  # born host
        p += 8  # store timestamp
        p += (16 if sysflag & 0x20 else 4) + 4  # store host
        reconsume, _prepared, body_len = struct.unpack_from(">iqi", data, p)
        p += 16
        body = data[p:p + body_len]
        p += body_len
        topic_len = data[p]
        topic = data[p + 1:p + 1 + topic_len].decode()
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", data, p)
        props_text = data[p + 2:p + 2 + props_len].decode()
        p += 2 + props_len
        assert p - pos == total
        props = dict(kv.split("\x01", 1) for kv in props_text.split("\x02") if kv)
        out.append(Ext(qid, qoff, phys, reconsume, body, topic, props))
        pos = p
    return out


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(tmp_path / "data") as gateway:
        yield gateway


async def create_topic(gw: Gateway, queues: int = 4) -> None:
    gw.ctx.rocketmq_topics.create(TopicConfig(TOPIC, read_queues=queues, write_queues=queues))


async def put(gw: Gateway, body: bytes, queue: int, tag: str = "", topic: str = TOPIC) -> int:
    """A message in queue ``queue`` (as the topic space stores an MQTT publish)."""
    result = await gw.ctx.publisher.submit(
        Message(topic=f"{topic}/eu/1", body=body, tag=tag), [queue_lmq(topic, queue)])
    return result.position


def pop_fields(queue: int = -1, n: int = 32, invisible: int = 30_000, poll: int = 0,
               **extra: Any) -> dict[str, Any]:
    return {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue, "maxMsgNums": n,
            "invisibleTime": invisible, "pollTime": poll, "bornTime": int(time.time() * 1000),
            "initMode": 0, **extra}


def ack_fields(ext: Ext) -> dict[str, Any]:
    return {"consumerGroup": GROUP, "topic": ext.topic, "queueId": ext.queue_id,
            "extraInfo": ext.properties["POP_CK"], "offset": ext.queue_offset}


async def test_pop_across_queues_and_ack_by_pop_ck(gw: Gateway) -> None:
    await create_topic(gw)
    for q in range(4):
        await put(gw, f"m{q}".encode(), q, tag="T")
    client = await Client.connect(port_of(gw))
    resp = await client.ok(RequestCode.POP_MESSAGE, pop_fields())
    exts = decode_exts(resp.body)
    assert sorted(e.body for e in exts) == [b"m0", b"m1", b"m2", b"m3"]
    assert {e.topic for e in exts} == {TOPIC}
    assert all(e.properties["mqttSecondTopic"] == "/eu/1" for e in exts)
    pop_time = int(resp.ext_fields["popTime"])
    for e in exts:
        ck = e.properties["POP_CK"].split(" ")
        assert ck[1] == str(pop_time) and ck[2] == "30000" and ck[4] == "0"
        assert int(ck[6]) == e.queue_id and int(ck[7]) == e.queue_offset
    assert len(resp.ext_fields["startOffsetInfo"].split(";")) == 4
    assert gw.store is not None and gw.store.pop.inflight_count(GROUP) == 4
    for e in exts:
        await client.ok(RequestCode.ACK_MESSAGE, ack_fields(e))
    assert gw.store.pop.inflight_count(GROUP) == 0
    # nothing left: POLLING_TIMEOUT after pollTime
    started = time.monotonic()
    empty = await client.call(RequestCode.POP_MESSAGE, pop_fields(poll=300))
    assert empty.code == ResponseCode.POLLING_TIMEOUT
    assert time.monotonic() - started >= 0.29
    # an ack of a receipt no longer in flight succeeds (RocketMQ), an offset outside the
    # queue is NO_MESSAGE, an unknown queue MESSAGE_ILLEGAL, a bad receipt INVALID_PARAMETER
    await client.ok(RequestCode.ACK_MESSAGE, ack_fields(exts[0]))
    bad = dict(ack_fields(exts[0]), offset=99)
    assert (await client.call(RequestCode.ACK_MESSAGE, bad)).code == ResponseCode.NO_MESSAGE
    bad = dict(ack_fields(exts[0]), queueId=9)
    assert (await client.call(RequestCode.ACK_MESSAGE, bad)).code == ResponseCode.MESSAGE_ILLEGAL
    bad = dict(ack_fields(exts[0]), extraInfo="nonsense")
    response = await client.call(RequestCode.ACK_MESSAGE, bad)
    assert response.code == ResponseCode.INVALID_PARAMETER
    await client.close()


async def test_long_poll_woken_by_a_publish(gw: Gateway) -> None:
    await create_topic(gw)
    client = await Client.connect(port_of(gw))
    _, fut = client.request(RequestCode.POP_MESSAGE, pop_fields(poll=10_000))
    await asyncio.sleep(0.2)
    info = await client.ok(RequestCode.POLLING_INFO,
                           {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1})
    assert info.ext_fields["pollingNum"] == "1"
    t0 = time.monotonic()
    await put(gw, b"wake", 2)
    resp = await asyncio.wait_for(fut, 5)
    assert resp.code == ResponseCode.SUCCESS and time.monotonic() - t0 < 1.0
    assert [e.body for e in decode_exts(resp.body)] == [b"wake"]
    await client.close()


async def test_change_invisible_time_batch_ack_and_redelivery(gw: Gateway) -> None:
    await create_topic(gw, queues=1)
    for n in range(3):
        await put(gw, b"m%d" % n, 0)
    client = await Client.connect(port_of(gw))
    resp = await client.ok(RequestCode.POP_MESSAGE, pop_fields(queue=0))
    exts = decode_exts(resp.body)
    assert [e.queue_offset for e in exts] == [0, 1, 2]
    # message 0 comes back in 200 ms; the others are batch-acked
    changed = await client.ok(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                              dict(ack_fields(exts[0]), invisibleTime=200))
    assert changed.ext_fields["invisibleTime"] == "200"
    # the old receipt is void
    again = await client.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                              dict(ack_fields(exts[0]), invisibleTime=200))
    assert again.code == ResponseCode.NO_MESSAGE
    ck = exts[1].properties["POP_CK"].split(" ")
    bits = base64.b64encode(bytes([0b110])).decode()  # offsets 1 and 2 from ckOffset 0
    body = {"brokerName": ck[5], "acks": [{
        "c": GROUP, "t": TOPIC, "r": "0", "so": int(ck[0]), "q": 0, "rq": 0,
        "pt": int(ck[1]), "it": int(ck[2]), "b": bits}]}
    await client.ok(RequestCode.BATCH_ACK_MESSAGE, body=json.dumps(body).encode())
    assert gw.store is not None and gw.store.pop.inflight_count(GROUP) == 1
    started = time.monotonic()
    back = await client.ok(RequestCode.POP_MESSAGE, pop_fields(queue=0, poll=5000))
    assert time.monotonic() - started < 3.0
    [redelivered] = decode_exts(back.body)
    assert redelivered.body == b"m0" and redelivered.reconsume_times == 1
    # the new receipt (from the change) acks
    new_ck = redelivered.properties["POP_CK"]
    await client.ok(RequestCode.ACK_MESSAGE, dict(ack_fields(redelivered), extraInfo=new_ck))
    assert gw.store.pop.inflight_count(GROUP) == 0
    await client.close()


async def test_receipt_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        await create_topic(gw, queues=2)
        await put(gw, b"durable", 1)
        client = await Client.connect(port_of(gw))
        [ext] = decode_exts((await client.ok(RequestCode.POP_MESSAGE, pop_fields())).body)
        await client.close()
    async with running_gateway(data) as gw:
        client = await Client.connect(port_of(gw))
        assert gw.store is not None and gw.store.pop.inflight_count(GROUP) == 1
        await client.ok(RequestCode.ACK_MESSAGE, ack_fields(ext))
        assert gw.store.pop.inflight_count(GROUP) == 0
        await client.close()


async def test_peek_notification_tags_and_orderly_refused(gw: Gateway) -> None:
    await create_topic(gw, queues=1)
    client = await Client.connect(port_of(gw))
    note = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "pollTime": 200,
            "bornTime": 0}
    assert (await client.ok(RequestCode.NOTIFICATION, note)).ext_fields["hasMsg"] == "false"
    await put(gw, b"a", 0, tag="A")
    await put(gw, b"b", 0, tag="B")
    assert (await client.ok(RequestCode.NOTIFICATION, note)).ext_fields["hasMsg"] == "true"
    peek = await client.ok(RequestCode.PEEK_MESSAGE,
                           {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0,
                            "maxMsgNums": 10})
    assert [e.body for e in decode_exts(peek.body)] == [b"a", b"b"]
    assert all("POP_CK" not in e.properties for e in decode_exts(peek.body))
    # a TAG expression: the message of the other tag is passed over
    resp = await client.ok(RequestCode.POP_MESSAGE,
                           pop_fields(queue=0, expType="TAG", exp="B"))
    assert [e.body for e in decode_exts(resp.body)] == [b"b"]
    assert gw.store is not None and gw.store.pop.inflight_count(GROUP) == 1
    orderly = await client.call(RequestCode.POP_MESSAGE, pop_fields(order=True))
    assert orderly.code == ResponseCode.INVALID_PARAMETER and "order" in (orderly.remark or "")
    too_many = await client.call(RequestCode.POP_MESSAGE, pop_fields(n=33))
    assert too_many.code == ResponseCode.INVALID_PARAMETER
    await client.close()


async def test_send_back_redelivers_through_retry_then_dlq(gw: Gateway) -> None:
    await create_topic(gw, queues=1)
    position = await put(gw, b"fails", 0, tag="T")
    client = await Client.connect(port_of(gw))
    back = {"offset": position, "group": GROUP, "delayLevel": 1, "originMsgId": "x",
            "originTopic": TOPIC, "maxReconsumeTimes": 1}
    await client.ok(RequestCode.CONSUMER_SEND_MSG_BACK, back)
    store = gw.store
    assert store is not None
    retry = queue_lmq(f"%RETRY%{GROUP}", 0)
    deadline = time.monotonic() + 5
    while (info := store.lmq(retry)) is None or info.max_offset == 0:
        assert time.monotonic() < deadline, "the 1 s delay level did not deliver"
        await asyncio.sleep(0.05)
    assert gw.ctx.rocketmq_topics.get(f"%RETRY%{GROUP}") is not None
    rec = store.pull(retry, 0, 1).messages[0].record
    assert rec.body == b"fails" and rec.tag == "T"
    # consumed from the retry topic and failed again: now past maxReconsumeTimes 1
    await client.ok(RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=rec.position))
    dlq = store.pull(queue_lmq(f"%DLQ%{GROUP}", 0), 0, 1).messages
    assert [m.body for m in dlq] == [b"fails"]
    missing = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, dict(back, offset=3))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "offset" in (missing.remark or "")
    await client.close()


async def test_schedule_topic_appears_with_the_first_send_back(gw: Gateway) -> None:
    topics = gw.ctx.rocketmq_topics
    assert gw.store is not None
    assert gw.store.has_listeners("rmq:SCHEDULE_TOPIC_XXXX:17")  # the schedule runs
    assert topics.get("SCHEDULE_TOPIC_XXXX") is None  # and has made nothing yet
    assert list(gw.store.lmqs("rmq:SCHEDULE_TOPIC_XXXX:")) == []
    await create_topic(gw, queues=1)
    position = await put(gw, b"x", 0)
    client = await Client.connect(port_of(gw))
    await client.ok(RequestCode.CONSUMER_SEND_MSG_BACK,
                    {"offset": position, "group": GROUP, "delayLevel": 4})
    await client.close()
    config = topics.get("SCHEDULE_TOPIC_XXXX")
    assert config is not None and config.queue_count == 18


async def test_send_back_pending_across_a_gateway_restart(tmp_path: Path) -> None:
    """Scheduled before a stop, moved by the next gateway with no request needed."""
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        await create_topic(gw, queues=1)
        position = await put(gw, b"later", 0)
        client = await Client.connect(port_of(gw))
        await client.ok(RequestCode.CONSUMER_SEND_MSG_BACK,
                        {"offset": position, "group": GROUP, "delayLevel": 2})  # 5 s
        await client.close()
        retry = queue_lmq(f"%RETRY%{GROUP}", 0)
        assert gw.store is not None
        info = gw.store.lmq(retry)
        assert info is None or info.max_offset == 0
    async with running_gateway(data) as gw:
        store = gw.store
        assert store is not None
        deadline = time.monotonic() + 10
        while (info := store.lmq(retry)) is None or info.max_offset == 0:
            assert time.monotonic() < deadline, "the pending delay was not moved"
            await asyncio.sleep(0.1)
        assert store.pull(retry, 0, 1).messages[0].body == b"later"


async def test_orderly_pop_on_a_fifo_topic_orders_each_message_group(gw: Gateway) -> None:
    """order=true on a FIFO topic: a message group's next message only after the previous
    one was acked, while the other groups flow (the store's FIFO pop)."""
    gw.ctx.rocketmq_topics.create(TopicConfig(TOPIC, read_queues=1, write_queues=1,
                                              message_type=MessageType.FIFO))
    for body, group in ((b"a0", "a"), (b"a1", "a"), (b"b0", "b"), (b"a2", "a"), (b"b1", "b")):
        await gw.ctx.publisher.submit(
            Message(topic=TOPIC, body=body, properties={"__SHARDINGKEY": group.encode()}),
            [queue_lmq(TOPIC, 0)])
    client = await Client.connect(port_of(gw))
    first = decode_exts((await client.ok(RequestCode.POP_MESSAGE, pop_fields(order=True))).body)
    assert [e.body for e in first] == [b"a0", b"b0"]  # one per group
    empty = await client.call(RequestCode.POP_MESSAGE, pop_fields(order=True, poll=200))
    assert empty.code == ResponseCode.POLLING_TIMEOUT  # both groups wait for their acks
    await client.ok(RequestCode.ACK_MESSAGE, ack_fields(first[1]))  # b0 acked, a0 not
    nxt = decode_exts((await client.ok(RequestCode.POP_MESSAGE, pop_fields(order=True))).body)
    assert [e.body for e in nxt] == [b"b1"]
    await client.ok(RequestCode.ACK_MESSAGE, ack_fields(first[0]))
    rest = decode_exts((await client.ok(RequestCode.POP_MESSAGE, pop_fields(order=True))).body)
    assert [e.body for e in rest] == [b"a1"]
    await client.close()
