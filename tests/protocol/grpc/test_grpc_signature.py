"""protocol.grpc.signature against the official Python client's own signing
(``rocketmq.v5.util.signature``), and the ``authorization`` values it must refuse."""

from __future__ import annotations

import pytest
from rocketmq.v5.util.signature import Signature

from protocol.grpc.signature import (
    AuthorizationError,
    parse_authorization,
    sign,
    verify,
)

DATE = "20261124T132000Z"


def official(ak: str, sk: str) -> dict[str, str]:
    class Credentials:
        pass

    class Config:
        credentials = Credentials()
        namespace = ""

    Config.credentials.ak = ak  # type: ignore[attr-defined]
    Config.credentials.sk = sk  # type: ignore[attr-defined]
    return dict(Signature.metadata(Config, "client@1"))


def test_verifies_the_official_clients_signature() -> None:
    md = official("AK1", "secret")
    auth = parse_authorization(md["authorization"])
    assert auth.access_key == "AK1" and auth.signed_headers == ("x-mq-date-time",)
    assert verify(auth, md, "secret")
    assert not verify(auth, md, "other")
    assert not verify(auth, {**md, "x-mq-date-time": "20000101T000000Z"}, "secret")
    assert not verify(auth, {k: v for k, v in md.items() if k != "x-mq-date-time"}, "secret")
    assert sign("secret", md["x-mq-date-time"]) == auth.signature


def test_empty_credentials_and_variants() -> None:
    # the Python client sends the header even without credentials
    assert parse_authorization(official("", "")["authorization"]).access_key == ""
    upper = f"MQv2-HMAC-SHA1 Credential=AK1/region/x, SignedHeaders=x-mq-date-time, " \
            f"Signature={sign('s', DATE).upper()}"
    auth = parse_authorization(upper)
    assert auth.access_key == "AK1"
    assert verify(auth, {"x-mq-date-time": DATE}, "s")


@pytest.mark.parametrize("value", [
    "Basic dXNlcjpwYXNz",
    "MQv2-HMAC-SHA1",
    "MQv2-HMAC-SHA1 Credential=AK1",
    "MQv2-HMAC-SHA1 Credential=AK1, Signature",
    "MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=00",
])
def test_malformed(value: str) -> None:
    with pytest.raises(AuthorizationError):
        parse_authorization(value)


def test_no_signed_headers_never_verifies() -> None:
    auth = parse_authorization(f"MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=, "
                               f"Signature={sign('s', '')}")
    assert not verify(auth, {"x-mq-date-time": DATE}, "s")
