"""The network to the target cut and restored under load (issue 19): the connector
reaches gateway b only through a relay (cut_relay.py) that drops every connection and
refuses new ones for a while, three times; every message a acknowledged is at b exactly
once, in order per queue. The long version is ``bench.connector_chaos --phases cut``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from .connector_support import (
    ConnectorProcess,
    bodies_of,
    eventually,
    port,
    read_all,
    rules_text,
    send,
)
from .cut_relay import CutRelay
from .test_exactly_once import ONE_WAY, assert_exactly_once_in_order


async def test_cuts_of_the_network_to_the_target_under_load(two, tmp_path: Path) -> None:
    a, b = two
    relay = CutRelay(port(b))
    # b's routes name the relay as the broker address, so sends go through it too (by
    # default they name the port the connection arrived on: b's own)
    b.extra = ("--unified-port", str(port(b)), "--advertised-address", f"127.0.0.1:{relay.port}")
    b.stop()
    b.start()
    rules = tmp_path / "rules.toml"
    rules.write_text(rules_text(port(a), relay.port, ONE_WAY))
    conn = ConnectorProcess(rules).start()
    total = 600
    try:
        load = asyncio.ensure_future(send(port(a), "load", total, prefix="m"))
        for cut in range(3):
            # cut while copying: some copied, not all
            async def some(at_least: int = 60 * (cut + 1)) -> bool:
                return len(bodies_of(await read_all(port(b), "load"))) >= at_least

            assert await eventually(some, timeout=20), conn.output
            relay.cut()
            await asyncio.sleep(0.5)
            relay.restore()
        sent = await asyncio.wait_for(load, 30)

        async def all_copied() -> bool:
            return len(bodies_of(await read_all(port(b), "load"))) >= total

        await eventually(all_copied, timeout=20)
        got = await read_all(port(b), "load")
        assert relay.cuts == 3 and relay.accepted > 1  # the connector did reconnect
        assert_exactly_once_in_order(got, sent)

        # the state is live: a transient failure after the last copy (a request timing
        # out on a loaded machine) shows as target-unreachable until the retry, which
        # must bring the rule back to running
        async def running() -> bool:
            return bool(conn.status()["r"]["state"] == "running")

        assert await eventually(running, timeout=45), (
            conn.status()["r"],
            "".join(conn.output[-40:]),
        )
        assert conn.status()["r"]["errors"] >= 1
    finally:
        conn.stop()
        relay.stop()
