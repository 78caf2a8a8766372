"""A short history of the gateway's rates, kept in memory (as RabbitMQ's management
keeps its samples): every :data:`INTERVAL` seconds the message counters of each
protocol and the connection count are read, and the last :data:`KEEP` samples (an
hour) are kept. The overview's rates are the last two samples' difference; the
console's charts read :meth:`Samples.history`.

The counters are the front ends' Prometheus counters (:mod:`gateway.metrics`), so no
hot path counts anything twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.context import GatewayContext

__all__ = ["INTERVAL", "KEEP", "MESSAGE_COUNTERS", "Samples"]

INTERVAL = 5.0
KEEP = 720

#: protocol -> (messages in, messages out) counters.
MESSAGE_COUNTERS: dict[str, tuple[str, str]] = {
    "mqtt": ("lmq_mqtt_messages_received_total", "lmq_mqtt_messages_sent_total"),
    "amqp": ("lmq_amqp_messages_published_total", "lmq_amqp_messages_delivered_total"),
    "remoting": ("lmq_remoting_messages_received_total", "lmq_remoting_messages_pulled_total"),
}


class Samples:
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._samples: deque[dict[str, Any]] = deque(maxlen=KEEP)

    def take(self) -> dict[str, Any]:
        """The counters now: ``{"time": s, "in": {protocol: n}, "out": {...},
        "connections": n}``."""
        metrics = self.ctx.metrics
        metrics.collect()  # some front ends copy their counts in at scrape time
        sample: dict[str, Any] = {
            "time": round(time.time(), 3),
            "in": {},
            "out": {},
            "connections": len(self.ctx.state.connections),
        }
        for protocol, (received, sent) in MESSAGE_COUNTERS.items():
            for side, name in (("in", received), ("out", sent)):
                metric = metrics.get(name)
                sample[side][protocol] = metric.total() if metric is not None else 0
        return sample

    async def run(self) -> None:
        while True:
            self._samples.append(self.take())
            await asyncio.sleep(INTERVAL)

    def rates(self) -> dict[str, dict[str, float]]:
        """Messages a second in and out per protocol, from the last sample at least a
        second old to now (0 before there is one)."""
        now = self.take()
        last = next((s for s in reversed(self._samples) if s["time"] <= now["time"] - 1.0), None)
        out: dict[str, dict[str, float]] = {"in": {}, "out": {}}
        for side in ("in", "out"):
            for protocol, value in now[side].items():
                if last is None or now["time"] <= last["time"]:
                    out[side][protocol] = 0.0
                else:
                    delta = value - last[side].get(protocol, 0)
                    out[side][protocol] = round(delta / (now["time"] - last["time"]), 3)
        return out

    def history(self, since: float = 0.0) -> list[dict[str, Any]]:
        """The samples taken after ``since`` (unix seconds), oldest first."""
        return [s for s in self._samples if s["time"] > since]
