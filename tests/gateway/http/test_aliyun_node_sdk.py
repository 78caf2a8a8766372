"""The Aliyun MQ HTTP API with the real npm ``@aliyunmq/mq-http-sdk`` (unchanged, run by
``tests/node/aliyun_http_client.js`` under a timeout) against ``lmq serve`` (a
subprocess, stopped by its PID): publish, consume, ack, ordered,
delayed and transactional messages, and a wrong signature. The Node SDK differs from the
Python one on the wire (CDATA values, its query order, a Content-Type on GET, a signed
Content-MD5 of the hex digest), so this covers what the Python tests cannot."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule

from ..gateway_process import GatewayProcess

NODE_DIR = Path(__file__).resolve().parents[2] / "node"
SCRIPT = NODE_DIR / "aliyun_http_client.js"


CONFIG = """
[store]
txn_first_check_ms = 500
txn_check_interval_ms = 1000
"""


class Served:
    def __init__(self, gw: GatewayProcess) -> None:
        self.endpoint = f"http://127.0.0.1:{gw.ports['http']}"


@contextlib.contextmanager
def serve(data: Path) -> Iterator[Served]:
    data.mkdir(exist_ok=True)
    config = data.parent / "gateway.toml"
    config.write_text(CONFIG)
    gw = GatewayProcess(data, "--http-port", "auto", "--config", str(config)).start()
    try:
        yield Served(gw)
    finally:
        gw.stop()


def run(gw: Served, scenario: str, **cfg: Any) -> dict[str, Any]:
    options = {"endpoint": gw.endpoint, "ak": "ak", "sk": "sk", "instance": "",
               "topic": scenario, "group": f"GID_{scenario}", **cfg}
    done = subprocess.run(["node", str(SCRIPT), scenario, json.dumps(options)],
                          capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("LMQ ")]
    assert len(lines) == 1, done.stdout + done.stderr
    return json.loads(lines[0][4:])


def test_node_sdk(tmp_path: Path) -> None:
    with serve(tmp_path / "data") as gw:
        basic = run(gw, "basic", instance="INST")
        assert sorted(m["body"] for m in basic["got"]) == ["node-0", "node-1", "node-2"]
        assert {m["id"] for m in basic["got"]} == set(basic["sent"])
        for m in basic["got"]:
            assert m["tag"] == "tagN" and m["key"].startswith("key-")
            assert m["props"] == {"color": "blue"} and m["times"] == "1"
        assert basic["ackCode"] == 204 and basic["requestId"]
        assert basic["againCode"] == 404
        assert basic["againErrors"][0]["ErrorCode"] == "MessageNotExist"
        assert basic["empty"] == "MessageNotExist"

        order = run(gw, "order")
        by_key: dict[str, list[str]] = {}
        for m in order["got"]:
            by_key.setdefault(m["key"], []).append(m["body"])
        assert by_key == {"k0": ["0-0", "0-2", "0-4"], "k1": ["1-1", "1-3", "1-5"]}

        delay = run(gw, "delay")
        assert [m["body"] for m in delay["got"]] == ["later"]
        assert delay["got"][0]["first"] >= delay["at"]

        trans = run(gw, "trans", instance="INST")
        assert trans["commitCode"] == 204 and trans["rollbackCode"] == 204
        assert trans["got"] == ["commit-me"]
        assert trans["polled"] == ["decide-later"] and trans["later"] == ["decide-later"]


def test_node_sdk_wrong_signature(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("both badsign/#"))
    db.save(data / "users.json")
    with serve(data) as gw:
        assert run(gw, "badsign", ak="AK_app", sk="secret-app") == {"code": "published"}
        assert run(gw, "badsign", ak="AK_app", sk="nope") == {"code": "SignatureDoesNotMatch"}

