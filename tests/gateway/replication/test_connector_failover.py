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

from .group_support import Member, caught_up, wait_for

pytestmark = pytest.mark.slow

N = 300
RATE = 100  # messages a second per rule: about three seconds of copying each way


def _rules(outside: int, group: list[int]) -> str:
    endpoints = ", ".join(f'"127.0.0.1:{p}"' for p in group)
    return f"""
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
name = "into-the-group"
source = "outside"
topic = "orders"
target = "grp"
start = "earliest"
rate_limit = {RATE}

[[rules]]
name = "out-of-the-group"
source = "grp"
topic = "events"
target = "outside"
target_topic = "events-copy"
start = "earliest"
rate_limit = {RATE}
"""


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
