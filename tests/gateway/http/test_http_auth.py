"""The JSON API with a real users file: HTTP Basic credentials of a gateway user (401
with a challenge otherwise) and the user's topic ACL on every call (403)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from cli.main import main

from ..gateway_process import GatewayProcess

BOUND = 10.0


def lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture
def secured(tmp_path: Path):
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "carol", "--password", "pw", *d)
    lmq("users", "acl", "add", "carol", "--deny", "secret", *d)
    lmq("users", "acl", "add", "carol", "--both", "orders", *d)
    lmq("users", "set-permissions", "carol", "--vhost", "/", "--configure", ".*",
        "--write", "^(ok|q)$", "--read", ".*", *d)
    gw = GatewayProcess(data, "--http-port", "auto").start()
    yield gw
    gw.stop()


def test_basic_auth_and_acls(secured):
    url = f"http://127.0.0.1:{secured.ports['http']}"
    msg = {"body": "x"}
    resp = requests.post(f"{url}/v1/topics/orders/messages", json=msg, timeout=BOUND)
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Basic ")
    assert resp.headers["Content-Type"] == "application/problem+json"
    resp = requests.post(f"{url}/v1/topics/orders/messages", json=msg, timeout=BOUND,
                         auth=("carol", "wrong"))
    assert resp.status_code == 401
    carol = requests.Session()
    carol.auth = ("carol", "pw")
    assert carol.post(f"{url}/v1/topics/orders/messages", json=msg,
                      timeout=BOUND).status_code == 201
    assert carol.post(f"{url}/v1/topics/secret/messages", json=msg,
                      timeout=BOUND).status_code == 403
    resp = carol.post(f"{url}/v1/groups/g/topics/orders/receive", json={}, timeout=BOUND)
    assert resp.status_code == 200 and len(resp.json()["messages"]) == 1
    assert carol.post(f"{url}/v1/groups/g/topics/secret/receive", json={},
                      timeout=BOUND).status_code == 403
    # /health stays open for probes
    assert requests.get(f"{url}/health", timeout=BOUND).status_code == 200


def test_failed_logins_are_rate_limited_with_retry_after(secured):
    url = f"http://127.0.0.1:{secured.ports['http']}/v1/topics/orders/messages"
    session = requests.Session()
    statuses = []
    for _ in range(12):
        resp = session.post(url, json={"body": "x"}, auth=("nobody", "guess"), timeout=BOUND)
        statuses.append(resp.status_code)
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
    assert int(resp.headers["Retry-After"]) >= 1
    assert resp.headers["Content-Type"] == "application/problem+json"


def test_exchange_publish_checks_the_amqp_write_permission(secured):
    import pika

    url = f"http://127.0.0.1:{secured.ports['http']}"
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", secured.ports.get("amqp", secured.mqtt_port),
        credentials=pika.PlainCredentials("carol", "pw")))
    try:
        ch = conn.channel()
        ch.queue_declare("q")
        for name in ("ok", "no"):
            ch.exchange_declare(name, "fanout")
        ch.queue_bind("q", "ok")
        carol = requests.Session()
        carol.auth = ("carol", "pw")
        resp = carol.post(f"{url}/v1/amqp/%2F/exchanges/no/messages", json={"body": "x"},
                          timeout=BOUND)
        assert resp.status_code == 403
        resp = carol.post(f"{url}/v1/amqp/%2F/exchanges/ok/messages", json={"body": "y"},
                          timeout=BOUND)
        assert resp.status_code == 201 and resp.json()["routed_to"] == 1
        method, _props, body = None, None, None
        for _ in range(200):
            method, _props, body = ch.basic_get("q", auto_ack=True)
            if method is not None:
                break
            conn.sleep(0.02)
        assert body == b"y"  # and only that one
        assert ch.basic_get("q", auto_ack=True)[0] is None
    finally:
        conn.close()
