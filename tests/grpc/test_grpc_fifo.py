"""FIFO over gRPC against a real ``lmq serve`` with raw stubs: a group consuming in order
receives each message group's next message only after the previous one was acked, other
groups flowing; ChangeInvisibleDuration and nacks bring the held message back first;
a multi-message SendMessage puts each message in its own group's queue, in one append
and in order. (The official client: tests/gateway/grpc_clients/test_python_client_fifo.py.)"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import MessageStore
from cli.main import main
from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.producer import ShardingKey
from gateway.rocketmq.topics import TopicRegistry
from lmq.rocketmq import GroupConfig, MessageType, TopicConfig, queue_lmq
from protocol.grpc import Code
from tests.gateway.gateway_process import GatewayProcess
from tests.grpc.grpc_msg_support import (
    Grpc,
    ack,
    grpc_gateway,
    message,
    parts,
    receive,
    send,
)
from tests.grpc.test_grpc_ack import change

QUEUES = 2


def prepare(data: Path) -> None:
    with MessageStore.open(data) as store:
        TopicRegistry(store, False, 8).create(
            TopicConfig("fifo", QUEUES, QUEUES, message_type=MessageType.FIFO))
        groups = GroupRegistry(store)
        groups.create(GroupConfig("ordered", retry_max_times=5, consume_message_orderly=True))
        groups.create(GroupConfig("plain", retry_max_times=5))


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def bodies(messages: list[pb.Message]) -> list[str]:
    return sorted(m.body.decode() for m in messages)


async def test_one_message_per_group_until_acked_others_flow(tmp_path: Path) -> None:
    data = tmp_path / "data"
    prepare(data)
    async with grpc_gateway(data) as (_gw, g):
        for i in range(3):
            for grp in ("a", "b", "c"):
                res = await send(g, message("fifo", f"{grp}{i}".encode(), group=grp,
                                            kind=pb.FIFO))
                assert res.status.code == Code.OK, res
        got, _, status = parts(await receive(g, "ordered", "fifo", invisible=30))
        assert status.code == Code.OK and bodies(got) == ["a0", "b0", "c0"]
        by = {m.body.decode(): m for m in got}
        # a0 is held (never acked): b and c go on, a waits
        await ack(g, "ordered", "fifo", by["b0"], by["c0"])
        got, _, _ = parts(await receive(g, "ordered", "fifo", invisible=30))
        assert bodies(got) == ["b1", "c1"]
        await ack(g, "ordered", "fifo", *got)
        got, _, _ = parts(await receive(g, "ordered", "fifo", invisible=30))
        assert bodies(got) == ["b2", "c2"]
        await ack(g, "ordered", "fifo", *got)
        empty, _, status = parts(await receive(g, "ordered", "fifo", poll=0.5))
        assert empty == [] and status.code == Code.MESSAGE_NOT_FOUND
        # a0 made visible again in 1 s: it comes back first for its group (after the
        # store's retry backoff), with its delivery attempt counted
        res = await change(g, "ordered", "fifo", by["a0"].system_properties.receipt_handle, 1)
        assert res.status.code == Code.OK  # type: ignore[attr-defined]
        t0 = time.monotonic()
        again, _, _ = parts(await receive(g, "ordered", "fifo", poll=10, invisible=30))
        assert bodies(again) == ["a0"] and again[0].system_properties.delivery_attempt == 2
        assert time.monotonic() - t0 < 9
        # delivered twice and not acked: a blocked group, in the metrics
        metrics = await asyncio.to_thread(_metrics, _gw.ports["unified"])
        assert "lmq_store_fifo_blocked_groups 1" in metrics
        assert "lmq_store_fifo_blocked_waiting 2" in metrics
        await ack(g, "ordered", "fifo", again[0])
        nxt, _, _ = parts(await receive(g, "ordered", "fifo", poll=5))
        assert bodies(nxt) == ["a1"]
        # a group that does not consume in order gets everything at once
        everything, _, _ = parts(await receive(g, "plain", "fifo"))
        assert len(everything) == 9


async def test_an_ack_wakes_a_long_poll_with_the_next_of_the_group(tmp_path: Path) -> None:
    data = tmp_path / "data"
    prepare(data)
    async with grpc_gateway(data) as (_gw, g):
        for i in range(2):
            await send(g, message("fifo", f"a{i}".encode(), group="a", kind=pb.FIFO))
        (first,), _, _ = parts(await receive(g, "ordered", "fifo"))
        waiting = asyncio.ensure_future(receive(g, "ordered", "fifo", poll=15))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await ack(g, "ordered", "fifo", first)
        got, _, _ = parts(await asyncio.wait_for(waiting, 10))
        assert bodies(got) == ["a1"]


async def test_batch_send_puts_each_message_in_its_groups_queue(tmp_path: Path) -> None:
    """RocketMQ 5 puts a whole batch in its first message's queue; here each message
    goes to its group's queue (where the group's single sends go too), in order, in
    one append."""
    data = tmp_path / "data"
    prepare(data)
    groups = [f"order-{i}" for i in range(8)]
    fifo = TopicConfig("fifo", QUEUES, QUEUES)
    queues = {grp: ShardingKey(grp).select(fifo) for grp in groups}
    assert len(set(queues.values())) == QUEUES  # the groups span both queues
    async with grpc_gateway(data) as (_gw, g):
        batch = [message("fifo", f"{grp}:{n}".encode(), group=grp, kind=pb.FIFO)
                 for n in range(3) for grp in groups]
        res = await send(g, *batch)
        assert res.status.code == Code.OK, res
        assert len(res.entries) == len(batch)
        single = await send(g, message("fifo", b"order-0:3", group="order-0", kind=pb.FIFO))
        assert single.status.code == Code.OK
    with MessageStore.open(data) as store:
        for q in range(QUEUES):
            stored = [m.record.body.decode()
                      for m in store.pull(queue_lmq("fifo", q), 0, 100).messages]
            for body in stored:
                assert queues[body.split(":")[0]] == q, (body, q)
            for grp in groups:  # each group's messages in the order sent
                seq = [int(b.split(":")[1]) for b in stored if b.split(":")[0] == grp]
                assert seq == sorted(seq)
        assert sum(store.lmq(queue_lmq("fifo", q)).messages for q in range(QUEUES)) == 25


async def test_a_held_group_stays_held_across_a_gateway_kill(tmp_path: Path) -> None:
    """kill -9 the gateway while a message group's head is out: after the restart the
    group is still held (its next message is not given), the other group flows, and
    once the head's invisible time runs out it comes back first for its group."""
    data = tmp_path / "data"
    prepare(data)
    gw = GatewayProcess(data).start()
    try:
        g = Grpc(gw.ports["grpc"])
        try:
            for i in range(3):
                for grp in ("a", "b"):
                    await send(g, message("fifo", f"{grp}{i}".encode(), group=grp,
                                          kind=pb.FIFO))
            got, _, _ = parts(await receive(g, "ordered", "fifo", invisible=8))
            assert bodies(got) == ["a0", "b0"]
            await ack(g, "ordered", "fifo", *[m for m in got if m.body == b"b0"])
        finally:
            await g.close()
        gw.kill()
        gw.restart()
        g = Grpc(gw.ports["grpc"])
        try:
            got, _, _ = parts(await receive(g, "ordered", "fifo", invisible=30))
            assert bodies(got) == ["b1"]  # a is held by a0, still in flight
            await ack(g, "ordered", "fifo", *got)
            again, _, _ = parts(await receive(g, "ordered", "fifo", poll=15, invisible=30))
            assert bodies(again) in (["a0"], ["b2"])
            seen = list(again)
            while not any(m.body == b"a0" for m in seen):
                await ack(g, "ordered", "fifo", *seen)
                seen, _, _ = parts(await receive(g, "ordered", "fifo", poll=15,
                                                 invisible=30))
                assert seen, "a0 never came back"
            a0 = next(m for m in seen if m.body == b"a0")
            assert a0.system_properties.delivery_attempt == 2
            assert all(m.body != b"a1" for m in seen)
            await ack(g, "ordered", "fifo", *seen)
            nxt, _, _ = parts(await receive(g, "ordered", "fifo", poll=5))
            assert "a1" in bodies(nxt) and "a2" not in bodies(nxt)
        finally:
            await g.close()
    finally:
        gw.stop()


