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
    lmq("users", "access-keys", "add", "carol", "--access-key", "AK_carol",
        "--secret-key", "sk-carol", *d)
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


def _signed(method: str, url: str, path: str, body: bytes, access_key: str, secret: str,
            *, date: str | None = None, md5_of: bytes | None = None) -> requests.Response:
    """A request signed by the Aliyun SDK's own signer (``MQClient.get_signature`` of PyPI
    mq-http-sdk), not by the gateway's code."""
    from email.utils import formatdate

    from mq_http_sdk.mq_client import MQClient

    headers = {"content-type": "application/json",
               "date": date or formatdate(usegmt=True),
               "x-mq-version": "2015-06-06"}
    if md5_of is not None:
        import base64
        import hashlib
        headers["content-md5"] = base64.b64encode(hashlib.md5(md5_of).digest()).decode()
    signer = MQClient("http://unused", access_key, secret)
    headers["Authorization"] = signer.get_signature(method, headers, path)
    return requests.request(method, url + path, data=body, headers=headers, timeout=BOUND)


def test_json_api_accepts_aliyun_signed_requests(secured):
    url = f"http://127.0.0.1:{secured.ports['http']}"
    body = b'{"body": "signed"}'
    resp = _signed("POST", url, "/v1/topics/orders/messages", body, "AK_carol", "sk-carol")
    assert resp.status_code == 201, resp.text
    # the signature covers the target: a body to another topic with the same header fails
    resp = _signed("POST", url, "/v1/topics/orders/messages", body, "AK_carol", "wrong")
    assert resp.status_code == 401 and resp.headers["Content-Type"] == "application/problem+json"
    assert "does not verify" in resp.json()["detail"]
    # the signed user's ACL applies
    resp = _signed("POST", url, "/v1/topics/secret/messages", body, "AK_carol", "sk-carol")
    assert resp.status_code == 403
    # a Date out of the 15 minutes, a Content-MD5 of another body
    resp = _signed("POST", url, "/v1/topics/orders/messages", body, "AK_carol", "sk-carol",
                   date="Mon, 01 Jan 2024 00:00:00 GMT")
    assert resp.status_code == 401 and "clock" in resp.json()["detail"]
    resp = _signed("POST", url, "/v1/topics/orders/messages", body, "AK_carol", "sk-carol",
                   md5_of=b"another body")
    assert resp.status_code == 400 and "Content-MD5" in resp.json()["detail"]
    # what was signed and accepted is there, once
    carol = requests.Session()
    carol.auth = ("carol", "pw")
    got = carol.post(f"{url}/v1/groups/s/topics/orders/receive",
                     json={"max_messages": 16}, timeout=BOUND).json()["messages"]
    assert [m["body"] for m in got] == ["signed"]
