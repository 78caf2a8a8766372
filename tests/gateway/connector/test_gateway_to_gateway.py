"""The connector between two gateways (two ``lmq serve`` processes, two data dirs) run
as its own process: one-way, renames, filters, start positions, both ways without loops,
status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.connector.endpoints import ORIGIN_CLUSTER, ORIGIN_OFFSET, ORIGIN_QUEUE, PATH

from ..gateway_process import GatewayProcess
from .connector_support import (
    ConnectorProcess,
    bodies_of,
    eventually,
    port,
    read_all,
    rules_text,
    send,
    two_gateways,
)


@pytest.fixture(scope="module")
def two(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two gateways for the module's tests (each test uses its own topics)."""
    with two_gateways(tmp_path_factory.mktemp("two")) as pair:
        yield pair


@pytest.fixture
def run_connector(tmp_path: Path) -> Iterator[object]:
    started: list[ConnectorProcess] = []

    def start(text: str) -> ConnectorProcess:
        path = tmp_path / f"rules{len(started)}.toml"
        path.write_text(text)
        conn = ConnectorProcess(path).start()
        started.append(conn)
        return conn

    yield start
    for conn in started:
        conn.stop()


async def wait_running(conn: ConnectorProcess, *rules: str) -> None:
    async def running():
        s = conn.status()
        return all(s[r]["state"] == "running" for r in rules)

    assert await eventually(running), conn.output


async def test_one_way_keeps_body_tag_keys_properties_and_order(two, run_connector) -> None:
    a, b = two
    sent = await send(
        port(a), "orders", 40, tag=lambda i: "eu" if i % 2 else "us",
        properties=lambda i: {"n": str(i)},
    )  # fmt: skip
    conn = run_connector(
        rules_text(port(a), port(b), '[[rules]]\nname = "r"\nsource = "a"\ntopic = "orders"\n'
                   'target = "b"\nstart = "earliest"\n')
    )  # fmt: skip

    async def copied():
        got = await read_all(port(b), "orders")
        return got if len(bodies_of(got)) >= 40 else None

    got = await eventually(copied)
    assert got, conn.output
    assert bodies_of(got) == sorted(sent)
    for qid, messages in got.items():
        # source queue q goes to target queue q (mod count), in source order
        numbers = [int(m.body.decode().split("-")[1]) for m in messages]
        assert numbers == sorted(numbers) and all(n % 4 == qid for n in numbers)
        for m in messages:
            n = int(m.body.decode().split("-")[1])
            assert m.tags == ("eu" if n % 2 else "us")
            assert m.keys == f"k{n}"
            assert m.properties["n"] == str(n)
            assert m.properties[ORIGIN_QUEUE] == f"orders:{qid}"
            assert int(m.properties[ORIGIN_OFFSET]) == n // 4
            assert m.properties[PATH] == m.properties[ORIGIN_CLUSTER]
    status = conn.status()["r"]
    assert status["state"] == "running"
    assert status["messages"] == 40 and status["last_sync_ms"] is not None
    assert conn.stop() == 0


async def test_rename_tag_filter_and_latest_start(two, run_connector) -> None:
    a, b = two
    await send(port(a), "events", 8, prefix="before")
    conn = run_connector(
        rules_text(port(a), port(b), '[[rules]]\nname = "r"\nsource = "a"\ntopic = "events"\n'
                   'tag = "keep || also"\ntarget = "b"\ntarget_topic = "copy-{topic}"\n')
    )  # fmt: skip
    await wait_running(conn, "r")
    tags = ["keep", "drop", "also", None]
    sent = await send(port(a), "events", 40, prefix="after", tag=lambda i: tags[i % 4])

    async def copied():
        got = await read_all(port(b), "copy-events")
        return got if len(bodies_of(got)) >= 20 else None

    got = await eventually(copied)
    assert got, conn.output
    expected = sorted(body for i, body in enumerate(sent) if tags[i % 4] in ("keep", "also"))
    assert bodies_of(got) == expected
    assert await read_all(port(b), "events") == {}

    async def all_filtered_seen():
        s = conn.status()["r"]
        return s["filtered"] == 20 and s["lag"] == 0

    assert await eventually(all_filtered_seen), str(conn.status()["r"])


async def test_start_at_a_time(two, run_connector) -> None:
    a, b = two
    await send(port(a), "timed", 8, prefix="old")
    time.sleep(0.05)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time()))
    # messages stamped within the same second as `since` are "at or after" it
    sent = await send(port(a), "timed", 8, prefix="new")
    text = rules_text(
        port(a), port(b),
        f'[[rules]]\nname = "r"\nsource = "a"\ntopic = "timed"\ntarget = "b"\n'
        f'start = "{since}Z"\n',
    )  # fmt: skip
    run_connector(text)

    async def copied():
        got = await read_all(port(b), "timed")
        return got if len(bodies_of(got)) >= 8 else None

    got = await eventually(copied)
    assert set(sent) <= set(bodies_of(got))


