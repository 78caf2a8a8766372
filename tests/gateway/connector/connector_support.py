"""Support for the connector tests (no tests here): the connector as a process
(``python -m cli.connector run``), rules files for two gateways, and remoting helpers
to send to and read back a whole topic (the benches use them too)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gateway.clients import Message, Producer, PullConsumer, ReceivedMessage, RemotingClient
from gateway.connector.heartbeat import HEARTBEAT

from ..gateway_process import GatewayProcess, ReadyProcess


class ConnectorProcess(ReadyProcess):
    """``lmq connector run --rules FILE`` in a subprocess (the harness of
    gateway_process.py): its status listener on a free loopback port, ``status_url``."""

    name = "connector"
    start_timeout = 20.0

    def __init__(self, rules_file: Path) -> None:
        super().__init__()
        self.rules_file = rules_file
        self.status_url = ""

    def command(self) -> list[str]:
        return ["-m", "cli.connector", "run",
                "--rules", str(self.rules_file), "--status-address", "127.0.0.1:0"]  # fmt: skip

    def _saw(self, line: str) -> None:
        if line.startswith("status "):
            self.status_url = "http://" + line.split()[1]

    def status(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(self.status_url + "/status", timeout=5) as response:
            rules = json.loads(response.read())["rules"]
        return {r["rule"]: r for r in rules}


@contextmanager
def two_gateways(directory: Path, *b_extra: str) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Gateways a and b (``lmq serve`` in ``directory``/a and /b, b with the arguments
    ``b_extra``), stopped at the end."""
    a = GatewayProcess(directory / "a").start()
    try:
        b = GatewayProcess(directory / "b", *b_extra).start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def port(gw: GatewayProcess) -> int:
    """The gateway's unified port (remoting among others)."""
    return gw.ports["unified"]


def rules_text(
    a_port: int, b_port: int, rules: str, *, heartbeat: float = 0, extra: str = ""
) -> str:
    return f"""
heartbeat_interval = {heartbeat}
stall_after = 5
retry_initial = 0.05
retry_max = 0.5
group_offsets_interval = 0.2
{extra}
[clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{a_port}"]

[clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{b_port}"]

{rules}
"""


def peer_rules(path: Path, peer: str, rule: str, gateway_port: int | None = None) -> Path:
    """``path`` written as a rules file of the cluster(s) ``peer`` (TOML), a gateway
    cluster ``gw`` at ``gateway_port`` (where given) and ``rule``; no status listener, no
    heartbeats."""
    gw = f'[clusters.gw]\nkind = "gateway"\nendpoints = ["127.0.0.1:{gateway_port}"]\n'
    clusters = f"{peer}\n{gw if gateway_port else ''}"
    path.write_text(f'status_address = ""\nheartbeat_interval = 0\n\n{clusters}\n{rule}\n')
    return path


async def send(
    port: int,
    topic: str,
    count: int,
    *,
    queues: int = 4,
    tag: Callable[[int], str | None] = lambda i: None,
    prefix: str = "m",
    properties: Callable[[int], dict[str, str]] = lambda i: {},
) -> list[str]:
    """Send ``count`` messages ``<prefix>-<i>`` round robin over queue ids < ``queues``;
    returns the bodies, in order."""
    bodies = []
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        producer = Producer(client, "test-producers")
        for i in range(count):
            body = f"{prefix}-{i}"
            await producer.send(
                topic,
                body.encode(),
                tags=tag(i),
                keys=[f"k{i}"],
                properties=properties(i),
                queue_id=i % queues,
            )
            bodies.append(body)
    return bodies


async def send_batches(namesrv: str, topic: str, n: int, *, tags: str | None = None) -> None:
    """``m0`` .. ``m<n-1>`` into queue 0 of ``topic``, 50 a batch, each with its number as
    property ``n``."""
    async with RemotingClient(namesrv) as client:
        producer = Producer(client, "test-producers")
        for start in range(0, n, 50):
            batch = [Message(topic, f"m{i}".encode(), tags=tags, properties={"n": str(i)})
                     for i in range(start, min(start + 50, n))]  # fmt: skip
            await producer.send_batch(topic, batch, queue_id=0)


