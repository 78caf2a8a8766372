"""A static pair (no etcd) of real gateway processes (docs/replication.md): the slave
holds the master's log byte for byte; in sync mode nothing is acknowledged before the
in-sync slave has it, so a kill -9 of the master under load loses nothing acknowledged;
the slave, promoted by hand, takes writes in a new epoch; the old master returns as a
slave, is cut where the new epoch began, and holds the new master's log byte for byte;
clients of a slave are sent to the master."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pika
import pytest

from broker_core import Message, MessageStore, StoreConfig
from gateway.clients import Producer, PullConsumer, RemotingClient, TransactionProducer
from gateway.clients.remoting import SendResult
from protocol.mqtt import Connect, MQTTVersion, ReasonCode
from protocol.remoting.codes import RequestCode
from tests.gateway.mqtt_clients import Paho, RawClient
from tests.gateway.remoting.remoting_support import Client
from tests.grpc.test_grpc_send import create_topic

from .group_support import (
    Member,
    Publisher,
    bodies_in_log,
    caught_up,
    log_bytes,
    pull_at,
    route_addrs,
    static_pair,
    wait_for,
)

pytestmark = pytest.mark.slow


Q = {"topic": "off", "queueId": 1}


async def _commit_offset(port: int, offset: int) -> None:
    client = await Client.connect(port)
    try:
        await client.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "off"})
        for i in range(offset + 1):
            await client.ok(
                RequestCode.SEND_MESSAGE_V2,
                {"a": "PG", "b": "off", "e": 1, "f": 0, "g": 0, "h": 0},
                body=b"%d" % i,
            )
        await client.ok(
            RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "commitOffset": offset, **Q}
        )
    finally:
        await client.close()


async def _query_offset(port: int) -> int:
    client = await Client.connect(port)
    try:
        got = await client.ok(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", **Q})
        return int(got.ext_fields["offset"])
    finally:
        await client.close()


def _stored_offset(data_dir: Path) -> int | None:
    store = MessageStore.open_read_only(data_dir)
    try:
        return next((o for _, group, o in store.offsets() if group == "G"), None)
    finally:
        store.close()


def _drain(client: Paho, seen: set[bytes]) -> bool:
    """Take what ``client`` received so far into ``seen``."""
    while not client.messages.empty():
        seen.add(client.messages.get().payload)
    return True


def test_sync_pair_kill9_promote_and_rejoin(tmp_path: Path) -> None:
    a = Member(
        tmp_path / "a",
        "--replication-role",
        "master",
        "--replication-ack",
        "sync",
        "--remoting-port",
        "auto",
    )
    a.start()
    b = Member(
        tmp_path / "b",
        "--replication-role",
        "slave",
        "--remoting-port",
        "auto",
        "--replication-master",
        a.replication_address,
    )
    try:
        b.start()
        wait_for(
            "b in the in-sync set",
            lambda: a.replication()["in_sync"] == [b.replication()["member"]],
        )
        # a slave refuses clients with the master's address (MQTT 5: 0x9C + reference)
        raw = RawClient(b.ports["mqtt"], MQTTVersion.V5)
        raw.send(Connect(client_id="c5", protocol_version=MQTTVersion.V5))
        connack = raw.recv()
        assert connack.reason_code == ReasonCode.USE_ANOTHER_SERVER
        assert connack.properties.server_reference == f"127.0.0.1:{a.ports['mqtt']}"
        raw3 = RawClient(b.ports["mqtt"])
        raw3.send(Connect(client_id="c3", protocol_version=MQTTVersion.V3_1_1))
        assert raw3.recv().reason_code == 3  # 3.1.1: server unavailable, next address
        # a RocketMQ consumer group's offset, committed on the master (consumer state,
        # shipped beside the log)
        asyncio.run(_commit_offset(a.ports["remoting"], 4))
        wait_for("the offset on b", lambda: _stored_offset(b.data_dir) == 4)
        # an MQTT persistent session on the master, offline while the load runs
        keeper = Paho(a.ports["mqtt"], "keeper", clean=False)
        keeper.subscribe("rep/#", qos=1)
        keeper.disconnect()
        # load on the master, killed -9 in the middle of it
        pub = Publisher(a.ports["mqtt"]).start()
        wait_for("acknowledged load", lambda: len(pub.acked) >= 300)
        a.kill()
        acked = pub.stop()
        assert len(acked) >= 300
        # nothing acknowledged is missing on the slave (sync mode)
        on_b = set(bodies_in_log(b.data_dir))
        assert [m for m in acked if m not in on_b] == []
        # before the promotion the slave's route names only itself, broker 1, as
        # RocketMQ's name server once it dropped the dead master: RocketMQ consumers
        # pull from it (the commit flag of the pull ignored)
        at_b = f"127.0.0.1:{b.ports['remoting']}"
        wait_for(
            "a gone from b's route", lambda: asyncio.run(route_addrs(at_b, "off")) == {"1": at_b}
        )
        assert asyncio.run(pull_at(at_b, "off", 1)) == [b"%d" % i for i in range(5)]
        assert b.replication()["role"] == "slave"
        # promoted by hand (the old master is down), it takes writes in epoch 2
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        assert b.replication()["epoch"] == 2
        assert asyncio.run(_query_offset(b.ports["remoting"])) == 4
        pub2 = Publisher(b.ports["mqtt"], prefix="after").start()
        wait_for("load on b", lambda: len(pub2.acked) >= 50)
        after = pub2.stop()
        # the persistent session resumes on the new master: nothing acknowledged skipped
        keeper = Paho(b.ports["mqtt"], "keeper", clean=False)
        assert keeper.session_present
        seen: set[bytes] = set()
        want = set(acked) | set(after)
        wait_for("the session's backlog", lambda: _drain(keeper, seen) and want <= seen)
        keeper.close()
        # the old master returns as a slave of b, and without its epoch history
        # (apache/rocketmq#9689): it counts as epoch 0, is cut to b's first epoch start
        # and copies b's log again; never served stale
        (a.data_dir / "epochs").unlink()
        a.extra = (
            "--http-port",
            "0",
            "--replication-port",
            "auto",
            "--replication-role",
            "slave",
            "--replication-master",
            b.replication_address,
        )
        a.start()
        wait_for("a caught up", lambda: caught_up(a, b))
        assert log_bytes(a.data_dir) == log_bytes(b.data_dir)
        assert a.says("replication: cutting")
        assert set(after) <= set(bodies_in_log(a.data_dir))
        assert a.replication()["role"] == "slave" and a.replication()["epoch"] == 2
    finally:
        b.stop()
        a.stop()


def test_sync_ack_waits_for_the_in_sync_slave(tmp_path: Path) -> None:
    """A paused in-sync slave holds the acknowledgement until it leaves the set (after
    replication_max_lag): the PUBACK comes only after the master said so."""
    a = Member(
        tmp_path / "a",
        "--replication-role",
        "master",
        "--replication-ack",
        "sync",
        "--replication-max-lag",
        "2",
    )
    a.start()
    b = Member(
        tmp_path / "b", "--replication-role", "slave", "--replication-master", a.replication_address
    )
    try:
        b.start()
        wait_for("b in the in-sync set", lambda: a.replication()["in_sync"] != [])
        b.pause()
        pub = Publisher(a.ports["mqtt"], prefix="held").start()
        wait_for("one acknowledgement", lambda: len(pub.acked) >= 1)
        # at the moment of the first PUBACK the set had already shrunk
        assert a.says("in-sync set of broker-a: (the master alone)")
        pub.stop()
        b.resume()
        wait_for("b back in the set", lambda: a.replication()["in_sync"] != [])
        wait_for("b caught up", lambda: caught_up(b, a))
        assert log_bytes(a.data_dir) == log_bytes(b.data_dir)
    finally:
        b.resume()
        b.stop()
        a.stop()


async def _send_delayed(port: int, body: bytes, seconds: int) -> int:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        result = await Producer(client, "PG_delay").send(
            "dly", body, properties={"TIMER_DELAY_SEC": str(seconds)}, queue_id=0
        )
        return result.queue.queue_id


async def _send_halves(port: int) -> list[SendResult]:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        producer = TransactionProducer(client, "PG_tx")
        return [await producer.send_half("rtx", body) for body in (b"commit-me", b"roll-back")]


async def _end(port: int, halves: list[SendResult]) -> None:
    """Commit the first, roll back the second, on the member at ``port`` (the ids name
    log positions of the old master: the same positions on this one)."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        producer = TransactionProducer(client, "PG_tx")
        await producer.end(halves[0], True)
        await producer.end(halves[1], False)


