"""Crash loop of the gateway under RocketMQ remoting load, with sync durability.

A ``cli.serve`` subprocess (``--durability sync``) takes SEND_MESSAGE_V2 from several
producers (the project's Python remoting client) while a pull consumer reads every queue
of the topic and commits its offsets with UPDATE_CONSUMER_OFFSET (answered requests, not
oneway). It is killed with SIGKILL at random moments and restarted on the same data
directory; the clients reconnect to the new port and go on. Then:

- every send the gateway acknowledged is in the topic's queues (``lost`` = 0);
- no committed consumer offset the gateway acknowledged is found lower after a restart
  (``offset_regressions`` = 0), checked with QUERY_CONSUMER_OFFSET right after each
  restart, before the consumer commits anything new;
- the committed offsets never pass the queue's end.

    .venv/bin/python -m bench.remoting_crash_loop --kills 20

The test suite runs a few kills (tests/gateway/remoting/test_remoting_crash.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.clients import (  # noqa: E402
    MessageQueue,
    Producer,
    PullConsumer,
    RemotingClient,
    RemotingError,
)
from tests.gateway.gateway_process import GatewayProcess  # noqa: E402

TOPIC = "crashTopic"
GROUP = "crashGroup"


@dataclass
class Figures:
    kills: int = 0
    restart_s: list[float] = field(default_factory=list)
    acked: int = 0
    sent_failed: int = 0
    stored: int = 0
    lost: int = 0
    duplicates: int = 0
    commits_acked: int = 0
    offset_checks: int = 0
    offset_regressions: int = 0
    offsets_past_end: int = 0
    consumed: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"kills {self.kills}, restart {max(self.restart_s or [0]):.2f} s max; "
            f"acked sends {self.acked} (failed {self.sent_failed}), stored {self.stored}, "
            f"lost {self.lost}, duplicates {self.duplicates}; offset commits acked "
            f"{self.commits_acked}, checks {self.offset_checks}, regressions "
            f"{self.offset_regressions}, past end {self.offsets_past_end}; "
            f"consumed {self.consumed}; problems {self.problems[:5]}"
        )


class _Target:
    """The gateway's current address and a generation number bumped at every restart."""

    def __init__(self) -> None:
        self.address: str | None = None
        self.generation = 0
        self.up = asyncio.Event()

    def set_up(self, address: str) -> None:
        self.address = address
        self.generation += 1
        self.up.set()

    def set_down(self) -> None:
        self.up.clear()


async def _producer(
    name: str, target: _Target, stop: asyncio.Event, acked: set[str], fig: Figures
) -> None:
    seq = 0
    while not stop.is_set():
        await target.up.wait()
        assert target.address is not None
        client = RemotingClient(target.address, timeout=5.0)
        producer = Producer(client, "crashProducers", timeout=5.0)
        try:
            while not stop.is_set():
                body = f"{name}-{seq}"
                seq += 1
                await producer.send(TOPIC, body.encode())
                acked.add(body)
        except (RemotingError, OSError):
            fig.sent_failed += 1
            await asyncio.sleep(0.05)
        finally:
            await client.close()


async def _consumer(
    target: _Target,
    stop: asyncio.Event,
    committed: dict[MessageQueue, int],
    fig: Figures,
) -> None:
    while not stop.is_set():
        await target.up.wait()
        assert target.address is not None
        client = RemotingClient(target.address, timeout=5.0)
        pull = PullConsumer(client, GROUP, timeout=5.0)
        try:
            queues = await pull.queues(TOPIC)
            offsets = {mq: (await pull.query_offset(mq)) or 0 for mq in queues}
            while not stop.is_set():
                for mq in queues:
                    result = await pull.pull(mq, offsets[mq], max_nums=64)
                    fig.consumed += len(result.messages)
                    if result.next_begin_offset != offsets[mq]:
                        offsets[mq] = result.next_begin_offset
                        await pull.update_offset(mq, offsets[mq])
                        committed[mq] = max(committed.get(mq, 0), offsets[mq])
                        fig.commits_acked += 1
                await asyncio.sleep(0.02)
        except (RemotingError, OSError):
            await asyncio.sleep(0.05)
        finally:
            await client.close()