async def test_show_and_release_a_blocked_group_of_a_running_gateway(tmp_path: Path) -> None:
    """``lmq groups show`` beside the running gateway lists the blocked group;
    ``lmq groups release --gateway`` releases it over the gRPC port: the head goes to
    %DLQ%<group>, the group's next message follows, its old receipt is void."""
    data = tmp_path / "data"
    prepare(data)
    runner = CliRunner()
    async with grpc_gateway(data) as (gw, g):
        for i in range(3):
            await send(g, message("fifo", f"a{i}".encode(), group="a", kind=pb.FIFO))
        (a0,), _, _ = parts(await receive(g, "ordered", "fifo"))
        await change(g, "ordered", "fifo", a0.system_properties.receipt_handle, 1)
        (again,), _, _ = parts(await receive(g, "ordered", "fifo", poll=10))
        assert again.body == b"a0" and again.system_properties.delivery_attempt == 2
        shown = await asyncio.to_thread(runner.invoke, main, [
            "groups", "show", "ordered", "--json", "--data-dir", str(data)])
        assert shown.exit_code == 0, shown.output
        blocked = json.loads(shown.output)["blocked_message_groups"]
        assert [(b["message_group"], b["topic"], b["deliveries"], b["waiting"])
                for b in blocked] == [("a", "fifo", 2, 2)]
        address = f"127.0.0.1:{gw.ports['grpc']}"
        missing = await asyncio.to_thread(runner.invoke, main, [
            "groups", "release", "ordered", "fifo", "zz", "--gateway", address])
        assert missing.exit_code != 0 and "no message out" in missing.output
        done = await asyncio.to_thread(runner.invoke, main, [
            "groups", "release", "ordered", "fifo", "a", "--gateway", address])
        assert done.exit_code == 0, done.output
        assert "moved to %DLQ%ordered" in done.output
        nxt, _, _ = parts(await receive(g, "ordered", "fifo", poll=5))
        assert bodies(nxt) == ["a1"]
        await ack(g, "ordered", "fifo", again)  # released: its receipt is void, and
        empty, _, _ = parts(await receive(g, "ordered", "fifo", poll=1))
        assert empty == []  # its ack does not move the group past a1 (still out)
    with MessageStore.open(data) as store:
        dlq = store.pull(queue_lmq("%DLQ%ordered", 0), 0, 10).messages
        assert [m.record.body for m in dlq] == [b"a0"]


