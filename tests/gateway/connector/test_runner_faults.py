"""The runner's own invariant under any schedule of faults, with in-memory endpoints
that keep the contract of ``endpoints.py`` (a gateway target's high-water marks and
duplicate drop; a log source): whatever fails when (a read, a write before it is
stored, a write stored but its answer lost, a crash of the runner that forgets every
position), every source record passing the filter is stored exactly once, in source
order per queue, and no filtered record is stored.

The two-gateway tests check the same through real processes with a few kills; this one
covers the interleavings those cannot reach."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.connector.endpoints import (
    CopyMessage,
    EndpointUnavailable,
    SourceRecord,
)
from gateway.connector.rules import parse_rules
from gateway.connector.runner import RuleRunner

RULES_TABLE = {
    "clusters": {
        "a": {"kind": "gateway", "endpoints": ["127.0.0.1:1"]},
        "b": {"kind": "gateway", "endpoints": ["127.0.0.1:2"]},
    },
    "rules": [
        {
            "name": "r", "source": "a", "topic": "t", "target": "b",
            "tag": "keep", "start": "earliest", "batch_size": 3, "wait_ms": 0,
        }
    ],
}  # fmt: skip
RULES = parse_rules(
    {"heartbeat_interval": 0, "retry_initial": 0.001, "retry_max": 0.002, **RULES_TABLE}
)


class Faults:
    """A schedule drawn by Hypothesis: what the next read / write does."""

    def __init__(self, reads: list[bool], writes: list[int]) -> None:
        self.reads = iter(reads)
        self.writes = iter(writes)

    def read_fails(self) -> bool:
        return next(self.reads, False)

    def write_fault(self) -> int:
        return next(self.writes, 0)


class LogSource:
    def __init__(self, log: dict[str, list[CopyMessage]], faults: Faults) -> None:
        self.log = log
        self.faults = faults

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def cluster_id(self) -> str:
        return "A"

    async def queues(self) -> list[str]:
        return sorted(self.log)

    async def read(
        self, queue: str, after: int | None, start: str, max_messages: int, wait_ms: int
    ) -> list[SourceRecord]:
        await asyncio.sleep(0)
        if self.faults.read_fails():
            raise EndpointUnavailable("read fault")
        first = 0 if after is None else after + 1
        messages = self.log[queue][first : first + max_messages]
        return [SourceRecord(queue, first + i, m) for i, m in enumerate(messages)]

    async def acknowledge(self, queue: str, up_to: int) -> None: ...

    async def end_offset(self, queue: str) -> int | None:
        return len(self.log[queue])


class MarkTarget:
    """A gateway target as the contract describes it: per (origin cluster, queue) the
    highest origin offset stored; a copy at or below it is dropped."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.stored: dict[str, list[int]] = {}
        self.marks: dict[str, int] = {}
        self.advanced: dict[str, int] = {}

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def cluster_id(self) -> str:
        return "B"

    async def high_water(self, origin_cluster: str, queues: Sequence[str]) -> dict[str, int]:
        assert origin_cluster == "A"
        return {q: self.marks[q] for q in queues if q in self.marks}

    async def advance(self, origin_cluster: str, queue: str, offset: int) -> None:
        self.marks[queue] = max(self.marks.get(queue, -1), offset)

    async def write(self, topic: str, source_queue: str, messages: Sequence[CopyMessage]) -> None:
        await asyncio.sleep(0)
        fault = self.faults.write_fault()
        if fault == 1:
            raise EndpointUnavailable("write fault before storing")
        for m in messages:  # one append: all stored (or dropped as duplicates) together
            assert m.origin is not None and m.origin.queue == source_queue
            assert m.path == ("A",)
            if m.origin.offset > self.marks.get(source_queue, -1):
                self.stored.setdefault(source_queue, []).append(m.origin.offset)
                self.marks[source_queue] = m.origin.offset
        if fault == 2:
            raise EndpointUnavailable("write stored, answer lost")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(
    tags=st.lists(st.lists(st.sampled_from(["keep", "drop"]), max_size=12), min_size=1, max_size=3),
    reads=st.lists(st.booleans(), max_size=30),
    writes=st.lists(st.integers(0, 2), max_size=30),
    crashes=st.lists(st.integers(1, 6), max_size=3),
)
def test_every_kept_record_stored_once_in_order(tags, reads, writes, crashes) -> None:
    log = {
        f"t:{q}": [CopyMessage(body=b"%d" % i, topic="t", tag=tag) for i, tag in enumerate(queue)]
        for q, queue in enumerate(tags)
    }
    faults = Faults(reads, writes)
    target = MarkTarget(faults)

    def done() -> bool:
        return all(
            target.stored.get(q, []) == [i for i, m in enumerate(ms) if m.tag == "keep"]
            for q, ms in log.items()
        )

    async def run_once(steps: int | None) -> None:
        """One runner process: until done, or crashed after ``steps`` event-loop turns."""
        runner = RuleRunner(
            RULES, RULES.rules[0], endpoints=lambda: (LogSource(log, faults), target)
        )
        task = asyncio.ensure_future(runner.run())
        turns = 0
        while not done() and not task.done():
            await asyncio.sleep(0.001)
            turns += 1
            if steps is not None and turns >= steps:
                task.cancel()  # a crash: no goodbye, positions in memory are gone
                await asyncio.wait({task}, timeout=5)
                assert task.cancelled(), "the runner did not end when cancelled"
                return
            assert turns < 5000, "no progress"
        # the rule never gives up by itself on unreachable endpoints
        assert not task.done(), runner.stats.last_error
        runner.stop()
        await asyncio.wait_for(task, 5)

    async def scenario() -> None:
        for steps in crashes:
            await run_once(steps)
        await run_once(None)

    asyncio.run(scenario())
    for q, ms in log.items():
        kept = [i for i, m in enumerate(ms) if m.tag == "keep"]
        assert target.stored.get(q, []) == kept  # once each, in order, nothing filtered


class StuckTarget(MarkTarget):
    """A target that takes writes but does not answer them until released."""

    def __init__(self) -> None:
        super().__init__(Faults([], []))
        self.release = asyncio.Event()

    async def write(self, topic: str, source_queue: str, messages: Sequence[CopyMessage]) -> None:
        await self.release.wait()
        await super().write(topic, source_queue, messages)


async def test_a_rule_without_progress_is_stalled_then_running_again() -> None:
    rules = parse_rules(
        {
            "heartbeat_interval": 0,
            "stall_after": 0.2,
            "clusters": RULES_TABLE["clusters"],
            "rules": RULES_TABLE["rules"],
        }
    )
    log = {"t:0": [CopyMessage(body=b"x", topic="t", tag="keep") for _ in range(5)]}
    target = StuckTarget()
    runner = RuleRunner(
        rules, rules.rules[0], endpoints=lambda: (LogSource(log, Faults([], [])), target)
    )
    task = asyncio.ensure_future(runner.run())
    try:

        async def state_is(state: str) -> None:
            while runner.stats.state != state:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(state_is("stalled"), 5)
        assert runner.stats.lag == 5
        target.release.set()
        await asyncio.wait_for(state_is("running"), 5)
        while runner.stats.lag != 0:
            await asyncio.sleep(0.05)
        assert target.stored == {"t:0": [0, 1, 2, 3, 4]}
    finally:
        runner.stop()
        await asyncio.wait_for(task, 5)
    assert runner.stats.state == "stopped"
