"""Requests signed the Aliyun MQ way (``Authorization: MQ <AccessKeyId>:<Signature>``),
for both HTTP APIs: the Aliyun MQ HTTP API (`gateway/http/aliyun.py`) requires it, the
JSON API (`gateway/http/v1/`) accepts it beside HTTP Basic.

The signature is HMAC-SHA1 over method, Content-MD5, Content-Type, Date, the ``x-mq-*``
headers and the request target (`protocol/aliyun_http/signature.py`), by the secret key of
a gateway user's access key (`lmq users`); the Date must be within 15 minutes of the
gateway's clock, and a Content-MD5, when sent, must match the body. A wrong signature is
a failed login (counted and locked out like a wrong password).
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

from gateway.auth import Authenticator, LoginResult, Refusal, RefusalReason
from gateway.http.messages import Request
from protocol.aliyun_http import AuthorizationError, parse_authorization, verify
from protocol.aliyun_http.signature import content_md5_matches

#: How far a signed request's Date may be from the gateway's clock (Aliyun's 15 minutes).
MAX_CLOCK_SKEW_S = 15 * 60


class SignatureRefused(Exception):
    """The signed request is refused; ``denied`` is True when the request was well
    formed but not allowed (a stale Date), False for a bad or unverifiable signature."""

    def __init__(self, message: str, *, denied: bool = False, bad_request: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.denied = denied
        #: the request itself is malformed (a Content-MD5 that does not match the body)
        self.bad_request = bad_request
        #: seconds, when refused for too many failures (rate limited)
        self.retry_after = retry_after


def is_signed(request: Request) -> bool:
    """Whether the request carries an ``Authorization: MQ`` header."""
    header = request.header("authorization", "") or ""
    return header[:3].upper() == "MQ "


def authenticate_signed(auth: Authenticator, request: Request) -> LoginResult:
    """The principal of a request signed the Aliyun MQ way (or of an unsigned one, as
    anonymous if the authenticator allows it). Raises :class:`SignatureRefused`."""
    header = request.header("authorization", "") or ""
    parsed = None
    if header:
        try:
            parsed = parse_authorization(header)
        except AuthorizationError as exc:
            raise SignatureRefused(f"Authorization: {exc}") from None
        date = request.header("date", "") or ""
        try:
            skew = abs(parsedate_to_datetime(date).timestamp() - time.time())
        except (TypeError, ValueError):
            raise SignatureRefused(f"the Date header {date!r} is not an RFC 1123 date",
                                   denied=True) from None
        if skew > MAX_CLOCK_SKEW_S:
            raise SignatureRefused(f"the request's Date is {skew:.0f} s from the gateway's"
                                   " clock", denied=True)
        md5 = request.header("content-md5", "") or ""
        if md5 and not content_md5_matches(md5, request.body):
            raise SignatureRefused("Content-MD5 does not match the body", bad_request=True)

    def check(secret: str) -> bool:
        return parsed is not None and verify(
            parsed, secret, request.method, request.headers, request.target)

    access_key = parsed.access_key if parsed is not None else None
    peer_host = request.peer.rpartition(":")[0].strip("[]") or None
    result = auth.authenticate_signature(access_key, check, peer_host=peer_host)
    if isinstance(result, Refusal):
        if not access_key:
            raise SignatureRefused("this gateway requires signed requests"
                                   " (Authorization: MQ ak:sig)")
        if result.reason == RefusalReason.RATE_LIMITED:
            raise SignatureRefused(f"too many failed signatures; retry in"
                                   f" {result.retry_after:.0f} s",
                                   retry_after=result.retry_after)
        raise SignatureRefused(f"the signature of access key {access_key} does not verify")
    return result
