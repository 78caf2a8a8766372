"""Fixtures shared by the gateway tests (tests/gateway/**): the two gateway harnesses,
and closing every MQTT client a test left open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .amqp_support import ThreadGateway
from .gateway_process import GatewayProcess
from .mqtt_clients import close_all


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    close_all()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway subprocess (``lmq serve``) on ephemeral loopback ports, stopped by PID."""
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[ThreadGateway]:
    """An in-process gateway on its own event-loop thread (blocking clients such as pika
    can be used from the test); ephemeral loopback ports, bounded start and stop."""
    gateway = ThreadGateway(tmp_path / "data").start()
    try:
        yield gateway
    finally:
        gateway.stop()
