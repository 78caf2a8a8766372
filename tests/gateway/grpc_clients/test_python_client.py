"""The official RocketMQ 5 Python client (PyPI ``rocketmq-python-client`` 5.1.2),
unchanged, against a gateway subprocess on loopback over gRPC:

- Producer NORMAL sends with tag, keys and user properties -> a SimpleConsumer sees them
  as sent (same message id; the tag subscription filters); the dedicated ``grpc_port``
  serves the same as the unified port;
- FIFO sends with a message group to a FIFO topic keep their order and their group;
- DELAY sends with a delivery timestamp reach a SimpleConsumer not before it, and carry it;
- SimpleConsumer receive / ack / change invisible duration: the new receipt handle acks;
- at-least-once: a message not acked comes back after its invisible duration with a
  growing delivery attempt;
- PushConsumer consumes and acks (nothing comes back); a listener that fails goes
  through the backoff policy and, after the group's maximum attempts, to ``%DLQ%<group>``;
- transactional producer: a committed half message is delivered, a rolled-back one
  never; one left open is checked back on the producer's Telemetry stream and its
  checker's answer settles it.

Every client is a subprocess stopped by PID; every wait is bounded (``clients.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.clients import PullConsumer, RemotingClient
from lmq.rocketmq import MessageType

from ..gateway_process import GatewayProcess
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def producer(clients: Clients, gw: GatewayProcess, *topics: str, port: str = "unified",
             **kw: Any) -> Any:
    return clients.py("producer", endpoints=grpc_endpoint(gw, port), topics=list(topics), **kw)


def simple(clients: Clients, gw: GatewayProcess, group: str, subs: dict[str, str],
           port: str = "unified", **kw: Any) -> Any:
    return clients.py("simple", endpoints=grpc_endpoint(gw, port), group=group,
                      subscriptions=subs, **kw)


@pytest.mark.parametrize("port", ["unified", "grpc"])
def test_normal_send_with_tag_keys_properties_to_a_simple_consumer(
    ggw: GatewayProcess, clients: Clients, port: str
) -> None:
    p = producer(clients, ggw, "pyNormal", port=port)
    c = simple(clients, ggw, "GID_pyNormal", {"pyNormal": "TagA||TagB"}, port=port)
    sent = {}
    for i, tag in enumerate(["TagA", "TagC", "TagB"]):
        receipt = p.send_message("pyNormal", f"m{i}", tag=tag, keys=[f"k{i}", "shared"],
                                 properties={"color": f"c{i}", "n": str(i)})
        assert receipt["id"] and receipt["queue"] is not None
        sent[f"m{i}"] = receipt
    got = {m["body"]: m for m in c.receive_all(2, WAIT)}
    assert sorted(got) == ["m0", "m2"]  # TagC filtered out
    for body, i, tag in (("m0", 0, "TagA"), ("m2", 2, "TagB")):
        m = got[body]
        assert m["id"] == sent[body]["id"]
        assert m["topic"] == "pyNormal" and m["tag"] == tag
        assert m["keys"] == sorted([f"k{i}", "shared"])
        assert m["properties"] == {"color": f"c{i}", "n": str(i)}
        assert m["attempt"] == 1 and m["receipt"] and not m["corrupted"]
        assert m["group"] is None
        assert abs(m["born"] / 1000 - time.time()) < 60  # milliseconds since the epoch
        c.ack(m["id"])
    assert c.receive(16, 15) == []  # acked, and TagC never matches


def test_fifo_send_keeps_group_and_order(start_gateway: Callable[..., GatewayProcess],
                                         clients: Clients) -> None:
    gw = start_gateway(topics={"pyFifo": MessageType.FIFO})
    p = producer(clients, gw, "pyFifo")
    for i in range(6):
        group = "g1" if i % 2 == 0 else "g2"
        p.send_message("pyFifo", f"{group}-{i}", tag="T", group=group)
    # a NORMAL message does not fit the FIFO topic: the client refuses it from the route's
    # accepted message types, before any send
    refused = p.try_call("send", message={"topic": "pyFifo", "body": "plain"})
    assert "error" in refused and "message type" in refused["error"]
    c = simple(clients, gw, "GID_pyFifo", {"pyFifo": "*"})
    got = c.receive_all(6, WAIT, invisible=30)
    assert {m["group"] for m in got} == {"g1", "g2"}
    for group in ("g1", "g2"):
        bodies = [m["body"] for m in got if m["group"] == group]
        assert bodies == sorted(bodies, key=lambda b: int(b.split("-")[1]))  # sent order
        assert len(bodies) == 3
    for m in got:
        c.ack(m["id"])


def test_delayed_messages_are_not_received_before_their_delivery_time(
        start_gateway: Callable[..., GatewayProcess], clients: Clients) -> None:
    gw = start_gateway(topics={"pyDelay": MessageType.DELAY})
    p = producer(clients, gw, "pyDelay")
    c = simple(clients, gw, "GID_pyDelay", {"pyDelay": "*"})
    # rocketmq-python-client 5.1.2 writes Message.delivery_timestamp into the protobuf
    # Timestamp's SECONDS (its docstring says ms): so it is given epoch seconds here.
    now = int(time.time())
    due = {"later": now + 5, "sooner": now + 3}
    for body, at in due.items():
        receipt = p.send_message("pyDelay", body, tag="T", delivery=at)
        assert receipt["id"]
    got = c.receive_all(2, WAIT)
    assert sorted(m["body"] for m in got) == ["later", "sooner"]
    for m in got:
        assert m["received_ms"] >= due[m["body"]] * 1000, m  # never before its time
        assert m["delivery"] == due[m["body"]] * 1000  # seen as its delivery timestamp (ms)
        c.ack(m["id"])
    assert [m["body"] for m in sorted(got, key=lambda m: m["received_ms"])] == [
        "sooner", "later"]


def test_simple_consumer_ack_and_change_invisible_duration(ggw: GatewayProcess,
                                                           clients: Clients) -> None:
    p = producer(clients, ggw, "pyInvisible")
    c = simple(clients, ggw, "GID_pyInvisible", {"pyInvisible": "*"}, await_s=3)
    p.send_message("pyInvisible", "keep", tag="T")
    p.send_message("pyInvisible", "ack-now", tag="T")
    got = {m["body"]: m for m in c.receive_all(2, WAIT, invisible=60)}
    c.ack(got["ack-now"]["id"])
    old = got["keep"]["receipt"]
    new = c.change_invisible(got["keep"]["id"], 2)
    assert new and new != old  # ChangeInvisibleDuration returns a new receipt handle
    t0 = time.monotonic()
    again = c.receive_all(1, WAIT, invisible=60)  # back after ~2 s, not after 60 s
    assert [m["body"] for m in again] == ["keep"]
    assert again[0]["id"] == got["keep"]["id"] and again[0]["attempt"] == 2
    assert time.monotonic() - t0 < 20
    # extend once more and ack with the handle the change returned
    c.change_invisible(again[0]["id"], 30)
    c.ack(again[0]["id"])
    assert c.receive(16, 1) == []  # acked: neither comes back (await 3 s)


def test_unacked_message_comes_back_with_a_growing_delivery_attempt(
    ggw: GatewayProcess, clients: Clients
) -> None:
    p = producer(clients, ggw, "pyRedeliver")
    c = simple(clients, ggw, "GID_pyRedeliver", {"pyRedeliver": "*"})
    sent = p.send_message("pyRedeliver", "not-acked", tag="T")
    attempts = []
    seen_at = []
    for _ in range(3):
        got = c.receive_all(1, WAIT, invisible=2)
        assert got[0]["id"] == sent["id"] and got[0]["body"] == "not-acked"
        attempts.append(got[0]["attempt"])
        seen_at.append(time.monotonic())
    assert attempts == [1, 2, 3]
    # invisible for its 2 s each time (the long poll returns it as soon as it is visible)
    assert all(b - a >= 1.5 for a, b in zip(seen_at, seen_at[1:], strict=False))
    c.ack(got[0]["id"])
    assert c.receive(16, 2) == []


def test_push_consumer_consumes_and_acks(ggw: GatewayProcess, clients: Clients) -> None:
    p = producer(clients, ggw, "pyPush")
    push = clients.py("push", endpoints=grpc_endpoint(ggw), group="GID_pyPush",
                      subscriptions={"pyPush": "*"})
    bodies = [f"p{i}" for i in range(5)]
    ids = {p.send_message("pyPush", b, tag="T", keys=[b])["id"] for b in bodies}
    got = push.collect("msg", 5, WAIT)
    assert sorted(m["body"] for m in got) == bodies
    assert {m["id"] for m in got} == ids
    assert all(m["attempt"] == 1 and m["keys"] == [m["body"]] for m in got)
    # acked: none comes back, to this consumer or another one of the group
    assert push.quiet("msg", 4.0) == []
    push.stop()
    c = simple(clients, ggw, "GID_pyPush", {"pyPush": "*"}, await_s=3)
    assert c.receive(16, 15) == []


def _dead_letters(address: str, group: str) -> list[Any]:
    async def pull() -> list[Any]:
        async with RemotingClient(address) as client:
            consumer = PullConsumer(client, "dlq-reader")
            out: list[Any] = []
            for mq in await consumer.queues(f"%DLQ%{group}"):
                out += (await consumer.pull(mq, 0)).messages
            return out

    return asyncio.run(pull())


def test_push_consumer_failure_backs_off_then_goes_to_the_dlq(
    start_gateway: Callable[..., GatewayProcess], clients: Clients
) -> None:
    # the group allows 2 redeliveries: 3 deliveries in all, then the dead-letter topic
    gw = start_gateway(groups={"GID_pyPoison": 2})
    p = producer(clients, gw, "pyPoison")
    push = clients.py("push", endpoints=grpc_endpoint(gw), group="GID_pyPoison",
                      subscriptions={"pyPoison": "*"}, fail=["poison"])
    p.send_message("pyPoison", "fine", tag="T")
    poison = p.send_message("pyPoison", "poison", tag="T", keys=["bad"])
    got = push.collect("msg", 4, 90.0)
    fine = [m for m in got if m["body"] == "fine"]
    tries = [m for m in got if m["body"] == "poison"]
    assert len(fine) == 1 and fine[0]["attempt"] == 1
    assert [m["attempt"] for m in tries] == [1, 2, 3]
    assert all(m["id"] == poison["id"] for m in tries)
    # each retry waits for the backoff the settings gave (at least a second)
    gaps = [b["at"] - a["at"] for a, b in zip(tries, tries[1:], strict=False)]
    assert all(g >= 0.9 for g in gaps), gaps
    assert push.quiet("msg", 5.0) == []  # no fourth delivery
    address = f"127.0.0.1:{gw.ports['unified']}"
    deadline = time.monotonic() + WAIT
    while not (dlq := _dead_letters(address, "GID_pyPoison")):
        assert time.monotonic() < deadline, "nothing in %DLQ%GID_pyPoison"
        time.sleep(0.5)
    assert [m.body for m in dlq] == [b"poison"]
    assert dlq[0].keys == "bad"


def test_transactional_producer_commit_rollback_and_check_back(
    start_gateway: Callable[..., GatewayProcess], clients: Clients, tmp_path: Any
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\ntxn_first_check_ms = 500\ntxn_check_interval_ms = 60000\n")
    gw = start_gateway("--config", str(config), topics={"pyTx": MessageType.TRANSACTION})
    p = producer(clients, gw, "pyTx",
                 checker={"left-open-yes": "COMMIT", "left-open-no": "ROLLBACK"})
    c = simple(clients, gw, "GID_pyTx", {"pyTx": "*"})
    committed = p.call("send_tx", message={"topic": "pyTx", "body": "commit-me"},
                       end="commit")
    assert committed["transaction_id"].startswith("lmq-tx:")
    p.call("send_tx", message={"topic": "pyTx", "body": "roll-me-back"}, end="rollback")
    opened = {body: p.call("send_tx", message={"topic": "pyTx", "body": body}, end="none")
              for body in ("left-open-yes", "left-open-no")}
    # the gateway asks the producer about the two left open; its checker answers
    checks = {e["body"]: e for e in p.collect("check", 2, WAIT)}
    assert sorted(checks) == ["left-open-no", "left-open-yes"]
    assert checks["left-open-yes"]["id"] == opened["left-open-yes"]["id"]
    assert checks["left-open-yes"]["topic"] == "pyTx" and not checks["left-open-yes"]["corrupted"]
    got = {m["body"]: m for m in c.receive_all(2, WAIT, invisible=30)}
    assert sorted(got) == ["commit-me", "left-open-yes"]
    assert got["commit-me"]["id"] == committed["id"]
    for m in got.values():
        assert not m["corrupted"]
        c.ack(m["id"])
    assert c.receive(16, 5) == []  # the rolled-back ones never come
