"""The remoting load generator's raw connections (bench/remoting_wire.py): the send
template writes the codec's frames, the sender counts responses from raw frames, and
the raw puller, against a real gateway, counts every message once and flags what does
not add up (a lost or repeated offset, a sequence number out of order)."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bench.mqtt_wire import Stats
from gateway.clients import RemotingClient
from gateway.remoting.replies import encode_send_ok
from protocol.remoting import RemotingCommand, RequestCode, ResponseCode
from protocol.remoting.codes import SerializeType
from protocol.remoting.messages import StoredMessage, encode_stored

from .remoting_support import port_of, running_gateway

rw = importlib.import_module("bench.remoting_wire")


@given(topic=st.text(st.sampled_from("abcXYZ09_-%"), min_size=1, max_size=60),
       opaque=st.integers(1, 2**31 - 1), queue_id=st.integers(0, 1023),
       born=st.integers(10**12, 10**13 - 1), seq=st.integers(0, 2**48 - 1),
       uniq=st.booleans(), body=st.binary(max_size=40))
def test_send_template_writes_the_codecs_frame(topic, opaque, queue_id, born, seq, uniq,
                                               body) -> None:
    template = rw.SendTemplate(topic, uniq=uniq)
    expected = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, rw.send_fields(topic, queue_id, born, seq, uniq), body,
        opaque=opaque).encode()
    assert template.frame(opaque, queue_id, b'"%d"' % born, seq, body) == expected


def _response(code: int, opaque: int, remark: str | None, kind: SerializeType) -> bytes:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque=opaque)
    return RemotingCommand.response_to(request, code, remark).encode(kind)


def test_raw_sender_counts_responses_across_any_split() -> None:
    frames = [encode_send_ok(i, f"7F00000100001F90{i:016X}", 1, i) for i in range(1, 40)]
    frames.insert(5, _response(ResponseCode.SYSTEM_BUSY, 99, "busy", SerializeType.JSON))
    frames.insert(9, _response(ResponseCode.SUCCESS, 7, None, SerializeType.ROCKETMQ))
    frames.insert(20, _response(ResponseCode.FLUSH_DISK_TIMEOUT, 8, '"code":0',
                                SerializeType.ROCKETMQ))
    data = b"".join(frames)
    rng = random.Random(7)
    for _ in range(20):
        sender = rw.RawSender("t", 8, 100)
        cuts = sorted(rng.sample(range(1, len(data)), 15))
        for a, b in itertools.pairwise([0, *cuts, len(data)]):
            sender.data_received(data[a:b])
        assert (sender.confirmed, sender.nacked) == (40, 2)


def _body(queue_id: int, offsets: list[int], seqs: list[int]) -> bytes:
    return b"".join(encode_stored(StoredMessage(
        topic="t", body=rw.STAMP.pack(0.0, seq) + bytes(10), queue_id=queue_id,
        queue_offset=off, store_host=("::1", 1) if off % 2 else ("127.0.0.1", 2)))
        for off, seq in zip(offsets, seqs, strict=True))


def test_raw_puller_checks_offsets_and_sequence_numbers() -> None:
    stats = Stats()
    puller = rw.RawPuller("t", "g", {3: 10}, 8, stats)
    q = puller.queues[3]
    puller._check(q, _body(3, [10, 11, 12], [3, 11, 19]))
    assert (stats.delivered, q.offset, q.bad_order, q.bad_seq) == (3, 13, 0, 0)
    puller._check(q, _body(3, [14, 15], [35, 27]))  # offset 13 lost; 27 after 35
    assert (stats.delivered, q.offset, q.bad_order, q.bad_seq) == (5, 16, 1, 1)
    puller._check(q, _body(3, [16], [36]))  # a sequence number of queue 4
    assert (q.bad_order, q.bad_seq) == (1, 2) and len(stats.latencies) == 6
    assert puller.checks() == {"consumed": 6, "pulls": 0, "bad_order": 1, "bad_seq": 2}


async def test_raw_sender_and_puller_through_a_gateway(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        port = port_of(gw)
        loop = asyncio.get_running_loop()
        stats = Stats()
        topic = "benchWire"
        async with RemotingClient(f"127.0.0.1:{port}") as client:  # creates the topic
            assert len((await client.route(topic)).read_queues) == 8
        transport, sender = await loop.create_connection(
            lambda: rw.RawSender(topic, 8, 100), "127.0.0.1", port)
        pull_transport, puller = await loop.create_connection(
            lambda: rw.RawPuller(topic, "benchGroup", {q: 0 for q in range(8)}, 8, stats,
                                 batch=16, suspend_ms=2000), "127.0.0.1", port)
        try:
            for _ in range(10):
                transport.write(sender.build(100))
                await asyncio.sleep(0.01)
            async with asyncio.timeout(15):
                while stats.delivered < 1000 or sender.confirmed < 1000:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # nothing more arrives
        finally:
            puller.closing = True
            pull_transport.close()
            transport.close()
        assert (sender.confirmed, sender.nacked) == (1000, 0)
        assert stats.delivered == 1000 and len(stats.latencies) == 1000
        checks = puller.checks()
        assert checks["consumed"] == 1000 and checks["bad_order"] == checks["bad_seq"] == 0
        assert checks["pulls"] > 8 and puller.errors == []
        assert puller.offsets() == {q: 125 for q in range(8)}
        # the offsets were committed with the pulls (the last pull's commitOffset)
        committed = gw.ctx.store.get_offset("benchGroup", f"rmq:{topic}:0")
        assert committed == 125
