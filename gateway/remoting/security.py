"""Remoting authentication and authorisation.

Open mode (no users file, loopback): nothing here runs. With a users database:

- **Who.** RocketMQ's ACL clients sign every request: ``extFields`` carry
  ``AccessKey`` and ``Signature`` (base64 HMAC-SHA1 with the secret key over the sorted
  ``extFields`` values and the body; ali-ons adds ``OnsChannel``). A request with an
  access key is served as the user that owns it when the signature verifies, refused
  NO_PERMISSION otherwise (unknown key, bad signature). A request without an access key
  is served as the anonymous principal when ``allow_anonymous`` is on, else refused.
- **What.** Sending to topic ``T`` needs the MQTT ``publish`` right on ``T`` (the
  topic's MQTT name, see docs/rocketmq.md); consuming ``T`` (pull, offsets of ``T``'s
  queues) needs ``subscribe`` on ``T/#``: the same ACL rules (:mod:`gateway.auth.acl`)
  decide for every protocol. Name-server requests (routes), heartbeats and the client's
  own bookkeeping need only a valid identity.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.auth.authenticator import Refusal, RefusalReason
from gateway.remoting.dispatch import RequestError
from gateway.remoting.replies import error
from protocol.remoting.codes import ResponseCode

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"

if TYPE_CHECKING:
    from gateway.remoting.dispatch import RequestContext
    from gateway.remoting.frontend import RemotingFrontEnd
    from protocol.remoting import RemotingCommand


def signature(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """RocketMQ's request signature (``AclUtils.combineRequestContent`` + HMAC-SHA1):
    base64 HMAC-SHA1 with the secret key over every ``extFields`` value except
    ``Signature``, in the order of their names, then the body."""
    content = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE)
    mac = hmac.new(secret_key.encode(), content.encode() + body, hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def authorize(
    front: RemotingFrontEnd, handler: RequestContext, cmd: RemotingCommand
) -> RemotingCommand | None:
    """Set ``handler.principal`` for ``cmd``; an error response when it is refused."""
    auth = front.ctx.authenticator
    if auth is None:
        return None
    fields = cmd.ext_fields
    access_key = fields.get(ACCESS_KEY)
    sent = fields.get(SIGNATURE, "")

    def verify(secret_key: str) -> bool:
        return hmac.compare_digest(signature(fields, cmd.body, secret_key), sent)

    result = auth.authenticate_signature(
        access_key, verify, client_id=handler.client_id, peer_host=handler.conn.peer_host)
    if isinstance(result, Refusal):
        if not access_key:
            remark = "this gateway requires signed requests (AccessKey and Signature)"
        elif result.reason == RefusalReason.RATE_LIMITED:
            remark = f"too many failed signatures; retry in {result.retry_after:.0f} s"
        else:
            remark = f"the signature of access key {access_key} does not verify"
        return error(ResponseCode.NO_PERMISSION, remark)
    handler.principal = result
    return None


def check_publish(front: RemotingFrontEnd, handler: RequestContext, topic: str) -> None:
    auth = front.ctx.authenticator
    if auth is not None and not auth.can_publish(handler.principal, handler.client_id, topic):
        raise RequestError(
            ResponseCode.NO_PERMISSION, f"no permission to send to topic {topic}")


def check_subscribe(
    front: RemotingFrontEnd, handler: RequestContext, topic: str, group: str
) -> None:
    auth = front.ctx.authenticator
    if auth is not None and not auth.can_subscribe(
        handler.principal, handler.client_id, f"{topic}/#"
    ):
        raise RequestError(
            ResponseCode.NO_PERMISSION,
            f"no permission to consume topic {topic} as group {group}")
