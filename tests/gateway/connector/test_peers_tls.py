"""TLS to MQTT and AMQP brokers: the endpoints built from a rules file's cluster with
``tls = { ca_file = ... }`` copy through Debian's mosquitto and rabbitmq-server on their
TLS listeners (the server certificate checked against that CA and the address), and a
certificate that does not verify is a :class:`TlsFailure` naming the broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiormq
import pytest

from gateway.connector import amqp, mqtt
from gateway.connector.endpoints import CopyMessage, SourceRecord, TlsFailure
from gateway.connector.rules import parse_rules

from .peer_support import MosquittoTls, RabbitMQTls, start_broker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(connector_pki: dict[str, tuple[Path, Path]]) -> dict[str, tuple[Path, Path]]:
    return connector_pki


def cluster_and_rule(kind: str, port: int, ca: Path, read: str) -> tuple[Any, Any]:
    """A cluster and a rule as `lmq connector run` parses them from a rules file."""
    key = {"mqtt": "filter", "amqp": "queue"}[kind]
    rules = parse_rules({
        "clusters": {"x": {"kind": kind, "endpoints": [f"127.0.0.1:{port}"],
                           "tls": {"ca_file": str(ca)}}},
        "rules": [{"name": "r", "source": "x", key: read, "target": "x"}],
    })  # fmt: skip
    return rules.clusters["x"], rules.rules[0]


async def read_n(source: Any, queue: str, n: int) -> list[SourceRecord]:
    records: list[SourceRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while len(records) < n and loop.time() < deadline:
        records += await source.read(queue, None, "latest", n - len(records), 200)
    return records


@pytest.fixture(scope="module")
def mosquitto_tls(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, tuple[Path, Path]]
) -> Iterator[MosquittoTls]:
    broker = MosquittoTls(tmp_path_factory.mktemp("mosquitto"), *pki["server"])
    start_broker(broker)
    try:
        yield broker
    finally:
        broker.stop()


async def test_mqtt_source_and_target_over_tls(mosquitto_tls, pki) -> None:
    cluster, rule = cluster_and_rule("mqtt", mosquitto_tls.tls_port, pki["server"][0], "tls/#")
    source, target = mqtt.make_source(cluster, rule), mqtt.make_target(cluster, rule)
    await source.open()
    await target.open()
    try:
        sent = [CopyMessage(body=f"m{i}".encode(), topic="t", msg_id=f"id{i}") for i in range(10)]
        await target.write("tls/a", "q", sent)
        records = await read_n(source, "tls/#", 10)
        assert [r.message.body for r in records] == [m.body for m in sent]
        assert [r.message.msg_id for r in records] == [m.msg_id for m in sent]
        assert {r.message.topic for r in records} == {"tls/a"}
        await source.acknowledge("tls/#", records[-1].offset)
    finally:
        await source.close()
        await target.close()


async def test_mqtt_certificate_that_does_not_verify(mosquitto_tls, pki) -> None:
    cluster, rule = cluster_and_rule("mqtt", mosquitto_tls.tls_port, pki["other"][0], "tls/#")
    for endpoint in (mqtt.make_target(cluster, rule), mqtt.make_source(cluster, rule)):
        with pytest.raises(TlsFailure, match="certificate does not verify") as info:
            await endpoint.open()
        assert f"MQTT broker 127.0.0.1:{mosquitto_tls.tls_port}" in str(info.value)
        await endpoint.close()


@pytest.fixture(scope="module")
def rabbit_tls(rabbitmq_tls: RabbitMQTls) -> RabbitMQTls:
    return rabbitmq_tls  # conftest.py: one node per session


async def test_amqp_source_and_target_over_tls(rabbit_tls, pki) -> None:
    # the queue is declared on the plain listener (the connector declares nothing)
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{rabbit_tls.amqp_port}/")
    channel = await conn.channel()
    await channel.queue_declare("tls-jobs", durable=True)
    await conn.close()
    cluster, rule = cluster_and_rule("amqp", rabbit_tls.tls_port, pki["server"][0], "tls-jobs")
    assert amqp.peer_of(cluster).url.startswith("amqps://")
    source, target = amqp.make_source(cluster, rule), amqp.make_target(cluster, rule)
    await source.open()
    await target.open()
    try:
        sent = [CopyMessage(body=f"j{i}".encode(), topic="t", msg_id=f"id{i}") for i in range(10)]
        await target.write("tls-jobs", "q", sent)
        records = await read_n(source, "tls-jobs", 10)
        assert [r.message.body for r in records] == [m.body for m in sent]
        assert [r.message.msg_id for r in records] == [m.msg_id for m in sent]
        await source.acknowledge("tls-jobs", records[-1].offset)
    finally:
        await source.close()
        await target.close()


async def test_amqp_certificate_that_does_not_verify(rabbit_tls, pki) -> None:
    cluster, rule = cluster_and_rule("amqp", rabbit_tls.tls_port, pki["other"][0], "tls-jobs")
    for endpoint in (amqp.make_target(cluster, rule), amqp.make_source(cluster, rule)):
        with pytest.raises(TlsFailure, match="certificate does not verify") as info:
            await endpoint.open()
        assert f"AMQP broker 127.0.0.1:{rabbit_tls.tls_port}" in str(info.value)
        await endpoint.close()
