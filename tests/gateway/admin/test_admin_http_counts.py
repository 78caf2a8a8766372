"""Messages per HTTP connection and per HTTP API (issue 31): the JSON API, the Aliyun MQ
HTTP API and RIP-17 count the messages each request stored or was given on the
connection it came on (the admin API's connections list) and in their rates of the
overview (``http``, ``aliyun``, ``rip17``). Real keep-alive connections to a running
``lmq serve``; each connection is found in the list by its local port."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from ..gateway_process import GatewayProcess
from .support import AdminClient, admin_gateway

RIP17 = {"GroupName": "PG_cnt", "Pid": "1", "Version": "1.0", "Language": "JAVA"}


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = admin_gateway(tmp_path / "data").start()
    try:
        yield gw
    finally:
        gw.stop()


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
