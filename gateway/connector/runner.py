"""The connector's runner: per rule, per source queue, one task that reads a batch,
drops loops, filters, renames, writes the batch to the target and acknowledges it.

Theory of operation (docs/connector.md "How it copies"):

- **Position.** A queue's position is the last source offset the target has (stored,
  filtered or skipped). It starts from the target's high-water mark for the queue (a
  gateway target: exactly once), else from the source (a gateway source: the connector
  group's committed offset; MQTT/AMQP: their session or queue), else the rule's
  ``start``. It lives in memory only while the process runs: nothing is buffered that a
  crash could lose; the source's log (or the peer's session/queue) is the buffer.
- **Order.** One source queue's records are written in source order, one ``write`` per
  run of records with the same target topic (normally the whole batch: one append at
  a gateway), each acknowledged to the source only after the target answered.
- **Exactly once between gateways.** Every copy carries its Origin; a gateway target
  drops a copy at or below its high-water mark, so re-sending after an unknown outcome
  (a timeout, a kill -9 between the send and our noting it) stores nothing twice. A
  range the filter dropped moves the mark with an advance request (at most once a second
  per queue, and when the queue is idle), so a restart does not rescan it.
- **Loops.** A record whose path holds the target's cluster id is not written.
- **Faults.** EndpointUnavailable: the whole rule closes its endpoints, backs off
  (bounded exponential with jitter), reopens and resumes from its positions (and the
  target's marks). MessageRefused: ``on_refused`` (stop / skip / dead-letter). Any
  other exception (TlsFailure: a certificate that does not verify) stops the rule with
  its error in ``status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gateway.token_bucket import TokenBucket

from .endpoints import (
    CopyMessage,
    EndpointUnavailable,
    MessageRefused,
    Origin,
    Source,
    SourceRecord,
    Target,
    TlsFailure,
)
from .heartbeat import HEARTBEAT, HEARTBEAT_TAG
from .registry import make_source, make_target
from .rules import Rule, Rules, check_shared_marks
from .status import RuleStats

log = logging.getLogger("lmq.connector")

#: How often a queue's lag is sampled and the stall check runs, in seconds.
SAMPLE_INTERVAL = 1.0
#: How often the source's queue list is read again (a topic's queues may grow).
QUEUES_INTERVAL = 10.0


class _Side(Exception):
    """An EndpointUnavailable, with the side it came from."""

    def __init__(self, side: str, exc: EndpointUnavailable) -> None:
        super().__init__(f"{side}: {exc}")
        self.side = side
        self.exc = exc


class RuleStopped(Exception):
    """The rule stops for good (a refusal with ``on_refused = "stop"``, ...)."""

    def __init__(self, state: str, why: str) -> None:
        super().__init__(why)
        self.state = state


def backoff(attempt: int, initial: float, maximum: float) -> float:
    """Bounded exponential back-off with full jitter: a wait in [d/2, d], d = initial *
    2**attempt capped at maximum."""
    ceiling = min(maximum, initial * (2 ** min(attempt, 30)))
    return ceiling / 2 + random.random() * ceiling / 2


class RuleRunner:
    """Runs one rule until :meth:`stop`; its :class:`RuleStats` say how it goes."""

    def __init__(
        self,
        rules: Rules,
        rule: Rule,
        stats: RuleStats | None = None,
        *,
        endpoints: Callable[[], tuple[Source, Target]] | None = None,
    ) -> None:
        self.rules = rules
        self.rule = rule
        self.settings = rules.settings
        self.stats = stats or RuleStats(rule.name)
        self.stats.source = rule.source
        self.stats.target = rule.target
        self.source_cluster = rules.clusters[rule.source]
        self.target_cluster = rules.clusters[rule.target]
        #: builds a session's source and target (default: the registry, by kind)
        self._endpoints = endpoints or self._registry_endpoints
        #: the last source offset the target has, per queue (kept across reconnects)
        self.positions: dict[str, int] = {}
        self._advanced: dict[str, tuple[int, float]] = {}
        self._stopping = asyncio.Event()
        self._bucket = TokenBucket(rule.rate_limit, time.monotonic()) if rule.rate_limit else None
        self.source: Source | None = None
        self.target: Target | None = None
        self.source_id = ""
        self.target_id = ""
        self.exactly_once = False

    def _registry_endpoints(self) -> tuple[Source, Target]:
        return (
            make_source(self.source_cluster, self.rule),
            make_target(self.target_cluster, self.rule),
        )

    def stop(self) -> None:
        self._stopping.set()

    def rearm(self) -> None:
        """After a stop, let :meth:`run` run again (the connector inside a broker
        group's member starts and stops with the member's mastership)."""
        self._stopping.clear()

    async def run(self) -> None:
        if not self.rule.enabled:
            self.stats.state = "disabled"
            return
        attempt = 0
        while not self._stopping.is_set():
            progress_before = self.stats.messages
            try:
                await self._session()
                return
            except _Side as exc:
                self.stats.state = f"{exc.side}-unreachable"
                self.stats.error(str(exc))
                log.warning("rule %s: %s", self.rule.name, exc)
            except _Stop:
                break
            except (RuleStopped, TlsFailure) as exc:
                self.stats.state = exc.state if isinstance(exc, RuleStopped) else "stopped"
                self.stats.error(str(exc))
                log.error("rule %s stopped: %s", self.rule.name, exc)
                return
            except Exception as exc:
                self.stats.state = "stopped"
                self.stats.error(f"{type(exc).__name__}: {exc}")
                log.exception("rule %s stopped", self.rule.name)
                return
            finally:
                await self._close()
            if self.stats.messages > progress_before:
                attempt = 0
            wait = backoff(attempt, self.settings.retry_initial, self.settings.retry_max)
            attempt += 1
            self.stats.retries += 1
            # asyncio.wait, not wait_for: Python 3.11's wait_for loses a cancellation
            # that comes as the wait ends, and the rule would run on after a cancel
            stopping = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait({stopping}, timeout=wait)
            finally:
                stopping.cancel()
        self.stats.state = "stopped"

    async def _close(self) -> None:
        for endpoint in (self.source, self.target):
            if endpoint is not None:
                with contextlib.suppress(Exception):
                    await endpoint.close()
        self.source = self.target = None

    async def _src(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except EndpointUnavailable as exc:
            raise _Side("source", exc) from exc

    async def _tgt(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except EndpointUnavailable as exc:
            raise _Side("target", exc) from exc

    async def _session(self) -> None:
        if self.stats.state not in ("source-unreachable", "target-unreachable"):
            self.stats.state = "starting"
        self.source, self.target = source, target = self._endpoints()
        await self._src(source.open())
        await self._tgt(target.open())
        self.source_id = await self._src(source.cluster_id())
        self.target_id = await self._tgt(target.cluster_id())
        queues = await self._src(source.queues())
        marks = None
        if self.source_cluster.is_gateway:
            marks = await self._tgt(target.high_water(self.source_id, queues))
        self.exactly_once = marks is not None
        self.stats.exactly_once = self.exactly_once
        for queue, mark in (marks or {}).items():
            # the target's mark is the truth: behind what we noted only by a filtered
            # tail not yet advanced (rescanned, harmlessly) or a target that lost data
            # (copied again)
            self.positions[queue] = mark
        await self._resolve_starts(queues)
        self.stats.state = "running"
        log.info(
            "rule %s: %s (%s) -> %s (%s), %d queues, %s",
            self.rule.name,
            self.rule.source,
            self.source_id,
            self.rule.target,
            self.target_id,
            len(queues),
            "exactly once" if self.exactly_once else "at least once",
        )
        tasks = _Tasks()
        await self._start_tasks(tasks, queues)
        await tasks.run()

    async def _start_tasks(self, tasks: _Tasks, queues: Sequence[str]) -> None:
        started: set[str] = set()

        def start_queues(names: Sequence[str]) -> None:
            for q in names:
                if q not in started:
                    started.add(q)
                    self.stats.queue(q)
                    tasks.create_task(self._copy_queue(q))

        start_queues(queues)
        tasks.create_task(self._monitor(start_queues))
        if self.settings.heartbeat_interval > 0 and hasattr(self.source, "send_heartbeat"):
            tasks.create_task(self._heartbeats())
        if self.rule.carry_group_offsets and self.exactly_once:
            tasks.create_task(self._carry_offsets())
        tasks.create_task(self._until_stopped())

    async def _resolve_starts(self, queues: Sequence[str]) -> None:
        """Fix where queues without a position start, before the rule is "running" (so
        what is sent after that is copied), and record it at the target (so a restart
        does not resolve "latest" again and skip what came in between)."""
        start_offset = getattr(self.source, "start_offset", None)
        if start_offset is None:
            return
        for queue in queues:
            if queue in self.positions:
                continue
            first = await self._src(start_offset(queue, self.rule.start))
            self.positions[queue] = first - 1
            self.stats.queue(queue).position = first - 1
            if first > 0:
                await self._maybe_advance(queue, idle=True)

    async def _until_stopped(self) -> None:
        await self._stopping.wait()
        raise _Stop

    # --- one source queue ----------------------------------------------------------

    async def _copy_queue(self, queue: str) -> None:
        assert self.source is not None and self.target is not None
        source, rule = self.source, self.rule
        batch = rule.batch_size
        if rule.rate_limit:
            batch = max(1, min(batch, int(rule.rate_limit)))
        stats = self.stats.queue(queue)
        scanned: dict[str, int] | None = getattr(source, "scanned", None)
        while True:
            after = self.positions.get(queue)
            records: list[SourceRecord] = await self._src(
                source.read(queue, after, rule.start, batch, rule.wait_ms)
            )
            # a source that filters (the gateway: the tag expression pushed into PULL)
            # says how far it looked: the records it skipped are filtered out
            upto = scanned.get(queue) if scanned is not None else None
            if not records:
                if upto is not None and (after is None or upto > after):
                    await self._skip(queue, after, upto)
                else:
                    await self._maybe_advance(queue, idle=True)
                continue
            await self._copy(queue, records, upto)
            if after is not None:
                self.stats.filtered += max(0, self.positions[queue] - after - len(records))
            stats.position = self.positions[queue]
            if self._bucket is not None:
                pause = 0.0
                for _ in records:
                    pause = self._bucket.take(time.monotonic())
                if pause > 0:
                    await asyncio.sleep(pause)

    async def _skip(self, queue: str, after: int | None, upto: int) -> None:
        """The source skipped records up to ``upto``, all filtered out."""
        assert self.source is not None
        if after is not None:
            self.stats.filtered += upto - after
        await self._src(self.source.acknowledge(queue, upto))
        self.positions[queue] = upto
        self.stats.queue(queue).position = upto
        await self._maybe_advance(queue, idle=False)

    async def _copy(self, queue: str, records: list[SourceRecord], upto: int | None = None) -> None:
        """Write one batch of one queue, in order; acknowledge; note the position."""
        assert self.source is not None and self.target is not None
        rule, stats = self.rule, self.stats
        runs: list[tuple[str, list[CopyMessage], list[SourceRecord]]] = []
        heartbeats: list[int] = []
        #: the publisher's timestamp of the last copy that has one (MQTT/AMQP sources)
        stamp: int | None = None
        for record in records:
            m = record.message
            if self.target_id in m.path:
                stats.loops_dropped += 1
                continue
            beat = m.properties.get(HEARTBEAT)
            if beat is None and not rule.passes(m.tag or None, m.properties):
                stats.filtered += 1
                continue
            if beat is not None and beat.startswith(rule.name + ":"):
                with contextlib.suppress(ValueError):
                    heartbeats.append(int(beat.rpartition(":")[2]))
            path = m.path if m.path and m.path[-1] == self.source_id else m.path + (self.source_id,)
            copy = replace(
                m,
                origin=Origin(self.source_id, queue, record.offset) if self.exactly_once else None,
                path=path,
            )
            if m.stamped:
                stamp = m.born_ms
            topic = rule.render_topic(m.topic, rule.read)
            if runs and runs[-1][0] == topic:
                runs[-1][1].append(copy)
                runs[-1][2].append(record)
            else:
                runs.append((topic, [copy], [record]))
        for topic, copies, recs in runs:
            await self._write(topic, queue, copies, recs)
        last = max(records[-1].offset, upto if upto is not None else -1)
        written_last = runs[-1][2][-1].offset if runs else None
        await self._src(self.source.acknowledge(queue, last))
        self.positions[queue] = last
        if written_last != last:
            await self._maybe_advance(queue, idle=False)
        else:
            self._advanced[queue] = (last, time.monotonic())
        if heartbeats:
            now = time.time() * 1000
            stats.heartbeats += len(heartbeats)
            stats.delay_ms = max(0.0, now - heartbeats[-1])
        elif stamp is not None:
            # a broker source sends no heartbeats: the publisher's own timestamp, to the
            # target's acknowledgement (the publisher's clock against ours)
            stats.delay_ms = max(0.0, time.time() * 1000 - stamp)

    async def _write(
        self, topic: str, queue: str, copies: list[CopyMessage], recs: list[SourceRecord]
    ) -> None:
        assert self.target is not None
        before = getattr(self.target, "duplicates", 0)
        try:
            await self._tgt(self.target.write(topic, queue, copies))
        except MessageRefused as exc:
            if len(copies) > 1:
                # find the one: each alone (a gateway drops the ones already stored)
                for copy, rec in zip(copies, recs, strict=True):
                    await self._write(topic, queue, [copy], [rec])
                return
            await self._refused(topic, queue, copies[0], recs[0], exc)
            return
        self.stats.duplicates += getattr(self.target, "duplicates", 0) - before
        self.stats.stored(len(copies), sum(len(c.body) for c in copies))
        if self.stats.state in ("stalled", "starting"):
            self.stats.state = "running"

    async def _refused(
        self, topic: str, queue: str, copy: CopyMessage, rec: SourceRecord, exc: MessageRefused
    ) -> None:
        assert self.target is not None
        rule, stats = self.rule, self.stats
        stats.refused += 1
        what = f"{queue}@{rec.offset} to {topic} refused: {exc.reason}"
        if rule.on_refused == "skip":
            stats.error(what + " (skipped)")
            log.warning("rule %s: %s (skipped)", rule.name, what)
            return
        if rule.on_refused == "dead-letter" and rule.dead_letter_topic:
            try:
                await self._tgt(self.target.write(rule.dead_letter_topic, queue, [copy]))
            except MessageRefused as again:
                raise RuleStopped(
                    "target-refusing", f"{what}; dead-letter write refused: {again.reason}"
                ) from again
            stats.dead_lettered += 1
            stats.error(what + f" (dead-lettered to {rule.dead_letter_topic})")
            return
        raise RuleStopped("target-refusing", what)

    async def _maybe_advance(self, queue: str, *, idle: bool) -> None:
        """Move the target's mark over a filtered-out tail (throttled)."""
        position = self.positions.get(queue)
        advance = getattr(self.target, "advance", None)
        if not self.exactly_once or position is None or advance is None:
            return
        done, at = self._advanced.get(queue, (-1, 0.0))
        now = time.monotonic()
        if done >= position or (not idle and now - at < 1.0):
            return
        await self._tgt(advance(self.source_id, queue, position))
        self._advanced[queue] = (position, now)

    # --- side tasks ----------------------------------------------------------------

    async def _monitor(self, start_queues: Any) -> None:
        """Sample lag, detect a stall, pick up new source queues."""
        assert self.source is not None
        source, stats = self.source, self.stats
        target_check = getattr(self.target, "check", None)
        last_queues = time.monotonic()
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL)
            if target_check is not None:
                # an idle rule notices a lost target too (status shows it)
                await self._tgt(target_check())
            for name, q in list(stats.queues.items()):
                q.end_offset = await self._src(source.end_offset(name))
                if name in self.positions:
                    q.position = self.positions[name]
            lag = stats.lag or 0
            idle_for = time.monotonic() - stats.last_progress
            if lag > 0 and idle_for > self.settings.stall_after and stats.state == "running":
                stats.state = "stalled"
            elif (lag == 0 or idle_for <= self.settings.stall_after) and stats.state == "stalled":
                stats.state = "running"
            if lag == 0:
                stats.last_progress = time.monotonic()
            if time.monotonic() - last_queues > QUEUES_INTERVAL:
                last_queues = time.monotonic()
                queues = await self._src(source.queues())
                await self._resolve_starts(queues)
                start_queues(queues)

    async def _heartbeats(self) -> None:
        assert self.source is not None
        send = getattr(self.source, "send_heartbeat")  # noqa: B009 (an optional method)
        turn = 0
        while True:
            queues = sorted(self.stats.queues)
            if queues:
                queue = queues[turn % len(queues)]
                turn += 1
                born = int(time.time() * 1000)
                beat = {HEARTBEAT: f"{self.rule.name}:{born}"}
                await self._src(send(queue, beat, HEARTBEAT_TAG))
            await asyncio.sleep(self.settings.heartbeat_interval)

    async def _carry_offsets(self) -> None:
        """Carry the listed groups' committed offsets to the target, translated, never
        past what has been copied (so a group that fails over reprocesses nothing and
        skips nothing)."""
        assert self.source is not None and self.target is not None
        committed_of = getattr(self.source, "committed_offsets", None)
        carry = getattr(self.target, "carry_offsets", None)
        if committed_of is None or carry is None:
            return
        while True:
            for group in self.rule.carry_group_offsets:
                committed = await self._src(committed_of(group))
                capped = {
                    q: min(off, self.positions[q] + 1)
                    for q, off in committed.items()
                    if q in self.positions
                }
                await self._tgt(carry(group, self.source_id, capped))
            await asyncio.sleep(self.settings.group_offsets_interval)


