"""Consumers of a static pair (no etcd) resuming on the promoted slave (issue 30's
check "consumer groups resume on the new master without skipping anything"): RocketMQ
pop consumers and the HTTP JSON API's receive/ack. Their pop state (in-flight
receipts, acks) is consumer state shipped beside the log (docs/replication.md, "State
that is not in the log"): on the new master a message popped but not acked on the old
one comes back once its invisible time is up, an acked one never, and nothing popped by
nobody is skipped."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pika
import pytest
import requests

from broker_core import MessageStore, RecordType
from broker_core.transactions import CONTROL, Action
from gateway.clients import Producer, PullConsumer, RemotingClient, TransactionProducer
from gateway.clients.pop import PopConsumer, PoppedMessage
from gateway.clients.remoting import RemotingError, SendResult
from tests.gateway.amqp.test_amqp_crash import close_quietly
from tests.grpc.test_grpc_send import create_topic

from .group_support import Member, bodies_in_log, caught_up, static_pair, wait_for

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


def _check_times(data_dir: Path) -> list[int]:
    """When each check-back of a half message was counted: the store times of the
    log's CHECK control records (a member's store, read beside it)."""
    store = MessageStore.open_read_only(data_dir)
    try:
        return [
            r.store_ms
            for r in store.records_from(store.log_start)
            if r.type == RecordType.TXN_CONTROL and CONTROL.unpack(r.body)[4] == Action.CHECK
        ]
    finally:
        store.close()


async def _producer_checked(port: int, checks: int, commit_at: int | None = None) -> int:
    """A transaction producer of group PG_chk on the member at ``port``: when
    ``commit_at`` is None it sends a half message; it answers every check-back
    "unknown" until it has received ``checks`` of them (committing at check
    ``commit_at``). Returns how many check-backs it received."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        received = 0
        done = asyncio.Event()

        def checker(check: object, message: object) -> bool | None:
            nonlocal received
            received += 1
            if received >= checks:
                done.set()
            return True if received == commit_at else None

        producer = TransactionProducer(client, "PG_chk", checker=checker)
        await producer.start("ctx")
        if commit_at is None:
            await producer.send_half("ctx", b"checked")
        await asyncio.wait_for(done.wait(), BOUND)
        await asyncio.sleep(0.2)  # the commit's END_TRANSACTION (oneway) on its way
        return received


async def _pull(port: int) -> list[bytes]:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PullConsumer(client, "CG_chk")
        out: list[bytes] = []
        for mq in await consumer.queues("ctx"):
            result = await consumer.pull(mq, 0, max_nums=64)
            out += [m.body for m in result.messages]
        return out


def test_a_transaction_check_back_across_a_failover(tmp_path: Path) -> None:
    """A half message whose producer never ends it: checked back by the master, then,
    after kill -9 and promotion, by the new master, whose check count continues the old
    one's (each check is a control record of the log, so none is repeated or reset; each
    reached the producer at most once). The producer commits in answer to the new
    master's second check: delivered once, nothing pending any more."""
    config = tmp_path / "lmq.toml"
    config.write_text("[store]\ntxn_first_check_ms = 300\ntxn_check_interval_ms = 1000\n")
    create_topic(tmp_path / "a", "ctx", "--type", "transaction", "--queues", "1")
    conf = ("--config", str(config))
    a = Member(tmp_path / "a", *conf, "--replication-role", "master", "--replication-ack", "sync")
    a.start()
    b = Member(
        tmp_path / "b",
        *conf,
        "--replication-role",
        "slave",
        "--replication-master",
        a.replication_address,
    )
    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        on_a = asyncio.run(_producer_checked(a.ports["unified"], 2))
        wait_for("b caught up", lambda: caught_up(b, a))
        a.kill()
        at_kill = len(_check_times(b.data_dir))
        assert at_kill >= on_a  # every check the producer got was counted in the log
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        on_b = asyncio.run(_producer_checked(b.ports["unified"], 2, commit_at=2))
        wait_for("the commit", lambda: asyncio.run(_pull(b.ports["unified"])) != [])
        assert asyncio.run(_pull(b.ports["unified"])) == [b"checked"]
        store = MessageStore.open_read_only(b.data_dir)
        try:
            assert list(store.txns.iter_pending()) == []
        finally:
            store.close()
        # the new master's checks continue the old one's count and schedule: each
        # reached the producer at most once, and no two are less than the check
        # interval apart (none repeated or made early at the failover)
        times = _check_times(b.data_dir)
        assert len(times) - at_kill >= on_b
        assert all(later - earlier >= 1000 for earlier, later in itertools.pairwise(times))
        assert b.says("replication: master of group")
    finally:
        b.stop()
        a.stop()


def _amqp_in_flight(
    port: int, n: int, acked: int
) -> tuple[pika.BlockingConnection, list[bytes], list[bytes]]:
    """Publish ``n`` bodies with confirms to the durable queue ``iq``, then consume
    with manual acks and a prefetch of 10: ten delivered, the first ``acked`` acked,
    the rest left in flight (the connection stays open: the master is killed under it).
    Returns (the connection, acked bodies, bodies in flight)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("iq", durable=True)
    for i in range(n):
        ch.basic_publish("", "iq", b"q-%d" % i, pika.BasicProperties(delivery_mode=2))
    ch.basic_qos(prefetch_count=10)
    delivered = []
    for method, _props, body in ch.consume("iq", inactivity_timeout=BOUND):
        assert method is not None, "no delivery in time"
        delivered.append((method.delivery_tag, body))
        if len(delivered) == 10:
            break
    for tag, _ in delivered[:acked]:
        ch.basic_ack(tag)
    # a confirmed publish after the acks: the acks were handled before it, so a slave
    # holding it holds them (consumer state ships ahead of the next records)
    ch.basic_publish("", "marker", b"after-the-acks")
    conn.process_data_events(0)
    return conn, [b for _, b in delivered[:acked]], [b for _, b in delivered[acked:]]


def _amqp_drain(port: int) -> list[tuple[bytes, bool]]:
    """Every message of ``iq`` (body, redelivered), acked, until one second of nothing."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        out = []
        for method, _props, body in ch.consume("iq", inactivity_timeout=1.0):
            if method is None:
                return out
            out.append((body, bool(method.redelivered)))
            ch.basic_ack(method.delivery_tag)
        return out
    finally:
        conn.close()


