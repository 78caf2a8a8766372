"""gRPC authentication: the ``authorization`` metadata checked against access keys.

Open mode (no users file, loopback bind): nothing here runs, every call is served as
the anonymous principal. With a users database, every call (a stream: once, when it
opens) is authenticated as remoting's requests are (:mod:`gateway.remoting.security`),
with the same access keys (``lmq users`` gives a user ``access_keys``) and the same
failure counting and lockouts (:meth:`Authenticator.authenticate_signature`):

- a valid signature (:mod:`protocol.grpc.signature`) by a known access key: the call is
  served as the key's user;
- no ``authorization``, or an empty access key: the anonymous principal when
  ``allow_anonymous`` is on, else UNAUTHORIZED;
- a malformed header, an unknown key or a wrong signature: UNAUTHORIZED (the Java
  proxy's answer to a failed authentication; FORBIDDEN is for ACL denials, see
  :meth:`Call.check_publish <gateway.grpc.call.Call.check_publish>`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.auth import Refusal, RefusalReason
from gateway.grpc.call import AUTHORIZATION
from protocol.grpc import Code, StatusError
from protocol.grpc.signature import AuthorizationError, parse_authorization, verify

if TYPE_CHECKING:
    from gateway.auth import Authenticator
    from gateway.grpc.call import Call


def authenticate(auth: Authenticator, call: Call) -> None:
    """Set ``call.principal``; raise StatusError(UNAUTHORIZED) when refused."""
    header = call.metadata.get(AUTHORIZATION, "")
    access_key: str | None = None
    parsed = None
    if header:
        try:
            parsed = parse_authorization(header)
        except AuthorizationError as exc:
            raise StatusError(Code.UNAUTHORIZED, f"authorization: {exc}") from None
        access_key = parsed.access_key or None
    metadata = call.metadata

    def check(secret_key: str) -> bool:
        return parsed is not None and verify(parsed, metadata, secret_key)

    result = auth.authenticate_signature(
        access_key, check, client_id=call.client_id, peer_host=call.peer_host)
    if isinstance(result, Refusal):
        if not access_key:
            message = "this gateway requires signed requests (an access key and secret)"
        elif result.reason == RefusalReason.RATE_LIMITED:
            message = f"too many failed signatures; retry in {result.retry_after:.0f} s"
        else:
            message = f"the signature of access key {access_key} does not verify"
        raise StatusError(Code.UNAUTHORIZED, message)
    call.principal = result