async def read_all(port: int, topic: str) -> dict[int, list[ReceivedMessage]]:
    """Every message of ``topic`` at the gateway on ``port``, per queue id, in order."""
    out: dict[int, list[ReceivedMessage]] = {}
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        consumer = PullConsumer(client, "test-readers")
        route = await client.route(topic, refresh=True)
        for mq in route.read_queues:
            messages: list[ReceivedMessage] = []
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=64)
                if not result.messages:
                    break
                messages += result.messages
                offset = result.next_begin_offset
            if messages:
                out[mq.queue_id] = messages
    return out


async def pull_all(namesrv: str, topic: str, *, max_nums: int = 32) -> list[ReceivedMessage]:
    """Every message of ``topic`` at the gateway ``namesrv`` (``host:port``), pulled from
    offset 0 of each queue in turn; none while the topic does not exist yet."""
    out: list[ReceivedMessage] = []
    async with RemotingClient(namesrv) as client:
        consumer = PullConsumer(client, "test-readers")
        try:
            queues = await consumer.queues(topic)
        except Exception:
            return []
        for mq in queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=max_nums)
                if not result.found:
                    break
                out += result.messages
                offset = result.next_begin_offset
    return out


def bodies_of(messages: dict[int, list[ReceivedMessage]]) -> list[str]:
    """The bodies, sorted, without the connector's heartbeats (as docs/connector.md tells
    consumers to skip them)."""
    return sorted(
        m.body.decode() for ms in messages.values() for m in ms if HEARTBEAT not in m.properties
    )


async def eventually(
    check: Callable[[], Awaitable[Any]], *, timeout: float = 10.0, interval: float = 0.1
) -> Any:
    """Await ``check()`` until it returns a true value (returned) or ``timeout`` passes
    (its last value is returned, for the assertion to show)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)


async def stored_through_a_kill(
    rules_file: Path,
    namesrv: str,
    topic: str,
    n: int,
    publish: Callable[[], Awaitable[object]],
    ready: Callable[[ConnectorProcess], bool] = lambda connector: True,
) -> list[ReceivedMessage]:
    """The connector on ``rules_file`` copies ``n`` distinct bodies, sent by ``publish()``
    once the connector is ``ready``, into ``topic`` at the gateway ``namesrv``; it is
    SIGKILLed mid-stream (a quarter stored, not all) and started again. Returns what
    ``topic`` holds once every body is there."""
    connector = ConnectorProcess(rules_file).start()
    try:

        async def is_ready() -> bool:
            return ready(connector)

        assert await eventually(is_ready, timeout=10), connector.output
        publisher = asyncio.ensure_future(publish())

        async def some_stored() -> bool:
            return len(await pull_all(namesrv, topic)) >= n // 4

        assert await eventually(some_stored, timeout=15, interval=0.02)
        connector.kill()  # SIGKILL, mid-stream
        stored_at_kill = len(await pull_all(namesrv, topic))
        assert stored_at_kill < n, "the connector finished before the kill: no crash tested"
        connector = ConnectorProcess(rules_file).start()
        await asyncio.wait_for(publisher, 20)

        async def all_stored() -> bool:
            return len({m.body for m in await pull_all(namesrv, topic)}) == n

        assert await eventually(all_stored, timeout=20)
    finally:
        connector.stop()
    return await pull_all(namesrv, topic)


async def received_through_a_kill(
    rules_file: Path,
    n: int,
    receive: Callable[[int], Awaitable[list[Any]]],
    body: Callable[[Any], bytes],
) -> list[Any]:
    """The connector on ``rules_file`` copies ``n`` distinct bodies out to a peer where
    ``receive(k)`` takes up to ``k`` of them; it is SIGKILLed once a quarter arrived and
    started again. Returns all that arrived (duplicates too) once every body has, or
    after 20 s more."""
    connector = ConnectorProcess(rules_file).start()
    got: list[Any] = []
    try:
        got += await receive(n // 4)
        connector.kill()
        connector = ConnectorProcess(rules_file).start()
        deadline = time.monotonic() + 20
        while len({body(m) for m in got}) < n and time.monotonic() < deadline:
            got += await receive(1)
    finally:
        connector.stop()
    return got
