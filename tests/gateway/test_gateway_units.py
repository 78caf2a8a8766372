"""The gateway's small parts without sockets: sniffing, metrics text, flow control, logs."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from gateway.flow_control import FlowControl
from gateway.logs import configure_logging
from gateway.metrics import Registry
from gateway.sniff import MAX_PREFIX, classify, sniff_amqp, sniff_http, sniff_mqtt

SNIFFERS = [("mqtt", sniff_mqtt), ("amqp", sniff_amqp), ("http", sniff_http)]


@pytest.mark.parametrize(
    ("first_bytes", "protocol"),
    [
        (b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", "mqtt"),
        (b"AMQP\x00\x00\x09\x01", "amqp"),
        (b"GET /health HTTP/1.1\r\n", "http"),
        (b"HEAD / HTTP/1.1\r\n", "http"),
        (b"POST /x HTTP/1.1\r\n", "http"),
        (b"\x16\x03\x01\x02\x00", False),  # a TLS ClientHello: not served (yet)
        (b"GETX / HTTP/1.1", False),
        (b"AMQX", False),
        (b"\x30\x00", False),  # MQTT PUBLISH before CONNECT
    ],
)
def test_classify_whole_and_every_prefix(first_bytes, protocol):
    assert classify(first_bytes, SNIFFERS) == protocol
    decided_at = next(
        n for n in range(1, len(first_bytes) + 1) if classify(first_bytes[:n], SNIFFERS) is not None
    )
    for n in range(decided_at, len(first_bytes) + 1):
        assert classify(first_bytes[:n], SNIFFERS) == protocol
    assert classify(b"", SNIFFERS) is None


def test_classify_gives_up_at_max_prefix():
    always_unsure = [("x", lambda prefix: None)]
    assert classify(b"a" * (MAX_PREFIX - 1), always_unsure) is None
    assert classify(b"a" * MAX_PREFIX, always_unsure) is False


def test_metrics_text_format():
    reg = Registry()
    c = reg.counter("lmq_test_total", "A test\ncounter", ("kind",))
    c.inc(kind='a"b\\c')
    c.inc(2, kind="plain")
    c.inc_values("plain")  # the same series by its label values
    with pytest.raises(ValueError):
        c.inc_values("plain", "extra")
    g = reg.gauge("lmq_test_gauge", "A gauge")
    g.set(1.5)
    reg.on_collect(lambda: g.inc())
    assert reg.counter("lmq_test_total", "again", ("kind",)) is c
    with pytest.raises(ValueError):
        reg.gauge("lmq_test_total", "different type")
    with pytest.raises(ValueError):
        reg.counter("bad name", "x")
    with pytest.raises(ValueError):
        c.inc(-1, kind="plain")
    text = reg.render()
    assert text.endswith("\n")
    assert "# HELP lmq_test_total A test\\ncounter\n# TYPE lmq_test_total counter\n" in text
    assert 'lmq_test_total{kind="a\\"b\\\\c"} 1\n' in text
    assert 'lmq_test_total{kind="plain"} 3\n' in text
    assert "# TYPE lmq_test_gauge gauge\nlmq_test_gauge 2.5\n" in text


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = 0
        self.resumed = 0

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def is_closing(self) -> bool:
        return False


async def test_flow_control():
    transport = FakeTransport()
    flow = FlowControl(transport)
    flow.pause_reading()
    flow.pause_reading()
    flow.resume_reading()
    flow.resume_reading()
    assert (transport.paused, transport.resumed) == (1, 1)

    await asyncio.wait_for(flow.drain(), 1)  # writable: returns at once
    flow.pause_writing()
    flow.pause_writing()
    waiter = asyncio.ensure_future(flow.drain())
    await asyncio.sleep(0)
    assert not waiter.done()
    flow.resume_writing()
    await asyncio.wait_for(waiter, 1)
    flow.pause_writing()
    waiter = asyncio.ensure_future(flow.drain())
    flow.connection_lost()  # nobody waits forever on a dead connection
    await asyncio.wait_for(waiter, 1)


def test_json_and_text_logs():
    stream = io.StringIO()
    level = logging.getLogger().level
    handler = configure_logging("json", "info", stream)
    try:
        log = logging.getLogger("gateway.test")
        log.info("connection accepted", extra={"peer": "1.2.3.4:5", "protocol": "mqtt"})
        log.debug("not shown")
        try:
            raise RuntimeError("boom\nsecond line")
        except RuntimeError:
            log.exception("failed")
        lines = stream.getvalue().splitlines()
        assert len(lines) == 2
        first, second = (json.loads(line) for line in lines)
        assert first["msg"] == "connection accepted" and first["peer"] == "1.2.3.4:5"
        assert first["level"] == "info" and first["logger"] == "gateway.test"
        assert "boom" in second["exc"]

        stream.truncate(0)
        stream.seek(0)
        handler = configure_logging("text", "info", stream)
        log.info("listener started", extra={"address": "127.0.0.1:1883", "note": "two words"})
        assert stream.getvalue().rstrip().endswith(
            'listener started address=127.0.0.1:1883 note="two words"'
        )
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
