"""The message connector and a broker group across a failover (issue 30: the
connector's high-water marks survive it). One connector, two rules, each rate-limited
so that the master is killed (SIGKILL) mid-stream of both:

- *into the group*: a topic of a separate gateway copied into a static pair (sync)
  named by both members' addresses. The copies' origins and the group's high-water
  marks are records of the log (docs/connector.md), so the promoted slave holds the
  marks of every copy it acknowledged; the connector, refused while the slave is not
  yet promoted (a transient error: it backs off and tries the next endpoint), resumes
  from those marks;
- *out of the group*: a topic of the group copied to the separate gateway, whose marks
  are kept by origin cluster: the group's cluster id, which the promoted slave must
  answer with (the old master's, replicated), or the rule would start over.

Each way every message arrives once: none skipped, none twice."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from gateway.clients import RemotingClient
from gateway.clients.origins import OriginClient
from gateway.connector.endpoints import ORIGIN_CLUSTER
from tests.gateway.connector.connector_support import (
    ConnectorProcess,
    eventually,
    pull_all,
    send,
)
from tests.gateway.gateway_process import GatewayProcess

from .etcd_support import free_port
from .group_support import Member, caught_up, wait_for

pytestmark = pytest.mark.slow

N = 300
RATE = 100  # messages a second per rule: about three seconds of copying each way


def _rules(outside: int, group: list[int], *, into: bool = True, rate: int = RATE) -> str:
    """Clusters ``outside`` and ``grp`` (every member), the rule ``out-of-the-group``
    (grp's ``events`` to outside's ``events-copy``) and, with ``into``, the rule
    ``into-the-group`` (outside's ``orders`` to grp); ``rate``: msg/s each (0: none)."""
    endpoints = ", ".join(f'"127.0.0.1:{p}"' for p in group)
    limit = f"rate_limit = {rate}\n" if rate else ""
    text = f"""status_address = ""
heartbeat_interval = 0
retry_initial = 0.05
retry_max = 0.5

[clusters.outside]
kind = "gateway"
endpoints = ["127.0.0.1:{outside}"]

[clusters.grp]
kind = "gateway"
endpoints = [{endpoints}]

[[rules]]
name = "out-of-the-group"
source = "grp"
topic = "events"
target = "outside"
target_topic = "events-copy"
start = "earliest"
{limit}"""
    if into:
        text += f"""
[[rules]]
name = "into-the-group"
source = "outside"
topic = "orders"
target = "grp"
start = "earliest"
{limit}"""
    return text


async def _cluster_id(port: int) -> str:
    async with RemotingClient(f"127.0.0.1:{port}") as client:
        return await OriginClient(client).cluster_id()


def _once(got: list[bytes], sent: set[bytes]) -> None:
    assert set(got) == sent, "nothing skipped"
    assert [b for b, n in Counter(got).items() if n > 1] == [], "nothing copied twice"


def test_connector_rules_across_a_failover(tmp_path: Path) -> None:
    a = Member(tmp_path / "a", "--replication-role", "master", "--replication-ack", "sync")
    a.start()
    b = Member(
        tmp_path / "b", "--replication-role", "slave", "--replication-master", a.replication_address
    )
    outside = GatewayProcess(tmp_path / "outside")
    connector: ConnectorProcess | None = None
    try:
        b.start()
        outside.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        at_a = f"127.0.0.1:{a.ports['unified']}"
        at_b = f"127.0.0.1:{b.ports['unified']}"
        at_outside = f"127.0.0.1:{outside.ports['unified']}"
        orders = asyncio.run(send(outside.ports["unified"], "orders", N, prefix="o"))
        events = asyncio.run(send(a.ports["unified"], "events", N, prefix="e"))
        wait_for("b caught up", lambda: caught_up(b, a))
        group_id = asyncio.run(_cluster_id(a.ports["unified"]))
        rules = tmp_path / "rules.toml"
        rules.write_text(_rules(outside.ports["unified"], [a.ports["unified"], b.ports["unified"]]))
        connector = ConnectorProcess(rules).start()

        async def some_copied() -> bool:
            into = await pull_all(at_a, "orders")
            out = await pull_all(at_outside, "events-copy")
            return len(into) >= N // 4 and len(out) >= N // 4

        assert asyncio.run(eventually(some_copied, timeout=30, interval=0.02))
        a.kill()  # SIGKILL, mid-stream both ways
        b.promote()
        wait_for("b is master", lambda: b.replication()["role"] == "master")

        async def all_copied() -> bool:
            into = {m.body for m in await pull_all(at_b, "orders")}
            out = {m.body for m in await pull_all(at_outside, "events-copy")}
            return len(into) >= N and len(out) >= N

        output = connector.output
        assert asyncio.run(eventually(all_copied, timeout=60)), "".join(output[-20:])
        _once([m.body for m in asyncio.run(pull_all(at_b, "orders"))], {o.encode() for o in orders})
        copies = asyncio.run(pull_all(at_outside, "events-copy"))
        _once([m.body for m in copies], {e.encode() for e in events})
        # every copy names the group as its origin by one id, the old master's: the
        # promoted slave answers with it (its own, generated at its first start, would
        # start the marks over)
        assert {m.properties[ORIGIN_CLUSTER] for m in copies} == {group_id}
    finally:
        if connector is not None:
            connector.stop()
        outside.stop()
        b.stop()
        a.stop()


def _copied_by(member: Member, rule: str) -> float:
    """``lmq_connector_messages_total`` of ``rule`` on ``member``'s /metrics."""
    url = f"http://127.0.0.1:{member.ports['unified']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(f'lmq_connector_messages_total{{rule="{rule}"}}'):
                return float(line.split()[-1])
    return 0.0


def test_rules_inside_the_group_run_on_its_master_only(tmp_path: Path) -> None:
    """Both members carry the same [connector] rule (a topic of the group copied to
    an outside gateway): it runs on the master only; after kill -9 and promotion it
    runs on the new master, which carries on from the outside gateway's marks (every
    message once); the old master, back as a slave, does not run it."""
    outside = GatewayProcess(tmp_path / "outside").start()
    ports = {"a": free_port(), "b": free_port()}
    rules = tmp_path / "rules.toml"
    rules.write_text(_rules(outside.ports["unified"], [ports["a"], ports["b"]], into=False, rate=0))
    config = tmp_path / "lmq.toml"
    config.write_text(f'[connector]\nrules = "{rules}"\n')

    def member(name: str, *role: str) -> Member:
        return Member(
            tmp_path / name, "--config", str(config), "--unified-port", str(ports[name]), *role
        )

    a = member("a", "--replication-role", "master", "--replication-ack", "sync").start()
    b = member("b", "--replication-role", "slave", "--replication-master", a.replication_address)
    at_outside = f"127.0.0.1:{outside.ports['unified']}"

    async def copies() -> list[bytes]:
        return [m.body for m in await pull_all(at_outside, "events-copy")]

    try:
        b.start()
        wait_for("b in sync", lambda: a.replication()["in_sync"] != [])
        first = asyncio.run(send(a.ports["unified"], "events", 100, prefix="e1"))
        wait_for("the first copies", lambda: len(asyncio.run(copies())) >= 100)
        assert _copied_by(a, "out-of-the-group") == 100
        assert _copied_by(b, "out-of-the-group") == 0 and b.says("connector rules wait")
        wait_for("b caught up", lambda: caught_up(b, a))
        a.kill()
        b.promote()
        wait_for("b's rules", lambda: b.says("connector rules started"))
        second = asyncio.run(send(b.ports["unified"], "events", 100, prefix="e2"))
        wait_for("every copy", lambda: len(asyncio.run(copies())) >= 200)
        _once(asyncio.run(copies()), {e.encode() for e in first + second})
        a = member(
            "a", "--replication-role", "slave", "--replication-master", b.replication_address
        )
        a.start()
        wait_for("a in sync", lambda: b.replication()["in_sync"] != [])
        assert a.says("connector rules wait") and _copied_by(a, "out-of-the-group") == 0
    finally:
        b.stop()
        a.stop()
        outside.stop()
