"""kill -9 of the gateway under transactional load over remoting (sync durability), twice,
restarting on the same data directory, then a producer whose checker answers the
check-backs. Every half message is meant to be committed (``c-*``), rolled back
(``r-*``) or left open for the check-back (``p-*``):

- every acknowledged commit is delivered, exactly once;
- no rolled-back message is ever delivered (also not when its check-back comes);
- every acknowledged half left open is checked back after the restarts, committed by
  the checker, and delivered once;
- a half whose send or end was cut by the kill is delivered at most once.

Bounded in time: each load phase lasts a random 0.8-1.8 s, each wait at most ``BOUND``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.clients import PullConsumer, RemotingClient, TransactionProducer
from tests.grpc.test_grpc_send import create_topic

from ..gateway_process import GatewayProcess

pytestmark = pytest.mark.slow

KILLS = 2
BOUND = 40.0
TOPIC = "txcrash"


@dataclass
class Ledger:
    #: bodies whose half send was acknowledged
    sent: set[str] = field(default_factory=set)
    #: bodies whose half send was attempted (acknowledged or not)
    tried: set[str] = field(default_factory=set)
    #: bodies whose END_TRANSACTION was acknowledged
    ended: set[str] = field(default_factory=set)
    next: int = 0


async def load(port: int, ledger: Ledger, stop: asyncio.Event) -> None:
    with contextlib.suppress(Exception):
        async with RemotingClient(f"127.0.0.1:{port}", timeout=2.0) as client:
            producer = TransactionProducer(client, "PG_crash", timeout=2.0)
            while not stop.is_set():
                i = ledger.next
                ledger.next += 1
                body = f"{'crp'[i % 3]}-{i}"
                ledger.tried.add(body)
                result = await producer.send_half(TOPIC, body.encode())
                ledger.sent.add(body)
                if body[0] != "p":
                    await producer.end(result, body[0] == "c")
                    ledger.ended.add(body)


async def delivered(client: RemotingClient) -> list[str]:
    consumer = PullConsumer(client, "CG_crash")
    out: list[str] = []
    for mq in await consumer.queues(TOPIC):
        offset = 0
        while True:
            result = await consumer.pull(mq, offset, max_nums=64)
            if not result.messages:
                break
            out += [m.body.decode() for m in result.messages]
            offset = result.next_begin_offset
    return out


async def test_kill9_under_transactions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, TOPIC, "--type", "transaction", "--queues", "2")
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\ntxn_first_check_ms = 500\ntxn_check_interval_ms = 500\n"
                      "txn_max_checks = 10000\n")
    args = ("--durability", "sync", "--config", str(config))
    rng = random.Random(17)
    ledger = Ledger()
    gw = GatewayProcess(data, *args).start()
    try:
        for _ in range(KILLS):
            stop = asyncio.Event()
            task = asyncio.create_task(load(gw.ports["unified"], ledger, stop))
            await asyncio.sleep(rng.uniform(0.8, 1.8))
            gw.kill()  # SIGKILL, mid-load
            stop.set()
            await asyncio.wait_for(task, BOUND)
            gw = GatewayProcess(data, *args).start()
        assert len(ledger.sent) > 30 and len(ledger.ended) > 20  # the load did run
        # a producer of the group answers the check-backs by the body
        async with RemotingClient(f"127.0.0.1:{gw.ports['unified']}") as client:
            checker = TransactionProducer(
                client, "PG_crash", checker=lambda check, msg: not msg.body.startswith(b"r"))
            await checker.start(TOPIC)
            # every half acked and not rolled back: committed (by its end or its check)
            must = {b for b in ledger.sent if b[0] in "cp"}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + BOUND
            got = await delivered(client)
            while not must <= set(got) and loop.time() < deadline:
                await asyncio.sleep(0.5)
                got = await delivered(client)
            assert must <= set(got), f"not delivered: {sorted(must - set(got))[:10]}"
            # the halves cut by a kill (tried, not acked) get their check too: let the
            # checks run out, then nothing is twice and nothing rolled back is there
            await asyncio.sleep(2.0)
            got = await delivered(client)
            assert len(got) == len(set(got)), "a message was delivered twice"
            assert not [b for b in got if b.startswith("r")], "a rolled-back message"
            assert set(got) <= ledger.tried
            assert {b for b in ledger.sent if b[0] == "p"} <= set(got)
            assert checker.checks, "no check-back after the restarts"
            print(f"halves acked {len(ledger.sent)}, ends acked {len(ledger.ended)},"
                  f" delivered {len(got)}, check-backs {len(checker.checks)}")
    finally:
        gw.stop()
