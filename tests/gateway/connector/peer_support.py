"""Real peers for the connector's endpoint tests: Debian's mosquitto and rabbitmq-server
(bench/peers.py's classes: loopback ephemeral ports, their own data directories, stopped
by PID; an ``atexit`` hook kills whatever a crash left running), and small helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bench.peers import Mosquitto, RabbitMQ


def start_mosquitto(workdir: Path) -> Mosquitto:
    broker = Mosquitto(workdir)
    why = broker.available()
    if why:
        pytest.skip(why)
    broker.start()
    return broker


def start_rabbitmq(workdir: Path) -> RabbitMQ:
    broker = RabbitMQ(workdir)
    why = broker.available()
    if why:
        pytest.skip(why)
    broker.start()
    return broker


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """Await ``check`` until it is true (polled every 20 ms), at most ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