def _amqp_publish(port: int, n: int) -> list[bytes]:
    """Publish ``n`` persistent messages with confirms to the durable queue ``aq``."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("aq", durable=True)
        bodies = [b"amqp-%d" % i for i in range(n)]
        for body in bodies:
            ch.basic_publish("", "aq", body, pika.BasicProperties(delivery_mode=2))
        return bodies
    finally:
        conn.close()


def _amqp_get_all(port: int) -> list[bytes]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        out = []
        while True:
            method, _, body = ch.basic_get("aq", auto_ack=True)
            if method is None:
                return out
            out.append(body)
    finally:
        conn.close()


async def _pull_all(port: int, topic: str = "dly") -> list[bytes]:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PullConsumer(client, "CG_delay")
        out: list[bytes] = []
        for mq in await consumer.queues(topic):
            result = await consumer.pull(mq, 0, max_nums=64)
            out += [m.body for m in result.messages]
        return out


def test_delayed_and_half_messages_across_a_failover(tmp_path: Path) -> None:
    """A delayed message stored on the master, the master killed before it is due: the
    promoted slave fires it (its timer came with the log), exactly once; the topic's
    configuration came with the consumer state and is live on the promoted member. Half
    messages sent to the master are committed and rolled back on the promoted slave:
    the commit delivered once, the rollback never. An AMQP durable queue declared on the
    master, with confirmed messages, is on the promoted slave with all of them."""
    create_topic(tmp_path / "a", "dly", "--type", "delay", "--queues", "1")
    create_topic(tmp_path / "a", "rtx", "--type", "transaction", "--queues", "1")
    a = Member(tmp_path / "a", "--replication-role", "master", "--replication-ack", "sync")
    a.start()
    b = Member(
        tmp_path / "b", "--replication-role", "slave", "--replication-master", a.replication_address
    )
    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        asyncio.run(_send_delayed(a.ports["unified"], b"later", 3))
        halves = asyncio.run(_send_halves(a.ports["unified"]))
        confirmed = _amqp_publish(a.ports["amqp"], 50)
        wait_for("b caught up", lambda: caught_up(b, a))
        a.kill()
        # (a slave's routes name the master, dead now: nothing to pull from b yet)
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        # the topic's configuration (a delay topic of one queue) came replicated and the
        # promoted member's registry has it: a delayed send is accepted
        asyncio.run(_send_delayed(b.ports["unified"], b"on-b", 60))
        wait_for("the fire", lambda: asyncio.run(_pull_all(b.ports["unified"])) != [])
        assert asyncio.run(_pull_all(b.ports["unified"])) == [b"later"]
        # the half messages stored on the old master are ended on the new one: the
        # commit delivers once, the rollback never (apache/rocketmq#7709, #9804)
        assert asyncio.run(_pull_all(b.ports["unified"], "rtx")) == []
        asyncio.run(_end(b.ports["unified"], halves))
        asyncio.run(_end(b.ports["unified"], halves))  # a repeated end changes nothing
        wait_for("the commit", lambda: asyncio.run(_pull_all(b.ports["unified"], "rtx")) != [])
        assert asyncio.run(_pull_all(b.ports["unified"], "rtx")) == [b"commit-me"]
        # an AMQP durable queue of the old master, with its confirmed messages
        assert _amqp_get_all(b.ports["amqp"]) == confirmed
        assert b.says("replication: master of group") and not b.says("firing timers failed")
    finally:
        b.stop()
        a.stop()


def _retained_master(data_dir: Path, copy_to: Path | None = None) -> int:
    """A store of 1,500 messages in ``data_dir`` (copied whole to ``copy_to`` when
    given), then its retention (192 KiB): the log start, above 0."""
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=192 * 1024)
    with MessageStore.open(data_dir, cfg) as store:
        for i in range(1500):
            store.append(Message(topic="t", body=b"%d-" % i + b"x" * 300), ["q"])
    if copy_to is not None:
        shutil.copytree(data_dir, copy_to)
    with MessageStore.open(data_dir, cfg) as store:
        store.apply_retention()
        start = store.log_start
    assert start > 0
    return start


def test_a_new_slave_of_a_master_whose_log_was_trimmed(tmp_path: Path) -> None:
    """Retention removed the beginning of the master's log: a slave started on an empty
    data directory begins its log at the master's log start and holds the same bytes."""
    start = _retained_master(tmp_path / "a")
    a, b = static_pair(tmp_path)
    try:
        b.start()
        wait_for("b caught up", lambda: caught_up(b, a))
        assert log_bytes(b.data_dir) == log_bytes(a.data_dir)
        assert b.says(f"this empty log starts at {start}")
    finally:
        b.stop()
        a.stop()


def test_a_slave_removes_what_the_masters_retention_removed(tmp_path: Path) -> None:
    """A slave holding the master's whole log (a copy of it) joins after the master's
    retention removed its first segments: the master's TRIM removes the same segments
    on the slave, whose log then starts where the master's does."""
    start = _retained_master(tmp_path / "a", copy_to=tmp_path / "b")
    a, b = static_pair(tmp_path)
    try:
        b.start()
        wait_for("b trimmed", lambda: b.says(f"below the master's log start {start}"))
        wait_for("b caught up", lambda: caught_up(b, a))
        segments = sorted(p.name for p in (tmp_path / "b" / "commitlog").iterdir())
        assert segments == sorted(p.name for p in (tmp_path / "a" / "commitlog").iterdir())
        assert log_bytes(b.data_dir) == log_bytes(a.data_dir)
    finally:
        b.stop()
        a.stop()
