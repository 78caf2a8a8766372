"""The real npm ``ali-ons`` client (installed from tests/node/package-lock.json), unchanged,
against a gateway subprocess on loopback: its name server is the gateway's unified port
(``nameSrv: '127.0.0.1:<port>'``), nothing else is configured.

- producer -> push consumer with tags and keys (the consumer's tag subscription filters;
  message ids agree on both sides);
- a consumer group's committed offsets across a consumer restart: nothing committed is
  consumed again, nothing sent while it was down is lost;
- a failed consume is redelivered through the group's retry topic (CONSUMER_SEND_MSG_BACK)
  with reconsumeTimes 1;
- interoperation with the project's Python client both ways.

Every node process is stopped by PID; every wait is bounded. If node or the npm packages
are missing the tests fail (``node_clients.require_node``), they never skip.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.clients import Producer, PullConsumer, RemotingClient

from ..gateway_process import GatewayProcess
from .node_clients import OnsProcess, produce, require_node

pytestmark = pytest.mark.slow

WAIT = 45.0


@pytest.fixture
def rgw(tmp_path: Path) -> Iterator[GatewayProcess]:
    require_node()
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


def namesrv(gw: GatewayProcess) -> str:
    return f"127.0.0.1:{gw.ports['unified']}"


def consumer(gw: GatewayProcess, topic: str, group: str, **kw: object) -> OnsProcess:
    c = OnsProcess("consume", nameSrv=namesrv(gw), topic=topic, group=group, **kw)
    c.wait_for(lambda e: e.get("ready") is True, WAIT)
    return c


def test_producer_to_push_consumer_with_tags_and_keys(rgw: GatewayProcess) -> None:
    c = consumer(rgw, "onsTags", "GID_tags", expression="TagA || TagB")
    try:
        sent = produce(
            namesrv(rgw),
            "onsTags",
            "PID_tags",
            [
                {"body": f"m{i}", "tag": tag, "keys": [f"k{i}", "shared"]}
                for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", "TagC", "TagB"])
            ],
        )
        assert all(s["status"] == "SEND_OK" for s in sent)
        got = {m["body"]: m for m in c.collect("msg", 4, WAIT)}
        assert sorted(got) == ["m0", "m1", "m3", "m5"]  # TagC filtered out
        for i, s in enumerate(sent):
            if s["body"] in got:
                m = got[s["body"]]
                assert m["tags"] == ["TagA", "TagB", "TagC", "TagA", "TagC", "TagB"][i]
                assert m["keys"] == f"k{i} shared"  # KEYS: space-separated
                assert m["msgId"] == s["msgId"]  # the store's id, the same on both sides
                assert m["queueId"] == s["queueId"] and m["queueOffset"] == s["queueOffset"]
                assert m["reconsumeTimes"] == 0
        assert c.quiet("msg", 2.0) == []  # no TagC, no duplicate
    finally:
        c.stop()


def test_offsets_survive_a_consumer_restart(rgw: GatewayProcess) -> None:
    ns = namesrv(rgw)
    first = consumer(rgw, "onsOffsets", "GID_offsets")
    try:
        produce(ns, "onsOffsets", "PID_offsets", [{"body": f"a{i}"} for i in range(8)])
        got = sorted(m["body"] for m in first.collect("msg", 8, WAIT))
        assert got == [f"a{i}" for i in range(8)]
    finally:
        assert first.stop() == 0  # a clean close commits the offsets
    assert any(e.get("closed") for e in first.seen + first.pending + list(first.events.queue))

    produce(ns, "onsOffsets", "PID_offsets", [{"body": f"b{i}"} for i in range(8)])
    second = consumer(rgw, "onsOffsets", "GID_offsets")
    try:
        got = sorted(m["body"] for m in second.collect("msg", 8, WAIT))
        assert got == [f"b{i}" for i in range(8)]  # sent while down: none lost
        assert second.quiet("msg", 3.0) == []  # committed ones: none again
    finally:
        second.stop()

    async def committed() -> int:
        async with RemotingClient(ns) as client:
            pull = PullConsumer(client, "GID_offsets")
            total = 0
            for mq in await pull.queues("onsOffsets"):
                total += max(0, await pull.query_offset(mq) or 0)
            return total

    assert asyncio.run(committed()) == 16


def test_failed_consume_is_redelivered_through_the_retry_topic(rgw: GatewayProcess) -> None:
    c = consumer(rgw, "onsRetry", "GID_retry", failOnce=["boom"])
    try:
        produce(namesrv(rgw), "onsRetry", "PID_retry", [{"body": "ok1"}, {"body": "boom"}])
        failed = c.wait_for(lambda e: "failed" in e, WAIT)["failed"]
        assert failed["body"] == "boom" and failed["reconsumeTimes"] == 0
        t0 = time.monotonic()
        again = c.wait_for(lambda e: e.get("msg", {}).get("body") == "boom", 60.0)["msg"]
        assert again["reconsumeTimes"] == 1
        assert again["topic"] == "onsRetry"  # ali-ons restores the original topic
        assert again["properties"].get("RETRY_TOPIC") == "onsRetry"
        assert time.monotonic() - t0 < 60.0
        bodies = [e["msg"]["body"] for e in c.seen if "msg" in e]
        assert bodies.count("ok1") == 1 and bodies.count("boom") == 1
    finally:
        c.stop()


def test_python_producer_to_ali_ons_and_ali_ons_producer_to_python(rgw: GatewayProcess) -> None:
    ns = namesrv(rgw)
    c = consumer(rgw, "onsInterop", "GID_interop")

    async def send() -> list[str]:
        async with RemotingClient(ns) as client:
            producer = Producer(client, "PID_py")
            ids = []
            for i in range(4):
                r = await producer.send(
                    "onsInterop", f"py{i}".encode(), tags="T", keys=[f"key{i}"],
                    properties={"color": "red"},
                )
                ids.append(r.offset_msg_id)
            return ids

    try:
        ids = asyncio.run(send())
        got = {m["body"]: m for m in c.collect("msg", 4, WAIT)}
        assert sorted(got) == [f"py{i}" for i in range(4)]
        for i in range(4):
            m = got[f"py{i}"]
            assert m["tags"] == "T" and m["keys"] == f"key{i}"
            assert m["properties"]["color"] == "red"
            assert m["properties"]["UNIQ_KEY"]  # set by our producer as Java sets it
            assert m["msgId"] == ids[i]
    finally:
        c.stop()

    sent = produce(ns, "onsInterop2", "PID_js", [{"body": "js0", "tag": "X", "keys": ["kk"]}])

    async def pull_all() -> list[tuple[str, str | None, str | None]]:
        async with RemotingClient(ns) as client:
            pull = PullConsumer(client, "GID_pyreader")
            out = []
            for mq in await pull.queues("onsInterop2"):
                r = await pull.pull(mq, 0)
                out += [(m.body.decode(), m.tags, m.keys) for m in r.messages]
            return out

    assert asyncio.run(pull_all()) == [("js0", "X", "kk")]
    assert sent[0]["status"] == "SEND_OK"