async def _check_offsets(address: str, committed: dict[MessageQueue, int], fig: Figures) -> None:
    async with RemotingClient(address, timeout=10.0) as client:
        pull = PullConsumer(client, GROUP, timeout=10.0)
        for mq, want in list(committed.items()):
            got = await pull.query_offset(mq)
            fig.offset_checks += 1
            if got is None or got < want:
                fig.offset_regressions += 1
                fig.problems.append(f"{mq.topic}:{mq.queue_id} committed {want}, now {got}")
            if got is not None and got > await pull.max_offset(mq):
                fig.offsets_past_end += 1


async def _stored(address: str) -> Counter[str]:
    bodies: Counter[str] = Counter()
    async with RemotingClient(address, timeout=10.0) as client:
        pull = PullConsumer(client, "crashAudit", timeout=10.0)
        for mq in await pull.queues(TOPIC):
            offset = await pull.min_offset(mq)
            end = await pull.max_offset(mq)
            while offset < end:
                result = await pull.pull(mq, offset, max_nums=256)
                bodies.update(m.body.decode() for m in result.messages)
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
    return bodies


async def crash_loop_async(
    data_dir: Path,
    *,
    kills: int = 3,
    seed: int = 7,
    min_s: float = 1.0,
    max_s: float = 2.5,
    producers: int = 3,
) -> Figures:
    rng = random.Random(seed)
    fig = Figures()
    loop = asyncio.get_running_loop()
    gw = GatewayProcess(data_dir, "--durability", "sync")
    await loop.run_in_executor(None, gw.start)
    target = _Target()
    target.set_up(f"127.0.0.1:{gw.ports['unified']}")
    stop = asyncio.Event()
    acked: set[str] = set()
    committed: dict[MessageQueue, int] = {}
    tasks = [
        asyncio.ensure_future(_producer(f"p{i}", target, stop, acked, fig))
        for i in range(producers)
    ]
    tasks.append(asyncio.ensure_future(_consumer(target, stop, committed, fig)))
    try:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(min_s, max_s))
            target.set_down()
            await loop.run_in_executor(None, gw.kill)
            fig.kills += 1
            snapshot = dict(committed)
            t0 = time.monotonic()
            gw.ports = {}
            await loop.run_in_executor(None, gw.start)
            fig.restart_s.append(round(time.monotonic() - t0, 3))
            address = f"127.0.0.1:{gw.ports['unified']}"
            await _check_offsets(address, snapshot, fig)
            target.set_up(address)
        await asyncio.sleep(rng.uniform(min_s, max_s))
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30.0)
        assert target.address is not None
        await _check_offsets(target.address, committed, fig)
        stored = await _stored(target.address)
        fig.acked = len(acked)
        fig.stored = sum(1 for b in acked if b in stored)
        fig.lost = fig.acked - fig.stored
        fig.duplicates = sum(n - 1 for n in stored.values() if n > 1)
        if fig.lost:
            fig.problems.append(f"lost e.g. {sorted(b for b in acked if b not in stored)[:5]}")
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await loop.run_in_executor(None, gw.stop)
    return fig


def crash_loop(data_dir: Path, **kw: object) -> Figures:
    return asyncio.run(crash_loop_async(data_dir, **kw))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.remoting_crash_loop")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--max-s", type=float, default=4.0)
    ap.add_argument("--producers", type=int, default=4)
    ns = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lmq-remoting-crash-") as tmp:
        fig = crash_loop(
            Path(tmp) / "data", kills=ns.kills, seed=ns.seed, min_s=ns.min_s, max_s=ns.max_s,
            producers=ns.producers,
        )
    print(fig.summary())
    ok = fig.lost == 0 and fig.offset_regressions == 0 and fig.offsets_past_end == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
