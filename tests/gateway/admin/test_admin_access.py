"""The admin API's users against a running ``lmq serve`` in users mode, with the real
clients the changes are for: an ACL rule refuses the next MQTT subscription (paho), AMQP
permissions open and close a vhost (pika), an access key signs the Aliyun SDK's requests
until it is deleted (mq_http_sdk). A user without the administrator tag gets 403 on
every admin call and changes nothing; what the API answered is kept after a kill -9."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_producer import TopicMessage

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho
from .support import TIMEOUT, AdminClient, admin_gateway, audit_lines, write_users

ROOT = ("root", "root-pw")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    data = tmp_path / "data"
    data.mkdir()
    write_users(
        data / "users.json",
        {"root": ("root-pw", ("administrator",)), "app": ("app-pw", ("monitoring",))},
    )
    gw = admin_gateway(data).start()
    try:
        yield gw
    finally:
        gw.stop()


def amqp_connects(port: int, user: str, password: str) -> bool:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        "/",
        pika.PlainCredentials(user, password),
        connection_attempts=1,
        socket_timeout=TIMEOUT,
    )
    try:
        connection = pika.BlockingConnection(params)
    except pika.exceptions.AMQPConnectionError:
        return False
    try:
        channel = connection.channel()
        channel.queue_declare("perm.q")
        channel.basic_publish("", "perm.q", b"hi")
    finally:
        connection.close()
    return True


def refused(codes: list[object]) -> bool:
    """A SUBACK's return code is a failure (0x80)."""
    return int(getattr(codes[0], "value", codes[0])) >= 0x80  # type: ignore[call-overload]


def test_acl_permissions_and_access_keys_take_effect_at_once(gw: GatewayProcess) -> None:
    root = AdminClient(gw.ports["admin"], ROOT)
    assert root.call("PUT", "/users/dev", {"password": "dev-pw"}).status_code == 201
    allow = root.call("POST", "/users/dev/acl", {"access": "both", "filter": "dev/#"})
    assert allow.status_code == 201, allow.text
    # an ACL rule: the next subscription of a client already connected is checked by it
    device = Paho(gw.mqtt_port, "dev-1", username="dev", password="dev-pw")
    assert device.rc == 0
    assert not refused(device.subscribe("dev/secret/a", qos=1))
    deny = {"access": "deny", "filter": "dev/secret/#", "position": 1}
    assert root.call("POST", "/users/dev/acl", deny).status_code == 201
    assert root.get("/users/dev")["acl"] == ["deny dev/secret/#", "both dev/#"]
    assert refused(device.subscribe("dev/secret/b", qos=1))
    assert not refused(device.subscribe("dev/open", qos=1))
    bad = root.call("DELETE", "/users/dev/acl/0")
    assert bad.status_code == 400 and bad.json()["field"] == "position"
    assert root.call("DELETE", "/users/dev/acl/1").status_code == 200
    assert not refused(device.subscribe("dev/secret/c", qos=1))
    device.close()
    # AMQP permissions: none on "/" refuses the connection; set, it opens; cleared, refused
    port = gw.ports["amqp"]
    assert not amqp_connects(port, "dev", "dev-pw")
    bad = root.call("PUT", "/users/dev/permissions/%2F", {"configure": "("})
    assert bad.status_code == 400 and bad.json()["field"] == "configure"
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert root.call("PUT", "/users/dev/permissions/%2F", perms).status_code == 200
    assert amqp_connects(port, "dev", "dev-pw")
    assert root.call("DELETE", "/users/dev/permissions/%2F").status_code == 200
    assert not amqp_connects(port, "dev", "dev-pw")
    # an access key signs the Aliyun HTTP API's requests at once, until deleted
    key = root.call("POST", "/users/dev/access-keys", {})
    assert key.status_code == 201, key.text
    ak, sk = key.json()["access_key"], key.json()["secret_key"]
    sdk = MQClient(f"http://127.0.0.1:{gw.ports['unified']}", ak, sk)
    try:
        sdk.get_producer("", "dev").publish_message(TopicMessage("signed", ""))
        assert root.call("DELETE", f"/access-keys/{ak}").status_code == 200
        with pytest.raises(MQServerException):
            sdk.get_producer("", "dev").publish_message(TopicMessage("unsigned", ""))
    finally:
        sdk.close_connection()
    actions = [a["action"] for a in audit_lines(gw.data_dir)]
    assert actions == [
        "user.put",
        "acl.add",
        "acl.add",
        "acl.remove",
        "acl.remove",
        "permissions.set",
        "permissions.set",
        "permissions.clear",
        "access_key.add",
        "access_key.delete",
    ]
    assert sk not in (gw.data_dir / "audit.log").read_text()


def test_non_administrator_gets_403_everywhere_and_changes_survive_a_kill(
    gw: GatewayProcess,
) -> None:
    port = gw.ports["admin"]
    spec_url = f"http://127.0.0.1:{gw.ports['unified']}/v1/openapi.json"
    spec = requests.get(spec_url, timeout=TIMEOUT).json()
    app = AdminClient(port, ("app", "app-pw"))
    calls = [
        (method.upper(), path.replace("{", "").replace("}", ""))
        for path, item in spec["paths"].items()
        if path.startswith("/v1/admin/")
        for method in item
    ]
    assert len(calls) > 40
    for method, path in calls:
        response = app.call(method, path.removeprefix("/v1/admin"), {} if method != "GET" else None)
        assert response.status_code == 403, (method, path, response.status_code)
    assert audit_lines(gw.data_dir) == []  # nothing changed, nothing to record
    root = AdminClient(port, ROOT)
    assert root.get("/topics", limit=1000)["total"] == 0
    # answered, then killed: the topic, the group's offsets and the user are kept
    made = root.call("PUT", "/topics/keptT", {"queues": 2, "message_type": "FIFO"})
    assert made.status_code == 201
    reset = root.call("POST", "/groups/GID_kept/reset", {"topic": "keptT", "position": "latest"})
    assert reset.status_code == 200
    assert root.call("PUT", "/users/kept", {"password": "kept-pw"}).status_code == 201
    root.close()
    gw.kill()
    gw.ports = {}
    gw.start()
    root = AdminClient(gw.ports["admin"], ROOT)
    topic = root.get("/topics/keptT")
    assert (topic["message_type"], len(topic["queues"])) == ("FIFO", 2)
    assert [q["offset"] for q in root.get("/groups/GID_kept")["queues"]] == [0, 0]
    client = Paho(gw.mqtt_port, "kept-1", username="kept", password="kept-pw")
    assert client.rc == 0
    client.close()
    root.close()
