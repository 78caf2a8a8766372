"""The admin API's MQTT and AMQP views against a running ``lmq serve`` with real clients
(paho-mqtt, pika): sessions with their offline backlog, kick; AMQP queues with depth and
consumers, bindings, purge, delete; the connector's rules when none runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from .support import AdminClient, admin_gateway, audit_lines


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = admin_gateway(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


def test_mqtt_sessions_backlog_and_kick(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    offline = Paho(gw.mqtt_port, "dev-offline", clean=False)
    offline.subscribe("plant/+/temp", qos=1)
    offline.disconnect()
    online = Paho(gw.mqtt_port, "dev-online", clean=False)
    online.subscribe("plant/#", qos=1)
    publisher = Paho(gw.mqtt_port, "pub")
    for i in range(3):
        publisher.publish(f"plant/{i}/temp", b"21", qos=1)
    online.get_n(3)
    rows = api.get("/mqtt/sessions", sort="-name")["items"]
    by_id = {r["client_id"]: r for r in rows}
    assert by_id["dev-offline"]["connected"] is False
    assert by_id["dev-offline"]["backlog"] == 3
    assert by_id["dev-online"]["connected"] is True
    assert [r["client_id"] for r in rows] == ["pub", "dev-online", "dev-offline"]
    # paged before the backlog is read (only the page's rows have one), or sorted by it
    first = api.get("/mqtt/sessions", limit=1)
    assert [(r["client_id"], r["backlog"]) for r in first["items"]] == [("dev-offline", 3)]
    by_backlog = api.get("/mqtt/sessions", sort="-backlog")["items"]
    backlogs = [r["backlog"] for r in by_backlog]
    assert backlogs == sorted(backlogs, reverse=True) and backlogs[0] >= 3
    # selected on (value, client id) pairs: a sort by a count, a filter, the next page
    by_subs = api.get("/mqtt/sessions", sort="-subscriptions", limit=2)
    assert [r["subscriptions"] for r in by_subs["items"]] == [1, 1]
    rest = api.get("/mqtt/sessions", sort="-subscriptions", limit=2, cursor=by_subs["next"])
    assert [(r["client_id"], r["subscriptions"]) for r in rest["items"]] == [("pub", 0)]
    assert rest["next"] is None and rest["total"] == 3
    assert {r["client_id"] for r in by_subs["items"]} == {"dev-offline", "dev-online"}
    filtered = api.get("/mqtt/sessions", filter="dev-", sort="-name")
    assert [r["client_id"] for r in filtered["items"]] == ["dev-online", "dev-offline"]
    assert api.call("GET", "/mqtt/sessions", sort="bogus").json()["field"] == "sort"
    shown = api.get("/mqtt/sessions/dev-offline")
    assert shown["subscription_list"] == [
        {"filter": "plant/+/temp", "qos": 1, "share_group": None, "backlog": 3}
    ]
    assert [r["client_id"] for r in api.get("/mqtt/sessions", connected="true")["items"]] == [
        "dev-online",
        "pub",
    ]
    # kick: the connected client is disconnected and its session discarded
    kicked = api.call("DELETE", "/mqtt/sessions/dev-online")
    assert kicked.status_code == 200 and kicked.json()["was_connected"] is True
    again = Paho(gw.mqtt_port, "dev-online", clean=False)
    assert not again.session_present
    assert api.call("DELETE", "/mqtt/sessions/dev-offline").json()["was_connected"] is False
    assert api.call("GET", "/mqtt/sessions/dev-offline").status_code == 404
    missing = api.call("DELETE", "/mqtt/sessions/nobody")
    assert missing.status_code == 404 and missing.json()["field"] == "client_id"
    assert api.call("GET", "/connector/rules").status_code == 404  # no connector here
    assert [a["action"] for a in audit_lines(gw.data_dir)] == [
        "mqtt.kick",
        "mqtt.kick",
        "mqtt.kick",
    ]


def test_amqp_queues_bindings_purge_delete(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.ports["amqp"]))
    try:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct")
        ch.queue_declare("orders.q", durable=True)
        ch.queue_bind("orders.q", "orders.x", "eu")
        for i in range(4):
            ch.basic_publish("orders.x", "eu", f"o{i}".encode())
        ch.queue_declare("idle.q")
        deadline_rows = None
        for _ in range(50):
            rows = {q["name"]: q for q in api.get("/amqp/queues", vhost="/")["items"]}
            if rows.get("orders.q", {}).get("messages") == 4:
                deadline_rows = rows
                break
            conn.sleep(0.1)
        assert deadline_rows is not None
        assert api.get("/amqp/queues", sort="-messages", limit=1)["items"][0]["name"] == "orders.q"
        binding = [b for b in api.get("/amqp/bindings")["items"] if b["source"] == "orders.x"]
        assert binding == [
            {
                "vhost": "/",
                "source": "orders.x",
                "destination_type": "queue",
                "destination": "orders.q",
                "routing_key": "eu",
            }
        ]
        assert "orders.x" in {x["name"] for x in api.get("/amqp/exchanges")["items"]}
        purged = api.call("POST", "/amqp/queues/%2F/orders.q/purge")
        assert purged.status_code == 200 and purged.json()["purged"] == 4
        assert ch.queue_declare("orders.q", durable=True, passive=True).method.message_count == 0
        # messages in and out on the connection's row (5 published, 1 got)
        ch.basic_publish("orders.x", "eu", b"o4")
        got = None
        for _ in range(50):
            _method, _props, got = ch.basic_get("orders.q", auto_ack=True)
            if got is not None:
                break
            conn.sleep(0.1)
        assert got == b"o4"
        [row] = api.get("/connections", protocol="amqp")["items"]
        assert (row["messages_in"], row["messages_out"]) == (5, 1)
        refused = api.call("DELETE", "/amqp/exchanges/%2F/amq.topic")
        assert refused.status_code == 400
        assert api.call("DELETE", "/amqp/queues/%2F/idle.q").status_code == 200
        assert "idle.q" not in {q["name"] for q in api.get("/amqp/queues")["items"]}
        assert api.call("DELETE", "/amqp/queues/%2F/idle.q").status_code == 404
    finally:
        conn.close()
