"""Consuming AMQP queues over the JSON API (/v1/amqp/{vhost}/queues/{queue}/receive):
requests and pika on the same queues of a real gateway, every JSON API response checked
against the OpenAPI document (the Api class of test_http_v1). The queue decides what is
delivered: the work is shared with pika consumers, TTL, dead-lettering and
x-delivery-limit still apply, deliveries not acked come back, a restart redelivers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from click.testing import CliRunner

from cli.main import main
from gateway.config import AUTO

from ..amqp_support import ThreadGateway
from ..gateway_process import GatewayProcess
from .test_http_v1 import BOUND, Api, base

Q = "/v1/amqp/{vhost}/queues/{queue}"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[ThreadGateway]:
    gateway = ThreadGateway(tmp_path / "data", http_port=AUTO).start()
    try:
        yield gateway
    finally:
        gateway.stop()


class Queues(Api):
    def receive_q(self, queue: str, **doc: Any) -> list[dict[str, Any]]:
        resp = self.post_q(queue, "receive", **doc)
        assert resp.status_code == 200, resp.text
        return resp.json()["messages"]

    def post_q(self, queue: str, what: str, **doc: Any) -> requests.Response:
        return self.call("POST", f"/v1/amqp/%2F/queues/{queue}/{what}", f"{Q}/{what}",
                         json=doc)

    def settle_q(self, queue: str, what: str, handles: list[str], **doc: Any
                 ) -> requests.Response:
        return self.post_q(queue, what, receipt_handles=handles, **doc)


@pytest.fixture
def amqp(gw: ThreadGateway) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.port))
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


def _publish(ch: Any, queue: str, bodies: list[str], **props: Any) -> None:
    for body in bodies:
        ch.basic_publish("", queue, body.encode(), pika.BasicProperties(**props))


def _get(ch: Any, queue: str) -> tuple[Any, Any, bytes] | None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    return None


def test_receive_ack_and_share_the_work_with_a_pika_consumer(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("jobs", durable=True)
    _publish(amqp, "jobs", [f"m{i}" for i in range(20)], content_type="text/plain",
             headers={"k": "v", "n": 7}, delivery_mode=2, priority=3, message_id="id-1",
             correlation_id="c-1", reply_to="r", app_id="app", type="t",
             timestamp=1_700_000_000)
    # a pika consumer with prefetch 5 takes 5 and holds them unacked
    amqp.basic_qos(prefetch_count=5)
    pika_got: list[tuple[int, bytes]] = []
    amqp.basic_consume("jobs", lambda ch, m, p, b: pika_got.append((m.delivery_tag, b)))
    deadline = time.monotonic() + BOUND
    while len(pika_got) < 5 and time.monotonic() < deadline:
        amqp.connection.process_data_events(time_limit=0.05)
    assert len(pika_got) == 5
    # HTTP gets the rest: one more consumer of the queue, never what pika holds
    http_got = api.receive_q("jobs", max_messages=32, wait_seconds=1)
    http_got += api.receive_q("jobs", max_messages=32, wait_seconds=0)
    bodies = [b.decode() for _, b in pika_got] + [m["body"] for m in http_got]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(20))
    first = http_got[0]
    assert first["exchange"] == "" and first["routing_key"] == "jobs"
    assert first["redelivered"] is False and first["delivery_count"] == 1
    assert first["properties"] == {
        "content_type": "text/plain", "headers": {"k": "v", "n": 7}, "delivery_mode": 2,
        "priority": 3, "correlation_id": "c-1", "reply_to": "r", "message_id": "id-1",
        "timestamp": 1_700_000_000, "message_type": "t", "app_id": "app"}
    assert api.receive_q("jobs", wait_seconds=0) == []  # all in flight
    resp = api.settle_q("jobs", "ack", [m["receipt_handle"] for m in http_got] + ["junk"])
    assert resp.status_code == 207
    assert [r["status"] for r in resp.json()["results"]] == [200] * len(http_got) + [400]
    # acked twice: no longer held
    assert api.settle_q("jobs", "ack", [first["receipt_handle"]]).status_code == 410
    for tag, _ in pika_got:
        amqp.basic_ack(tag)
    amqp.basic_cancel(amqp.consumer_tags[0])
    assert amqp.queue_declare("jobs", passive=True).method.message_count == 0
    assert api.receive_q("jobs", wait_seconds=0.2) == []


def test_long_poll_is_woken_by_a_publish_and_round_robins_with_amqp(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("work")
    got: list[dict[str, Any]] = []
    start = threading.Event()

    def poll() -> None:
        start.set()
        got.extend(Queues(base(gw)).receive_q("work", wait_seconds=BOUND, max_messages=1))

    t = threading.Thread(target=poll)
    t.start()
    start.wait()
    queue = gw.front.broker.vhosts["/"].queues["work"]
    deadline = time.monotonic() + BOUND
    while not gw.run(lambda: any(c.remote for c in queue.consumers)):  # it waits now
        assert time.monotonic() < deadline
        time.sleep(0.01)
    _publish(amqp, "work", ["wake"])
    t.join(BOUND)
    assert not t.is_alive() and [m["body"] for m in got] == ["wake"]
    api.settle_q("work", "ack", [got[0]["receipt_handle"]])
    # no body published to "work" is lost or doubled between the two kinds of consumer
    pika_got: list[bytes] = []
    amqp.basic_qos(prefetch_count=1)
    amqp.basic_consume("work", lambda ch, m, p, b: (pika_got.append(b),
                                                    ch.basic_ack(m.delivery_tag)))
    _publish(amqp, "work", [f"w{i}" for i in range(10)])
    http_bodies: list[str] = []
    deadline = time.monotonic() + BOUND
    while len(pika_got) + len(http_bodies) < 10 and time.monotonic() < deadline:
        amqp.connection.process_data_events(time_limit=0.02)
        msgs = api.receive_q("work", max_messages=1, wait_seconds=0)
        http_bodies += [m["body"] for m in msgs]
        if msgs:
            api.settle_q("work", "ack", [m["receipt_handle"] for m in msgs])
    assert sorted([b.decode() for b in pika_got] + http_bodies) == sorted(
        f"w{i}" for i in range(10))


def test_nack_visibility_and_timeout_requeue(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("v")
    _publish(amqp, "v", ["a"])
    [m] = api.receive_q("v", invisible_seconds=1)
    resp = api.settle_q("v", "nack", [m["receipt_handle"]])
    assert resp.status_code == 200
    [m] = api.receive_q("v", wait_seconds=1, invisible_seconds=1)
    assert m["redelivered"] is True and m["delivery_count"] == 2
    # extended: not back after its first second; the handle still acks afterwards
    resp = api.settle_q("v", "visibility", [m["receipt_handle"]], invisible_seconds=3)
    assert resp.status_code == 200
    assert resp.json()["results"][0]["new_receipt_handle"] == m["receipt_handle"]
    assert api.receive_q("v", wait_seconds=1.5) == []
    # not settled in time: back in the queue, to AMQP consumers too, redelivered
    got = _get(amqp, "v")
    assert got is not None and got[2] == b"a" and got[0].redelivered
    assert api.settle_q("v", "ack", [m["receipt_handle"]]).status_code == 410
    # visibility 0 requeues now; the handle is spent
    _publish(amqp, "v", ["b"])
    [m] = api.receive_q("v", wait_seconds=1)
    resp = api.settle_q("v", "visibility", [m["receipt_handle"]], invisible_seconds=0)
    assert resp.status_code == 200 and "new_receipt_handle" not in resp.json()["results"][0]
    [again] = api.receive_q("v", wait_seconds=1)
    assert again["body"] == "b" and again["delivery_count"] == 2


def test_ttl_dead_lettering_and_delivery_limit_still_apply(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("dead")
    amqp.queue_declare("limited", arguments={
        "x-delivery-limit": 1, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dead"})
    amqp.queue_declare("short", arguments={
        "x-message-ttl": 100, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dead"})
    # x-delivery-limit 1: delivered twice, then dead-lettered instead of a third time
    _publish(amqp, "limited", ["twice"])
    for count in (1, 2):
        [m] = api.receive_q("limited", wait_seconds=1)
        assert m["delivery_count"] == count
        api.settle_q("limited", "nack", [m["receipt_handle"]])
    assert api.receive_q("limited", wait_seconds=0.3) == []
    [dead] = api.receive_q("dead", wait_seconds=1)
    assert dead["body"] == "twice"
    death = dead["properties"]["headers"]["x-death"][0]
    assert death["queue"] == "limited" and death["reason"] == "delivery_limit"
    api.settle_q("dead", "ack", [dead["receipt_handle"]])
    # TTL: expired unseen, dead-lettered (the HTTP consumer never gets it)
    _publish(amqp, "short", ["stale"])
    [dead] = api.receive_q("dead", wait_seconds=3)
    assert dead["body"] == "stale"
    assert dead["properties"]["headers"]["x-death"][0]["reason"] == "expired"
    assert api.receive_q("short", wait_seconds=0) == []
    api.settle_q("dead", "ack", [dead["receipt_handle"]])
    # reject (requeue false): dead-lettered as rejected
    amqp.queue_declare("rej", arguments={"x-dead-letter-exchange": "",
                                         "x-dead-letter-routing-key": "dead"})
    _publish(amqp, "rej", ["no"])
    [m] = api.receive_q("rej", wait_seconds=1)
    assert api.settle_q("rej", "nack", [m["receipt_handle"]], requeue=False).status_code == 200
    [dead] = api.receive_q("dead", wait_seconds=2)
    assert dead["properties"]["headers"]["x-death"][0]["reason"] == "rejected"


def test_errors_exclusive_single_active_and_auto_delete(gw, amqp):
    api = Queues(base(gw))
    assert api.post_q("nope", "receive").status_code == 404
    amqp.queue_declare("a")
    amqp.queue_declare("b")
    _publish(amqp, "a", ["x"])
    [m] = api.receive_q("a", wait_seconds=1)
    resp = api.settle_q("b", "ack", [m["receipt_handle"]])  # a handle of another queue
    assert resp.status_code == 400
    assert api.settle_q("a", "ack", [m["receipt_handle"]]).status_code == 200
    assert api.post_q("a", "receive", max_messages=99).status_code == 400
    assert api.post_q("a", "receive", invisible_seconds=50_000).status_code == 400
    # an exclusive queue of a connection, an exclusive consumer: 409
    excl = amqp.queue_declare("", exclusive=True).method.queue
    assert api.call("POST", f"/v1/amqp/%2F/queues/{excl}/receive", f"{Q}/receive",
                    json={}).status_code == 409
    other = amqp.connection.channel()
    other.basic_consume("b", lambda *a: None, exclusive=True)
    assert api.post_q("b", "receive").status_code == 409
    other.close()
    # single active consumer: while a pika consumer is the active one, HTTP gets nothing
    amqp.queue_declare("sac", arguments={"x-single-active-consumer": True})
    seen: list[bytes] = []
    sac = amqp.connection.channel()
    sac.basic_consume("sac", lambda ch, m, p, b: seen.append(b), auto_ack=True)
    _publish(amqp, "sac", ["s1"])
    amqp.queue_declare("sac", passive=True)  # (a round trip: the publish was handled)
    assert api.receive_q("sac", wait_seconds=0.5) == []
    deadline = time.monotonic() + BOUND
    while not seen and time.monotonic() < deadline:
        amqp.connection.process_data_events(time_limit=0.05)
    assert seen == [b"s1"]
    sac.close()
    # an auto-delete queue is not deleted when an HTTP receive leaves it
    amqp.queue_declare("ad", auto_delete=True)
    assert api.receive_q("ad", wait_seconds=0.1) == []
    assert amqp.queue_declare("ad", passive=True).method.message_count == 0


def test_restart_redelivers_and_refuses_old_handles(tmp_path):
    data = tmp_path / "data"
    gw = ThreadGateway(data, http_port=AUTO).start()
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.port))
        ch = conn.channel()
        ch.queue_declare("keep", durable=True)
        _publish(ch, "keep", ["one", "two"], delivery_mode=2)
        conn.close()
        api = Queues(base(gw))
        held = api.receive_q("keep", wait_seconds=1, invisible_seconds=600)
        assert [m["body"] for m in held] == ["one", "two"]
    finally:
        gw.stop()
    gw = ThreadGateway(data, http_port=AUTO).start()
    try:
        api = Queues(base(gw))
        resp = api.settle_q("keep", "ack", [m["receipt_handle"] for m in held])
        assert resp.status_code == 409
        assert "another gateway node or an earlier run" in resp.json()["results"][0]["detail"]
        again = api.receive_q("keep", wait_seconds=1)
        assert [m["body"] for m in again] == ["one", "two"]
        assert all(m["redelivered"] and m["delivery_count"] == 2 for m in again)
        assert api.settle_q("keep", "ack", [m["receipt_handle"] for m in again]
                            ).status_code == 200
    finally:
        gw.stop()


def _lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


def test_vhost_read_permission_and_a_crash_redelivering(tmp_path):
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    _lmq("users", "add", "dave", "--password", "pw", *d)
    _lmq("users", "set-permissions", "dave", "--vhost", "/", "--configure", ".*",
         "--write", ".*", "--read", "^open$", *d)
    gw = GatewayProcess(data, "--http-port", "auto").start()
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", gw.ports["amqp"], credentials=pika.PlainCredentials("dave", "pw")))
        ch = conn.channel()
        for name in ("open", "closed"):
            ch.queue_declare(name, durable=True)
            _publish(ch, name, [f"to {name}"], delivery_mode=2)
        ch.queue_declare("open", passive=True)
        conn.close()
        url = f"http://127.0.0.1:{gw.ports['http']}"
        dave = requests.Session()
        dave.auth = ("dave", "pw")
        post = f"{url}/v1/amqp/%2F/queues/{{}}/{{}}"
        assert requests.post(post.format("open", "receive"), json={},
                             timeout=BOUND).status_code == 401
        assert dave.post(post.format("closed", "receive"), json={},
                         timeout=BOUND).status_code == 403
        resp = dave.post(post.format("open", "receive"), json={"wait_seconds": 2},
                         timeout=BOUND)
        assert resp.status_code == 200
        [m] = resp.json()["messages"]
        assert m["body"] == "to open"
        # a handle presented for a queue the user may not read: 403 before anything
        assert dave.post(post.format("closed", "ack"), json={
            "receipt_handles": [m["receipt_handle"]]}, timeout=BOUND).status_code == 403
        gw.kill()  # held, never acked: the next run delivers it again
        gw.restart()
        url = f"http://127.0.0.1:{gw.ports['http']}"
        resp = dave.post(f"{url}/v1/amqp/%2F/queues/open/ack",
                         json={"receipt_handles": [m["receipt_handle"]]}, timeout=BOUND)
        assert resp.status_code == 409
        resp = dave.post(f"{url}/v1/amqp/%2F/queues/open/receive", json={"wait_seconds": 2},
                         timeout=BOUND)
        [again] = resp.json()["messages"]
        assert again["body"] == "to open" and again["redelivered"] is True
    finally:
        gw.stop()


def test_message_group_stays_with_the_http_receiver_until_it_settles(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("grouped")
    for body, group in (("g1", "G"), ("g2", "G"), ("u1", None)):
        headers = {"JMSXGroupID": group} if group else {}
        _publish(amqp, "grouped", [body], headers=headers)
    [g1] = api.receive_q("grouped", max_messages=1, wait_seconds=1)
    assert g1["body"] == "g1"
    got: list[bytes] = []
    amqp.basic_consume("grouped", lambda ch, m, p, b: (got.append(b),
                                                       ch.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + BOUND
    while not got and time.monotonic() < deadline:
        amqp.connection.process_data_events(time_limit=0.05)
    amqp.connection.process_data_events(time_limit=0.3)
    assert got == [b"u1"]  # g2 waits: group G is with the HTTP receiver, g1 unsettled
    assert api.settle_q("grouped", "ack", [g1["receipt_handle"]]).status_code == 200
    deadline = time.monotonic() + BOUND
    while len(got) < 2 and time.monotonic() < deadline:
        amqp.connection.process_data_events(time_limit=0.05)
    assert got == [b"u1", b"g2"]  # released: the group moves on, in order


def test_priorities_come_first(gw, amqp):
    api = Queues(base(gw))
    amqp.queue_declare("prio", arguments={"x-max-priority": 5})
    for body, priority in (("low", 1), ("none", 0), ("high", 5), ("mid", 3)):
        _publish(amqp, "prio", [body], priority=priority)
    amqp.queue_declare("prio", passive=True)  # (a round trip: the publishes were handled)
    got = api.receive_q("prio", max_messages=4, wait_seconds=1)
    assert [m["body"] for m in got] == ["high", "mid", "low", "none"]
