"""The JSON API (/v1/) and RocketMQ 5 gRPC on one topic (``lmq serve`` subprocess, the
official Python gRPC client unchanged): a JSON API publish reaches a gRPC
SimpleConsumer with its id, tag, keys and properties; a gRPC send is received over the
JSON API with its own."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import requests

from lmq.rocketmq import MessageType

from ..gateway_process import GatewayProcess
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def test_json_api_and_grpc_both_ways(start_gateway: Callable[..., GatewayProcess],
                                     clients: Clients) -> None:
    gw = start_gateway("--http-port", "auto", topics={"xjson": MessageType.NORMAL})
    url = f"http://127.0.0.1:{gw.ports['http']}"
    c = clients.py("simple", endpoints=grpc_endpoint(gw), group="GID_xjson_grpc",
                   subscriptions={"xjson": "*"}, await_s=3)
    sent = requests.post(f"{url}/v1/topics/xjson/messages", timeout=WAIT, json={
        "body": "from-json", "tag": "tagJ", "keys": ["jk"],
        "properties": {"origin": "json"}}).json()
    [got] = c.receive_all(1, WAIT)
    assert got["body"] == "from-json" and got["id"] == sent["message_id"]
    assert got["tag"] == "tagJ" and got["keys"] == ["jk"]
    assert got["properties"]["origin"] == "json"
    c.ack(got["id"])

    p = clients.py("producer", endpoints=grpc_endpoint(gw), topics=["xjson"])
    result = p.send_message("xjson", "from-grpc", tag="G", keys=["gk"],
                            properties={"origin": "grpc"})
    messages: list[dict] = []
    deadline = time.monotonic() + WAIT
    while len(messages) < 2 and time.monotonic() < deadline:
        messages += requests.post(
            f"{url}/v1/groups/GID_xjson_http/topics/xjson/receive", timeout=WAIT,
            json={"wait_seconds": 2}).json()["messages"]
    by_body = {m["body"]: m for m in messages}
    assert set(by_body) == {"from-json", "from-grpc"}
    from_grpc = by_body["from-grpc"]
    assert from_grpc["tag"] == "G" and from_grpc["keys"] == ["gk"]
    assert from_grpc["properties"] == {"origin": "grpc"}
    assert from_grpc["message_id"] == result["id"]
