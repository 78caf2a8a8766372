"""A small metrics registry rendered in the Prometheus text format, version 0.0.4.

Front ends register their own metrics on the gateway's registry::

    received = gateway.metrics.counter(
        "lmq_mqtt_messages_received_total", "PUBLISH packets received", ("qos",)
    )
    received.inc(qos="1")
    sessions = gateway.metrics.gauge("lmq_mqtt_sessions", "Sessions held")
    sessions.set(12)

Registering the same name again with the same type and labels returns the existing
metric. ``on_collect`` callbacks run (synchronously, on the event loop) just before each
scrape, to sample gauges that are cheaper to read than to keep updated. ``on_sample``
callbacks are the cheap part: they copy counters kept as plain ints on a hot path into
their metrics, and also run before the overview's history reads them every few seconds
(:mod:`gateway.history`), which must not pay for the gauges (an AMQP queue's depth is a
store read per queue).

Event-loop thread only: no locking.

Why not ``prometheus_client`` (issue 31, measured with ``python -m bench.metrics_cost``,
prometheus_client 0.26.0, ns per call, best of 5 x 1,000,000, on the 2-core machine at a
load average of 13.5, so absolute figures are inflated; the ratios are the point):

======================================  ===========  ===================
per call                                this module  prometheus_client
======================================  ===========  ===================
unlabelled ``inc()``                    730          567
labelled ``inc(qos="1")`` / ``labels``  2,989        4,809
labelled, child kept (``child.inc()``)  (n/a)        940
scrape of 100 labelled series           437,761      3,333,356
======================================  ===========  ===================

On the hot paths neither is used per message: the MQTT and AMQP front ends count with
a plain attribute (``self.received += 1``: 88 ns in the same run) and copy it into the
counter at scrape time (``on_sample``); the library's counters take a lock per
``inc`` (the 940 ns), which an event-loop-only gateway does not need. A labelled
``inc`` here costs about 60% of the library's ``labels().inc()``, a scrape about 13%,
and the module is 170 lines without a dependency. So it stays; a metric type it lacks
(histograms) would be the reason to switch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

LabelValues = tuple[str, ...]


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labelnames: tuple[str, ...]) -> None:
        self.name = name
        self.help = help
        self.labelnames = labelnames
        self._values: dict[LabelValues, float] = {}
        if not labelnames:
            self._values[()] = 0.0

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if not labels and not self.labelnames:
            return ()
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def series(self) -> dict[LabelValues, float]:
        """Every labelled value now (label values in ``labelnames`` order)."""
        return dict(self._values)

    def total(self) -> float:
        """The sum over every label set."""
        return sum(self._values.values())

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {_escape_help(self.help)}")
        out.append(f"# TYPE {self.name} {self.kind}")
        for key, value in sorted(self._values.items()):
            if key:
                pairs = ",".join(
                    f'{n}="{_escape_label(v)}"' for n, v in zip(self.labelnames, key, strict=True)
                )
                out.append(f"{self.name}{{{pairs}}} {_number(value)}")
            else:
                out.append(f"{self.name} {_number(value)}")


class Counter(_Metric):
    kind = "counter"

    def inc(self, amount: float = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def inc_values(self, *values: str) -> None:
        """One more for the label ``values`` given in ``labelnames`` order (a hot path's
        :meth:`inc`: the names are not matched per call)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        self._values[values] = self._values.get(values, 0.0) + 1


class Gauge(_Metric):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        self._values[self._key(labels)] = float(value)

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def clear(self) -> None:
        """Forget every labelled series (e.g. of deleted queues)."""
        self._values.clear()

    def dec(self, amount: float = 1, **labels: str) -> None:
        self.inc(-amount, **labels)


_M = TypeVar("_M", bound=_Metric)


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._collectors: list[Callable[[], None]] = []
        self._samplers: list[Callable[[], None]] = []

    def counter(self, name: str, help: str, labelnames: tuple[str, ...] = ()) -> Counter:
        return self._register(Counter, name, help, labelnames)

    def gauge(self, name: str, help: str, labelnames: tuple[str, ...] = ()) -> Gauge:
        return self._register(Gauge, name, help, labelnames)

    def on_collect(self, callback: Callable[[], None]) -> None:
        self._collectors.append(callback)

    def on_sample(self, callback: Callable[[], None]) -> None:
        """A cheap callback bringing counters up to date (module doc)."""
        self._samplers.append(callback)

    def sample(self) -> None:
        """Run the ``on_sample`` callbacks: the counters read after this are current."""
        for sample in self._samplers:
            sample()

    def _register(
        self, cls: type[_M], name: str, help: str, labelnames: tuple[str, ...]
    ) -> _M:
        existing = self._metrics.get(name)
        if existing is not None:
            if type(existing) is not cls or existing.labelnames != tuple(labelnames):
                raise ValueError(f"metric {name} is already registered differently")
            return existing  # type: ignore[return-value]
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r}")
        metric = cls(name, help, tuple(labelnames))
        self._metrics[name] = metric
        return metric

    def get(self, name: str) -> _Metric | None:
        return self._metrics.get(name)

    def collect(self) -> None:
        """Run the ``on_sample`` and ``on_collect`` callbacks: every metric read after
        this is current (a scrape does it)."""
        self.sample()
        for collect in self._collectors:
            collect()

    def render(self) -> str:
        self.collect()
        out: list[str] = []
        for name in sorted(self._metrics):
            self._metrics[name].render(out)
        return "\n".join(out) + "\n"


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
