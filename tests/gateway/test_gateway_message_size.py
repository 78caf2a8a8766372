"""The 16 MiB message: by default every protocol takes a body of the store's
``max_message_bytes`` (16 MiB, RabbitMQ's default), delivers it whole to a real
subscriber, and the gateway's peak memory on the way through stays a small multiple of
the body's size (peak RSS of the gateway process over its RSS before the message).

A body one byte over the limit is refused: AMQP with a channel error (406 from the
content header), MQTT by closing the connection (3.1.1 has no reason code for it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from broker_core.config import StoreConfig

from .gateway_process import GatewayProcess
from .mqtt_clients import Paho

SIZE = StoreConfig().max_message_bytes
TIMEOUT = 60.0
#: Peak RSS growth of the gateway per byte of body, at most. The floor is the body
#: itself held once (the receive buffer that assembles it); measured figures are in
#: docs/configuration.md.
MAX_MULTIPLE = 6.0


def _status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of ``pid`` in bytes (Linux)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak(pid: int) -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0, own processes)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def _peak_growth(gateway: GatewayProcess, move: Callable[[], None]) -> int:
    assert gateway.proc is not None
    pid = gateway.proc.pid
    _reset_peak(pid)
    before = _status(pid)["VmRSS"]
    move()
    return _status(pid)["VmHWM"] - before


def _body(size: int) -> bytes:
    # not compressible, not all one page: a real payload's shape
    return os.urandom(4096) * (size // 4096) + os.urandom(size % 4096)


def _take_one(channel: pika.adapters.blocking_connection.BlockingChannel) -> bytes | None:
    """The next message of queue ``big`` (None after TIMEOUT seconds of silence)."""
    _method, _props, body = next(channel.consume(
        "big", auto_ack=True, inactivity_timeout=TIMEOUT))
    channel.cancel()
    return body


def test_default_limit_is_16_mib() -> None:
    assert SIZE == 16 * 1024 * 1024


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_16_mib_over_amqp(gateway: GatewayProcess) -> None:
    body = _body(SIZE)
    params = pika.ConnectionParameters(
        "127.0.0.1", gateway.ports["amqp"], socket_timeout=TIMEOUT,
        blocked_connection_timeout=TIMEOUT)
    publisher = pika.BlockingConnection(params)
    consumer = pika.BlockingConnection(params)
    try:
        pch = publisher.channel()
        pch.confirm_delivery()
        pch.queue_declare("big")
        pch.basic_publish("", "big", b"warm-up")
        cch = consumer.channel()
        assert _take_one(cch) == b"warm-up"
        received: list[bytes] = []

        def move() -> None:
            pch.basic_publish("", "big", body)  # returns once confirmed
            received.append(_take_one(cch))

        growth = _peak_growth(gateway, move)
        assert len(received) == 1 and received[0] == body
        print(f"amqp {SIZE} bytes: peak RSS growth {growth} = {growth / SIZE:.2f} x body")
        assert growth <= MAX_MULTIPLE * SIZE

        with pytest.raises(ChannelClosedByBroker) as info:
            pch.basic_publish("", "big", body + b"!")
        assert info.value.reply_code == 406
    finally:
        publisher.close()
        consumer.close()


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("qos", [0, 1])
def test_16_mib_over_mqtt(gateway: GatewayProcess, qos: int) -> None:
    body = _body(SIZE)
    sub = Paho(gateway.mqtt_port, "big-sub")
    pub = Paho(gateway.mqtt_port, "big-pub")
    sub.subscribe("big/#", qos=qos)
    pub.publish("big/warm-up", b"warm-up", qos=qos)
    assert sub.get().payload == b"warm-up"
    received: list[mqtt.MQTTMessage] = []

    def move() -> None:
        info = pub.client.publish("big/one", body, qos=qos)
        info.wait_for_publish(TIMEOUT)
        received.append(sub.get(timeout=TIMEOUT))

    growth = _peak_growth(gateway, move)
    assert received[0].topic == "big/one" and received[0].payload == body
    print(f"mqtt qos {qos} {SIZE} bytes: peak RSS growth {growth} = {growth / SIZE:.2f} x body")
    assert growth <= MAX_MULTIPLE * SIZE
