"""What the Python remoting client writes and reads, checked against the documented
formats (docs/rocketmq.md, the reference's section 1) and not against our own server: a
scripted peer on a real loopback socket records every frame the client sends and answers
with frames built here byte by byte (struct and hand-written JSON, not the codec).

- GET_ROUTEINFO_BY_TOPIC: the request, and a fastjson-style reply (numeric map keys
  unquoted) parsed into brokers and queues;
- SEND_MESSAGE_V2: every header field (a..n), the properties string, the body; the
  UNIQ_KEY the client sets and keeps; a compressed body flagged in sysFlag;
- SEND_BATCH_MESSAGE: the batch body laid out as MessageDecoder.encodeMessages does;
- PULL_MESSAGE: the request fields and sysFlag bits, and a reply body in the stored-message
  layout decoded into messages;
- offsets, oneway UPDATE_CONSUMER_OFFSET, a request timeout, a server request answered.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from gateway.clients import (
    MessageQueue,
    Producer,
    PullConsumer,
    RemotingClient,
    RemotingError,
    RequestTimeout,
)

Reply = Callable[[dict[str, Any], bytes], bytes | None]


def frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def response(opaque: int, code: int = 0, ext: dict[str, str] | None = None,
             body: bytes = b"", remark: str | None = None) -> bytes:
    header: dict[str, Any] = {"code": code, "flag": 1, "language": "JAVA", "opaque": opaque,
                              "serializeTypeCurrentRPC": "JSON", "version": 479}
    if ext:
        header["extFields"] = ext
    if remark:
        header["remark"] = remark
    return frame(header, body)


class ScriptedBroker:
    """Records every request (header dict, body) and answers with ``replies[code]``."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, Any], bytes]] = []
        self.replies: dict[int, Reply] = {}
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> ScriptedBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                length = struct.unpack(">i", await reader.readexactly(4))[0]
                data = await reader.readexactly(length)
                mark = struct.unpack_from(">i", data)[0]
                assert mark >> 24 == 0, "the client writes JSON headers"
                hlen = mark & 0xFFFFFF
                header = json.loads(data[4 : 4 + hlen])
                body = data[4 + hlen :]
                self.requests.append((header, body))
                if header.get("flag", 0) & 1:
                    continue  # a response to our own request
                reply = self.replies.get(header["code"])
                out = reply(header, body) if reply else None
                if out is not None:
                    writer.write(out)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def last(self, code: int) -> tuple[dict[str, Any], bytes]:
        return [r for r in self.requests if r[0]["code"] == code][-1]

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def fastjson_route(address: str, queues: int = 4) -> bytes:
    # fastjson writes the brokerAddrs map key 0 unquoted: not standard JSON.
    return (
        '{"brokerDatas":[{"brokerAddrs":{0:"' + address + '"},"brokerName":"b0",'
        '"cluster":"c"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b0","perm":6,'
        f'"readQueueNums":{queues},"topicSysFlag":0,"writeQueueNums":{queues}}}]}}'
    ).encode()


MAGIC_V1 = -626843481


def stored_message(
    *, topic: str, body: bytes, props: str, queue_id: int, queue_offset: int, phys: int,
    sys_flag: int = 0, reconsume: int = 0, born: int = 1_700_000_000_000,
    stored: int = 1_700_000_000_123,
) -> bytes:
    """One record of a pull body, v1 layout with IPv4 hosts (MessageDecoder)."""
    t, p = topic.encode(), props.encode()
    rest = b"".join([
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),  # BODYCRC
        struct.pack(">ii", queue_id, 0),  # QUEUEID, FLAG
        struct.pack(">qq", queue_offset, phys),  # QUEUEOFFSET, PHYSICALOFFSET
        struct.pack(">i", sys_flag),
        struct.pack(">q", born), socket.inet_aton("10.0.0.7"), struct.pack(">i", 5555),
        struct.pack(">q", stored), socket.inet_aton("127.0.0.1"), struct.pack(">i", 8080),
        struct.pack(">i", reconsume),
        struct.pack(">q", 0),  # PREPARED_TX_OFFSET
        struct.pack(">i", len(body)), body,
        struct.pack(">b", len(t)), t,
        struct.pack(">h", len(p)), p,
    ])
    total = 8 + len(rest)
    return struct.pack(">ii", total, MAGIC_V1) + rest


