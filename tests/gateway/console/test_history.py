"""The overview's history (gateway/history.py) over a real metrics registry: rates per
protocol from the message counters (brought up to date by the on_sample callbacks, the
scrape's gauges not computed), connections per protocol, the store's size and lag;
memory bounded to the span; ``since`` answers only newer samples."""

from __future__ import annotations

from gateway.history import History
from gateway.metrics import Registry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rates_connections_size_and_lag() -> None:
    m = Registry()
    received = m.counter("lmq_mqtt_messages_received_total", "in")
    delivered = m.counter("lmq_amqp_messages_delivered_total", "out")
    conns = m.gauge("lmq_connections", "open", ("protocol",))
    mqtt_sent = {"n": 0}
    sent = m.counter("lmq_mqtt_messages_sent_total", "out")
    m.on_sample(lambda: sent.inc(mqtt_sent["n"] - sent.value()))  # as the MQTT door does
    gauges: list[int] = []
    m.on_collect(lambda: gauges.append(1))  # a scrape's gauges: not the history's cost
    appended = {"n": 0}
    clock = Clock()
    h = History(
        m,
        appended=lambda: appended["n"],
        pending=lambda: 7,
        log_bytes=lambda: 4096,
        interval=5,
        span=15,
        clock=clock,
    )
    assert h.sample() is None  # the first reading only starts the rates
    received.inc(50)
    delivered.inc(10)
    mqtt_sent["n"] = 25
    appended["n"] = 60
    conns.set(3, protocol="mqtt")
    conns.set(0, protocol="pending")
    clock.now += 5
    s = h.sample()
    assert s is not None
    assert s.messages_in == {"mqtt": 10.0}  # no AMQP publish counter registered here
    assert s.messages_out == {"mqtt": 5.0, "amqp": 2.0}
    assert s.stored == 12.0
    assert s.connections == {"mqtt": 3}
    assert (s.store_bytes, s.store_lag) == (4096, 7)
    doc = h.document()
    assert doc["interval_s"] == 5 and doc["span_s"] == 15
    assert doc["samples"][0]["in"]["mqtt"] == 10.0
    assert h.document(since=s.t)["samples"] == []
    assert gauges == []
    m.render()
    assert gauges == [1]


def test_memory_is_bounded_to_the_span() -> None:
    clock = Clock()
    h = History(
        Registry(),
        appended=lambda: 0,
        pending=lambda: 0,
        log_bytes=lambda: 0,
        interval=5,
        span=15,
        clock=clock,
    )
    for _ in range(10):
        clock.now += 5
        h.sample()
    assert len(h.samples) == 3  # span / interval
