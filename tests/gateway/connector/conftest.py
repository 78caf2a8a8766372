"""Fixtures the connector's peer tests share: one RabbitMQ node per test session (per
xdist worker), started slowly once (about 12 s) rather than once per module; it listens
for AMQP and for AMQP over TLS with a certificate of ``connector_pki``. Each test uses
queues of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .peer_support import RabbitMQTls, make_cert, start_broker


@pytest.fixture(scope="session")
def connector_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """``server``: the brokers' certificate for 127.0.0.1; ``other``: one that did not
    sign it (a CA the server's certificate does not verify against)."""
    d = tmp_path_factory.mktemp("pki")
    return {"server": make_cert(d, "server"), "other": make_cert(d, "other")}


@pytest.fixture(scope="session")
def rabbitmq_tls(
    tmp_path_factory: pytest.TempPathFactory, connector_pki: dict[str, tuple[Path, Path]]
) -> Iterator[RabbitMQTls]:
    broker = RabbitMQTls(tmp_path_factory.mktemp("rabbitmq"), *connector_pki["server"])
    start_broker(broker)
    try:
        yield broker
    finally:
        broker.stop()
