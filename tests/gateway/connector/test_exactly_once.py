"""Exactly once between gateways: kill -9 of the connector under load, kill -9 of the
target gateway, a consumer group failing over to the target; and a refused message."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

from cli.main import main
from gateway.clients import Producer, PullConsumer, RemotingClient
from gateway.connector.endpoints import ORIGIN_OFFSET, ORIGIN_QUEUE

from .connector_support import (
    ConnectorProcess,
    bodies_of,
    eventually,
    port,
    read_all,
    rules_text,
    send,
)

ONE_WAY = (
    '[[rules]]\nname = "r"\nsource = "a"\ntopic = "load"\ntarget = "b"\nstart = "earliest"\n'
    "batch_size = 8\n"
)


def assert_exactly_once_in_order(got, sent: list[str], queues: int = 4) -> None:
    bodies = [m.body.decode() for ms in got.values() for m in ms]
    assert len(bodies) == len(set(bodies)), "duplicates at the target"
    assert sorted(bodies) == sorted(sent), "missing or extra messages at the target"
    for qid, messages in got.items():
        numbers = [int(m.body.decode().rsplit("-", 1)[1]) for m in messages]
        assert numbers == sorted(numbers), f"queue {qid} out of order"
        assert all(n % queues == qid for n in numbers)
        origins = [int(m.properties[ORIGIN_OFFSET]) for m in messages]
        assert origins == list(range(len(origins)))
        assert {m.properties[ORIGIN_QUEUE] for m in messages} == {f"load:{qid}"}


async def wait_copied(b_port: int, count: int, timeout: float = 20.0):
    async def copied():
        got = await read_all(b_port, "load")
        return got if len(bodies_of(got)) >= count else None

    return await eventually(copied, timeout=timeout) or await read_all(b_port, "load")


async def test_kill_9_of_the_connector_under_load(two, tmp_path: Path) -> None:
    a, b = two
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text(port(a), port(b), ONE_WAY))
    conn = ConnectorProcess(rules).start()
    total = 600
    try:
        load = asyncio.ensure_future(send(port(a), "load", total, prefix="m"))
        for kills in range(2):
            # kill while copying: some copied, not all
            async def some(at_least: int = 60 * (kills + 1)):
                got = await read_all(port(b), "load")
                return len(bodies_of(got)) >= at_least

            assert await eventually(some, timeout=20), conn.output
            conn.kill()
            # (started off the loop: the load's sends in flight must not time out
            # while it waits for the process to be ready)
            conn = await asyncio.to_thread(ConnectorProcess(rules).start)
        sent = await asyncio.wait_for(load, 60)
        got = await wait_copied(port(b), total)
        assert_exactly_once_in_order(got, sent)
    finally:
        conn.stop()


async def test_kill_9_of_the_target_gateway(two, tmp_path: Path) -> None:
    a, b = two
    b_port = port(b)
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text(port(a), b_port, ONE_WAY))
    conn = ConnectorProcess(rules).start()
    try:
        load = asyncio.ensure_future(send(port(a), "load", 300, prefix="m"))

        async def some():
            return len(bodies_of(await read_all(b_port, "load"))) >= 40

        assert await eventually(some, timeout=20), conn.output
        b.kill()
        b.extra = ("--unified-port", str(b_port))
        # started off the loop: a send to a in flight timed out (3 s) while the loop
        # waited for b to be ready (the response, already in the socket, lost to the
        # timer that asyncio.timeout runs in the same loop turn)
        await asyncio.to_thread(b.start)
        sent = await asyncio.wait_for(load, 60)
        got = await wait_copied(b_port, len(sent))
        assert_exactly_once_in_order(got, sent)
    finally:
        conn.stop()


async def test_a_consumer_group_fails_over_without_reprocessing(two, tmp_path: Path) -> None:
    a, b = two
    sent = await send(port(a), "load", 40, prefix="m")
    # group "billing" has processed the first 3 messages of each queue at the source
    committed = {0: 3, 1: 3, 2: 3, 3: 3}
    async with RemotingClient(f"127.0.0.1:{port(a)}") as client:
        billing = PullConsumer(client, "billing")
        source_queues = {mq.queue_id: mq for mq in await billing.queues("load")}
        for qid, offset in committed.items():
            await billing.update_offset(source_queues[qid], offset)
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text(port(a), port(b), ONE_WAY + 'carry_group_offsets = ["billing"]\n'))
    conn = ConnectorProcess(rules).start()
    try:
        got = await wait_copied(port(b), len(sent))
        assert_exactly_once_in_order(got, sent)
        async with RemotingClient(f"127.0.0.1:{port(b)}") as client:
            billing = PullConsumer(client, "billing")
            queues = {mq.queue_id: mq for mq in await billing.queues("load")}

            async def carried():
                offsets = {q: await billing.query_offset(queues[q]) for q in committed}
                return offsets if all(o and o > 0 for o in offsets.values()) else None

            offsets = await eventually(carried)
            assert offsets, conn.output
            for qid, offset in offsets.items():
                # the group resumes at the target on the copy of the first message it
                # had not processed at the source
                result = await billing.pull(queues[qid], offset, max_nums=1)
                first = result.messages[0]
                assert int(first.properties[ORIGIN_OFFSET]) == committed[qid]
                assert first.body.decode() == f"m-{committed[qid] * 4 + qid}"
    finally:
        conn.stop()


async def test_refused_messages_skipped_or_stopping_the_rule(two, tmp_path: Path) -> None:
    a, b = two
    # the target takes bodies up to 1 KiB, the source more
    config = tmp_path / "b.toml"
    config.write_text("[store]\nmax_message_bytes = 1024\n")
    b.stop()
    b.extra = ("--config", str(config))  # a new port: the rules below are written after
    b.start()
    rules = tmp_path / "rules.toml"
    rules.write_text(
        rules_text(
            port(a), port(b),
            ONE_WAY + 'on_refused = "skip"\n'
            '[[rules]]\nname = "s"\nsource = "a"\ntopic = "strict"\ntarget = "b"\n'
            'start = "earliest"\n',
        )
    )  # fmt: skip
    small = await send(port(a), "load", 8, prefix="m")
    async with RemotingClient(f"127.0.0.1:{port(a)}") as client:
        producer = Producer(client, "p")
        await producer.send("load", b"x" * 4096, queue_id=0)
        await producer.send("strict", b"x" * 4096, queue_id=0)
    more = await send(port(a), "load", 4, prefix="n")
    conn = ConnectorProcess(rules).start()
    try:
        got = await wait_copied(port(b), 12)
        assert bodies_of(got) == sorted(small + more)

        async def states():
            s = conn.status()
            return s if s["r"]["refused"] == 1 and s["s"]["state"] == "target-refusing" else None

        status = await eventually(states)
        assert status, conn.status()
        assert status["r"]["state"] == "running"
        assert "refused" in status["s"]["last_error"]
    finally:
        conn.stop()


async def test_a_refused_message_is_dead_lettered(two, tmp_path: Path) -> None:
    a, b = two
    # the target's "load" is read-only: every copy to it is refused, the dead-letter
    # topic takes them
    b.stop()
    created = CliRunner().invoke(
        main, ["topics", "create", "load", "--perm", "r", "--data-dir", str(b.data_dir)]
    )
    assert created.exit_code == 0, created.output
    b.start()  # on a new port (the port of before may be taken meanwhile by another test)
    rules = tmp_path / "rules.toml"
    rules.write_text(
        rules_text(port(a), port(b), ONE_WAY + 'on_refused = "dead-letter"\n'
                   'dead_letter_topic = "refused"\n')
    )  # fmt: skip
    sent = await send(port(a), "load", 6, prefix="m")
    conn = ConnectorProcess(rules).start()
    try:

        async def dead_lettered():
            got = await read_all(port(b), "refused")
            return got if len(bodies_of(got)) >= 6 else None

        got = await eventually(dead_lettered)
        assert got and bodies_of(got) == sorted(sent)
        status = conn.status()["r"]
        assert status["dead_lettered"] == 6 and status["refused"] == 6
        assert status["state"] == "running"
        assert "dead-lettered to refused" in status["last_error"]
    finally:
        conn.stop()