async def test_both_ways_without_loops(two, run_connector) -> None:
    a, b = two
    rules = (
        '[[rules]]\nname = "ab"\nsource = "a"\ntopic = "chat"\ntarget = "b"\n'
        '[[rules]]\nname = "ba"\nsource = "b"\ntopic = "chat"\ntarget = "a"\n'
    )
    conn = run_connector(rules_text(port(a), port(b), rules))
    await wait_running(conn, "ab", "ba")
    from_a = await send(port(a), "chat", 12, prefix="a")
    from_b = await send(port(b), "chat", 12, prefix="b")
    everything = sorted(from_a + from_b)

    async def both_have_all():
        ga, gb = await read_all(port(a), "chat"), await read_all(port(b), "chat")
        return (ga, gb) if bodies_of(ga) == everything and bodies_of(gb) == everything else None

    result = await eventually(both_have_all)
    assert result, (conn.output, conn.status())

    async def loops_seen():
        s = conn.status()
        return s["ab"]["loops_dropped"] == 12 and s["ba"]["loops_dropped"] == 12

    assert await eventually(loops_seen), conn.status()
    # and nothing more comes: every copy went once each way
    ga, gb = await read_all(port(a), "chat"), await read_all(port(b), "chat")
    assert bodies_of(ga) == everything and bodies_of(gb) == everything


async def test_target_then_source_unreachable(tmp_path: Path, run_connector) -> None:
    a = GatewayProcess(tmp_path / "a").start()
    b = GatewayProcess(tmp_path / "b").start()
    try:
        b_port = port(b)
        conn = run_connector(
            rules_text(port(a), b_port, '[[rules]]\nname = "r"\nsource = "a"\ntopic = "t"\n'
                       'target = "b"\nstart = "earliest"\n')
        )  # fmt: skip
        first = await send(port(a), "t", 8, prefix="first")

        async def copied(n: int):
            got = await read_all(b_port, "t")
            return got if len(bodies_of(got)) >= n else None

        assert await eventually(lambda: copied(8))
        b.stop()

        async def unreachable():
            return conn.status()["r"]["state"] == "target-unreachable"

        assert await eventually(unreachable), conn.status()
        second = await send(port(a), "t", 8, prefix="second")
        b.extra = ("--unified-port", str(b_port))
        b.start()
        got = await eventually(lambda: copied(16))
        assert got and bodies_of(got) == sorted(first + second)

        async def running():
            return conn.status()["r"]["state"] == "running"

        assert await eventually(running)
        status = conn.status()["r"]
        assert status["retries"] >= 1 and status["errors"] >= 1
        a.stop()

        async def source_unreachable():
            return conn.status()["r"]["state"] == "source-unreachable"

        assert await eventually(source_unreachable), conn.status()
    finally:
        b.stop()
        a.stop()


async def test_a_rocketmq_target_is_at_least_once(two, run_connector) -> None:
    """A target of kind "rocketmq" uses no private request: the copies carry no origin
    (high_water is None), the rule says it is at least once, and everything arrives."""
    a, b = two
    text = rules_text(
        port(a), port(b),
        '[[rules]]\nname = "r"\nsource = "a"\ntopic = "plain"\ntarget = "b"\nstart = "earliest"\n',
    ).replace('[clusters.b]\nkind = "gateway"', '[clusters.b]\nkind = "rocketmq"')  # fmt: skip
    sent = await send(port(a), "plain", 12)
    conn = run_connector(text)

    async def copied():
        got = await read_all(port(b), "plain")
        return got if len(bodies_of(got)) >= 12 else None

    got = await eventually(copied)
    assert got and bodies_of(got) == sorted(sent)
    assert all(ORIGIN_OFFSET not in m.properties for ms in got.values() for m in ms)
    # the path still travels (loops are still cut): the source gateway's generated id
    paths = {m.properties[PATH] for ms in got.values() for m in ms}
    assert len(paths) == 1 and paths.pop().startswith("lmq-")
    assert conn.status()["r"]["exactly_once"] is False


async def test_rate_limit_bounds_the_copy_rate_and_slows_no_other_rule(
    two, run_connector
) -> None:
    """``rate_limit = R`` (a token bucket holding R, shared by the rule's queues; a batch
    pays for itself after its write): by t seconds after the connector started, at most
    R + batch + R * t copies can be stored. Checked at every sample (a correctness bound
    on the limiter, not a speed assertion); an unlimited rule beside it copies its whole
    backlog meanwhile."""
    a, b = two
    rate, batch, n = 20, 5, 100
    await send(port(a), "limited", n, queues=1)
    await send(port(a), "free", n, queues=1)
    rules = (
        f'[[rules]]\nname = "slow"\nsource = "a"\ntopic = "limited"\ntarget = "b"\n'
        f'start = "earliest"\nrate_limit = {rate}\nbatch_size = {batch}\n\n'
        f'[[rules]]\nname = "fast"\nsource = "a"\ntopic = "free"\ntarget = "b"\n'
        f'start = "earliest"\nbatch_size = {batch}\n'
    )
    started = time.monotonic()
    conn = run_connector(rules_text(port(a), port(b), rules))
    samples: list[tuple[float, int]] = []
    free_done_with: int | None = None

    async def copied() -> bool:
        nonlocal free_done_with
        slow = len(bodies_of(await read_all(port(b), "limited")))
        samples.append((time.monotonic() - started, slow))
        if free_done_with is None and len(bodies_of(await read_all(port(b), "free"))) == n:
            free_done_with = slow
        return slow == n and free_done_with is not None

    assert await eventually(copied, timeout=30, interval=0.2), (samples, conn.output)
    for elapsed, count in samples:
        assert count <= rate + batch + rate * elapsed, (elapsed, count, samples)
    # the whole backlog took at least (n - rate - batch) / rate seconds ...
    assert samples[-1][0] >= (n - rate - batch) / rate
    # ... and the unlimited rule had all of its own before the limited one finished
    assert free_done_with is not None and free_done_with < n, samples
    assert conn.status()["fast"]["messages"] == n