class _Stop(Exception):
    """Raised inside a rule's task group to end it on :meth:`RuleRunner.stop`."""


def _pick(errors: list[BaseException]) -> BaseException:
    """Of the errors a rule's tasks ended with at once, the one that decides what the
    rule does next: a stop for good first, then an unreachable side, then a requested
    stop, then a bug."""
    for kind in (RuleStopped, _Side, _Stop):
        for exc in errors:
            if isinstance(exc, kind):
                return exc
    return errors[0]


class _Tasks:
    """The tasks of one rule session (a copy task per queue and the side tasks); the
    first to fail ends them all. Not a TaskGroup: Python 3.11's leaves the parent task
    marked as cancelling after a child fails, and one of its child errors can hide a
    cancellation of the parent; here a cancellation of :meth:`run` is just that."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Future[Any]] = set()
        self._changed = asyncio.Event()

    def create_task(self, coro: Any) -> None:
        self.tasks.add(asyncio.ensure_future(coro))
        self._changed.set()

    async def run(self) -> None:
        try:
            while self.tasks:
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    done, _ = await asyncio.wait(
                        self.tasks | {changed}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    changed.cancel()
                errors: list[BaseException] = []
                for task in done - {changed}:
                    self.tasks.discard(task)
                    if not task.cancelled() and task.exception() is not None:
                        errors.append(task.exception())  # type: ignore[arg-type]
                if errors:
                    raise _pick(errors)
        finally:
            # cancelled again every second until they end: a task can swallow one
            # cancellation (Python 3.11's wait_for in a library it awaits), and the
            # session would wait for it for good, silently
            while self.tasks:
                for task in self.tasks:
                    task.cancel()
                _, pending = await asyncio.wait(self.tasks, timeout=1.0)
                self.tasks = set(pending)


class Connector:
    """Every rule of a rules file, each in its own task."""

    def __init__(self, rules: Rules) -> None:
        # parse_rules checked it already; Rules built otherwise are checked here too
        check_shared_marks(rules)
        self.rules = rules
        self.runners = [RuleRunner(rules, rule) for rule in rules.rules]
        self._tasks: list[asyncio.Task[None]] = []
        #: rule name -> its task (the last started)
        self._task_of: dict[str, asyncio.Task[None]] = {}

    @property
    def stats(self) -> list[RuleStats]:
        return [r.stats for r in self.runners]

    def start(self) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        for runner in self.runners:
            self._start_one(runner)

    def _start_one(self, runner: RuleRunner) -> None:
        runner.rearm()
        task = asyncio.create_task(self._run(runner), name=runner.rule.name)
        self._tasks.append(task)
        self._task_of[runner.rule.name] = task

    def _runner(self, name: str) -> RuleRunner:
        for runner in self.runners:
            if runner.rule.name == name:
                return runner
        raise LookupError(f"no connector rule {name!r}")

    async def disable(self, name: str, timeout: float = 10.0) -> dict[str, Any]:
        """Stop rule ``name`` (its batch in flight ends, its endpoints close; its
        positions are kept) until :meth:`enable` or the next start (the admin API)."""
        runner = self._runner(name)
        runner.stop()
        task = self._task_of.get(name)
        if task is not None and not task.done():
            _, pending = await asyncio.wait({task}, timeout=timeout)
            for left in pending:
                left.cancel()
        runner.stats.state = "stopped"
        return runner.stats.snapshot()

    def enable(self, name: str) -> dict[str, Any]:
        """Run rule ``name`` again after :meth:`disable` (a rule ``enabled = false`` in
        its configuration stays off: ValueError)."""
        runner = self._runner(name)
        if not runner.rule.enabled:
            raise ValueError(f"rule {name!r} is disabled in the connector's configuration")
        task = self._task_of.get(name)
        if task is None or task.done():
            self._tasks = [t for t in self._tasks if not t.done()]
            self._start_one(runner)
        return runner.stats.snapshot()

    async def _run(self, runner: RuleRunner) -> None:
        await runner.run()

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop every rule: each ends its batch in flight (bounded by ``timeout``), then
        closes its endpoints."""
        for runner in self.runners:
            runner.stop()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def snapshot(self) -> list[dict[str, Any]]:
        return [s.snapshot() for s in self.stats]