async def test_release_over_grpc_is_authenticated_and_checked(tmp_path: Path) -> None:
    """With users, a release needs a valid signature and the right to consume the
    topic as the group (the ACL), as ForwardMessageToDeadLetterQueue does."""
    data = tmp_path / "data"
    data.mkdir(parents=True)
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("both allowed/#"))
    db.save(data / "users.json")
    runner = CliRunner()
    process = GatewayProcess(data).start()
    try:
        address = f"127.0.0.1:{process.ports['grpc']}"

        def release(topic: str, *key: str) -> Any:
            return runner.invoke(main, ["groups", "release", "G", topic, "a",
                                        "--gateway", address, *key])

        signed = ("--access-key", "AK_app", "--secret-key", "secret-app")
        unsigned = await asyncio.to_thread(release, "allowed")
        assert unsigned.exit_code != 0 and "requires signed requests" in unsigned.output
        wrong = await asyncio.to_thread(release, "allowed", "--access-key", "AK_app",
                                        "--secret-key", "nope")
        assert wrong.exit_code != 0 and "does not verify" in wrong.output
        forbidden = await asyncio.to_thread(release, "secret", *signed)
        assert forbidden.exit_code != 0
        assert "no permission to consume" in forbidden.output
        allowed = await asyncio.to_thread(release, "allowed", *signed)
        # authenticated and allowed: there is just nothing to release
        assert allowed.exit_code != 0 and "no message out" in allowed.output
    finally:
        process.stop()
