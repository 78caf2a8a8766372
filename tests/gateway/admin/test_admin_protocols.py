"""The admin API's MQTT and AMQP views against a running ``lmq serve`` with real clients
(paho-mqtt, pika): sessions with their offline backlog, kick; AMQP queues with depth and
consumers, bindings, purge, delete; the connector's rules when none runs; messages per
HTTP connection and per HTTP API (the JSON API, the Aliyun MQ HTTP API and RIP-17 count
what each request stored or was given on its connection and in their overview rates:
``http``, ``aliyun``, ``rip17``), each keep-alive connection found by its local port."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pika
import pytest

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from .support import AdminClient, admin_gateway, audit_lines


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"  # half messages checked back soon
    config.write_text("[store]\ntxn_first_check_ms = 300\n")
    gw = admin_gateway(tmp_path / "data", "--config", str(config)).start()
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

        # the queue's rates, between two looks a second or more apart: messages stored,
        # then messages settled (got with auto-ack)
        def rates() -> tuple[float | None, float | None]:
            [q] = [q for q in api.get("/amqp/queues", filter="orders.q")["items"]]
            return q["stored_per_s"], q["settled_per_s"]

        for _ in range(100):
            ch.basic_publish("orders.x", "eu", b"r")
            stored, _settled = rates()
            if stored:
                break
            conn.sleep(0.1)
        assert stored and stored > 0
        for _ in range(100):
            ch.basic_get("orders.q", auto_ack=True)
            _stored, settled = rates()
            if settled:
                break
            conn.sleep(0.1)
        assert settled and settled > 0
        assert {"name": "/", "exchanges": 6, "queues": 2} in api.get("/amqp/vhosts")["items"]
        # an exchange deleted: its bindings with it, a publish to it refused
        gone = api.call("DELETE", "/amqp/exchanges/%2F/orders.x")
        assert gone.status_code == 200, gone.text
        assert not [b for b in api.get("/amqp/bindings")["items"] if b["source"] == "orders.x"]
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.basic_publish("orders.x", "eu", b"late")
            ch.queue_declare("orders.q", durable=True, passive=True)  # the error arrives
        assert api.get("/amqp/vhosts")["items"][0]["exchanges"] == 5
        # a queue deleted under its consumer: the consumer is cancelled (consumer-cancel-notify)
        ch2 = conn.channel()
        ch2.queue_declare("consumed.q")
        cancelled: list[object] = []
        ch2.add_on_cancel_callback(cancelled.append)
        ch2.basic_consume("consumed.q", lambda *a: None)
        [row] = api.get("/amqp/queues", filter="consumed.q")["items"]
        assert row["consumers"] == 1
        assert api.call("DELETE", "/amqp/queues/%2F/consumed.q").status_code == 200
        for _ in range(50):
            conn.process_data_events(time_limit=0.1)
            if cancelled:
                break
        assert len(cancelled) == 1
        refused = api.call("DELETE", "/amqp/exchanges/%2F/amq.topic")
        assert refused.status_code == 400
        assert api.call("DELETE", "/amqp/queues/%2F/idle.q").status_code == 200
        assert "idle.q" not in {q["name"] for q in api.get("/amqp/queues")["items"]}
        assert api.call("DELETE", "/amqp/queues/%2F/idle.q").status_code == 404
        assert [(a["action"], a["target"], a["status"]) for a in audit_lines(gw.data_dir)] == [
            ("amqp.queue.purge", "//orders.q", 200),
            ("amqp.exchange.delete", "//orders.x", 200),
            ("amqp.queue.delete", "//consumed.q", 200),
            ("amqp.exchange.delete", "//amq.topic", 400),
            ("amqp.queue.delete", "//idle.q", 200),
            ("amqp.queue.delete", "//idle.q", 404),
        ]
    finally:
        conn.close()


RIP17 = {"GroupName": "PG_cnt", "Pid": "1", "Version": "1.0", "Language": "JAVA"}


def request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    return response.status, response.read()


def counted(api: AdminClient, conn: http.client.HTTPConnection) -> tuple[int, int]:
    """(messages in, messages out) of ``conn`` in the admin API's connections list."""
    assert conn.sock is not None
    peer = f"127.0.0.1:{conn.sock.getsockname()[1]}"
    rows = [r for r in api.get("/connections", protocol="http", limit=1000)["items"]]
    [row] = [r for r in rows if r["peer"] == peer]
    return row["messages_in"], row["messages_out"]


