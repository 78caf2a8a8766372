"""The overview's short history (issue 31): one sample every :data:`INTERVAL_S` seconds
over the last :data:`SPAN_S`, kept in memory, as RabbitMQ's management plugin keeps its
rates, so that the console draws its live charts without a Prometheus.

A sample is taken from what the gateway counts anyway (:mod:`gateway.metrics`, after
its cheap ``on_sample`` callbacks, not the scrape's gauges; the publisher), never from
the store's disk: sampling costs a few dictionary reads on the event loop, however many
LMQs the store holds. Each sample holds

- ``in`` / ``out``: messages per second per protocol over the interval, from the
  message counters of :data:`MESSAGE_COUNTERS` (HTTP's per API: ``http`` the JSON
  API with its stream, ``aliyun`` the Aliyun MQ HTTP API, ``rip17`` RIP-17's producer,
  which gives none: :mod:`gateway.http.counts`), and ``stored``: messages appended to the
  store per second by every door together (:attr:`Publisher.appended
  <gateway.publisher.Publisher.appended>`);
- ``connections``: open connections per protocol (``lmq_connections``);
- ``store_bytes``: bytes in the commit log (its end minus its start: no disk read);
- ``store_lag``: appends accepted and not yet stored (:attr:`Publisher.pending
  <gateway.publisher.Publisher.pending>`; the store lags, and publishers are slowed
  down, past ``LAG_LIMIT``).

Memory is bounded: at most ``SPAN_S / INTERVAL_S`` samples (720), the oldest dropped.
Measured on a started gateway (2 cores at a load average of 18.5): a sample costs 28-49
us of the event loop every 5 s; answering all 720 samples 0.7 ms (the console then asks
only for the new ones). Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.metrics import Registry

__all__ = ["History", "INTERVAL_S", "MESSAGE_COUNTERS", "SPAN_S", "Sample"]

#: Seconds between samples.
INTERVAL_S = 5.0
#: Seconds of history kept.
SPAN_S = 3600.0

#: protocol -> (counter of messages in, counter of messages out)
MESSAGE_COUNTERS = {
    "mqtt": ("lmq_mqtt_messages_received_total", "lmq_mqtt_messages_sent_total"),
    "amqp": ("lmq_amqp_messages_published_total", "lmq_amqp_messages_delivered_total"),
    "remoting": ("lmq_remoting_messages_received_total", "lmq_remoting_messages_pulled_total"),
    "grpc": ("lmq_grpc_messages_received_total", "lmq_grpc_messages_sent_total"),
    "http": ("lmq_http_messages_received_total", "lmq_http_messages_sent_total"),
    "aliyun": ("lmq_http_aliyun_messages_received_total", "lmq_http_aliyun_messages_sent_total"),
    "rip17": ("lmq_http_rip17_messages_received_total", "lmq_http_rip17_messages_sent_total"),
}


@dataclass(frozen=True, slots=True)
class Sample:
    #: Wall-clock time of the sample, milliseconds since the epoch.
    t: int
    messages_in: dict[str, float]
    messages_out: dict[str, float]
    stored: float
    connections: dict[str, int]
    store_bytes: int
    store_lag: int

    def document(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "in": self.messages_in,
            "out": self.messages_out,
            "stored": self.stored,
            "connections": self.connections,
            "store_bytes": self.store_bytes,
            "store_lag": self.store_lag,
        }


class History:
    """The samples of the last :data:`SPAN_S` seconds (module doc). ``appended``,
    ``pending`` and ``log_bytes`` read the publisher's and the store's counters."""

    def __init__(
        self,
        metrics: Registry,
        *,
        appended: Callable[[], int],
        pending: Callable[[], int],
        log_bytes: Callable[[], int],
        interval: float = INTERVAL_S,
        span: float = SPAN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.interval = interval
        self.span = span
        self._appended = appended
        self._pending = pending
        self._log_bytes = log_bytes
        self._clock = clock
        self.samples: deque[Sample] = deque(maxlen=max(1, int(span / interval)))
        #: The counters at the previous sample (monotonic seconds, values).
        self._last: tuple[float, dict[str, float]] | None = None

    def _counters(self) -> dict[str, float]:
        values: dict[str, float] = {"stored": float(self._appended())}
        for protocol, names in MESSAGE_COUNTERS.items():
            for direction, name in zip(("in", "out"), names, strict=True):
                metric = self.metrics.get(name)
                if metric is not None:
                    values[f"{direction}.{protocol}"] = sum(metric.series().values())
        return values

    def sample(self) -> Sample | None:
        """Take one sample; None the first time (a rate needs two readings)."""
        self.metrics.sample()  # the counters only: no gauge is computed here
        now = self._clock()
        counters = self._counters()
        last, self._last = self._last, (now, counters)
        if last is None:
            return None
        elapsed = max(now - last[0], 1e-3)
        before = last[1]

        def rate(key: str) -> float:
            # a counter that went down (a front end restarted its count) restarts at 0
            delta = counters[key] - before.get(key, 0.0)
            return round(max(delta, 0.0) / elapsed, 3)

        rates: dict[str, dict[str, float]] = {"in": {}, "out": {}}
        for key in counters:
            if "." in key:
                direction, protocol = key.split(".", 1)
                rates[direction][protocol] = rate(key)
        connections: dict[str, int] = {}
        open_now = self.metrics.get("lmq_connections")
        if open_now is not None:
            for (protocol,), n in open_now.series().items():
                if n:
                    connections[protocol] = int(n)
        sample = Sample(
            t=int(time.time() * 1000),
            messages_in=rates["in"],
            messages_out=rates["out"],
            stored=rate("stored"),
            connections=connections,
            store_bytes=self._log_bytes(),
            store_lag=self._pending(),
        )
        self.samples.append(sample)
        return sample

    def document(self, since: int = 0) -> dict[str, Any]:
        """The samples taken after ``since`` (ms since the epoch; 0: all), oldest
        first: what ``GET /v1/admin/overview/history`` answers."""
        return {
            "interval_s": self.interval,
            "span_s": self.span,
            "samples": [s.document() for s in self.samples if s.t > since],
        }

    async def run(self) -> None:
        """Sample every ``interval`` until cancelled."""
        self.sample()
        while True:
            await asyncio.sleep(self.interval)
            self.sample()
