"""The connector's rules through the admin API (gateway/admin/protocols.py): a gateway
running ``[connector]`` copies a topic to a second gateway; ``GET
/v1/admin/connector/rules`` shows the rule running; disabling it stops the copying
(messages sent meanwhile stay behind), enabling it again copies them; an unknown rule is
404 naming the field."""

from __future__ import annotations

import socket
from pathlib import Path

import requests

from ..gateway_process import GatewayProcess
from .connector_support import bodies_of, eventually, read_all, send

TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_rules_listed_disabled_and_enabled(tmp_path: Path) -> None:
    b = GatewayProcess(tmp_path / "b").start()
    a_port = free_port()
    config = tmp_path / "a.toml"
    config.write_text(
        f"""
[connector]
status_address = ""
[connector.clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{a_port}"]
[connector.clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{b.ports["unified"]}"]
[[connector.rules]]
name = "out"
source = "a"
topic = "jobs"
target = "b"
start = "earliest"
"""
    )
    a = GatewayProcess(tmp_path / "a", "--config", str(config), "--unified-port", str(a_port))
    a.start()
    api = f"http://127.0.0.1:{a_port}/v1/admin/connector/rules"
    try:
        first = await send(a_port, "jobs", 5)

        async def copied(n: int):
            got = bodies_of(await read_all(b.ports["unified"], "jobs"))
            return got if len(got) >= n else None

        assert await eventually(lambda: copied(5)) == sorted(first)
        rows = requests.get(api, timeout=TIMEOUT).json()["items"]
        assert [(r["rule"], r["enabled"], r["state"]) for r in rows] == [("out", True, "running")]
        assert rows[0]["messages"] >= 5 and rows[0]["source"] == "a"

        off = requests.post(f"{api}/out/disable", timeout=TIMEOUT)
        assert off.status_code == 200, off.text
        assert (off.json()["enabled"], off.json()["state"]) == (False, "disabled")
        later = await send(a_port, "jobs", 3)
        assert len(bodies_of(await read_all(b.ports["unified"], "jobs"))) == 5  # not copied

        on = requests.post(f"{api}/out/enable", timeout=TIMEOUT)
        assert on.status_code == 200 and on.json()["enabled"] is True
        assert await eventually(lambda: copied(8)) == sorted(first + later)
        missing = requests.post(f"{api}/nope/disable", timeout=TIMEOUT)
        assert missing.status_code == 404 and missing.json()["field"] == "rule"
    finally:
        a.stop()
        b.stop()
