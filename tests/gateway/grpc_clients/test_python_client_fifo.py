"""FIFO consumption with the official RocketMQ 5 Python client (``rocketmq-python-client``),
unchanged, against a gateway subprocess: a group that consumes in order
(``consume_message_orderly``) on a FIFO topic.

- SimpleConsumer: a receive gives each message group's next message only once the
  previous one was acked; a held message blocks its group and no other; made visible
  again (ChangeInvisibleDuration) it comes back first for its group;
- PushConsumer (Telemetry settings say ``fifo``): each group consumed in the order sent;
  a message that always fails is forwarded to the dead-letter queue by the client after
  its local retries, and its group goes on with the next message.

Every client is a subprocess stopped by PID; every wait is bounded (``clients.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core import MessageStore
from gateway.rocketmq.groups import GroupRegistry
from lmq.rocketmq import GroupConfig, MessageType

from ..gateway_process import GatewayProcess
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def orderly(tmp_path: Path, name: str, retry_max_times: int = 16) -> None:
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    with MessageStore.open(data) as store:
        GroupRegistry(store).create(GroupConfig(name, retry_max_times=retry_max_times,
                                                consume_message_orderly=True))


def test_simple_consumer_gets_each_group_in_order_others_flowing(
    tmp_path: Path, start_gateway: Callable[..., GatewayProcess], clients: Clients
) -> None:
    orderly(tmp_path, "GID_pyOrdered")
    gw = start_gateway(topics={"pyOrdered": MessageType.FIFO})
    p = clients.py("producer", endpoints=grpc_endpoint(gw), topics=["pyOrdered"])
    for i in range(3):
        for group in ("g1", "g2"):
            p.send_message("pyOrdered", f"{group}-{i}", tag="T", group=group)
    c = clients.py("simple", endpoints=grpc_endpoint(gw), group="GID_pyOrdered",
                   subscriptions={"pyOrdered": "*"}, await_s=2)
    first = {m["body"]: m for m in c.receive_all(2, WAIT, invisible=60)}
    assert sorted(first) == ["g1-0", "g2-0"]  # one per group
    # g1-0 is held: g2 flows, g1 waits
    c.ack(first["g2-0"]["id"])
    assert [m["body"] for m in c.receive_all(1, WAIT, invisible=60)] == ["g2-1"]
    assert c.receive(16, 60) == []  # g2-1 unacked, g1-0 held: nothing else
    held = c.change_invisible(first["g1-0"]["id"], 1)
    assert held
    again = c.receive_all(1, WAIT, invisible=60)
    assert [m["body"] for m in again] == ["g1-0"] and again[0]["attempt"] == 2
    c.ack(again[0]["id"])
    assert [m["body"] for m in c.receive_all(1, WAIT, invisible=60)] == ["g1-1"]


def test_push_consumer_fifo_order_and_dead_letter(
    tmp_path: Path, start_gateway: Callable[..., GatewayProcess], clients: Clients
) -> None:
    orderly(tmp_path, "GID_pyOrderedPush", retry_max_times=1)
    gw = start_gateway(topics={"pyOrderedPush": MessageType.FIFO})
    p = clients.py("producer", endpoints=grpc_endpoint(gw), topics=["pyOrderedPush"])
    for i in range(3):
        for group in ("g1", "g2"):
            p.send_message("pyOrderedPush", f"{group}-{i}", tag="T", group=group)
    push = clients.py("push", endpoints=grpc_endpoint(gw), group="GID_pyOrderedPush",
                      subscriptions={"pyOrderedPush": "*"}, fail=["g1-0"])
    # g1-0 fails on each local attempt (2: retry_max_times + 1), then is forwarded to
    # the dead-letter queue; g1-1 and g1-2 follow it, g2 goes its way
    events = [push.wait_for(lambda e: "msg" in e, 60.0) for _ in range(7)]
    for group in ("g1", "g2"):
        seq = [(e["msg"]["body"], e["result"]) for e in events if e["msg"]["group"] == group]
        ok = [b for b, r in seq if r == "SUCCESS"]
        if group == "g2":
            assert ok == ["g2-0", "g2-1", "g2-2"]
        else:
            assert ok == ["g1-1", "g1-2"]
            assert seq[:2] == [("g1-0", "FAILURE"), ("g1-0", "FAILURE")]
    assert push.quiet("msg", 4.0) == []
