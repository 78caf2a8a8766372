"""``lmq connector run`` between Debian's mosquitto and a gateway, killed with SIGKILL
under load: MQTT in (nothing lost; the redeliveries dropped by the gateway's dedup
window, so each message is stored once) and MQTT out (QoS 1, at-least-once)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import Mosquitto

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from .connector_support import (
    ConnectorProcess,
    peer_rules,
    received_through_a_kill,
    send_batches,
    stored_through_a_kill,
)
from .peer_support import running

pytestmark = pytest.mark.slow

N = 300


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[int]:
    """A mosquitto of each test's own (not conftest.py's, one a module)."""
    with running(Mosquitto(tmp_path / "mosquitto")) as broker:
        assert broker.mqtt_port is not None
        yield broker.mqtt_port


def rules(path: Path, mqtt_port: int, remoting_port: int, rule: str) -> Path:
    mosq = f"""
[clusters.mosq]
kind = "mqtt"
endpoints = ["127.0.0.1:{mqtt_port}"]
client_id = "bridge"
"""
    return peer_rules(path, mosq, rule, remoting_port)


async def test_mqtt_in_survives_kill9_without_loss_or_stored_duplicates(
        tmp_path: Path, mosquitto: int, gateway: GatewayProcess) -> None:
    namesrv = f"127.0.0.1:{gateway.ports['unified']}"
    rules_file = rules(tmp_path / "rules.toml", mosquitto, gateway.ports["unified"], """
[[rules]]
name = "in"
source = "mosq"
filter = "sensors/#"
target = "gw"
batch_size = 16
wait_ms = 100
""")

    def publish() -> None:
        pub = Paho(mosquitto, "sensor", v5=False)
        for i in range(N):
            pub.publish(f"sensors/{i % 3}", f"m{i}".encode(), qos=1)
        pub.disconnect()

    def subscribed(connector: ConnectorProcess) -> bool:
        # the session exists once the connector subscribed: from then on nothing is lost
        return any("subscribed" in line or "running" in line for line in connector.output)

    stored = await stored_through_a_kill(
        rules_file, namesrv, "sensors", N, lambda: asyncio.to_thread(publish), subscribed
    )
    bodies = sorted(m.body for m in stored)
    assert bodies == sorted(f"m{i}".encode() for i in range(N))  # each once
    by_queue: dict[int, list[int]] = {}
    for m in sorted(stored, key=lambda m: (m.queue_id, m.queue_offset)):
        by_queue.setdefault(m.queue_id, []).append(int(m.body[1:]))
    # one MQTT subscription is one source queue: its copies keep the arrival order
    assert len(by_queue) == 1
    assert next(iter(by_queue.values())) == list(range(N))


async def test_mqtt_out_survives_kill9_without_loss(
        tmp_path: Path, mosquitto: int, gateway: GatewayProcess) -> None:
    await send_batches(f"127.0.0.1:{gateway.ports['unified']}", "orders", N)
    sub = Paho(mosquitto, "app", v5=True, clean=False, session_expiry=300)
    sub.subscribe("out/#", qos=1)
    batch = 16
    rules_file = rules(tmp_path / "rules.toml", mosquitto, gateway.ports["unified"], f"""
[[rules]]
name = "out"
source = "gw"
topic = "orders"
target = "mosq"
target_topic = "out/{{topic}}"
start = "earliest"
batch_size = {batch}
wait_ms = 100
""")
    got = await received_through_a_kill(
        rules_file, N, lambda k: asyncio.to_thread(sub.get_n, k, 15), lambda m: m.payload
    )
    assert {m.payload for m in got} == {f"m{i}".encode() for i in range(N)}
    assert all(m.topic == "out/orders" and m.qos == 1 for m in got)
    assert dict(got[5].properties.UserProperty)["n"] == got[5].payload.decode()[1:]
    # at-least-once: what was in flight at the kill (a batch, and one whose commit was
    # on its way) may come twice; nothing else does, and first receipts keep the order
    duplicates = len(got) - N
    assert 0 <= duplicates <= 2 * batch
    first = list(dict.fromkeys(m.payload for m in got))
    assert first == [f"m{i}".encode() for i in range(N)]
