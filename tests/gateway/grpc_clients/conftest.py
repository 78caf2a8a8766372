"""Fixtures of the gRPC client tests: a gateway subprocess serving gRPC on its unified
port and on a dedicated ``grpc`` port (both ephemeral, loopback), topics and groups
prepared in its store before it starts (as an operator would with ``lmq topics create``),
and every client process a test started stopped by PID at its end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import MessageStore
from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.topics import TopicRegistry
from lmq.rocketmq import GroupConfig, MessageType, TopicConfig

from ..gateway_process import GatewayProcess
from .clients import GrpcClient, NodeClient, PyClient


class Clients:
    """Starts clients for one test and stops every one of them at its end."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.started: list[GrpcClient] = []

    def py(self, role: str, **config: Any) -> PyClient:
        c = PyClient(role, self.home / f"py{len(self.started)}", **config)
        self.started.append(c)
        c.ready()
        return c

    def node(self, role: str, **config: Any) -> NodeClient:
        c = NodeClient(role, **config)
        self.started.append(c)
        c.ready()
        return c

    def stop_all(self) -> None:
        for c in reversed(self.started):
            c.stop(timeout=20.0)


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[Clients]:
    c = Clients(tmp_path / "clients")
    try:
        yield c
    finally:
        c.stop_all()


def prepare(data_dir: Path, *, topics: dict[str, MessageType] | None = None,
            groups: dict[str, int] | None = None,
            users: list[tuple[str, str, str, list[str]]] | None = None) -> None:
    """Topics with their message type, groups with their retry_max_times, and users
    ``(name, access key, secret, ACL rules)`` in the store, before the gateway starts."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with MessageStore.open(data_dir) as store:
        for name, kind in (topics or {}).items():
            TopicRegistry(store, False, 8).create(TopicConfig(name, message_type=kind))
        for name, max_times in (groups or {}).items():
            GroupRegistry(store).create(GroupConfig(name, retry_max_times=max_times))
    if users:
        db = UsersDatabase()
        for name, ak, sk, rules in users:
            db.add_user(name, None)
            db.add_access_key(name, ak, sk)
            for rule in rules:
                db.add_acl_rule(name, AclRule.parse(rule))
        db.save(data_dir / "users.json")


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """``start_gateway(*flags, topics=..., groups=..., users=...)``: prepare the store,
    then start the gateway subprocess with ``flags`` (stopped at the end of the test)."""
    running: list[GatewayProcess] = []

    def start(*extra: str, **prepared: Any) -> GatewayProcess:
        data = tmp_path / "data"
        prepare(data, **prepared)
        gw = GatewayProcess(data, *extra).start()  # gRPC on the unified and a grpc port
        running.append(gw)
        return gw

    try:
        yield start
    finally:
        for gw in running:
            gw.stop()


@pytest.fixture
def ggw(start_gateway: Callable[..., GatewayProcess]) -> GatewayProcess:
    """A gateway with no preparation (topics are auto-created by route queries)."""
    return start_gateway()
