"""What each rule is doing (RIP-12 phase 2): its state, rates, lag, delay, last sync,
errors and retries; rendered as JSON for ``lmq connector status``, as a table, and as
Prometheus metrics on a :class:`gateway.metrics.Registry`.

States (distinct, alert-worthy ones included, docs/connector.md "States"):

- ``starting``: opening the endpoints, reading the high-water marks;
- ``running``: copying (or idle with no lag);
- ``stalled``: some source queue has lag and no record was stored for ``stall_after`` s;
- ``source-unreachable`` / ``target-unreachable``: backing off and retrying, position
  kept;
- ``target-refusing``: the target refused a message and the rule says ``stop``, or the
  dead-letter write was refused too (the rule waits for an operator: fix and restart);
- ``stopped``: the rule ended with an error (shown as ``last_error``), or was stopped;
- ``disabled``: ``enabled = false`` in the rules file.

Event-loop thread only.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gateway.metrics import Registry

STATES = (
    "starting",
    "running",
    "stalled",
    "source-unreachable",
    "target-unreachable",
    "target-refusing",
    "stopped",
    "disabled",
)
#: The window of the messages/s and bytes/s rates.
RATE_WINDOW = 10.0


@dataclass(slots=True)
class QueueStats:
    #: the last source offset the target has (stored, filtered or skipped); -1: none yet
    position: int = -1
    #: the source's next offset, sampled (None: unknown for this source kind)
    end_offset: int | None = None

    @property
    def lag(self) -> int | None:
        if self.end_offset is None:
            return None
        return max(0, self.end_offset - (self.position + 1))


@dataclass(slots=True)
class RuleStats:
    name: str
    source: str = ""
    target: str = ""
    state: str = "starting"
    exactly_once: bool | None = None
    messages: int = 0
    bytes: int = 0
    filtered: int = 0
    loops_dropped: int = 0
    #: copies the target dropped as already stored (sent again after a crash or an
    #: unknown outcome)
    duplicates: int = 0
    refused: int = 0
    dead_lettered: int = 0
    errors: int = 0
    retries: int = 0
    heartbeats: int = 0
    delay_ms: float | None = None
    last_sync_ms: int | None = None
    last_error: str = ""
    last_progress: float = field(default_factory=time.monotonic)
    queues: dict[str, QueueStats] = field(default_factory=dict)
    _window: deque[tuple[float, int, int]] = field(default_factory=deque)

    def queue(self, name: str) -> QueueStats:
        stats = self.queues.get(name)
        if stats is None:
            stats = self.queues[name] = QueueStats()
        return stats

    def stored(self, count: int, size: int) -> None:
        now = time.monotonic()
        self.messages += count
        self.bytes += size
        self.last_sync_ms = int(time.time() * 1000)
        self.last_progress = now
        self._window.append((now, count, size))
        self._trim(now)

    def error(self, text: str) -> None:
        self.errors += 1
        self.last_error = text

    def _trim(self, now: float) -> None:
        while self._window and self._window[0][0] < now - RATE_WINDOW:
            self._window.popleft()

    def rates(self) -> tuple[float, float]:
        """Messages/s and bytes/s over the last RATE_WINDOW seconds."""
        self._trim(time.monotonic())
        count = sum(c for _, c, _ in self._window)
        size = sum(s for _, _, s in self._window)
        return count / RATE_WINDOW, size / RATE_WINDOW

    @property
    def lag(self) -> int | None:
        lags = [q.lag for q in self.queues.values() if q.lag is not None]
        return sum(lags) if lags else None

    def snapshot(self) -> dict[str, Any]:
        tps, bps = self.rates()
        return {
            "rule": self.name,
            "source": self.source,
            "target": self.target,
            "state": self.state,
            "exactly_once": self.exactly_once,
            "messages": self.messages,
            "bytes": self.bytes,
            "messages_per_second": round(tps, 3),
            "bytes_per_second": round(bps, 3),
            "lag": self.lag,
            "delay_ms": None if self.delay_ms is None else round(self.delay_ms, 3),
            "last_sync_ms": self.last_sync_ms,
            "filtered": self.filtered,
            "loops_dropped": self.loops_dropped,
            "duplicates": self.duplicates,
            "refused": self.refused,
            "dead_lettered": self.dead_lettered,
            "errors": self.errors,
            "retries": self.retries,
            "heartbeats": self.heartbeats,
            "last_error": self.last_error,
            "queues": {
                name: {"position": q.position, "end_offset": q.end_offset, "lag": q.lag}
                for name, q in sorted(self.queues.items())
            },
        }


def render_table(rules: list[dict[str, Any]], now_ms: int | None = None) -> str:
    """The status table ``lmq connector status`` prints."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    header = ("RULE", "STATE", "LAG", "DELAY_MS", "TPS", "LAST_SYNC", "LAST_ERROR")
    rows = [header]
    for r in rules:
        last = r.get("last_sync_ms")
        rows.append(
            (
                str(r["rule"]),
                str(r["state"]),
                "-" if r.get("lag") is None else str(r["lag"]),
                "-" if r.get("delay_ms") is None else f"{r['delay_ms']:.1f}",
                f"{r.get('messages_per_second', 0):.1f}",
                "never" if last is None else f"{max(0, now_ms - last) / 1000:.1f}s ago",
                str(r.get("last_error") or "-")[:80],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def register_metrics(registry: Registry, rules: list[RuleStats]) -> None:
    """The per-rule metrics (``lmq_connector_*``), sampled from the stats at each scrape."""
    g = registry.gauge
    c = registry.counter
    messages = c("lmq_connector_messages_total", "Messages stored at the target", ("rule",))
    size = c("lmq_connector_bytes_total", "Body bytes stored at the target", ("rule",))
    tps = g("lmq_connector_messages_per_second", "Messages/s over the last 10 s", ("rule",))
    bps = g("lmq_connector_bytes_per_second", "Body bytes/s over the last 10 s", ("rule",))
    lag = g("lmq_connector_lag_messages", "Source end offset minus position", ("rule", "queue"))
    delay = g(
        "lmq_connector_delay_ms",
        "End-to-end delay: a heartbeat's (gateway sources) or from the publisher's timestamp",
        ("rule",)
    )
    sync = g("lmq_connector_last_sync_timestamp_seconds", "Time of the last store", ("rule",))
    errors = c("lmq_connector_errors_total", "Errors (unreachable, refused, ...)", ("rule",))
    retries = c("lmq_connector_retries_total", "Retries after a back-off", ("rule",))
    refused = c("lmq_connector_refused_total", "Messages the target refused", ("rule",))
    filtered = c("lmq_connector_filtered_total", "Messages the rule's filter dropped", ("rule",))
    loops = c(
        "lmq_connector_loops_skipped_total",
        "Records not copied: the target is on their path",
        ("rule",),
    )
    dups = c(
        "lmq_connector_duplicates_total", "Copies the target dropped as already stored", ("rule",)
    )
    state = g("lmq_connector_state", "1 for the rule's current state", ("rule", "state"))

    def collect() -> None:
        for r in rules:
            rule = r.name
            # counters are kept in the stats; a scrape sets them (they only go up)
            for metric, value in (
                (messages, r.messages),
                (size, r.bytes),
                (errors, r.errors),
                (retries, r.retries),
                (refused, r.refused),
                (filtered, r.filtered),
                (loops, r.loops_dropped),
                (dups, r.duplicates),
            ):
                metric.inc(max(0.0, value - metric.value(rule=rule)), rule=rule)
            m, b = r.rates()
            tps.set(m, rule=rule)
            bps.set(b, rule=rule)
            for queue, q in r.queues.items():
                if q.lag is not None:
                    lag.set(q.lag, rule=rule, queue=queue)
            if r.delay_ms is not None:
                delay.set(r.delay_ms, rule=rule)
            if r.last_sync_ms is not None:
                sync.set(r.last_sync_ms / 1000, rule=rule)
            for s in STATES:
                state.set(1.0 if r.state == s else 0.0, rule=rule, state=s)

    registry.on_collect(collect)
