"""Fixtures the connector's tests share: their certificates, Debian's mosquitto for a
module's tests, and one RabbitMQ node per test session (per xdist worker), started slowly
once (about 12 s) rather than once per module; it listens for AMQP and for AMQP over TLS
with a certificate of ``pki``. Each test uses queues (or topics) of its own. ``two``: a
pair of gateways for a test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import Mosquitto

from ..gateway_process import GatewayProcess
from .connector_support import two_gateways
from .peer_support import RabbitMQTls, make_cert, running


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """``server``: the brokers' certificate for 127.0.0.1; ``other``: one that did not
    sign it (a CA the server's certificate does not verify against)."""
    d = tmp_path_factory.mktemp("pki")
    return {"server": make_cert(d, "server"), "other": make_cert(d, "other")}


@pytest.fixture(scope="session")
def rabbitmq_tls(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, tuple[Path, Path]]
) -> Iterator[RabbitMQTls]:
    with running(RabbitMQTls(tmp_path_factory.mktemp("rabbitmq"), *pki["server"])) as broker:
        yield broker


@pytest.fixture(scope="module")
def rabbit(rabbitmq_tls: RabbitMQTls) -> int:
    """The AMQP port of the session's node."""
    assert rabbitmq_tls.amqp_port is not None
    return int(rabbitmq_tls.amqp_port)


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A mosquitto for the module's tests: its MQTT port."""
    with running(Mosquitto(tmp_path_factory.mktemp("mosquitto"))) as broker:
        assert broker.mqtt_port is not None
        yield broker.mqtt_port


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    with two_gateways(tmp_path) as pair:
        yield pair