def test_amqp_deliveries_in_flight_at_the_kill_are_redelivered(tmp_path: Path) -> None:
    """An AMQP consumer with ten deliveries of a durable queue in flight, four of them
    acked, when the master is killed: on the promoted slave the six unacked come again,
    flagged redelivered (and so do the up to four more the master had sent to refill
    the prefetch after the acks), the rest of the queue once, the four acked never."""
    a, b = static_pair(tmp_path, "--replication-ack", "sync")
    conn = None
    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        conn, acked, in_flight = _amqp_in_flight(a.ports["amqp"], 30, 4)
        wait_for("b caught up", lambda: caught_up(b, a))
        a.kill()  # the consumer's connection dies with it, its deliveries unsettled
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        got = _amqp_drain(b.ports["amqp"])
        bodies = [body for body, _ in got]
        assert sorted(bodies) == sorted({b"q-%d" % i for i in range(30)} - set(acked)), (
            "every unacked message exactly once, no acked one"
        )
        redelivered = {body for body, again in got if again}
        assert set(in_flight) <= redelivered <= {b"q-%d" % i for i in range(14)} - set(acked)
    finally:
        if conn is not None:
            close_quietly(conn)  # its broker was killed under it
        b.stop()
        a.stop()


async def _half(port: int, topic: str) -> SendResult:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        return await TransactionProducer(client, "PG_7709").send_half(topic, b"commit-me")


async def _commit(port: int, half: SendResult) -> str:
    """END_TRANSACTION (commit): "" when answered SUCCESS, else the error."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        try:
            await TransactionProducer(client, "PG_7709").end(half, True)
        except RemotingError as exc:
            return str(exc)
        return ""


async def _send_one(port: int, body: bytes) -> tuple[int, str]:
    """A remoting send to topic ``mins``: (response code, remark); 0 is SEND_OK."""
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        try:
            result = await Producer(client, "PG_min").send("mins", body, queue_id=0)
        except RemotingError as exc:
            return exc.code, str(exc)
        return result.code, ""


async def _pull_topic(port: int, topic: str) -> list[bytes]:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PullConsumer(client, "CG_7709")
        out: list[bytes] = []
        for mq in await consumer.queues(topic):
            out += [m.body for m in (await consumer.pull(mq, 0, max_nums=64)).messages]
        return out


def test_min_insync_and_a_commit_while_the_in_sync_set_shrinks(tmp_path: Path) -> None:
    """replication_min_insync 2 (the master and one slave), and apache/rocketmq#7709
    (two replicas, minInSyncReplicas 2: a commit made as the slave dropped out of the
    set, its half message dropped after retries). With the slave in the set a send is
    acknowledged. A send as the slave is paused is not acknowledged (held until the
    slave leaves the set, then refused; or refused at once if it came later). With the
    slave out of the set, a send and the commit of a half message are refused before
    anything is written. The slave back: sends are acknowledged again, the producer's
    retried commit is answered SUCCESS, the message is delivered once, on the master
    and, after kill -9 and promotion, on the slave, and nothing is pending."""
    create_topic(tmp_path / "a", "t7709", "--type", "transaction", "--queues", "1")
    a, b = static_pair(
        tmp_path,
        *("--replication-ack", "sync", "--replication-max-lag", "1"),
        *("--replication-min-insync", "2"),
    )
    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        port = a.ports["unified"]
        assert a.replication()["min_insync"] == 2
        assert asyncio.run(_send_one(port, b"with-b")) == (0, "")
        half = asyncio.run(_half(port, "t7709"))
        b.pause()
        code, remark = asyncio.run(_send_one(port, b"as-b-stops"))
        assert code != 0 and "replication_min_insync 2" in remark, (code, remark)
        wait_for("b out of the set", lambda: a.replication()["in_sync"] == [])
        assert a.says("fewer than replication_min_insync 2: writes are refused")
        code, remark = asyncio.run(_send_one(port, b"without-b"))
        assert code != 0 and "replication_min_insync 2" in remark, (code, remark)
        refused = asyncio.run(_commit(port, half))
        assert "replication_min_insync 2" in refused, refused
        b.resume()
        wait_for("b back in the set", lambda: a.replication()["in_sync"] != [])
        assert asyncio.run(_send_one(port, b"b-back")) == (0, "")
        again = asyncio.run(_commit(port, half))  # the producer's retry
        wait_for("b caught up", lambda: caught_up(b, a))
        # refused before anything was written
        sends = [m for m in bodies_in_log(b.data_dir) if m in (b"with-b", b"without-b", b"b-back")]
        assert sends == [b"with-b", b"b-back"]
        assert again == ""  # answered SUCCESS: the half message was committed already
        assert asyncio.run(_pull_topic(a.ports["unified"], "t7709")) == [b"commit-me"]
        a.kill()
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")
        assert asyncio.run(_pull_topic(b.ports["unified"], "t7709")) == [b"commit-me"]
        store = MessageStore.open_read_only(b.data_dir)
        try:
            assert list(store.txns.iter_pending()) == []
        finally:
            store.close()
    finally:
        b.resume()
        b.stop()
        a.stop()
