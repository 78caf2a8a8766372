"""The remoting front end over real sockets: routes, heartbeats and consumer lists,
offsets, locks, unknown codes and bad frames."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from pathlib import Path

from protocol.remoting import RequestCode, ResponseCode

from .remoting_support import Client, port_of, running_gateway


async def test_unknown_code_gets_request_code_not_supported(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        client = await Client.connect(port_of(gw))
        response = await client.call(9999)
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "9999" in (response.remark or "")
        # the connection is still usable
        route = await client.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        assert json.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 8
        text = gw.ctx.metrics.render()
        assert 'lmq_remoting_requests_total{code="105"} 1' in text
        assert 'lmq_remoting_requests_total{code="9999"} 1' in text
        assert 'lmq_remoting_errors_total{code="3"} 1' in text
        assert "lmq_remoting_connections 1" in text
        await client.close()


async def test_route_json_styles_and_auto_create(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        # an old client (version < 401): fastjson's unquoted broker id
        old = await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "r1"}, version=121)
        assert b'"brokerAddrs":{0:"127.0.0.1:' in old.body
        new = await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "r1"}, version=479)
        route = json.loads(new.body)
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{port_of(gw)}"}
        assert route["queueDatas"][0]["perm"] == 6
        asked = await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "r1", "acceptStandardJsonOnly": True}, version=121)
        assert json.loads(asked.body)["brokerDatas"][0]["brokerAddrs"]["0"]
        bad = await c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "a/b"})
        assert bad.code == ResponseCode.TOPIC_NOT_EXIST
        cluster = await c.ok(RequestCode.GET_BROKER_CLUSTER_INFO, version=479)
        assert json.loads(cluster.body)["clusterAddrTable"] == {"DefaultCluster": ["lmq-gateway"]}
        await c.close()


async def test_route_without_auto_create_and_advertised_address(tmp_path: Path) -> None:
    async with running_gateway(
        tmp_path / "data", rocketmq_auto_create_topics=False,
        advertised_address="broker.example:10911",
    ) as gw:
        c = await Client.connect(port_of(gw))
        missing = await c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        send = await c.call(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "nope", "e": 0, "f": 0, "g": 0, "h": 0}, body=b"x")
        assert send.code == ResponseCode.TOPIC_NOT_EXIST
        # retry topics always exist for a group
        retry = await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%G1"},
                           version=479)
        assert json.loads(retry.body)["brokerDatas"][0]["brokerAddrs"]["0"] == (
            "broker.example:10911")
        await c.close()


async def test_heartbeat_consumer_list_and_notifications(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        a = await Client.connect(port_of(gw))
        b = await Client.connect(port_of(gw))
        empty = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert empty.code == ResponseCode.SYSTEM_ERROR
        await a.heartbeat("10.0.0.1@a", "G", "orders")
        listed = await a.ok(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert json.loads(listed.body) == {"consumerIdList": ["10.0.0.1@a"]}
        await b.heartbeat("10.0.0.2@b", "G", "orders")
        # the group changed: every client of it is told (oneway, consumerGroup header)
        note = await asyncio.wait_for(a.server_requests.get(), 5)
        while note.ext_fields.get("consumerGroup") != "G" or b"" != note.body:
            note = await asyncio.wait_for(a.server_requests.get(), 5)
        assert note.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and note.is_oneway
        listed = await b.ok(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert json.loads(listed.body)["consumerIdList"] == ["10.0.0.1@a", "10.0.0.2@b"]
        # a repeated identical heartbeat changes nothing: no notification
        while not a.server_requests.empty():
            a.server_requests.get_nowait()
        await b.heartbeat("10.0.0.2@b", "G", "orders")
        await asyncio.sleep(0.2)
        assert a.server_requests.empty()
        # b's connection closes: it leaves the group, a is told
        await b.close()
        note = await asyncio.wait_for(a.server_requests.get(), 5)
        assert note.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        listed = await a.ok(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert json.loads(listed.body)["consumerIdList"] == ["10.0.0.1@a"]
        # unregistering leaves the group
        await a.ok(RequestCode.UNREGISTER_CLIENT,
                   {"clientID": "10.0.0.1@a", "consumerGroup": "G"})
        gone = await a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert gone.code == ResponseCode.SYSTEM_ERROR
        await a.close()


def lock_body(group: str, client: str, queues: list[int], topic: str = "fifo") -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client, "onlyThisBroker": True,
                       "mqSet": [{"topic": topic, "brokerName": "lmq-gateway", "queueId": q}
                                 for q in queues]}).encode()


async def test_locks_are_exclusive_and_expire(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", rocketmq_lock_expiry=0.5) as gw:
        a = await Client.connect(port_of(gw))
        b = await Client.connect(port_of(gw))
        got = await a.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "A", [0, 1]))
        assert [m["queueId"] for m in json.loads(got.body)["lockOKMQSet"]] == [0, 1]
        got = await b.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "B", [1, 2]))
        assert [m["queueId"] for m in json.loads(got.body)["lockOKMQSet"]] == [2]
        # another group locks independently
        got = await b.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("H", "B", [1]))
        assert [m["queueId"] for m in json.loads(got.body)["lockOKMQSet"]] == [1]
        # A renews queue 0 only; queue 1 expires and B can take it
        await asyncio.sleep(0.3)
        await a.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "A", [0]))
        await asyncio.sleep(0.35)
        got = await b.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "B", [0, 1]))
        assert [m["queueId"] for m in json.loads(got.body)["lockOKMQSet"]] == [1]
        # unlock frees a lock at once, but only the holder's
        await b.ok(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("G", "B", [0]))
        got = await b.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "B", [0]))
        assert json.loads(got.body)["lockOKMQSet"] == []
        await a.ok(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("G", "A", [0]))
        got = await b.ok(RequestCode.LOCK_BATCH_MQ, body=lock_body("G", "B", [0]))
        assert [m["queueId"] for m in json.loads(got.body)["lockOKMQSet"]] == [0]
        await a.close()
        await b.close()


async def test_offsets(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        q = {"topic": "off", "queueId": 2}
        await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "off"})
        # no committed offset on a queue that still starts at 0: offset 0
        first = await c.ok(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", **q})
        assert first.ext_fields["offset"] == "0"
        stamps = []
        for i in range(5):
            await c.ok(RequestCode.SEND_MESSAGE_V2, {
                "a": "PG", "b": "off", "e": 2, "f": 0, "g": 0, "h": 0}, body=b"%d" % i)
            stamps.append(int(time.time() * 1000))
            await asyncio.sleep(0.02)
        assert (await c.ok(RequestCode.GET_MAX_OFFSET, q)).ext_fields["offset"] == "5"
        assert (await c.ok(RequestCode.GET_MIN_OFFSET, q)).ext_fields["offset"] == "0"
        earliest = await c.ok(RequestCode.GET_EARLIEST_MSG_STORETIME, q)
        assert 0 < int(earliest.ext_fields["timestamp"]) <= stamps[0]
        search = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        found = await c.ok(search, {**q, "timestamp": stamps[1] + 1})
        assert found.ext_fields["offset"] == "2"
        late = await c.ok(search, {**q, "timestamp": stamps[-1] + 10**6})
        assert late.ext_fields["offset"] == "5"
        update = RequestCode.UPDATE_CONSUMER_OFFSET
        await c.ok(update, {"consumerGroup": "G", "commitOffset": 4, **q})
        # oneway update (as ali-ons sends it); negatives are ignored
        c.oneway(update, {"consumerGroup": "G", "commitOffset": -1, **q})
        got = await c.ok(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", **q})
        assert got.ext_fields["offset"] == "4"
        # an update stores what the client sends (a reset), as RocketMQ does
        await c.ok(update, {"consumerGroup": "G", "commitOffset": 1, **q})
        got = await c.ok(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", **q})
        assert got.ext_fields["offset"] == "1"
        missing = await c.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "off"})
        assert missing.code == ResponseCode.INVALID_PARAMETER
        await c.close()


async def test_bad_frames_close_only_that_connection(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        good = await Client.connect(port_of(gw))
        await good.ok(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "keep", "e": 0, "f": 0, "g": 0, "h": 0}, body=b"stored")
        # a well-framed header with a bad field, opaque readable: an error response,
        # and the connection goes on
        sloppy = await Client.connect(port_of(gw))
        await sloppy.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "keep"})
        header = b'{"code":"route","opaque":77,"flag":0,"extFields":{"topic":"keep"}}'
        sloppy.send_raw(struct.pack(">ii", 4 + len(header), len(header)) + header)
        sloppy._waiting[77] = asyncio.get_running_loop().create_future()
        answer = await asyncio.wait_for(sloppy._waiting[77], 5)
        assert answer.code != ResponseCode.SUCCESS
        await sloppy.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "keep"})
        # bad JSON: the opaque is unknown, nobody can be answered: closed
        garbled = await Client.connect(port_of(gw))
        await garbled.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "keep"})
        header = b'{"code":105,"opaque":78,"flag":0,"extFields":{"topic":'
        garbled.send_raw(struct.pack(">ii", 4 + len(header), len(header)) + header)
        await asyncio.wait_for(garbled.closed.wait(), 5)
        # a frame over the maximum: framing is lost, that connection is closed
        liar = await Client.connect(port_of(gw))
        await liar.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "keep"})
        liar.send_raw(struct.pack(">ii", 0x7FFFFFF0, 20) + b"{}")
        await asyncio.wait_for(liar.closed.wait(), 5)
        # a length shorter than the header mark: closed too
        short = await Client.connect(port_of(gw))
        await short.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "keep"})
        short.send_raw(struct.pack(">i", 2) + b"xx")
        await asyncio.wait_for(short.closed.wait(), 5)
        # everyone else goes on, nothing stored is lost
        pulled = await good.ok(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "CG", "topic": "keep", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 8, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0})
        assert b"stored" in pulled.body
        await sloppy.close()
        await garbled.close()
        await good.close()
        await liar.close()
        await short.close()
