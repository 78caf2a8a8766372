"""RIP-17's request codes over the gateway's HTTP port, with the standard library's
HTTP client posting forms as the proxy's users do: MSG_SEND (101) and MSG_BATCH_SEND
(102) are stored and read back by the Aliyun SDK's consumer (tag, key, properties);
header, code and body errors get their retCode and store nothing; with a users file,
Username/Passwd log in and the topic ACL applies."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException

from gateway.auth import UsersDatabase, hash_password
from gateway.auth.acl import AclRule

from .aliyun_support import AliyunGateway, aliyun_gateway

HEADERS = {"GroupName": "PG_rip", "Pid": "4242", "Version": "1.0", "Language": "JAVA"}


def post(gw: AliyunGateway, code: Any, form: dict[str, str],
         headers: dict[str, str] | None = None) -> dict[str, Any]:
    hdrs = {**HEADERS, **(headers or {}), "Content-Type": "application/x-www-form-urlencoded"}
    if code is not None:
        hdrs["Code"] = str(code)
    req = urllib.request.Request(gw.endpoint + "/", data=urlencode(form).encode(),
                                 headers=hdrs, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/json")
        return json.loads(resp.read())


def consume(gw: AliyunGateway, topic: str, want: int) -> list[Any]:
    client = MQClient(gw.endpoint, "ak", "sk")
    gw.on_stop.append(client.close_connection)
    consumer = client.get_consumer("", topic, "GID_rip")
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < want and time.monotonic() < deadline:
        try:
            got += consumer.consume_message(16, 1)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
    return got


def test_send_and_batch_send(tmp_path: Path) -> None:
    with aliyun_gateway(tmp_path / "data") as gw:
        ok = post(gw, 101, {"topic": "rip", "content": "hello", "bizSeqNo": "B1",
                            "uniqueId": "U1", "tag": "T", "ttl": "3000",
                            "extfields": json.dumps({"a": "1"})})
        assert ok == {"retCode": 0, "retMsg": "success"}
        [m] = consume(gw, "rip", 1)
        assert (m.message_body, m.message_tag, m.get_message_key()) == ("hello", "T", "B1")
        assert m.get_property("uniqueId") == "U1" and m.get_property("a") == "1"

        contents = [{"bizSeqNo": f"b{i}", "topic": "ripb", "msg": f"m{i}", "tag": "bt",
                     "ttl": 1000} for i in range(3)]
        ok = post(gw, 102, {"batchId": "X", "size": "3", "contents": json.dumps(contents)})
        assert ok["retCode"] == 0
        got = consume(gw, "ripb", 3)
        assert sorted(m.message_body for m in got) == ["m0", "m1", "m2"]


def test_errors_have_their_codes_and_store_nothing(tmp_path: Path) -> None:
    good = {"topic": "ripe", "content": "x", "bizSeqNo": "B", "uniqueId": "U"}
    with aliyun_gateway(tmp_path / "data") as gw:
        assert post(gw, 101, good, {"GroupName": ""})["retCode"] == 6
        assert post(gw, 101, good, {"Pid": "abc"})["retCode"] == 6
        assert post(gw, None, good)["retCode"] == 2
        assert post(gw, 203, good)["retCode"] == 2
        assert post(gw, 101, {**good, "content": ""})["retCode"] == 7
        assert post(gw, 101, {**good, "messageType": "2"})["retCode"] == 7  # sync, no ttl
        assert post(gw, 101, {**good, "extfields": "{nope"})["retCode"] == 7
        assert post(gw, 102, {"contents": "[1]"})["retCode"] == 7
        assert post(gw, 102, {"contents": json.dumps(
            [{"topic": "ripe", "msg": "a"}]), "size": "2"})["retCode"] == 7
        assert consume(gw, "ripe", 1) == []
        assert post(gw, 101, good)["retCode"] == 0
        assert [m.message_body for m in consume(gw, "ripe", 1)] == ["x"]


def test_username_and_password_with_a_users_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", hash_password("pw-app", n=16, r=1, p=1))
    db.add_acl_rule("app", AclRule.parse("both open/#"))
    db.save(data / "users.json")
    form = {"topic": "open", "content": "x", "bizSeqNo": "B", "uniqueId": "U"}
    with aliyun_gateway(data) as gw:
        assert post(gw, 101, form)["retCode"] == 6
        assert post(gw, 101, form, {"Username": "app", "Passwd": "nope"})["retCode"] == 6
        assert post(gw, 101, form, {"Username": "app", "Passwd": "pw-app"})["retCode"] == 0
        denied = post(gw, 101, {**form, "topic": "closed"},
                      {"Username": "app", "Passwd": "pw-app"})
        assert denied["retCode"] == 6


def test_a_browser_gets_a_page_and_rip17_keeps_the_endpoint(tmp_path: Path) -> None:
    def get(path: str, headers: dict[str, str]) -> tuple[str, bytes]:
        req = urllib.request.Request(gw.endpoint + path, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.headers["Content-Type"], resp.read()

    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    with aliyun_gateway(tmp_path / "data") as gw:
        kind, page = get("/", browser)
        assert kind.startswith("text/html")
        for link in (b'href="/health"', b'href="/metrics"', b'href="/v1/openapi.json"',
                     b"docs/http.md"):
            assert link in page
        # a RIP-17 GET (its request code as a header) is still RIP-17's, browser or not
        form = urlencode({"topic": "rip", "content": "x", "bizSeqNo": "B9", "uniqueId": "U9"})
        kind, body = get("/?" + form, {**browser, **HEADERS, "Code": "101"})
        assert kind.startswith("application/json") and json.loads(body)["retCode"] == 0, body
        # no Accept: text/html, no code: RIP-17's own answer
        kind, body = get("/", {})
        assert json.loads(body)["retCode"] != 0
        # JSON replies end with a newline (a terminal's prompt starts on its own line)
        kind, body = get("/health", {})
        assert body.endswith(b"}\n")
        req = urllib.request.Request(
            gw.endpoint + "/v1/mqtt/a%2Fb/messages", data=b'{"body": "x"}',
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.read().endswith(b"}\n")
