"""The connector's side of a gateway over remoting, through ``lmq serve`` (issue 19):
copies stored once whatever is repeated, high-water marks queried and advanced (also
after kill -9), loops dropped and counted, the cluster id kept across restarts,
group offsets translated; and the errors and permissions of the new requests."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from gateway.clients import Message, OriginClient, Producer, PullConsumer, RemotingClient
from gateway.clients.remoting import MessageQueue, RemotingError
from protocol.remoting import RequestCode, ResponseCode
from protocol.remoting.origins import ORIGIN_CLUSTER, ORIGIN_OFFSET, ORIGIN_QUEUE, PATH
from tests.grpc.test_grpc_send import create_topic

from ..gateway_process import GatewayProcess
from .remoting_support import Client, port_of, running_gateway
from .test_remoting_security import call_signed

BOUND = 15.0


def origin(offset: int, queue: str = "src:0", cluster: str = "gw-a",
           path: str = "gw-a") -> dict[str, str]:
    return {ORIGIN_CLUSTER: cluster, ORIGIN_QUEUE: queue, ORIGIN_OFFSET: str(offset),
            PATH: path}


async def bodies(client: RemotingClient, topic: str, queue_id: int = 0) -> list[bytes]:
    pull = PullConsumer(client, "GID_check")
    mq = MessageQueue(topic, "lmq-gateway", queue_id)
    result = await pull.pull(mq, 0, max_nums=1000)
    return [m.body for m in result.messages]


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=BOUND) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_copies_marks_loops_and_the_cluster_id_through_lmq_serve(tmp_path: Path):
    data = tmp_path / "data"
    create_topic(data, "copy", "--queues", "1")
    gw = GatewayProcess(data, "--durability", "sync").start()
    try:
        port = gw.ports["unified"]
        async with RemotingClient(f"127.0.0.1:{port}", timeout=BOUND) as client:
            origins = OriginClient(client)
            me = await origins.cluster_id()
            assert me.startswith("lmq-")
            producer = Producer(client, "PID_connector")
            first = await producer.send("copy", b"c0", properties=origin(0), queue_id=0)
            assert first.duplicates == 0 and first.queue_offset == 0
            again = await producer.send("copy", b"c0", properties=origin(0), queue_id=0)
            assert again.duplicates == 1 and again.queue_offset == -1
            # a batch repeating 0 and 1 after a "crash": only the new ones are stored
            await producer.send("copy", b"c1", properties=origin(1), queue_id=0)
            batch = await producer.send_batch(
                "copy", [Message("copy", b"c%d" % o, properties=origin(o)) for o in range(4)],
                queue_id=0)
            assert batch.duplicates == 2 and batch.queue_offset == 2
            # a copy whose path names this gateway is a loop: dropped, counted
            looped = await producer.send(
                "copy", b"loop", properties=origin(9, path=f"gw-a,{me}"), queue_id=0)
            assert looped.loops == 1
            assert await bodies(client, "copy") == [b"c0", b"c1", b"c2", b"c3"]
            reply = await origins.query_origins("copy", "gw-a", ["src:0", "src:1"])
            assert reply.cluster_id == me and reply.high_water == {"src:0": 3}
            assert await origins.advance("copy", "gw-a", "src:1", 41) == 41
            assert await origins.advance("copy", "gw-a", "src:1", 5) == 41  # never lowered
            assert metric(port, "lmq_connector_duplicates_dropped_total") == 3
            assert metric(port, "lmq_connector_loops_dropped_total") == 1
        gw.kill()  # the marks were acknowledged: they survive a kill -9
        gw.start()
        port = gw.ports["unified"]
        async with RemotingClient(f"127.0.0.1:{port}", timeout=BOUND) as client:
            origins = OriginClient(client)
            assert await origins.cluster_id() == me
            marks = await origins.high_water("copy", "gw-a", ["src:0", "src:1"])
            assert marks == {"src:0": 3, "src:1": 41}
            dup = await Producer(client, "PID_connector").send(
                "copy", b"x", properties=origin(40, queue="src:1"), queue_id=0)
            assert dup.duplicates == 1
            assert await bodies(client, "copy") == [b"c0", b"c1", b"c2", b"c3"]
    finally:
        gw.stop()


async def test_translate_offsets_for_a_group_failing_over(tmp_path: Path):
    data = tmp_path / "data"
    async with running_gateway(data, cluster_id="target") as gw:
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}", timeout=BOUND) as client:
            producer = Producer(client, "PID_connector")
            # source offsets 10, 12, ... 28 of src:0 copied to queue 0 of topic "copy"
            # (a filter skipped the odd ones); src:1 interleaved into the same queue
            for o in range(10, 30, 2):
                await producer.send("copy", b"a%d" % o, properties=origin(o), queue_id=0)
                await producer.send("copy", b"b%d" % o, properties=origin(o, "src:1"),
                                    queue_id=0)
            origins = OriginClient(client)
            reply = await origins.translate_offsets("copy", "gw-a", {"src:0": 15})
            assert reply.cluster_id == "target"
            # the group had consumed src:0 up to 14: resume at the copy of 16
            [t] = reply.offsets
            assert (t.topic, t.queue_id, t.offset) == ("copy", 0, 6)
            both = await origins.translate_offsets("copy", "gw-a", {"src:0": 15, "src:1": 12})
            assert [o.offset for o in both.offsets] == [3]  # b12 is at 3, before a16
            done = await origins.translate_offsets("copy", "gw-a", {"src:0": 1000})
            assert [o.offset for o in done.offsets] == [19]  # past a28 (at 18)
            none = await origins.translate_offsets("copy", "gw-b", {"src:0": 3})
            assert none.offsets == []
            with pytest.raises(RemotingError) as exc:
                await origins.translate_offsets("nothing", "gw-a", {"src:0": 3})
            assert exc.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_bad_requests_are_invalid_parameter(tmp_path: Path):
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        try:
            r = await c.call(RequestCode.LMQ_QUERY_ORIGINS, {"topic": "t"}, b"[]")
            assert r.code == ResponseCode.INVALID_PARAMETER
            assert "originCluster" in (r.remark or "")
            r = await c.call(RequestCode.LMQ_QUERY_ORIGINS,
                             {"topic": "t", "originCluster": "a"}, b"{not json")
            assert r.code == ResponseCode.INVALID_PARAMETER
            r = await c.call(RequestCode.LMQ_ADVANCE_ORIGIN,
                             {"topic": "t", "originCluster": "a", "originQueue": "q",
                              "originOffset": "x"})
            assert r.code == ResponseCode.INVALID_PARAMETER
            r = await c.call(RequestCode.LMQ_ADVANCE_ORIGIN,
                             {"topic": "t", "originCluster": "a", "originQueue": "q",
                              "originOffset": "-1"})
            assert r.code == ResponseCode.INVALID_PARAMETER
            r = await c.call(RequestCode.LMQ_TRANSLATE_OFFSETS,
                             {"topic": "t", "originCluster": "a"}, b"[1]")
            assert r.code == ResponseCode.INVALID_PARAMETER
        finally:
            await c.close()
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}", timeout=BOUND) as client:
            # a partial origin is refused, not stored as a plain message
            with pytest.raises(RemotingError) as exc:
                await Producer(client, "PID").send(
                    "t", b"x", properties={ORIGIN_CLUSTER: "a", ORIGIN_OFFSET: "1"})
            assert exc.value.code == ResponseCode.MESSAGE_ILLEGAL


async def test_the_requests_need_the_topics_permissions(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("publish mine/#"))
    db.save(data / "users.json")
    async with running_gateway(data) as gw:
        c = await Client.connect(port_of(gw))
        try:
            ok = await call_signed(c, RequestCode.LMQ_GET_CLUSTER_ID, {})
            assert ok.code == ResponseCode.SUCCESS
            for topic, want in (("mine", ResponseCode.SUCCESS),
                                ("theirs", ResponseCode.NO_PERMISSION)):
                q = await call_signed(c, RequestCode.LMQ_QUERY_ORIGINS,
                                      {"topic": topic, "originCluster": "a"}, b'["q"]')
                assert q.code == want, q.remark
                a = await call_signed(c, RequestCode.LMQ_ADVANCE_ORIGIN,
                                      {"topic": topic, "originCluster": "a",
                                       "originQueue": "q", "originOffset": 3})
                assert a.code == want, a.remark
            # translation reads the topic as a consumer would: publish alone is not enough
            t = await call_signed(c, RequestCode.LMQ_TRANSLATE_OFFSETS,
                                  {"topic": "mine", "originCluster": "a"}, b'{"q": 1}')
            assert t.code == ResponseCode.NO_PERMISSION
            unsigned = await c.call(RequestCode.LMQ_GET_CLUSTER_ID, {})
            assert unsigned.code == ResponseCode.NO_PERMISSION
        finally:
            await c.close()


def test_cluster_id_option_is_checked():
    from gateway.config import ConfigError, load_config

    assert load_config(overrides={"cluster_id": "east-1"}).cluster_id == "east-1"
    for bad in ("a,b", " a", "x" * 129):
        with pytest.raises(ConfigError, match="cluster_id"):
            load_config(overrides={"cluster_id": bad})




def test_the_cluster_id_is_generated_once_and_kept(tmp_path: Path):
    from broker_core import MessageStore
    from gateway.cluster_id import cluster_id

    with MessageStore.open(tmp_path) as store:
        first = cluster_id(store)
        assert first.startswith("lmq-") and cluster_id(store) == first
        assert cluster_id(store, "east-1") == "east-1"  # configured: wins, kept one stays
    with MessageStore.open(tmp_path) as store:
        assert cluster_id(store) == first
