"""The admin API's AMQP calls (gateway/admin/amqp.py) against ``lmq serve`` with a real
pika client: queues with their depth, unacked messages and consumers, exchanges with
their bindings, paged and filtered; purge drops the ready messages (a consumer then gets
none of them), delete cancels the queue's consumer and removes it; an unknown queue is
404 naming the field; changes are audited."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from ..gateway_process import GatewayProcess
from .support import AdminClient, admin_gateway, audit_lines


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = admin_gateway(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


def test_queues_exchanges_purge_and_delete(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.ports["amqp"]))
    try:
        ch = conn.channel()
        ch.exchange_declare("jobs-x", "direct", durable=True)
        for name in ("jobs", "spare"):
            ch.queue_declare(name, durable=True)
        ch.queue_bind("jobs", "jobs-x", routing_key="work")
        ch.confirm_delivery()
        for i in range(3):
            ch.basic_publish("jobs-x", "work", f"job-{i}".encode())

        doc = api.get("/amqp/queues", sort="name")
        rows = {r["name"]: r for r in doc["items"]}
        assert set(rows) == {"jobs", "spare"} and doc["total"] == 2
        assert rows["jobs"]["messages_ready"] == 3 and rows["jobs"]["vhost"] == "/"
        assert rows["spare"]["messages_ready"] == 0 and rows["jobs"]["durable"] is True
        assert [r["name"] for r in api.get("/amqp/queues", filter="spa")["items"]] == ["spare"]
        assert len(api.get("/amqp/queues", limit=1)["items"]) == 1
        xs = {x["name"]: x for x in api.get("/amqp/exchanges", limit=100)["items"]}
        assert xs["jobs-x"]["type"] == "direct" and "amq.topic" in xs
        assert xs["jobs-x"]["bindings"] == [
            {"destination_type": "queue", "destination": "jobs", "routing_key": "work"}
        ]

        purged = api.call("DELETE", "/amqp/vhosts/%2F/queues/jobs/messages")
        assert purged.status_code == 200 and purged.json()["purged"] == 3
        assert api.get("/amqp/queues", filter="jobs")["items"][0]["messages_ready"] == 0
        method, _, _ = ch.basic_get("jobs", auto_ack=True)
        assert method is None  # the purged messages are gone for consumers too

        cancelled: list[str] = []
        ch.basic_consume("spare", lambda *a: None, consumer_tag="c1")
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        assert api.get("/amqp/queues", filter="spare")["items"][0]["consumers"] == 1
        deleted = api.call("DELETE", "/amqp/vhosts/%2F/queues/spare")
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        for _ in range(50):  # up to 10 s for the basic.cancel to arrive
            conn.process_data_events(time_limit=0.2)
            if cancelled:
                break
        assert cancelled == ["c1"]  # consumer-cancel-notify
        assert [r["name"] for r in api.get("/amqp/queues")["items"]] == ["jobs"]
        missing = api.call("DELETE", "/amqp/vhosts/%2F/queues/spare")
        assert missing.status_code == 404 and missing.json()["field"] == "queue"
    finally:
        conn.close()
    actions = [a.get("action") for a in audit_lines(gw.data_dir)]
    assert actions.count("amqp_queue.purge") == 1 and actions.count("amqp_queue.delete") == 2