@pytest.fixture
async def broker():  # type: ignore[no-untyped-def]
    b = await ScriptedBroker().start()
    b.replies[105] = lambda h, _: response(h["opaque"], body=fastjson_route(b.address))
    try:
        yield b
    finally:
        await b.close()


async def test_route_request_and_fastjson_reply(broker: ScriptedBroker) -> None:
    async with RemotingClient(broker.address) as client:
        route = await client.route("orders")
    header, body = broker.last(105)
    assert header["extFields"] == {"topic": "orders", "acceptStandardJsonOnly": "true"}
    assert body == b"" and header["flag"] == 0 and header["language"] == "PYTHON"
    assert route.brokers == {"b0": broker.address}
    assert [q.queue_id for q in route.write_queues] == [0, 1, 2, 3]
    assert route.read_queues[0] == MessageQueue("orders", "b0", 0)


def _props(text: str) -> list[tuple[str, str]]:
    assert text.endswith("\x02")
    return [tuple(p.split("\x01")) for p in text[:-1].split("\x02")]  # type: ignore[misc]


async def test_send_message_v2_field_by_field(broker: ScriptedBroker) -> None:
    broker.replies[310] = lambda h, _: response(
        h["opaque"], ext={"msgId": "7F00000100001F90000000000000002A", "queueId": "2",
                          "queueOffset": "17"})
    async with RemotingClient(broker.address) as client:
        producer = Producer(client, "pg1")
        t0 = int(time.time() * 1000)
        result = await producer.send(
            "orders", b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"},
            queue_id=2,
        )
    header, body = broker.last(310)
    f = header["extFields"]
    assert header["code"] == 310 and header["flag"] == 0
    assert f["a"] == "pg1" and f["b"] == "orders" and f["c"] == "TBW102" and f["d"] == "4"
    assert f["e"] == "2" and f["f"] == "0" and f["h"] == "0" and f["j"] == "0"
    assert f["k"] == "false" and f["m"] == "false" and f["n"] == "b0"
    assert t0 <= int(f["g"]) <= int(time.time() * 1000)
    props = dict(_props(f["i"]))
    uniq = props.pop("UNIQ_KEY")
    assert props == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true"}
    assert len(uniq) == 32 and int(uniq, 16) >= 0  # MessageClientIDSetter: 16 bytes in hex
    assert body == b"hello"
    assert result.msg_id == uniq
    assert result.offset_msg_id == "7F00000100001F90000000000000002A"
    assert result.queue == MessageQueue("orders", "b0", 2) and result.queue_offset == 17


async def test_round_robin_and_compressed_body_and_error(broker: ScriptedBroker) -> None:
    codes = iter([0, 0, 0, 17])
    broker.replies[310] = lambda h, _: response(
        h["opaque"], code=next(codes), ext={"msgId": "X", "queueId": h["extFields"]["e"],
                                            "queueOffset": "0"}, remark="no such topic")
    async with RemotingClient(broker.address) as client:
        producer = Producer(client, "pg1", compress_over=1024)
        ids = [(await producer.send("orders", b"x")).queue.queue_id for _ in range(2)]
        assert ids[1] == (ids[0] + 1) % 4  # round robin over the write queues
        big = b"a" * 5000
        await producer.send("orders", big)
        header, body = broker.last(310)
        assert int(header["extFields"]["f"]) & 0x1  # COMPRESSED
        assert zlib.decompress(body) == big
        with pytest.raises(RemotingError) as err:
            await producer.send("orders", b"x")
        assert err.value.code == 17 and "no such topic" in str(err.value)


