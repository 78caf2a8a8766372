"""The admin API's RocketMQ operations against a running ``lmq serve`` (topic
auto-creation off, so only the API makes topics) with the real clients: a topic
created over the API is used at once by ali-ons (remoting) and the official RocketMQ 5
Python client (gRPC); a group reset to earliest is seen by its SimpleConsumer; bad
input is a 4xx naming the field; a topic deleted is gone for the producer; LMQs page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from ..gateway_process import GatewayProcess
from ..grpc_clients.clients import ClientError, PyClient, grpc_endpoint
from ..remoting.node_clients import produce, require_node
from .support import AdminClient, admin_gateway, audit_lines

pytestmark = pytest.mark.slow

WAIT = 30.0


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    require_node()
    config = tmp_path / "gateway.toml"
    config.write_text("rocketmq_auto_create_topics = false\n")
    gw = admin_gateway(tmp_path / "data", "--config", str(config)).start()
    try:
        yield gw
    finally:
        gw.stop()


def test_topic_created_used_at_once_group_reset_and_delete(
    gw: GatewayProcess, tmp_path: Path
) -> None:
    api = AdminClient(gw.ports["admin"])
    unified = f"127.0.0.1:{gw.ports['unified']}"
    # bad input: a 4xx naming the field, nothing created
    for body, field in (
        ({"message_type": "LOUD"}, "message_type"),
        ({"queues": 0}, "queues"),
        ({"queues": 2, "read_queues": 1}, "queues"),
        ({"perm": "x"}, "perm"),
        ({"queues": "8"}, "queues"),
    ):
        bad = api.call("PUT", "/topics/adminT", body)
        assert bad.status_code == 400 and bad.json()["field"] == field, (body, bad.text)
    bad = api.call("PUT", "/topics/TBW102", {})
    assert bad.status_code == 400 and bad.json()["field"] == "topic"
    assert api.call("GET", "/topics/adminT").status_code == 404
    created = api.call("PUT", "/topics/adminT", {"queues": 2, "message_type": "NORMAL"})
    assert created.status_code == 201, created.text
    assert [q["queue_id"] for q in created.json()["queues"]] == [0, 1]
    # used at once: ali-ons over remoting, the official client over gRPC
    sent = produce(unified, "adminT", "PID_admin", [{"body": "from-ons"}])
    assert sent[0]["msgId"]
    home = tmp_path / "py"
    producer = PyClient(
        "producer", home / "p", endpoints=grpc_endpoint(gw), topics=["adminT"]
    ).ready()
    consumer = PyClient(
        "simple",
        home / "c",
        endpoints=grpc_endpoint(gw),
        group="GID_admin",
        subscriptions={"adminT": "*"},
    ).ready()
    try:
        producer.send_message("adminT", "from-grpc")
        got = consumer.receive_all(2, WAIT)
        assert sorted(m["body"] for m in got) == ["from-grpc", "from-ons"]
        for m in got:
            consumer.ack(m["id"])
        # the gRPC connections count their messages: one sent, two (or more) received
        grpc_rows = api.get("/connections", protocol="grpc")["items"]
        assert sum(c["messages_in"] for c in grpc_rows) == 1, grpc_rows
        assert sum(c["messages_out"] for c in grpc_rows) >= 2, grpc_rows
        scraped = requests.get(f"http://127.0.0.1:{gw.ports['admin']}/metrics", timeout=10).text
        assert "lmq_grpc_messages_received_total 1" in scraped.splitlines()
        group = api.get("/groups/GID_admin")
        assert group["lag"] == 0 and sum(q["offset"] for q in group["queues"]) == 2
        # a reset to earliest: the consumer gets both again
        bad = api.call("POST", "/groups/GID_admin/reset", {"topic": "adminT"})
        assert bad.status_code == 400 and bad.json()["field"] == "position"
        reset = api.call(
            "POST", "/groups/GID_admin/reset", {"topic": "adminT", "position": "earliest"}
        )
        assert reset.status_code == 200, reset.text
        for sort in ("name", "-lag"):  # the page's lag, or every group's when sorted by it
            listed = api.get("/groups", filter="GID_adm", sort=sort)["items"]
            assert [(g["name"], g["lag"], g["queues"]) for g in listed] == [("GID_admin", 2, 2)]
        again = consumer.receive_all(2, WAIT)
        assert sorted(m["body"] for m in again) == ["from-grpc", "from-ons"]
        for m in again:
            consumer.ack(m["id"])
        listed = api.get("/groups", filter="GID_adm")
        assert [g["name"] for g in listed["items"]] == ["GID_admin"]
        # changing the type is applied at once: a NORMAL send to a FIFO topic is refused
        changed = api.call("PUT", "/topics/adminT", {"message_type": "FIFO"})
        assert changed.status_code == 200 and changed.json()["message_type"] == "FIFO"
        with pytest.raises(ClientError):
            producer.send_message("adminT", "normal-to-fifo")
        # deleted: gone for the producer
        gone = api.call("DELETE", "/topics/adminT")
        assert gone.status_code == 200 and gone.json()["messages"] == 2
        with pytest.raises(ClientError):
            producer.send_message("adminT", "after-delete")
        assert api.call("DELETE", "/topics/adminT").status_code == 404
    finally:
        producer.stop()
        consumer.stop()
    # LMQs page in name order: the group's offsets went with the topic's LMQs
    lmqs = api.get("/lmqs", limit=1)
    assert len(lmqs["items"]) <= 1
    actions = [(a["action"], a["status"]) for a in audit_lines(gw.data_dir)]
    assert ("topic.put", 201) in actions and ("group.reset", 200) in actions
    assert ("topic.delete", 200) in actions and ("topic.put", 400) in actions
