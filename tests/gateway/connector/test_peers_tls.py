"""TLS to MQTT and AMQP brokers: the endpoints built from a rules file's cluster with
``tls = { ca_file = ... }`` copy through Debian's mosquitto and rabbitmq-server on their
TLS listeners (the server certificate checked against that CA and the address), and a
certificate that does not verify is a :class:`TlsFailure` naming the broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiormq
import pytest

from gateway.connector import amqp, mqtt
from gateway.connector.endpoints import CopyMessage, SourceRecord, TlsFailure
from gateway.connector.rules import parse_rules

from .peer_support import MosquittoTls, RabbitMQTls, read_n, running

pytestmark = pytest.mark.slow


def cluster_and_rule(kind: str, port: int, ca: Path, read: str) -> tuple[Any, Any]:
    """A cluster and a rule as `lmq connector run` parses them from a rules file."""
    key = {"mqtt": "filter", "amqp": "queue"}[kind]
    rules = parse_rules({
        "clusters": {"x": {"kind": kind, "endpoints": [f"127.0.0.1:{port}"],
                           "tls": {"ca_file": str(ca)}}},
        "rules": [{"name": "r", "source": "x", key: read, "target": "x"}],
    })  # fmt: skip
    return rules.clusters["x"], rules.rules[0]


async def copy_over_tls(
    endpoints: Any, cluster: Any, rule: Any, address: str, read: str
) -> list[SourceRecord]:
    """Ten messages written by the target of ``endpoints`` (the module ``mqtt`` or
    ``amqp``) to ``address`` come back, in order with their ids, from its source reading
    ``read`` (then acknowledged); the records read."""
    source, target = endpoints.make_source(cluster, rule), endpoints.make_target(cluster, rule)
    await source.open()
    await target.open()
    try:
        sent = [CopyMessage(body=f"m{i}".encode(), topic="t", msg_id=f"id{i}") for i in range(10)]
        await target.write(address, "q", sent)
        records = await read_n(source, read, 10, timeout=10)
        assert [r.message.body for r in records] == [m.body for m in sent]
        assert [r.message.msg_id for r in records] == [m.msg_id for m in sent]
        await source.acknowledge(read, records[-1].offset)
    finally:
        await source.close()
        await target.close()
    return records


async def assert_does_not_verify(endpoints: Any, cluster: Any, rule: Any, broker: str) -> None:
    """Opening the target and the source of ``endpoints`` fails with a TlsFailure that
    names ``broker``."""
    for endpoint in (endpoints.make_target(cluster, rule), endpoints.make_source(cluster, rule)):
        with pytest.raises(TlsFailure, match="certificate does not verify") as info:
            await endpoint.open()
        assert broker in str(info.value)
        await endpoint.close()


@pytest.fixture(scope="module")
def mosquitto_tls(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, tuple[Path, Path]]
) -> Iterator[MosquittoTls]:
    with running(MosquittoTls(tmp_path_factory.mktemp("mosquitto"), *pki["server"])) as broker:
        yield broker


async def test_mqtt_source_and_target_over_tls(mosquitto_tls, pki) -> None:
    cluster, rule = cluster_and_rule("mqtt", mosquitto_tls.tls_port, pki["server"][0], "tls/#")
    records = await copy_over_tls(mqtt, cluster, rule, "tls/a", "tls/#")
    assert {r.message.topic for r in records} == {"tls/a"}


async def test_mqtt_certificate_that_does_not_verify(mosquitto_tls, pki) -> None:
    cluster, rule = cluster_and_rule("mqtt", mosquitto_tls.tls_port, pki["other"][0], "tls/#")
    await assert_does_not_verify(
        mqtt, cluster, rule, f"MQTT broker 127.0.0.1:{mosquitto_tls.tls_port}"
    )


async def test_amqp_source_and_target_over_tls(rabbitmq_tls: RabbitMQTls, pki) -> None:
    # the queue is declared on the plain listener (the connector declares nothing)
    conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{rabbitmq_tls.amqp_port}/")
    channel = await conn.channel()
    await channel.queue_declare("tls-jobs", durable=True)
    await conn.close()
    cluster, rule = cluster_and_rule("amqp", rabbitmq_tls.tls_port, pki["server"][0], "tls-jobs")
    assert amqp.peer_of(cluster).url.startswith("amqps://")
    await copy_over_tls(amqp, cluster, rule, "tls-jobs", "tls-jobs")


async def test_amqp_certificate_that_does_not_verify(rabbitmq_tls: RabbitMQTls, pki) -> None:
    cluster, rule = cluster_and_rule("amqp", rabbitmq_tls.tls_port, pki["other"][0], "tls-jobs")
    await assert_does_not_verify(
        amqp, cluster, rule, f"AMQP broker 127.0.0.1:{rabbitmq_tls.tls_port}"
    )
