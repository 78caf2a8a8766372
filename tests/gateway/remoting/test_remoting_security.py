"""Remoting security over real sockets: with a users file, requests are served as the
user whose access key signed them (RocketMQ's AclClientRPCHook signature), refused
when unsigned or wrongly signed, and sends and pulls are checked against the user's
topic ACL (the same rules MQTT uses)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from typing import Any

from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from protocol.remoting import RemotingCommand, RequestCode, ResponseCode

from .remoting_support import Client, port_of, running_gateway
from .test_remoting_send_pull import pull_fields, send_fields


def signed(fields: dict[str, Any], body: bytes, ak: str, sk: str) -> dict[str, str]:
    """extFields as ali-ons signs them: AccessKey and OnsChannel added, then
    base64 HMAC-SHA1 over the values sorted by name, then the body."""
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()}
    out["AccessKey"] = ak
    out["OnsChannel"] = "ALIYUN"
    content = "".join(v for _, v in sorted(out.items())).encode() + body
    mac = hmac.new(sk.encode(), content, hashlib.sha1).digest()
    out["Signature"] = base64.b64encode(mac).decode()
    return out


async def call_signed(c: Client, code: int, fields: dict[str, Any], body: bytes = b"",
                      ak: str = "AK_app", sk: str = "secret-app") -> RemotingCommand:
    return await c.call(code, signed(fields, body, ak, sk), body)


async def test_signed_requests_and_topic_acl(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("both allowed/#"))
    db.save(data / "users.json")
    async with running_gateway(data) as gw:
        c = await Client.connect(port_of(gw))
        # unsigned: refused
        unsigned = await c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "allowed"})
        assert unsigned.code == ResponseCode.NO_PERMISSION
        # signed with the right secret: served
        route = await call_signed(c, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "allowed"})
        assert route.code == ResponseCode.SUCCESS
        # wrong secret, unknown key: refused
        bad = await call_signed(c, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "allowed"},
                                sk="wrong")
        assert bad.code == ResponseCode.NO_PERMISSION
        unknown = await call_signed(c, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                    {"topic": "allowed"}, ak="AK_nobody")
        assert unknown.code == ResponseCode.NO_PERMISSION
        # a body is covered by the signature: a changed body does not verify
        fields = signed(send_fields("allowed", 0, ""), b"original", "AK_app", "secret-app")
        tampered = await c.call(RequestCode.SEND_MESSAGE_V2, fields, b"tampered")
        assert tampered.code == ResponseCode.NO_PERMISSION
        # sends and pulls follow the topic ACL
        ok = await call_signed(c, RequestCode.SEND_MESSAGE_V2, send_fields("allowed", 0, ""),
                               b"hello")
        assert ok.code == ResponseCode.SUCCESS
        denied = await call_signed(c, RequestCode.SEND_MESSAGE_V2,
                                   send_fields("secret", 0, ""), b"hello")
        assert denied.code == ResponseCode.NO_PERMISSION
        pulled = await call_signed(c, RequestCode.PULL_MESSAGE, pull_fields("allowed", 0, 0))
        assert pulled.code == ResponseCode.SUCCESS and b"hello" in pulled.body
        no_read = await call_signed(c, RequestCode.PULL_MESSAGE, pull_fields("secret", 0, 0))
        assert no_read.code == ResponseCode.NO_PERMISSION
        await c.close()
