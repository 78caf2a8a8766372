"""Remoting authentication and authorisation.

Open mode (no users file, loopback): nothing here runs. With a users database:

- **Who.** RocketMQ's ACL clients sign every request: ``extFields`` carry
  ``AccessKey`` and ``Signature`` (base64 HMAC-SHA1 with the secret key over the sorted
  ``extFields`` values and the body; ali-ons adds ``OnsChannel``), verified with
  :mod:`protocol.remoting.signature`. A request with an
  access key is served as the user that owns it when the signature verifies, refused
  NO_PERMISSION otherwise (unknown key, bad signature). A request without an access key
  is served as the anonymous principal when ``allow_anonymous`` is on, else refused.
- **What.** Sending to topic ``T`` needs the MQTT ``publish`` right on ``T`` (the
  topic's MQTT name, see docs/rocketmq.md); consuming ``T`` (pull, offsets of ``T``'s
  queues) needs ``subscribe`` on ``T/#``: the same ACL rules (:mod:`gateway.auth.acl`)
  decide for every protocol. Name-server requests (routes), heartbeats and the client's
  own bookkeeping need only a valid identity. The checks are
  :meth:`gateway.remoting.services.RemotingServices.check_publish` and
  :meth:`~gateway.remoting.services.RemotingServices.check_subscribe`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.auth.authenticator import Refusal, RefusalReason
from gateway.remoting.replies import error
from protocol.remoting import signature
from protocol.remoting.codes import ResponseCode

ACCESS_KEY = signature.ACCESS_KEY

if TYPE_CHECKING:
    from gateway.auth import Authenticator, Principal
    from protocol.remoting import RemotingCommand


def authorize(
    auth: Authenticator, cmd: RemotingCommand, client_id: str, peer_host: str | None
) -> Principal | RemotingCommand:
    """Who sends ``cmd``: the principal it is served as, or the error response when it
    is refused."""
    fields = cmd.ext_fields
    access_key = fields.get(ACCESS_KEY)

    def verify(secret_key: str) -> bool:
        return signature.verify(fields, cmd.body, secret_key, version=cmd.version)

    result = auth.authenticate_signature(
        access_key, verify, client_id=client_id, peer_host=peer_host)
    if isinstance(result, Refusal):
        if not access_key:
            remark = "this gateway requires signed requests (AccessKey and Signature)"
        elif result.reason == RefusalReason.RATE_LIMITED:
            remark = f"too many failed signatures; retry in {result.retry_after:.0f} s"
        else:
            remark = f"the signature of access key {access_key} does not verify"
        return error(ResponseCode.NO_PERMISSION, remark)
    return result