def test_http_apis_count_messages_per_connection_and_protocol(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    port = gw.ports["unified"]
    json_api, aliyun, rip17 = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(3)
    )
    try:
        # the JSON API: a batch of 3 and one more stored, 4 received (the batch counts each)
        batch = json.dumps({"messages": [{"body": f"m{i}"} for i in range(3)]}).encode()
        jh = {"content-type": "application/json"}
        assert request(json_api, "POST", "/v1/topics/cnt-json/messages", batch, jh)[0] == 200
        assert (
            request(json_api, "POST", "/v1/topics/cnt-json/messages", b'{"body":"x"}', jh)[0] == 201
        )
        got: list[Any] = []
        while len(got) < 4:
            status, raw = request(
                json_api,
                "POST",
                "/v1/groups/cnt/topics/cnt-json/receive?wait_seconds=5&max_messages=16",
            )
            assert status == 200, raw
            got += json.loads(raw)["messages"]
        assert counted(api, json_api) == (4, 4)
        # a half message, handed back to its producer group's poll: one in, one out
        half_doc = b'{"body":"h","transaction":true,"producer_group":"PG_cnt"}'
        assert request(json_api, "POST", "/v1/topics/cnt-json/messages", half_doc, jh)[0] == 201
        halves: list[Any] = []
        for _ in range(10):
            status, raw = request(
                json_api, "POST", "/v1/producers/PG_cnt/transactions/receive?wait_seconds=3"
            )
            halves += json.loads(raw)["transactions"]
            if halves:
                break
        assert len(halves) == 1, raw
        assert counted(api, json_api) == (5, 5)
        # the Aliyun MQ HTTP API: 2 published, 2 consumed
        xml = (
            b"<?xml version='1.0' encoding='UTF-8'?><Message><MessageBody>a</MessageBody></Message>"
        )
        for _ in range(2):
            status, raw = request(aliyun, "POST", "/topics/cnt-ali/messages", xml)
            assert status == 201, raw
        consumed = 0
        while consumed < 2:
            status, raw = request(
                aliyun,
                "GET",
                "/topics/cnt-ali/messages?consumer=GID_cnt&numOfMessages=16&waitseconds=5",
            )
            assert status == 200, raw
            consumed += raw.count(b"<Message>")
        assert counted(api, aliyun) == (2, 2)
        # a half message stored, then handed back to its producer (trans=pop): one more
        # in, one more out
        half = xml.replace(
            b"</MessageBody>", b"</MessageBody><Properties>__TransCheckT:1|</Properties>"
        )
        status, raw = request(aliyun, "POST", "/topics/cnt-ali/messages", half)
        assert status == 201 and b"<ReceiptHandle>" in raw, raw
        checked = 0
        for _ in range(10):
            status, raw = request(
                aliyun,
                "GET",
                "/topics/cnt-ali/messages?consumer=GID_cnt&trans=pop&numOfMessages=16"
                "&waitseconds=3",
            )
            checked += raw.count(b"<Message>")
            if checked:
                break
        assert checked == 1, raw
        assert counted(api, aliyun) == (3, 3)
        # RIP-17: one send and a batch of 3 (all stored together), nothing given
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        one = urlencode(
            {"topic": "cnt-rip", "content": "hello", "bizSeqNo": "B1", "uniqueId": "U1"}
        ).encode()
        status, raw = request(rip17, "POST", "/", one, {**RIP17, **form, "Code": "101"})
        assert json.loads(raw)["retCode"] == 0, raw
        contents = [{"bizSeqNo": f"b{i}", "topic": "cnt-rip", "msg": f"m{i}"} for i in range(3)]
        three = urlencode({"batchId": "X", "size": "3", "contents": json.dumps(contents)}).encode()
        status, raw = request(rip17, "POST", "/", three, {**RIP17, **form, "Code": "102"})
        assert json.loads(raw)["retCode"] == 0, raw
        assert counted(api, rip17) == (4, 0)
        # a refused request counts nothing
        status, raw = request(rip17, "POST", "/", one, {**RIP17, **form, "Code": "203"})
        assert json.loads(raw)["retCode"] == 2 and counted(api, rip17) == (4, 0)
        # each API's rates in the overview's history (a sample every 5 s)
        seen: dict[str, float] = {}
        for _ in range(300):
            for sample in api.get("/overview/history")["samples"]:
                for key in ("http", "aliyun", "rip17"):
                    seen[key] = max(seen.get(key, 0.0), sample["in"].get(key, 0.0))
                seen["aliyun out"] = max(
                    seen.get("aliyun out", 0.0), sample["out"].get("aliyun", 0.0)
                )
            if len(seen) == 4 and all(seen.values()):
                break
            time.sleep(0.1)
        assert all(seen.values()) and len(seen) == 4, seen
    finally:
        for conn in (json_api, aliyun, rip17):
            conn.close()
