"""Per-client limits of the gRPC front end, on a gateway started in this process (the
front end's own objects, no network needed for the hook itself)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.config import AUTO, GatewayConfig
from gateway.grpc.call import Call
from gateway.server import Gateway
from protocol.grpc import Code, StatusError


async def test_receive_slots_per_client(tmp_path: Path) -> None:
    gateway = Gateway(GatewayConfig(
        data_dir=tmp_path / "data", mqtt_port=0, amqp_port=0, unified_port=AUTO,
        grpc_port=0, grpc_max_receives_per_client=2, shutdown_timeout=2.0))
    await asyncio.wait_for(gateway.start(), 10)
    try:
        front: Any = gateway.front_ends["grpc"].services

        def call(client_id: str) -> Call:
            return Call(front, "ReceiveMessage", context=None, client_id=client_id)  # type: ignore[arg-type]

        with call("a").receive_slot(), call("a").receive_slot():
            with pytest.raises(StatusError) as refused, call("a").receive_slot():
                pass
            assert refused.value.code == Code.TOO_MANY_REQUESTS
            with call("b").receive_slot():  # another client has its own slots
                assert front.receives == {"a": 2, "b": 1}
        assert front.receives == {}  # released, also when the body raised
        with call("a").receive_slot():
            assert front.receives == {"a": 1}
    finally:
        await asyncio.wait_for(gateway.stop(), 10)
