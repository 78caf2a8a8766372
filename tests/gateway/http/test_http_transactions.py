"""Transactional check-back for JSON API producers: the producer group polls its half
messages that are due a check (POST /v1/producers/{group}/transactions/receive, served
by the gateway's one check-back loop) and ends them by transaction id; with requests and
curl, responses checked against the OpenAPI document, and a half message recovered after
a gateway restart."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from broker_core import StoreConfig
from gateway.config import AUTO

from ..amqp_support import ThreadGateway
from .test_http_v1 import BOUND, Api, base

POLL = "/v1/producers/{group}/transactions/receive"
END = "/v1/transactions/{transaction}/{action}"


def _gateway(data: Path) -> ThreadGateway:
    store = StoreConfig(txn_first_check_ms=300, txn_check_interval_ms=1000)
    return ThreadGateway(data, http_port=AUTO, store=store).start()


def _poll(api: Api, group: str, **doc: object) -> list[dict[str, object]]:
    resp = api.call("POST", f"/v1/producers/{group}/transactions/receive", POLL, json=doc)
    assert resp.status_code == 200, resp.text
    return resp.json()["transactions"]


def test_producer_polls_due_halves_and_ends_them(tmp_path):
    gw = _gateway(tmp_path / "data")
    try:
        api = Api(base(gw))
        pay = api.publish("pay", {"body": "charge", "transaction": True, "tag": "eu",
                                  "keys": ["o-1"], "properties": {"k": "v"},
                                  "producer_group": "pg"}).json()
        other = api.publish("pay", {"body": "theirs", "transaction": True,
                                    "producer_group": "pg2"}).json()
        assert api.receive("c", "pay", wait_seconds=0) == []
        # not due yet: an empty answer, not an error
        assert _poll(api, "pg", wait_seconds=0) == []
        [half] = _poll(api, "pg", wait_seconds=5)  # due after txn_first_check_ms
        assert half["transaction_id"] == pay["transaction_id"]
        assert half["producer_group"] == "pg" and half["topic"] == "pay"
        assert half["body"] == "charge" and half["tag"] == "eu" and half["keys"] == ["o-1"]
        assert half["properties"] == {"k": "v"} and half["checks"] >= 1
        assert half["message_id"] == pay["message_id"]
        resp = api.call("POST", f"/v1/transactions/{half['transaction_id']}/commit", END)
        assert resp.status_code == 200 and resp.json()["outcome"] == "committed"
        got = api.receive("c", "pay", wait_seconds=2)
        assert [m["body"] for m in got] == ["charge"]
        # the other group's half is its own: never handed to pg; pg2 rolls it back
        assert _poll(api, "pg", wait_seconds=1.5) == []
        [theirs] = _poll(api, "pg2", wait_seconds=5)
        assert theirs["transaction_id"] == other["transaction_id"]
        resp = api.call("POST", f"/v1/transactions/{theirs['transaction_id']}/rollback", END)
        assert resp.json()["outcome"] == "rolled_back"
        assert api.receive("c", "pay", wait_seconds=0.5) == []
    finally:
        gw.stop()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_a_half_recovered_after_a_restart_is_polled_with_curl(tmp_path):
    data = tmp_path / "data"
    gw = _gateway(data)
    try:
        api = Api(base(gw))
        sent = api.publish("ship", {"body": "parcel", "transaction": True,
                                    "producer_group": "shipper"}).json()
    finally:
        gw.stop()
    gw = _gateway(data)
    try:
        url = base(gw)
        out = subprocess.run(
            ["curl", "-s", "-X", "POST", "-H", "Content-Type: application/json",
             "-d", '{"wait_seconds": 5}', f"{url}/v1/producers/shipper/transactions/receive"],
            capture_output=True, check=True, timeout=BOUND).stdout
        [half] = json.loads(out)["transactions"]
        assert half["transaction_id"] == sent["transaction_id"] and half["body"] == "parcel"
        out = subprocess.run(
            ["curl", "-s", "-X", "POST",
             f"{url}/v1/transactions/{half['transaction_id']}/commit"],
            capture_output=True, check=True, timeout=BOUND).stdout
        assert json.loads(out)["outcome"] == "committed"
        api = Api(url)
        assert [m["body"] for m in api.receive("c", "ship", wait_seconds=2)] == ["parcel"]
    finally:
        gw.stop()
