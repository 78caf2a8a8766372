"""The delay metric of MQTT and AMQP sources: from the publisher's own timestamp (MQTT 5
user property ``msg-timestamp``, AMQP ``timestamp`` or RabbitMQ's ``timestamp_in_ms``
header) to the target's acknowledgement; unknown (None) for messages without one.

A rule runs in-process (:class:`RuleRunner`) from Debian's mosquitto or rabbitmq-server
into a real gateway. The publishers stamp their messages 3 s in the past: the delay must
be at least that (a lower bound the runner cannot meet by accident; no upper bound, the
machine may be slow)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import aiormq
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from pamqp import commands as spec

from gateway.connector.mqtt import TIMESTAMP_PROPERTY
from gateway.connector.rules import parse_rules
from gateway.connector.runner import RuleRunner

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from .connector_support import eventually

pytestmark = pytest.mark.slow

PAST_MS = 3000


def runner(kind: str, port: int, read: str, gateway: GatewayProcess) -> RuleRunner:
    key = {"mqtt": "filter", "amqp": "queue"}[kind]
    extra = {"client_id": "delay"} if kind == "mqtt" else {}
    rules = parse_rules({
        "heartbeat_interval": 0.2, "retry_initial": 0.05, "retry_max": 0.5,
        "clusters": {
            "peer": {"kind": kind, "endpoints": [f"127.0.0.1:{port}"], **extra},
            "gw": {"kind": "gateway", "endpoints": [f"127.0.0.1:{gateway.ports['unified']}"]},
        },
        "rules": [{"name": "r", "source": "peer", key: read, "target": "gw",
                   "target_topic": "delayed", "wait_ms": 100}],
    })  # fmt: skip
    return RuleRunner(rules, rules.rules[0])


async def copy_phases(run: RuleRunner, plain: Any, stamped: Any) -> None:
    """Run the rule; ``plain()`` publishes 5 messages without a timestamp: the delay
    stays unknown; ``stamped()`` 5 stamped PAST_MS ago: the delay is at least that."""
    task = asyncio.create_task(run.run())
    try:

        async def state_running() -> bool:
            return run.stats.state == "running"

        assert await eventually(state_running, timeout=10)
        await plain()

        async def stored(n: int) -> Any:
            async def check() -> bool:
                return run.stats.messages >= n

            return check

        assert await eventually(await stored(5), timeout=10)
        assert run.stats.delay_ms is None
        await stamped()
        assert await eventually(await stored(10), timeout=10)
        assert run.stats.delay_ms is not None and run.stats.delay_ms >= PAST_MS
        assert run.stats.heartbeats == 0  # no heartbeats from a broker source
    finally:
        run.stop()
        await asyncio.wait_for(task, 15)


async def test_mqtt_source_delay_from_the_msg_timestamp_property(
    mosquitto: int, gateway: GatewayProcess
) -> None:
    def publish(stamp: int | None) -> None:
        pub = Paho(mosquitto, "delay-pub", v5=True)
        for i in range(5):
            props = PahoProperties(PacketTypes.PUBLISH)
            if stamp is not None:
                props.UserProperty = [(TIMESTAMP_PROPERTY, str(stamp))]
            pub.publish("delay/x", f"m{i}".encode(), qos=1, properties=props)
        pub.disconnect()

    async def plain() -> None:
        await asyncio.to_thread(publish, None)

    async def stamped() -> None:
        await asyncio.to_thread(publish, int(time.time() * 1000) - PAST_MS)

    await copy_phases(runner("mqtt", mosquitto, "delay/#", gateway), plain, stamped)


async def test_amqp_source_delay_from_the_timestamp_property(
    rabbit: int, gateway: GatewayProcess
) -> None:
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{rabbit}/")
    channel = await conn.channel()
    await channel.queue_declare("delay-jobs", durable=True)

    async def publish(**props: Any) -> None:
        for i in range(5):
            await channel.basic_publish(
                f"j{i}".encode(), routing_key="delay-jobs",
                properties=spec.Basic.Properties(delivery_mode=2, **props),
            )  # fmt: skip

    async def plain() -> None:
        await publish()

    async def stamped() -> None:
        # AMQP's timestamp is in whole seconds: 3 s back from the second now is in
        await publish(timestamp=datetime.fromtimestamp(int(time.time()) - PAST_MS // 1000, UTC))

    try:
        await copy_phases(runner("amqp", rabbit, "delay-jobs", gateway), plain, stamped)
    finally:
        await conn.close()