async def test_send_batch_body_layout(broker: ScriptedBroker) -> None:
    broker.replies[320] = lambda h, _: response(
        h["opaque"], ext={"msgId": "A,B", "queueId": "0", "queueOffset": "5"})
    from gateway.clients import Message

    async with RemotingClient(broker.address) as client:
        producer = Producer(client, "pg1")
        msgs = [Message("orders", b"one", tags="t1"), Message("orders", b"two", keys=["k"])]
        result = await producer.send_batch("orders", msgs, queue_id=0)
    header, body = broker.last(320)
    assert header["extFields"]["m"] == "true" and header["extFields"]["b"] == "orders"
    # encodeMessages: TOTALSIZE | MAGIC 0 | BODYCRC 0 | FLAG | BODYLEN+body | PROPLEN(i16)+props
    pos, entries = 0, []
    while pos < len(body):
        total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
        mbody = body[pos + 20 : pos + 20 + blen]
        plen = struct.unpack_from(">h", body, pos + 20 + blen)[0]
        props = body[pos + 22 + blen : pos + 22 + blen + plen].decode()
        assert total == 22 + blen + plen and magic == 0 and crc == 0 and flag == 0
        entries.append((mbody, dict(_props(props))))
        pos += total
    assert [e[0] for e in entries] == [b"one", b"two"]
    assert entries[0][1]["TAGS"] == "t1" and entries[1][1]["KEYS"] == "k"
    uniq = [e[1]["UNIQ_KEY"] for e in entries]
    assert result.msg_id == ",".join(uniq) and uniq[0] != uniq[1]


async def test_pull_request_and_stored_message_layout(broker: ScriptedBroker) -> None:
    records = stored_message(
        topic="orders", body=b"first", props="TAGS\x01eu\x02KEYS\x01a b\x02UNIQ_KEY\x01U1\x02",
        queue_id=3, queue_offset=10, phys=4096,
    ) + stored_message(
        topic="orders", body=zlib.compress(b"second" * 100),
        props="mqttSecondTopic\x01/eu/42\x02", queue_id=3, queue_offset=11, phys=8192,
        sys_flag=0x1, reconsume=2,
    )
    broker.replies[11] = lambda h, _: response(
        h["opaque"], ext={"nextBeginOffset": "12", "minOffset": "0", "maxOffset": "12",
                          "suggestWhichBrokerId": "0"}, body=records)
    async with RemotingClient(broker.address) as client:
        pull = PullConsumer(client, "cg1")
        mq = MessageQueue("orders", "b0", 3)
        result = await pull.pull(mq, 10, expression="eu || us", suspend_ms=1000,
                                 commit_offset=9)
    header, _ = broker.last(11)
    f = header["extFields"]
    assert f["consumerGroup"] == "cg1" and f["topic"] == "orders" and f["queueId"] == "3"
    assert f["queueOffset"] == "10" and f["maxMsgNums"] == "32" and f["commitOffset"] == "9"
    assert f["suspendTimeoutMillis"] == "1000" and f["subscription"] == "eu || us"
    assert int(f["sysFlag"]) == 0x1 | 0x2 | 0x4  # commit offset, suspend, subscription
    assert result.found and result.next_begin_offset == 12 and result.max_offset == 12
    m1, m2 = result.messages
    assert (m1.topic, m1.body, m1.queue_id, m1.queue_offset) == ("orders", b"first", 3, 10)
    assert m1.tags == "eu" and m1.keys == "a b" and m1.properties["UNIQ_KEY"] == "U1"
    assert m1.commit_log_offset == 4096
    # offsetMsgId: store host 127.0.0.1, port 8080, physical offset, in hex
    assert m1.offset_msg_id == "7F00000100001F900000000000001000"
    assert m2.body == b"second" * 100  # zlib-inflated, as sysFlag bit 0 says
    assert m2.reconsume_times == 2 and m2.properties["mqttSecondTopic"] == "/eu/42"


