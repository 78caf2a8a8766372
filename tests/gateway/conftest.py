from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .gateway_process import GatewayProcess
from .mqtt_clients import close_all


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    close_all()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()
