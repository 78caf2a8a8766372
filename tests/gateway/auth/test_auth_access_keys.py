"""RocketMQ access keys: stored per user in the users file (secret recoverable, for HMAC
verification), looked up by the authenticator, signature logins counted and locked out
like passwords, picked up from the file without a restart."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat

import pytest

from gateway.auth import (
    ANONYMOUS_PRINCIPAL,
    Authenticator,
    LoginLimits,
    Principal,
    RefusalReason,
    UsersDatabase,
    UsersFileError,
)
from gateway.auth.users import UsersError, generate_access_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_db() -> UsersDatabase:
    db = UsersDatabase()
    db.add_user("orders-app", None, ("administrator",))
    db.add_user("bob", None)
    db.add_access_key("orders-app", "AK_orders_1", "secret-one")
    db.add_access_key("orders-app", "AK_orders_2", "secret-two")
    return db


def signer(secret: str, content: bytes):
    """What a RocketMQ client sends: HMAC-SHA1 of the request content, base64. The
    verify callback recomputes it with the stored secret (as the remoting front end
    will with protocol.remoting's signature)."""
    import base64

    sent = base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest())

    def verify(stored_secret: str) -> bool:
        mine = base64.b64encode(hmac.new(stored_secret.encode(), content, hashlib.sha1).digest())
        return hmac.compare_digest(mine, sent)

    return verify


def test_database_keys_round_trip_and_rules(tmp_path):
    db = make_db()
    assert db.user_for_access_key("AK_orders_2").name == "orders-app"
    assert set(db.access_key_index()) == {"AK_orders_1", "AK_orders_2"}
    with pytest.raises(UsersError, match="already belongs to 'orders-app'"):
        db.add_access_key("bob", "AK_orders_1", "another")
    with pytest.raises(UsersError, match="access key 'short' must be 6-128"):
        db.add_access_key("bob", "short", "secret-xx")
    with pytest.raises(UsersError, match="secret key must be 6-128") as info:
        db.add_access_key("bob", "AK_bob_1", "has space")
    assert "has space" not in str(info.value)  # a secret never goes into a message
    with pytest.raises(UsersError, match="no user 'carol'"):
        db.add_access_key("carol", "AK_carol", "secret-xx")
    path = tmp_path / "users.json"
    db.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    raw = json.loads(path.read_text())
    assert raw["users"]["orders-app"]["access_keys"] == {
        "AK_orders_1": "secret-one", "AK_orders_2": "secret-two"
    }
    assert "access_keys" not in raw["users"]["bob"]  # files without keys look as before
    again = UsersDatabase.load(path)
    assert again.users["orders-app"].access_keys == db.users["orders-app"].access_keys
    assert db.delete_access_key("AK_orders_1") == "orders-app"
    with pytest.raises(UsersError, match="no access key"):
        db.delete_access_key("AK_orders_1")
    db.delete_user("orders-app")
    assert db.access_key_index() == {}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('{"AK_x_123": 5}', "secret key must be"),
        ('{"a b": "secret-xx"}', "access key 'a b' must be"),
        ('["AK_x_123"]', "access_keys must be a JSON object"),
    ],
)
def test_malformed_keys_in_the_file(tmp_path, keys, message):
    path = tmp_path / "users.json"
    user = {"password": None, "access_keys": json.loads(keys)}
    path.write_text(json.dumps({"format": "lmq-users", "version": 1, "users": {"u": user}}))
    with pytest.raises(UsersFileError, match=message):
        UsersDatabase.load(path)


def test_duplicate_key_across_users_in_the_file(tmp_path):
    path = tmp_path / "users.json"
    user = '{"password": null, "access_keys": {"AK_same_1": "secret-xx"}}'
    path.write_text(
        f'{{"format": "lmq-users", "version": 1, "users": {{"a": {user}, "b": {user}}}}}'
    )
    with pytest.raises(UsersFileError, match="already belongs to 'a'"):
        UsersDatabase.load(path)