async def test_pull_not_found_keeps_the_offsets(broker: ScriptedBroker) -> None:
    broker.replies[11] = lambda h, _: response(
        h["opaque"], code=19, ext={"nextBeginOffset": "5", "minOffset": "0", "maxOffset": "5"})
    async with RemotingClient(broker.address) as client:
        result = await PullConsumer(client, "cg1").pull(MessageQueue("orders", "b0", 0), 5)
    assert result.status == 19 and not result.found and result.messages == []
    assert result.next_begin_offset == 5


async def test_offset_requests(broker: ScriptedBroker) -> None:
    broker.replies[14] = lambda h, _: (
        response(h["opaque"], ext={"offset": "42"}) if h["extFields"]["queueId"] == "0"
        else response(h["opaque"], code=22, remark="not found"))
    broker.replies[30] = lambda h, _: response(h["opaque"], ext={"offset": "100"})
    broker.replies[29] = lambda h, _: response(h["opaque"], ext={"offset": "7"})
    async with RemotingClient(broker.address) as client:
        pull = PullConsumer(client, "cg1")
        q0, q1 = MessageQueue("orders", "b0", 0), MessageQueue("orders", "b0", 1)
        assert await pull.query_offset(q0) == 42
        assert await pull.query_offset(q1) is None
        assert await pull.max_offset(q0) == 100
        assert await pull.search_offset(q0, 1_700_000_000_000) == 7
        await pull.update_offset(q1, 55, oneway=True)
        for _ in range(100):
            if any(r[0]["code"] == 15 for r in broker.requests):
                break
            await asyncio.sleep(0.01)
    header, _ = broker.last(14)
    assert header["extFields"] == {"consumerGroup": "cg1", "topic": "orders", "queueId": "1"}
    header, _ = broker.last(29)
    assert header["extFields"]["timestamp"] == "1700000000000"
    header, _ = broker.last(15)
    assert header["flag"] == 2  # oneway
    assert header["extFields"] == {"consumerGroup": "cg1", "topic": "orders", "queueId": "1",
                                   "commitOffset": "55"}


async def test_timeout_and_server_request(broker: ScriptedBroker) -> None:
    async with RemotingClient(broker.address, timeout=0.3) as client:
        conn = await client.connection(broker.address)
        with pytest.raises(RequestTimeout):
            await conn.call(30, {"topic": "x", "queueId": 0}, timeout=0.3)
        # the server asks something this client does not serve: it answers code 3
        broker.writers[0].write(frame({"code": 309, "flag": 0, "opaque": 900}))
        for _ in range(200):
            if any(r[0].get("opaque") == 900 and r[0]["flag"] & 1 for r in broker.requests):
                break
            await asyncio.sleep(0.01)
    answer = [r[0] for r in broker.requests if r[0].get("opaque") == 900][0]
    assert answer["code"] == 3 and answer["flag"] == 1


async def test_requests_are_signed_when_an_access_key_is_given(broker: ScriptedBroker) -> None:
    import base64
    import hashlib
    import hmac

    broker.replies[30] = lambda h, _: response(h["opaque"], ext={"offset": "1"})
    async with RemotingClient(broker.address, access_key="AK1", secret_key="s3cret") as client:
        await client.route("orders")
        await PullConsumer(client, "cg").max_offset(MessageQueue("orders", "b0", 0))
    for code in (105, 30):
        f = broker.last(code)[0]["extFields"]
        assert f["AccessKey"] == "AK1"
        # AclClientRPCHook: HMAC-SHA1 over the field values sorted by name, then the body
        content = "".join(f[k] for k in sorted(f) if k != "Signature").encode()
        expected = base64.b64encode(hmac.new(b"s3cret", content, hashlib.sha1).digest())
        assert f["Signature"] == expected.decode()
