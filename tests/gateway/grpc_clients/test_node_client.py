"""The official RocketMQ 5 Node client (npm ``rocketmq-client-nodejs`` 1.0.8, installed
from tests/node/package-lock.json), unchanged, against a gateway subprocess over gRPC:

- Node producer -> Node simple consumer with tags, keys and properties; ack; change
  invisible duration (the returned receipt handle acks) and redelivery with a growing
  attempt after the invisible duration;
- the two official clients interoperate: Node producer -> Python simple consumer and
  Python producer -> Node simple consumer (the Node client reads queue 0 of a route only,
  so the gateway must pop across the topic's queues for it to see the Python producer's
  messages).

The Node client waits for the Telemetry settings reply with no timeout of its own: every
start here is bounded by ``clients.START``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ..gateway_process import GatewayProcess
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def node_producer(clients: Clients, gw: GatewayProcess, *topics: str) -> Any:
    return clients.node("producer", endpoints=grpc_endpoint(gw), topics=list(topics))


def node_simple(clients: Clients, gw: GatewayProcess, group: str, subs: dict[str, str],
                **kw: Any) -> Any:
    return clients.node("simple", endpoints=grpc_endpoint(gw), group=group,
                        subscriptions=subs, **kw)


def test_node_producer_to_node_simple_consumer(ggw: GatewayProcess, clients: Clients) -> None:
    p = node_producer(clients, ggw, "nodeTopic")
    c = node_simple(clients, ggw, "GID_node", {"nodeTopic": "TagA"}, await_s=3)
    sent = {}
    for i, tag in enumerate(["TagA", "TagB", "TagA"]):
        r = p.send_message("nodeTopic", f"n{i}", tag=tag, keys=[f"k{i}"],
                           properties={"origin": "node"})
        assert r["id"] and r["queue"] == 0  # the Node client uses queue 0 only
        sent[f"n{i}"] = r
    got = {m["body"]: m for m in c.receive_all(2, WAIT, invisible=30)}
    assert sorted(got) == ["n0", "n2"]  # TagB filtered out
    for body in ("n0", "n2"):
        m = got[body]
        assert m["id"] == sent[body]["id"] and m["tag"] == "TagA"
        assert m["keys"] == [f"k{body[1]}"] and m["properties"] == {"origin": "node"}
        assert m["attempt"] == 1 and not m["corrupted"]
    c.ack(got["n0"]["id"])
    # n2: shortened to 2 s with ChangeInvisibleDuration, comes back with attempt 2
    old = got["n2"]["receipt"]
    assert c.change_invisible(got["n2"]["id"], 2) != old
    t0 = time.monotonic()
    again = c.receive_all(1, WAIT, invisible=30)
    assert [m["body"] for m in again] == ["n2"] and again[0]["attempt"] == 2
    assert time.monotonic() - t0 < 20
    c.ack(again[0]["id"])
    assert c.receive(16, 2) == []


def test_node_and_python_clients_interoperate(ggw: GatewayProcess, clients: Clients) -> None:
    endpoint = grpc_endpoint(ggw)
    node_p = node_producer(clients, ggw, "mixed")
    py_p = clients.py("producer", endpoints=endpoint, topics=["mixed"])
    py_c = clients.py("simple", endpoints=endpoint, group="GID_mixed_py",
                      subscriptions={"mixed": "*"}, await_s=3)
    node_c = node_simple(clients, ggw, "GID_mixed_node", {"mixed": "*"}, await_s=3)
    from_node = node_p.send_message("mixed", "from-node", tag="N", keys=["kn"])
    # the Python producer spreads sends over the topic's queues: several, so that some
    # land on queues other than 0
    from_py = [py_p.send_message("mixed", f"from-py-{i}", tag="P", keys=[f"kp{i}"])
               for i in range(6)]
    assert len({r["queue"] for r in from_py}) > 1
    want = {"from-node"} | {f"from-py-{i}" for i in range(6)}
    for consumer in (py_c, node_c):  # two groups: each gets every message
        got = {m["body"]: m for m in consumer.receive_all(7, WAIT, invisible=30)}
        assert set(got) == want
        assert got["from-node"]["id"] == from_node["id"]
        assert got["from-node"]["keys"] == ["kn"] and got["from-node"]["tag"] == "N"
        assert {got[f"from-py-{i}"]["id"] for i in range(6)} == {r["id"] for r in from_py}
        for m in got.values():
            consumer.ack(m["id"])
        assert consumer.receive(16, 2) == []