def test_generated_keys_are_valid_and_distinct():
    pairs = {generate_access_key() for _ in range(50)}
    assert len({ak for ak, _ in pairs}) == 50 and len({sk for _, sk in pairs}) == 50
    db = UsersDatabase()
    db.add_user("u", None)
    for ak, sk in pairs:
        db.add_access_key("u", ak, sk)
        assert ak.startswith("LMQ") and len(ak) == 20 and len(sk) == 40


def test_lookup_and_signature_login():
    auth = Authenticator(make_db(), clock=Clock())
    principal, secret = auth.lookup_access_key("AK_orders_2")
    assert principal == Principal("orders-app", "access_key", frozenset({"administrator"}))
    assert principal.is_administrator and secret == "secret-two"
    assert auth.lookup_access_key("AK_nobody_1") is None
    content = b"topicorders" + b"producerGroupp1"
    ok = auth.authenticate_signature("AK_orders_1", signer("secret-one", content))
    assert ok == Principal("orders-app", "access_key", frozenset({"administrator"}))
    wrong = auth.authenticate_signature("AK_orders_1", signer("secret-two", content))
    assert wrong.reason is RefusalReason.BAD_CREDENTIALS
    unknown = auth.authenticate_signature("AK_nobody_1", signer("secret-one", content))
    assert unknown.reason is RefusalReason.BAD_CREDENTIALS
    no_key = auth.authenticate_signature(None, signer("x", content))
    assert no_key.reason is RefusalReason.NOT_AUTHORIZED
    anonymous_ok = Authenticator(make_db(), allow_anonymous=True)
    assert anonymous_ok.authenticate_signature("", signer("x", b"")) is ANONYMOUS_PRINCIPAL
    open_mode = Authenticator(None, allow_anonymous=True)
    assert open_mode.authenticate_signature("AK_any_123", lambda s: False) is ANONYMOUS_PRINCIPAL
    closed = Authenticator(None, allow_anonymous=False)
    refused = closed.authenticate_signature("AK_any_123", lambda s: True)
    assert refused.reason is RefusalReason.NOT_AUTHORIZED


def test_bad_signatures_lock_out_like_passwords(caplog):
    clock = Clock()
    limits = LoginLimits(
        max_failures_per_address=10, max_failures_per_user=3, window=60, lockout=30,
        max_lockout=120,
    )
    auth = Authenticator(make_db(), limits=limits, clock=clock)
    calls = []

    def wrong(secret: str) -> bool:
        calls.append(secret)
        return False

    with caplog.at_level("WARNING", logger="gateway.auth"):
        for _ in range(3):
            refused = auth.authenticate_signature("AK_orders_1", wrong, peer_host="10.0.0.9")
            assert refused.reason is RefusalReason.BAD_CREDENTIALS
    assert all("secret-one" not in r.getMessage() and "secret-one" not in str(r.__dict__)
               for r in caplog.records)
    locked = auth.authenticate_signature("AK_orders_1", lambda s: True, peer_host="10.0.0.9")
    assert locked.reason is RefusalReason.RATE_LIMITED and locked.retry_after == 30
    # the user is locked whichever of its keys is used; the secret was not even tried
    calls.clear()
    locked = auth.authenticate_signature("AK_orders_2", wrong, peer_host="10.0.0.10")
    assert locked.reason is RefusalReason.RATE_LIMITED and calls == []
    clock.now += 30
    assert auth.authenticate_signature("AK_orders_2", lambda s: s == "secret-two")


def test_keys_follow_the_users_file(tmp_path):
    path = tmp_path / "users.json"
    make_db().save(path)
    auth = Authenticator.from_users_file(path, clock=Clock())
    assert auth.lookup_access_key("AK_orders_1") is not None
    db = make_db()
    db.delete_access_key("AK_orders_1")
    db.add_access_key("bob", "AK_bob_1", "bob-secret")
    db.save(path)  # what `lmq users access-keys ...` does behind the gateway's back
    assert auth.lookup_access_key("AK_orders_1") is None
    found = auth.lookup_access_key("AK_bob_1")
    assert found is not None and found[0].username == "bob" and found[1] == "bob-secret"
