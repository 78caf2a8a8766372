"""The AMQP endpoints against Debian's rabbitmq-server (conftest.py: one node per
session, it starts slowly; each test has its own queues): manual acks only for what is
acknowledged, the rest requeued after a crash; publisher confirms out, nack / return
refused."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import aiormq
import pytest
from pamqp import commands as spec

from gateway.connector.amqp import AmqpPeer, AmqpSource, AmqpTarget
from gateway.connector.endpoints import PATH, CopyMessage, EndpointUnavailable, MessageRefused

from ..gateway_process import GatewayProcess
from .connector_support import (
    peer_rules,
    received_through_a_kill,
    send_batches,
    stored_through_a_kill,
)
from .peer_support import read_n

pytestmark = pytest.mark.slow


async def declare(port: int, *queues: str, arguments: dict | None = None) -> None:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel()
    for q in queues:
        await ch.queue_declare(q, durable=True, arguments=arguments)
    await conn.close()


async def publish(port: int, queue: str, bodies: list[bytes], **props: object) -> None:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel()
    for i, body in enumerate(bodies):
        p = dict(props)
        if "message_id" in p:
            p["message_id"] = f"{p['message_id']}-{i}"
        await ch.basic_publish(body, routing_key=queue,
                               properties=spec.Basic.Properties(delivery_mode=2, **p))
    await conn.close()


async def get_all(port: int, queue: str, n: int) -> list[aiormq.abc.DeliveredMessage]:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel()
    out = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(out) < n and loop.time() < deadline:
        m = await ch.basic_get(queue, no_ack=True)
        if m.delivery_tag is None or isinstance(m.delivery, spec.Basic.GetEmpty):
            await asyncio.sleep(0.02)
            continue
        out.append(m)
    await conn.close()
    return out


async def depth(port: int, queue: str) -> int:
    """Messages ready in ``queue`` (a passive declare)."""
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel()
    ok = await ch.queue_declare(queue, passive=True)
    await conn.close()
    return int(ok.message_count or 0)


async def crash(source: AmqpSource, port: int) -> None:
    """A kill -9 of the connector: the socket reset, no basic.ack for the rest. (aiormq
    keeps its stream writer to itself: found among the live objects, the one connected
    from the source's local port.)"""
    conn = source._connection
    assert conn is not None
    await conn.channel()  # a round trip: the acks before it have reached the broker
    writers = [o for o in gc.get_objects() if isinstance(o, asyncio.StreamWriter)
               and not o.is_closing() and o.get_extra_info("peername")[1] == port]
    assert len(writers) == 1
    writers[0].transport.abort()
    source._connection = source._channel = None


async def test_source_acks_only_what_the_target_stored(rabbit: int) -> None:
    await declare(rabbit, "src-ack")
    bodies = [f"m{i}".encode() for i in range(10)]
    await publish(rabbit, "src-ack", bodies, message_id="id",
                  headers={"color": "red", "TAGS": "eu", "KEYS": "k1 k2", PATH: "gw-a"})
    peer = AmqpPeer(port=rabbit, prefetch=20)
    source = AmqpSource("rabbit", peer, "src-ack")
    await source.open()
    first = await read_n(source, "src-ack", 10)
    assert [r.message.body for r in first] == bodies
    offsets = [r.offset for r in first]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    m = first[3].message
    assert (m.msg_id, m.topic, m.tag, m.keys, m.path) == ("id-3", "src-ack", "eu",
                                                          ("k1", "k2"), ("gw-a",))
    assert m.properties == {"color": "red"}
    await source.acknowledge("src-ack", first[5].offset)
    await crash(source, rabbit)

    again = AmqpSource("rabbit", peer, "src-ack")
    await again.open()
    redelivered = await read_n(again, "src-ack", 4)
    assert [r.message.body for r in redelivered] == bodies[6:]
    assert [r.message.msg_id for r in redelivered] == [f"id-{i}" for i in range(6, 10)]
    await again.acknowledge("src-ack", redelivered[-1].offset)
    await again.close()
    assert await depth(rabbit, "src-ack") == 0


async def test_target_publishes_with_confirms(rabbit: int) -> None:
    await declare(rabbit, "tgt-out")
    target = AmqpTarget("rabbit", AmqpPeer(port=rabbit))
    await target.open()
    assert await target.high_water("gw", ["q"]) is None
    messages = [CopyMessage(body=f"b{i}".encode(), topic="orders", tag="eu", keys=("k",),
                            properties={"n": str(i)}, msg_id=f"id{i}", born_ms=1_700_000_000_000,
                            path=("gw-a",)) for i in range(100)]
    await target.write("tgt-out", "orders:0", messages)
    got = await get_all(rabbit, "tgt-out", 100)
    assert [g.body for g in got] == [m.body for m in messages]
    p = got[7].header.properties
    assert p.message_id == "id7" and p.delivery_mode == 2
    assert p.headers == {"n": "7", "TAGS": "eu", "KEYS": "k", PATH: "gw-a"}
    assert int(p.timestamp.timestamp()) == 1_700_000_000
    await target.close()


async def test_target_refuses_returned_and_nacked_messages(rabbit: int) -> None:
    target = AmqpTarget("rabbit", AmqpPeer(port=rabbit))
    await target.open()
    with pytest.raises(MessageRefused) as info:
        await target.write("no-such-queue", "q", [CopyMessage(body=b"x", topic="t")])
    assert info.value.index == 0
    # a full queue that rejects publishes nacks them
    await declare(rabbit, "tgt-full", arguments={"x-max-length": 1,
                                                 "x-overflow": "reject-publish"})
    with pytest.raises(MessageRefused) as info:
        await target.write("tgt-full", "q", [CopyMessage(body=b"1", topic="t"),
                                            CopyMessage(body=b"2", topic="t")])
    assert info.value.index == 1 and "nack" in info.value.reason
    await target.close()


async def test_an_absent_broker_or_queue_is_unavailable(rabbit: int) -> None:
    from bench.peers import free_port
    with pytest.raises(EndpointUnavailable):
        await AmqpTarget("none", AmqpPeer(port=free_port(), timeout=1.0)).open()
    source = AmqpSource("rabbit", AmqpPeer(port=rabbit), "no-such-queue")
    with pytest.raises(EndpointUnavailable):
        await source.open()
    await source.close()


def rules(path: Path, amqp_port: int, remoting_port: int, rule: str) -> Path:
    rabbit = f"""
[clusters.rabbit]
kind = "amqp"
endpoints = ["127.0.0.1:{amqp_port}"]
prefetch = 50
"""
    return peer_rules(path, rabbit, rule, remoting_port)


N = 300


async def test_amqp_in_survives_kill9_without_loss_or_stored_duplicates(
        tmp_path: Path, rabbit: int, gateway: GatewayProcess) -> None:
    namesrv = f"127.0.0.1:{gateway.ports['unified']}"
    await declare(rabbit, "jobs")
    rules_file = rules(tmp_path / "rules.toml", rabbit, gateway.ports["unified"], """
[[rules]]
name = "in"
source = "rabbit"
queue = "jobs"
target = "gw"
target_topic = "jobs"
batch_size = 16
wait_ms = 100
""")
    bodies = [f"m{i}".encode() for i in range(N)]
    stored = await stored_through_a_kill(
        rules_file, namesrv, "jobs", N, lambda: publish(rabbit, "jobs", bodies, message_id="job"))
    assert sorted(m.body for m in stored) == sorted(f"m{i}".encode() for i in range(N))
    in_order = [int(m.body[1:]) for m in sorted(stored, key=lambda m: (m.queue_id,
                                                                         m.queue_offset))]
    assert in_order == list(range(N))
    assert await depth(rabbit, "jobs") == 0  # all acked


async def test_amqp_out_survives_kill9_without_loss(
        tmp_path: Path, rabbit: int, gateway: GatewayProcess) -> None:
    await send_batches(f"127.0.0.1:{gateway.ports['unified']}", "orders", N, tags="eu")
    await declare(rabbit, "orders-copy")
    batch = 16
    rules_file = rules(tmp_path / "rules.toml", rabbit, gateway.ports["unified"], f"""
[[rules]]
name = "out"
source = "gw"
topic = "orders"
target = "rabbit"
target_topic = "orders-copy"
start = "earliest"
batch_size = {batch}
wait_ms = 100
""")
    got = await received_through_a_kill(
        rules_file, N, lambda k: get_all(rabbit, "orders-copy", k), lambda m: m.body)
    assert {m.body for m in got} == {f"m{i}".encode() for i in range(N)}
    headers = got[5].header.properties.headers
    assert headers["n"] == got[5].body.decode()[1:] and headers["TAGS"] == "eu"
    duplicates = len(got) - N
    assert 0 <= duplicates <= 2 * batch
    assert list(dict.fromkeys(m.body for m in got)) == [f"m{i}".encode() for i in range(N)]


async def test_target_does_not_publish_the_runners_heartbeats(rabbit: int) -> None:
    from gateway.connector.heartbeat import HEARTBEAT

    await declare(rabbit, "tgt-hb")
    target = AmqpTarget("rabbit", AmqpPeer(port=rabbit))
    await target.open()
    beat = CopyMessage(body=b"", topic="t", properties={HEARTBEAT: "r:1"})
    await target.write("tgt-hb", "q", [CopyMessage(body=b"1", topic="t"), beat,
                                       CopyMessage(body=b"2", topic="t")])
    await target.close()
    assert [m.body for m in await get_all(rabbit, "tgt-hb", 2)] == [b"1", b"2"]
    assert await depth(rabbit, "tgt-hb") == 0


async def test_target_publishes_through_an_exchange(rabbit: int) -> None:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{rabbit}/")
    ch = await conn.channel()
    await ch.queue_declare("tgt-ex", durable=True)
    await ch.queue_bind("tgt-ex", "amq.topic", routing_key="orders.#")
    await conn.close()
    target = AmqpTarget("rabbit", AmqpPeer(port=rabbit, exchange="amq.topic"))
    await target.open()
    await target.write("orders.eu", "q", [CopyMessage(body=b"x", topic="t")])
    with pytest.raises(MessageRefused):  # routed nowhere: returned
        await target.write("invoices.eu", "q", [CopyMessage(body=b"y", topic="t")])
    await target.close()
    assert [m.body for m in await get_all(rabbit, "tgt-ex", 1)] == [b"x"]
    missing = AmqpTarget("rabbit", AmqpPeer(port=rabbit, exchange="no-such-exchange"))
    await missing.open()
    with pytest.raises(MessageRefused):  # the broker closes the channel: 404
        await missing.write("k", "q", [CopyMessage(body=b"z", topic="t")])
    # the next write opens a new channel (and is refused again, not stuck)
    with pytest.raises(MessageRefused):
        await missing.write("k", "q", [CopyMessage(body=b"z", topic="t")])
    await missing.close()
