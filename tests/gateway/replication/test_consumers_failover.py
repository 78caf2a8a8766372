"""Consumers of a static pair (no etcd) resuming on the promoted slave (issue 30's
check "consumer groups resume on the new master without skipping anything"): RocketMQ
pop consumers and the HTTP JSON API's receive/ack. Their pop state (in-flight
receipts, acks) is consumer state shipped beside the log (docs/replication.md, "State
that is not in the log"): on the new master a message popped but not acked on the old
one comes back once its invisible time is up, an acked one never, and nothing popped by
nobody is skipped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import requests

from gateway.clients import Producer, RemotingClient
from gateway.clients.pop import PopConsumer, PoppedMessage
from tests.grpc.test_grpc_send import create_topic

from .group_support import Member, caught_up, wait_for

pytestmark = pytest.mark.slow

BODIES = [b"p-%d" % i for i in range(8)]
INVISIBLE_S = 3
BOUND = 10.0


async def _send(port: int, topic: str, bodies: list[bytes]) -> None:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        producer = Producer(client, "PG_pop")
        for body in bodies:
            await producer.send(topic, body, queue_id=0)


async def _pop_and_ack_half(port: int) -> tuple[set[bytes], set[bytes]]:
    """Pop four messages (invisible for INVISIBLE_S), ack two of them: (acked, unacked)."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PopConsumer(client, "CG_pop")
        popped: list[PoppedMessage] = []
        while len(popped) < 4:
            popped += await consumer.pop(
                "pt", max_nums=4 - len(popped), invisible_ms=INVISIBLE_S * 1000, poll_ms=1000
            )
        for p in popped[:2]:
            await consumer.ack(p)
        return {p.message.body for p in popped[:2]}, {p.message.body for p in popped[2:]}


async def _pop_until(port: int, want: set[bytes]) -> list[bytes]:
    """Pop (acking each) until every body of ``want`` came, then once more: every body
    popped, in order, repeats included."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PopConsumer(client, "CG_pop")
        got: list[bytes] = []

        async def one_pop() -> list[PoppedMessage]:
            popped = await consumer.pop("pt", max_nums=8, invisible_ms=60_000, poll_ms=1000)
            for p in popped:
                await consumer.ack(p)
            got.extend(p.message.body for p in popped)
            return popped

        async def until() -> None:
            while not want <= set(got):
                await one_pop()

        await asyncio.wait_for(until(), BOUND + INVISIBLE_S)
        await one_pop()  # nothing more: the acked ones do not come back
        return got


def _http(member: Member) -> str:
    return f"http://127.0.0.1:{member.ports['unified']}/v1/groups/hg"


def _http_receive(session: requests.Session, member: Member, n: int) -> list[dict]:
    return session.post(
        f"{_http(member)}/topics/pt/receive",
        json={"max_messages": n, "wait_seconds": 1, "invisible_seconds": INVISIBLE_S},
        timeout=BOUND,
    ).json()["messages"]


def _http_ack(session: requests.Session, member: Member, messages: list[dict]) -> None:
    resp = session.post(
        f"{_http(member)}/ack",
        json={"receipt_handles": [m["receipt_handle"] for m in messages]},
        timeout=BOUND,
    )
    assert resp.status_code == 200, resp.text


def test_pop_and_http_consumers_resume_on_the_promoted_slave(tmp_path: Path) -> None:
    create_topic(tmp_path / "a", "pt", "--queues", "1")
    a = Member(tmp_path / "a", "--replication-role", "master", "--replication-ack", "sync")
    a.start()
    b = Member(
        tmp_path / "b", "--replication-role", "slave", "--replication-master", a.replication_address
    )
    session = requests.Session()
    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        asyncio.run(_send(a.ports["unified"], "pt", BODIES))
        # RocketMQ pop: four popped, two of them acked, on the master
        pop_acked, pop_unacked = asyncio.run(_pop_and_ack_half(a.ports["unified"]))
        # HTTP JSON API, another group: four received, two acked
        received: list[dict] = []
        while len(received) < 4:
            received += _http_receive(session, a, 4 - len(received))
        _http_ack(session, a, received[:2])
        http_acked = {m["body"].encode() for m in received[:2]}
        http_unacked = {m["body"].encode() for m in received[2:]}
        # consumer state goes out ahead of the next chunk of records: once b holds a
        # record written after the acks, it holds the acks
        asyncio.run(_send(a.ports["unified"], "marker", [b"after-the-acks"]))
        wait_for("b caught up", lambda: caught_up(b, a))
        a.kill()
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        # pop: the never-popped four at once, the popped-unacked two after their
        # invisible time, each once; the acked two never
        never_popped = set(BODIES) - pop_acked - pop_unacked
        got = asyncio.run(_pop_until(b.ports["unified"], never_popped | pop_unacked))
        assert sorted(got) == sorted(never_popped | pop_unacked)
        # HTTP: the same for its group
        want = set(BODIES) - http_acked
        got_http: list[bytes] = []
        for _ in range(int(BOUND + INVISIBLE_S)):
            messages = _http_receive(session, b, 8)
            if messages:
                _http_ack(session, b, messages)
            got_http += [m["body"].encode() for m in messages]
            if want <= set(got_http):
                break
        assert _http_receive(session, b, 8) == []  # the acked ones do not come back
        assert sorted(got_http) == sorted(want)
        assert http_unacked <= set(got_http)
    finally:
        session.close()
        b.stop()
        a.stop()
