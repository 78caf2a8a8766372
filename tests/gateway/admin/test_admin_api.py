"""The admin API (gateway/admin, docs/operations.md) against a running ``lmq serve``
with real clients: the overview, connections (list, page, close), authentication
(open mode, 401, 403, a user added taking effect at once) and the audit log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from cli.main import main
from gateway.admin.address import read_address

from ..amqp_support import ThreadGateway
from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho, RawClient
from .support import AdminClient, admin_gateway, audit_lines, write_users


@pytest.fixture
def open_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = admin_gateway(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


def test_overview_connections_and_close(open_gateway: GatewayProcess) -> None:
    gw = open_gateway
    data = gw.data_dir
    assert read_address(data) == f"http://127.0.0.1:{gw.ports['admin']}"
    api = AdminClient(gw.ports["admin"])
    clients = [Paho(gw.mqtt_port, f"sensor-{i}") for i in range(3)]
    clients[0].publish("a/b", b"x", qos=1)
    doc = api.get("/overview")
    assert doc["status"] == "ok" and doc["authentication"] == "open"
    for _ in range(300):  # the rates move while a client publishes (samples every 5 s)
        clients[1].publish("a/b", b"y", qos=1)
        rates = api.get("/overview")["rates"]
        if rates["in"].get("mqtt", 0) > 0:
            break
        time.sleep(0.1)
    assert rates["in"].get("mqtt", 0) > 0, rates
    assert doc["connections"]["by_protocol"]["mqtt"] == 3
    assert doc["store"]["segments"] >= 1 and doc["process"]["open_files"] > 0
    assert doc["version"] == version("lmq-gateway") and doc["uptime_seconds"] >= 0
    assert doc["process"]["rss_bytes"] > 0 and doc["store"]["bytes"] > 0
    assert doc["store"]["publisher_pending"] >= 0  # the store's lag: appends not yet done
    assert doc["connections"]["by_listener"] and doc["listeners"]
    assert set(doc["rates"]) == {"in", "out"}
    history = api.get("/overview/history", since=0)
    assert history["interval_s"] > 0 and isinstance(history["samples"], list)
    assert api.call("GET", "/overview/history", since="yesterday").status_code == 400
    # paged, sorted and filtered on the server
    first = api.get("/connections", protocol="mqtt", sort="-client_id", limit=2)
    assert [c["client_id"] for c in first["items"]] == ["sensor-2", "sensor-1"]
    second = api.get(
        "/connections", protocol="mqtt", sort="-client_id", limit=2, cursor=first["next"]
    )
    assert [c["client_id"] for c in second["items"]] == ["sensor-0"]
    assert second["next"] is None
    # the default sort (by id) pages by a bisection of the table, either way
    ids = [c["id"] for c in api.get("/connections", protocol="mqtt")["items"]]
    assert ids == sorted(ids) and len(ids) == 3
    paged = []
    cursor = None
    for sort in ("id", "-id"):
        pages = []
        while True:
            doc = api.get(
                "/connections",
                protocol="mqtt",
                sort=sort,
                limit=2,
                **({"cursor": cursor} if cursor else {}),
            )
            pages.append([c["id"] for c in doc["items"]])
            cursor = doc["next"]
            if cursor is None:
                break
        paged.append(pages)
    assert paged == [[ids[:2], ids[2:]], [ids[:0:-1], ids[:1]]]
    id_cursor = api.get("/connections", limit=1)["next"]  # a cursor of another sort: 400
    # youngest first by age, oldest first descending
    by_age = [
        c["client_id"]
        for c in api.get("/connections", protocol="mqtt", sort="age_seconds")["items"]
    ]
    assert by_age == ["sensor-2", "sensor-1", "sensor-0"]
    assert (
        api.call("GET", "/connections", sort="peer", cursor=id_cursor).json()["field"] == "cursor"
    )
    # messages in and out per connection, counted by the front end
    counted_sub = Paho(gw.mqtt_port, "counted-sub")
    counted_sub.subscribe("count/#", qos=1)
    counted_pub = Paho(gw.mqtt_port, "counted-pub")
    for i in range(3):
        counted_pub.publish(f"count/{i}", b"n", qos=1)
    counted_sub.get_n(3)
    counted_rows = api.get("/connections", filter="counted-")["items"]
    assert all(c["bytes_in"] > 0 and c["bytes_out"] > 0 for c in counted_rows), counted_rows
    counted = {
        c["client_id"]: (c["messages_in"], c["messages_out"])
        for c in api.get("/connections", filter="counted-", sort="-messages_in")["items"]
    }
    assert counted == {"counted-pub": (3, 0), "counted-sub": (0, 3)}
    counted_sub.disconnect()
    counted_pub.disconnect()
    assert api.get("/connections", filter="sensor-1")["items"][0]["client_id"] == "sensor-1"
    # a connection closed is closed
    raw = RawClient(gw.mqtt_port)
    from protocol.mqtt import Connect

    raw.send(Connect(client_id="to-close"))
    raw.recv()
    target = api.get("/connections", filter="to-close")["items"][0]
    assert target["user"] == "" and target["protocol"] == "mqtt"
    response = api.call("DELETE", f"/connections/{target['id']}")
    assert response.status_code == 202, response.text
    assert raw.closed_by_server()
    assert api.call("DELETE", f"/connections/{target['id']}").status_code == 404
    # the overview's counts are kept as connections come and go: the three sensors left
    for _ in range(100):
        conns = api.get("/overview")["connections"]
        if conns["by_protocol"].get("mqtt") == 3:
            break
        time.sleep(0.05)
    assert conns["by_protocol"]["mqtt"] == 3, conns
    assert sum(conns["by_listener"].values()) == conns["total"]
    assert sum(conns["by_protocol"].values()) == conns["total"]
    bad = api.call("DELETE", "/connections/x")
    assert bad.status_code == 400 and bad.json()["field"] == "id"
    assert api.call("GET", "/connections", limit="0").json()["field"] == "limit"
    assert api.call("GET", "/connections", sort="colour").json()["field"] == "sort"
    # the admin port answers the admin API only
    other = api.session.post(
        f"http://127.0.0.1:{gw.ports['admin']}/v1/topics/t/messages", timeout=10
    )
    assert other.status_code == 404
    lines = audit_lines(data)
    assert [(a["action"], a["status"]) for a in lines] == [
        ("connection.close", 202),
        ("connection.close", 404),
        ("connection.close", 400),
    ]
    assert lines[0]["user"] == "anonymous" and lines[0]["peer"] == "127.0.0.1"
    api.close()
    gw.stop()
    assert read_address(data) is None  # removed at a clean stop


def test_logins_401_403_and_users_taking_effect(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    users = data / "users.json"
    write_users(users, {"root": ("root-pw", ("administrator",)), "app": ("app-pw", ())})
    gw = admin_gateway(data).start()
    try:
        port = gw.ports["admin"]
        anonymous = AdminClient(port).call("GET", "/overview")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic")
        wrong = AdminClient(port, ("root", "nope")).call("GET", "/overview")
        assert wrong.status_code == 401
        app = AdminClient(port, ("app", "app-pw")).call("GET", "/overview")
        assert app.status_code == 403 and "administrator" in app.json()["detail"]
        root = AdminClient(port, ("root", "root-pw"))
        assert root.get("/overview")["authentication"] == "users"
        # the CLI with and without the administrator's credentials
        cli = CliRunner()
        out = cli.invoke(
            main,
            ["status", "--data-dir", str(data)],
            env={"LMQ_SERVER": None, "LMQ_ADMIN_USER": None},
        )
        assert out.exit_code == 1 and out.output.count("\n") == 1
        assert "LMQ_ADMIN_USER" in out.output
        out = cli.invoke(
            main,
            ["status", "--data-dir", str(data)],
            env={"LMQ_SERVER": None, "LMQ_ADMIN_USER": "root", "LMQ_ADMIN_PASSWORD": "root-pw"},
        )
        assert out.exit_code == 0 and "authentication users" in out.output, out.output
        # a user added to the file logs in over MQTT at once (the file's watch)
        write_users(
            users,
            {"root": ("root-pw", ("administrator",)), "app": ("app-pw", ()), "new": ("new-pw", ())},
        )
        deadline_client = None
        for _ in range(50):
            client = Paho(gw.mqtt_port, "new-client", username="new", password="new-pw")
            if client.rc == 0:
                deadline_client = client
                break
            client.close()
            time.sleep(0.1)
        assert deadline_client is not None
        found = root.get("/connections", filter="new-client")["items"]
        assert found[0]["user"] == "new"
        closed = root.call("DELETE", f"/connections/{found[0]['id']}")
        assert closed.status_code == 202
        # a user added over the API logs in at once; bad input names the field
        bad = root.call("PUT", "/users/api-user", {"password": ""})
        assert bad.status_code == 400 and bad.json()["field"] == "password"
        bad = root.call("PUT", "/users/api-user", {"password": "pw", "tags": "admin"})
        assert bad.status_code == 400 and bad.json()["field"] == "tags"
        added = root.call("PUT", "/users/api-user", {"password": "api-pw"})
        assert added.status_code == 201 and added.json()["password"] is True
        client = Paho(gw.mqtt_port, "api-client", username="api-user", password="api-pw")
        assert client.rc == 0
        rule = root.call("POST", "/users/api-user/acl", {"access": "maybe", "filter": "a/#"})
        assert rule.status_code == 400 and rule.json()["field"] == "access"
        rule = root.call("POST", "/users/api-user/acl", {"access": "deny", "filter": "a/#"})
        assert rule.status_code == 201 and rule.json()["rule"] == "deny a/#"
        key = root.call("POST", "/users/api-user/access-keys", {}).json()
        assert key["secret_key"] and key["access_key"].startswith("LMQ")
        shown = root.get("/users/api-user")
        assert shown["acl"] == ["deny a/#"] and shown["access_keys"] == [key["access_key"]]
        assert "secret_key" not in str(root.get("/users"))
        assert root.call("DELETE", "/users/nobody").status_code == 404
        assert root.call("DELETE", "/users/api-user").status_code == 200
        refused = Paho(gw.mqtt_port, "api-client-2", username="api-user", password="api-pw")
        assert refused.rc != 0
        entry = audit_lines(data)[-1]
        assert (entry["user"], entry["via"], entry["action"]) == ("root", "basic", "user.delete")
        actions = [a["action"] for a in audit_lines(data)]
        assert actions[:2] == ["connection.close", "user.put"]
        assert "acl.add" in actions and "access_key.add" in actions
        text = (data / "audit.log").read_text()
        assert "api-pw" not in text and '"password":"(secret)"' in text
        assert json.dumps(entry)  # one JSON line
    finally:
        gw.stop()


def test_lmqs_page_in_name_order_with_prefix_and_filter(open_gateway: GatewayProcess) -> None:
    api = AdminClient(open_gateway.ports["admin"])
    for name in ("pageA", "pageB", "pageC"):
        assert api.call("PUT", f"/topics/{name}", {"queues": 100}).status_code == 201
    seen: list[str] = []
    cursor = None
    while True:
        params = {"prefix": "rmq:page", "limit": 70}
        if cursor:
            params["cursor"] = cursor
        doc = api.get("/lmqs", **params)
        seen += [i["name"] for i in doc["items"]]
        cursor = doc["next"]
        if cursor is None:
            break
    assert len(seen) == 300 and seen == sorted(seen) and len(set(seen)) == 300
    only = api.get("/lmqs", prefix="rmq:", filter="pageB:9", limit=1000)
    assert [i["name"] for i in only["items"]] == sorted(
        ["rmq:pageB:9", *(f"rmq:pageB:{n}" for n in range(90, 100))]
    )
    assert {i["consumers"] for i in only["items"]} == {0}
    one = api.get("/lmqs/rmq:pageA:7")
    assert one["messages"] == 0 and one["consumers"] == []
    # a consumer's offset set on an LMQ (lmq offsets set online)
    path = "/lmqs/rmq:pageA:7/offsets/G_set"
    assert api.call("PUT", path, {}).json()["field"] == "position"
    assert api.call("PUT", path, {"offset": 3}).json()["field"] == "offset"
    assert api.call("PUT", path, {"offset": -1}).json()["field"] == "offset"
    assert api.call("PUT", "/lmqs/rmq:nowhere:0/offsets/G_set", {"offset": 0}).status_code == 404
    put = api.call("PUT", path, {"position": "earliest"})
    assert put.status_code == 200 and put.json() == {
        "group": "G_set",
        "lmq": "rmq:pageA:7",
        "old_offset": None,
        "offset": 0,
    }
    assert api.get("/lmqs/rmq:pageA:7")["consumers"] == [{"group": "G_set", "offset": 0, "lag": 0}]
    topics = api.get("/topics", sort="-name", limit=2)
    assert [t["name"] for t in topics["items"]] == ["pageC", "pageB"]
    dry = api.call("POST", "/lmqs/clean", {"prefix": "rmq:pageC:", "dry_run": True}).json()
    assert dry["lmqs"] == 100 and "removed" not in dry
    # messages: peek (read-only) and find by id and key
    from ..mqtt_clients import Paho as Client

    subscriber = Client(open_gateway.mqtt_port, "peek-sub", clean=False)
    subscriber.subscribe("peek/me", qos=1)  # its filter's LMQ, mqtt:peek/me, holds them
    subscriber.disconnect()
    publisher = Client(open_gateway.mqtt_port, "peeker")
    for i in range(3):
        publisher.publish("peek/me", f"m{i}".encode(), qos=1)
    peeked = api.get("/lmqs/mqtt:peek%2Fme/messages", limit=2)
    assert [m["body"] for m in peeked["items"]] == ["m0", "m1"]
    again = api.get("/lmqs/mqtt:peek%2Fme/messages", offset=peeked["next_offset"])
    assert [m["body"] for m in again["items"]] == ["m2"]
    assert api.get("/lmqs/mqtt:peek%2Fme/messages", limit=2)["items"] == peeked["items"]
    assert api.call("GET", "/messages", topic="peek").json()["field"] == "key"
    assert api.call("GET", "/messages/0123456789ABCDEF0123456789ABCDEF").status_code == 404
    # a verify run: started (202), then its result
    assert api.call("GET", "/store/verify").status_code == 404
    started = api.call("POST", "/store/verify", {})
    assert started.status_code == 202 and started.json()["state"] in ("running", "done")
    for _ in range(600):
        run = api.get("/store/verify")
        if run["state"] == "done":
            break
        time.sleep(0.05)
    assert run["state"] == "done" and run["ok"] is True and run["records"] >= 3, run
    released = api.call("POST", "/groups/GID/release", {"topic": "pageA", "message_group": "g"})
    assert released.status_code == 404 and released.json()["field"] == "message_group"
    assert api.call("POST", "/lmqs/clean", {}).json()["field"] == "prefix"
    api.close()


def test_every_admin_route_is_in_the_openapi_document(tmp_path: Path) -> None:
    """The routes of a started gateway's admin API (an in-process gateway: its router)
    against the paths of the published document, which validates."""
    from openapi_spec_validator import validate

    from gateway.admin.core import PREFIX
    from gateway.http.admin import admin_of

    gw = ThreadGateway(tmp_path / "data", http_port="auto").start()
    try:
        router = gw.gateway.front_ends["http"].router
        routes = {(r.method, PREFIX + r.pattern) for r in admin_of(router).routes}
        port = gw.gateway.listener_address("http")[1]
        response = requests.get(f"http://127.0.0.1:{port}/v1/openapi.json", timeout=10)
    finally:
        gw.stop()
    spec = response.json()
    validate(spec)
    documented = {
        (m.upper(), p) for p, item in spec["paths"].items() for m in item if p.startswith(PREFIX)
    }
    assert routes == documented