class EmbeddedConnector:
    """The connector inside ``lmq serve`` (``[connector]``): its metrics on the gateway's
    registry (``/metrics``), and the status listener when the rules give an address
    (a port in use is logged, not fatal: the gateway runs on)."""

    def __init__(self, rules: Rules, registry: Any) -> None:
        from .status import register_metrics

        self.connector = Connector(rules)
        register_metrics(registry, self.connector.stats)
        self._registry = registry
        self._listener: Any = None
        #: Whether the rules run (a broker group's slave keeps them stopped).
        self.running = False

    async def start(self, rules: bool = True) -> None:
        """The status listener, and the rules unless ``rules`` is False (a slave of a
        broker group: :meth:`start_rules` once it is the master)."""
        from .listener import StatusListener

        address = self.connector.rules.settings.status_address
        if address:
            host, _, port = address.rpartition(":")
            listener = StatusListener(
                host.strip("[]"), int(port), self.connector.snapshot, self._registry
            )
            try:
                bound = await listener.start()
                self._listener = listener
                log.info("connector status on %s:%d", *bound)
            except OSError as exc:
                log.warning("connector status listener not started: %s", exc)
        if rules:
            await self.start_rules()

    async def start_rules(self) -> None:
        if not self.running:
            self.running = True
            self.connector.start()

    async def stop_rules(self, timeout: float = 10.0) -> None:
        if self.running:
            self.running = False
            await self.connector.stop(timeout)

    async def stop(self, timeout: float = 10.0) -> None:
        await self.stop_rules(timeout)
        if self._listener is not None:
            await self._listener.close()
