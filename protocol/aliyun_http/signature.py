"""``Authorization: MQ <AccessKeyId>:<Signature>``, as both SDKs compute it::

    Signature = base64(HMAC-SHA1(AccessKeySecret,
        METHOD "\\n" Content-MD5 "\\n" Content-Type "\\n" Date "\\n"
        CanonicalizedMQHeaders CanonicalizedResource))

``CanonicalizedMQHeaders``: every ``x-mq-*`` header, ``name:value\\n``, sorted by name
(lower case; both SDKs send ``x-mq-version`` only). ``CanonicalizedResource``: the
request target as sent, path and query (the SDKs differ in query order, so the server
signs the target it received, never a re-encoding of it).

Where the SDKs differ (a server must take both):

- Content-Type: Python sends ``text/xml;charset=UTF-8`` only with a body (so none on a
  GET), Node sends ``text/xml;charset=utf-8`` always;
- Content-MD5: Python sends none; Node sends, on POST and DELETE, base64 of the *hex*
  MD5 of the body, and signs it. The value signed is the header as received; whether it
  matches the body is not part of the signature (:func:`content_md5_matches` checks it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "Authorization",
    "AuthorizationError",
    "content_md5_matches",
    "parse_authorization",
    "sign",
    "string_to_sign",
    "verify",
]

SCHEME = "MQ"


class AuthorizationError(ValueError):
    """An ``Authorization`` header that is not ``MQ ak:signature``."""


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signature: str


def parse_authorization(value: str) -> Authorization:
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME or ":" not in rest:
        raise AuthorizationError("expected 'MQ <AccessKeyId>:<Signature>'")
    access_key, _, signature = rest.strip().rpartition(":")
    if not access_key or not signature:
        raise AuthorizationError("empty access key or signature")
    return Authorization(access_key, signature)


def _first(headers: Iterable[tuple[str, str]], name: str) -> str:
    for key, value in headers:
        if key.lower() == name:
            return value
    return ""


def string_to_sign(method: str, headers: Iterable[tuple[str, str]], resource: str) -> str:
    """The string both SDKs sign, from the request's ``headers`` (name, value pairs, any
    case) and ``resource`` (the target: path and query, as sent)."""
    headers = list(headers)
    mq = sorted((k.lower(), v) for k, v in headers if k.lower().startswith("x-mq-"))
    canonical = "".join(f"{k}:{v}\n" for k, v in mq)
    return (f"{method}\n{_first(headers, 'content-md5')}\n{_first(headers, 'content-type')}\n"
            f"{_first(headers, 'date')}\n{canonical}{resource}")


def sign(secret: str, method: str, headers: Iterable[tuple[str, str]], resource: str) -> str:
    """The base64 signature of the request."""
    text = string_to_sign(method, headers, resource)
    digest = hmac.new(secret.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def verify(auth: Authorization, secret: str, method: str,
           headers: Iterable[tuple[str, str]], resource: str) -> bool:
    expected = sign(secret, method, headers, resource)
    return hmac.compare_digest(expected.encode(), auth.signature.encode())


def content_md5_matches(value: str, body: bytes) -> bool:
    """Whether ``Content-MD5`` fits ``body``: the Node SDK's base64 of the hex digest,
    or RFC 1864's base64 of the raw digest."""
    digest = hashlib.md5(body)
    return value in (base64.b64encode(digest.hexdigest().encode()).decode(),
                     base64.b64encode(digest.digest()).decode())
