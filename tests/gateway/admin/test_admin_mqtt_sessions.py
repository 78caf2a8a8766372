"""The admin API's MQTT sessions (gateway/admin/mqtt_sessions.py) against ``lmq serve``
with real paho clients: online and offline sessions listed with their subscriptions
and backlog, paged and filtered; kicking an online session closes its connection and
ends the session (a reconnect finds none), kicking an offline one drops its state; an
unknown client id is 404 naming the field; each kick is in the audit log."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

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


def test_sessions_listed_and_kicked(gw: GatewayProcess) -> None:
    api = AdminClient(gw.ports["admin"])
    offline = Paho(gw.mqtt_port, "sleeper", clean=False)
    offline.subscribe("alerts/#", qos=1)
    offline.disconnect()
    online = Paho(gw.mqtt_port, "worker", clean=False)
    online.subscribe("jobs/+", qos=1)
    publisher = Paho(gw.mqtt_port, "pub")
    for i in range(3):
        publisher.publish(f"alerts/{i}", b"x", qos=1)

    doc = api.get("/mqtt/sessions", sort="client_id")
    rows = {r["client_id"]: r for r in doc["items"]}
    assert set(rows) == {"sleeper", "worker", "pub"} and doc["total"] == 3
    assert rows["sleeper"]["connected"] is False and rows["worker"]["connected"] is True
    assert rows["sleeper"]["subscriptions"] == [{"filter": "alerts/#", "qos": 1}]
    assert rows["sleeper"]["backlog"] == 3  # stored while it was away
    assert rows["worker"]["backlog"] == 0
    first = api.get("/mqtt/sessions", limit=2)
    assert len(first["items"]) == 2 and first["next"]
    assert [r["client_id"] for r in api.get("/mqtt/sessions", filter="sle")["items"]] == ["sleeper"]
    assert [r["client_id"] for r in api.get("/mqtt/sessions", connected="false")["items"]] == [
        "sleeper"
    ]

    gone = threading.Event()
    online.client.on_disconnect = lambda *args: gone.set()
    kicked = api.call("DELETE", "/mqtt/sessions/worker")
    assert kicked.status_code == 202, kicked.text
    assert gone.wait(10), "the kicked client's connection stayed open"
    online.close()
    assert api.call("DELETE", "/mqtt/sessions/sleeper").status_code == 202
    left = [r["client_id"] for r in api.get("/mqtt/sessions")["items"]]
    assert left == ["pub"]
    again = Paho(gw.mqtt_port, "sleeper", clean=False)
    assert not again.session_present  # its state went with the kick
    missing = api.call("DELETE", "/mqtt/sessions/nobody")
    assert missing.status_code == 404 and missing.json()["field"] == "client_id"
    kicks = [a for a in audit_lines(gw.data_dir) if a.get("action") == "mqtt_session.kick"]
    assert len(kicks) == 3  # the refused one too
