"""The ``authorization`` metadata of RocketMQ 5's gRPC clients (sans-IO).

Every call carries::

    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1 of the x-mq-date-time value with the secret key>
    x-mq-date-time: 20261124T132000Z

(``rocketmq/v5/util/signature.py`` of the Python client; the Java and Node clients send
the same). A client without credentials sends an empty access key (Python) or no
header at all (Node). Some clients write ``Credential=<ak>/<region>/...``: the access key
is what precedes the first ``/``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME = "x-mq-date-time"


class AuthorizationError(ValueError):
    """The ``authorization`` value is not ``MQv2-HMAC-SHA1 Credential=..., ...``."""


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Authorization:
    """The parts of an ``authorization`` value; AuthorizationError when malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthorizationError(f"unsupported authorization scheme {algorithm[:40]!r}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, val = item.strip().partition("=")
        if not sep:
            raise AuthorizationError(f"malformed authorization item {item.strip()[:40]!r}")
        parts[name.strip()] = val.strip()
    if "Credential" not in parts or "Signature" not in parts:
        raise AuthorizationError("authorization needs Credential and Signature")
    signed = tuple(
        h.strip().lower() for h in parts.get("SignedHeaders", DATE_TIME).split(";") if h.strip())
    return Authorization(parts["Credential"].split("/", 1)[0], signed, parts["Signature"])


def sign(secret_key: str, date_time: str) -> str:
    """The signature of ``date_time`` (the ``x-mq-date-time`` value), lower-case hex."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def verify(auth: Authorization, metadata: dict[str, str], secret_key: str) -> bool:
    """Whether ``auth`` signs ``metadata`` (lower-case keys) with ``secret_key``: the
    signed headers' values, concatenated in order (in practice only x-mq-date-time)."""
    if not auth.signed_headers:
        return False
    try:
        signed = "".join(metadata[h] for h in auth.signed_headers)
    except KeyError:
        return False
    expected = hmac.new(secret_key.encode(), signed.encode(), hashlib.sha1).hexdigest()
    return hmac.compare_digest(expected, auth.signature.lower())
