"""The Authenticator: logins, lockouts, anonymous and open mode, certificates, MQTT ACLs
and AMQP permissions, reloads."""

from __future__ import annotations

import logging

import pytest

from gateway.auth import (
    ANONYMOUS,
    ANONYMOUS_PRINCIPAL,
    DEFAULT,
    Authenticator,
    ExposureError,
    LoginLimits,
    Permissions,
    Principal,
    Refusal,
    RefusalReason,
    UsersDatabase,
    UsersFileError,
    resolve_allow_anonymous,
    subject_from_peercert,
)
from gateway.auth.acl import AclRule
from gateway.auth.passwords import PasswordHash, hash_password
from gateway.auth.ratelimit import address_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fast_hash(password: str) -> str:
    return hash_password(password, n=16, r=1, p=1)


def make_db() -> UsersDatabase:
    db = UsersDatabase()
    db.add_user("alice", fast_hash("alice-pw"), ("administrator",))
    db.add_user("bob", fast_hash("bob-pw"))
    db.add_user("dev1", None, (), ("CN=dev1,O=Acme",))
    db.add_vhost("prod")
    db.set_permissions("alice", "/", Permissions(".*", ".*", ".*"))
    db.set_permissions("bob", "/", Permissions("^bob\\.", "^amq\\.topic$|^bob\\.", ""))
    db.set_permissions("bob", "prod", Permissions("", "", ""))
    for rule in ("both devices/%c/#", "both home/%u/#", "subscribe public/#"):
        db.add_acl_rule(DEFAULT, AclRule.parse(rule))
    db.add_acl_rule("bob", AclRule.parse("deny home/bob/private/#"))
    db.add_acl_rule(ANONYMOUS, AclRule.parse("subscribe public/#"))
    db.set_permissions(ANONYMOUS, "/", Permissions("", "", "^public$"))
    return db


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(clock) -> Authenticator:
    limits = LoginLimits(
        max_failures_per_address=10, max_failures_per_user=3, window=60, lockout=30, max_lockout=120
    )
    return Authenticator(make_db(), limits=limits, clock=clock)


def login(auth, user, password, peer="10.0.0.1"):
    return auth.authenticate(user, password, client_id="c1", peer_host=peer)


# -- logins ---------------------------------------------------------------------------


def test_password_login(auth):
    p = login(auth, "alice", "alice-pw")
    assert p == Principal("alice", "password", frozenset({"administrator"}))
    assert p and p.is_administrator and not p.anonymous
    assert login(auth, "bob", b"bob-pw") == Principal("bob", "password")


def test_wrong_password_and_unknown_user_look_the_same(auth):
    wrong, unknown = login(auth, "alice", "nope"), login(auth, "mallory", "nope")
    assert wrong == unknown == Refusal(RefusalReason.BAD_CREDENTIALS)
    assert not wrong
    assert (wrong.mqtt5_reason_code, wrong.mqtt3_return_code, wrong.amqp_reply_code) == (
        0x86,
        4,
        403,
    )
    assert login(auth, "alice", None) == Refusal(RefusalReason.BAD_CREDENTIALS)
    assert login(auth, "dev1", "") == Refusal(RefusalReason.BAD_CREDENTIALS)  # cert only


def test_unknown_user_costs_one_verification_with_the_users_parameters(auth, monkeypatch):
    seen = []
    real = PasswordHash.matches
    monkeypatch.setattr(PasswordHash, "matches", lambda h, pw: seen.append(h.params) or real(h, pw))
    login(auth, "mallory", "x")
    login(auth, "alice", "x")
    login(auth, "dev1", "x")  # exists, no password
    assert seen == [(16, 1, 1)] * 3


def test_failures_are_logged_without_the_password(auth, caplog):
    with caplog.at_level(logging.DEBUG, logger="gateway.auth"):
        login(auth, "alice", "hunter2-secret")
        login(auth, "nobody\nfake line", "hunter2-secret")
    assert len(caplog.records) == 2
    for record in caplog.records:
        assert record.levelno == logging.WARNING and record.getMessage() == "login failed"
        assert record.peer == "10.0.0.1" and record.client_id == "c1"
        assert "hunter2" not in str(vars(record))
    assert [r.user for r in caplog.records] == ["alice", "nobody\nfake line"]


def test_anonymous(clock):
    closed = Authenticator(make_db(), clock=clock)
    assert closed.authenticate(None, None) == Refusal(RefusalReason.NOT_AUTHORIZED)
    assert closed.authenticate("", b"pw").mqtt5_reason_code == 0x87
    opened = Authenticator(make_db(), allow_anonymous=True, clock=clock)
    assert opened.authenticate(None, None) is ANONYMOUS_PRINCIPAL
    assert opened.authenticate("mallory", "x") == Refusal(RefusalReason.BAD_CREDENTIALS)


def test_open_mode_allows_everything_but_writing_sys():
    auth = Authenticator(None, allow_anonymous=True)
    p = auth.authenticate("anyone", "anything", client_id="x")
    assert p is ANONYMOUS_PRINCIPAL and not auth.authentication_configured
    assert auth.can_publish(p, "x", "any/topic") and auth.can_subscribe(p, "x", "#")
    assert auth.can_subscribe(p, "x", "$SYS/#")
    assert not auth.can_publish(p, "x", "$SYS/broker/uptime")
    assert auth.vhost_allowed(p, "/") and not auth.vhost_allowed(p, "other")
    assert (
        auth.can_configure(p, "/", "q")
        and auth.can_write(p, "/", "")
        and auth.can_read(p, "/", "q")
    )


def test_no_users_and_no_anonymous_refuses_everyone():
    auth = Authenticator(None)
    assert auth.authenticate("alice", "pw") == Refusal(RefusalReason.NOT_AUTHORIZED)
    assert auth.authenticate(None, None) == Refusal(RefusalReason.NOT_AUTHORIZED)
    assert not auth.can_publish(ANONYMOUS_PRINCIPAL, "c", "a")
    assert not auth.vhost_allowed(ANONYMOUS_PRINCIPAL, "/")


# -- rate limiting ----------------------------------------------------------------------


def test_per_username_lockout_backs_off_and_expires(auth, clock):
    for _ in range(3):
        assert login(auth, "bob", "bad", peer="10.0.0.9").reason is RefusalReason.BAD_CREDENTIALS
    refused = login(auth, "bob", "bob-pw", peer="10.0.0.9")  # right password, still locked
    assert refused.reason is RefusalReason.RATE_LIMITED and refused.retry_after == 30
    assert refused.mqtt5_reason_code == 0x9F and refused.amqp_reply_code == 403
    assert login(auth, "bob", "bob-pw", peer="10.0.0.10").reason is RefusalReason.RATE_LIMITED
    assert login(auth, "alice", "alice-pw", peer="10.0.0.9")  # other users unaffected
    clock.now += 30
    for _ in range(3):
        login(auth, "bob", "bad", peer="10.0.0.9")
    assert login(auth, "bob", "bob-pw").retry_after == 60  # second lockout doubles
    clock.now += 60
    assert login(auth, "bob", "bob-pw")  # success clears the username's record
    assert login(auth, "bob", "bad").reason is RefusalReason.BAD_CREDENTIALS


def test_failures_outside_the_window_are_forgotten(auth, clock):
    for _ in range(10):
        login(auth, "bob", "bad")
        clock.now += 31  # two failures per 60 s window at most
    assert login(auth, "bob", "bob-pw")


def test_per_address_lockout_covers_every_username(auth, clock):
    for i in range(10):
        login(auth, f"guess{i}", "x", peer="203.0.113.5")
    assert login(auth, "alice", "alice-pw", peer="203.0.113.5").reason is RefusalReason.RATE_LIMITED
    assert login(auth, "alice", "alice-pw", peer="203.0.113.6")
    clock.now += 30
    assert login(auth, "alice", "alice-pw", peer="203.0.113.5")


def test_locked_out_attempts_cost_no_hashing(auth, monkeypatch):
    for _ in range(3):
        login(auth, "bob", "bad")
    monkeypatch.setattr(PasswordHash, "matches", lambda *a: pytest.fail("hashed while locked"))
    assert login(auth, "bob", "bob-pw").reason is RefusalReason.RATE_LIMITED


def test_an_attacker_cannot_lock_out_a_device_from_its_usual_address(auth):
    assert login(auth, "bob", "bob-pw", peer="10.0.0.1")
    for _ in range(5):
        login(auth, "bob", "bad", peer="198.51.100.7")
    assert login(auth, "bob", "bob-pw", peer="198.51.100.8").reason is RefusalReason.RATE_LIMITED
    assert login(auth, "bob", "bob-pw", peer="10.0.0.1")  # trusted pair


def test_address_keys():
    assert address_key("10.1.2.3") == "10.1.2.3"
    assert address_key("::ffff:10.1.2.3") == "10.1.2.3"
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9")
    assert address_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert address_key(None) == "-" and address_key("unix") == "unix"


def test_tracked_keys_are_bounded(clock):
    auth = Authenticator(make_db(), limits=LoginLimits(max_keys=50), clock=clock)
    for i in range(200):
        auth.authenticate(f"user{i}", "x", peer_host=f"10.0.{i // 250}.{i % 250}")
    assert len(auth._by_user) == 50 and len(auth._by_address) == 50


# -- certificates -------------------------------------------------------------------------


def test_certificate_login(auth):
    assert auth.authenticate_certificate("CN=dev1,O=Acme") == Principal("dev1", "certificate")
    assert auth.authenticate_certificate(" cn = dev1 , o=Acme") == Principal("dev1", "certificate")
    assert auth.authenticate_certificate("CN=dev1,O=Evil").reason is RefusalReason.BAD_CREDENTIALS
    assert auth.authenticate_certificate("garbage").reason is RefusalReason.BAD_CREDENTIALS


def test_subject_from_peercert():
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Acme, Inc"),),
            (("commonName", "dev1"),),
        )
    }
    assert subject_from_peercert(cert) == "CN=dev1,O=Acme\\, Inc,C=DE"
    with pytest.raises(ValueError):
        subject_from_peercert({})


# -- MQTT ACLs ------------------------------------------------------------------------------


def test_publish_and_subscribe_through_default_rules(auth):
    bob = login(auth, "bob", "bob-pw")
    assert auth.can_publish(bob, "c1", "devices/c1/temp")
    assert not auth.can_publish(bob, "c1", "devices/c2/temp")  # another client's topic
    assert not auth.can_subscribe(bob, "c1", "devices/+/temp")
    # his own deny rule, before the @default rule that grants it, filters delivery
    decision = auth.subscribe_decision(bob, "c1", "home/bob/#")
    assert decision.granted and decision.deny is not None
    assert decision.deny("home/bob/private/diary") and not decision.deny("home/bob/lamp")
    assert not auth.can_subscribe(bob, "c1", "home/bob/private/#")  # covered: refused
    assert auth.subscribe_decision(bob, "c1", "home/bob/lamp/#").deny is None
    assert auth.can_subscribe(bob, "c1", "home/bob/lamp/#")
    assert not auth.can_publish(bob, "c1", "home/bob/private/diary")
    assert not auth.can_publish(bob, "c1", "home/alice/lamp")  # another user's topic
    assert auth.can_subscribe(bob, "c1", "public/#") and not auth.can_publish(bob, "c1", "public/x")
    assert not auth.can_subscribe(bob, "c1", "#")


def test_shared_subscriptions_are_checked_on_their_filter(auth):
    bob = login(auth, "bob", "bob-pw")
    assert auth.can_subscribe(bob, "c1", "$share/g/public/+")
    assert not auth.can_subscribe(bob, "c1", "$share/g/home/alice/#")
    assert not auth.can_subscribe(bob, "c1", "$share/g")


def test_sys_is_for_administrators_unless_a_rule_says_otherwise(auth):
    alice, bob = login(auth, "alice", "alice-pw"), login(auth, "bob", "bob-pw")
    assert auth.can_subscribe(alice, "c1", "$SYS/#")
    assert not auth.can_subscribe(bob, "c1", "$SYS/#")
    assert not auth.can_publish(alice, "c1", "$SYS/broker/clients")
    db = auth.database
    db.add_acl_rule("bob", AclRule.parse("subscribe $SYS/broker/load/#"))
    db.add_acl_rule("alice", AclRule.parse("deny $SYS/broker/clients/#"))
    assert auth.can_subscribe(bob, "c1", "$SYS/broker/load/+")
    assert not auth.can_subscribe(bob, "c1", "$SYS/#")
    decision = auth.subscribe_decision(alice, "c1", "$SYS/#")  # granted, filtered
    assert decision.deny("$SYS/broker/clients/connected") and not decision.deny("$SYS/x")
    assert not auth.can_subscribe(alice, "c1", "$SYS/broker/clients/+")
    assert auth.can_subscribe(alice, "c1", "$SYS/broker/load/#")


def test_anonymous_gets_the_anonymous_rules_only(clock):
    auth = Authenticator(make_db(), allow_anonymous=True, clock=clock)
    anon = auth.authenticate(None, None)
    assert auth.can_subscribe(anon, "c1", "public/x")
    assert not auth.can_publish(anon, "c1", "devices/c1/temp")  # @default is for users
    closed = Authenticator(make_db(), clock=clock)
    assert not closed.can_subscribe(ANONYMOUS_PRINCIPAL, "c1", "public/x")


def test_a_deleted_user_can_do_nothing(auth):
    bob = login(auth, "bob", "bob-pw")
    auth.database.delete_user("bob")
    assert not auth.can_publish(bob, "c1", "devices/c1/x")
    assert not auth.vhost_allowed(bob, "/")


# -- AMQP permissions -----------------------------------------------------------------------


def test_vhost_access(auth):
    alice, bob = login(auth, "alice", "alice-pw"), login(auth, "bob", "bob-pw")
    assert auth.vhost_allowed(alice, "/") and not auth.vhost_allowed(alice, "prod")
    assert auth.vhost_allowed(bob, "prod")  # empty permissions still grant the vhost
    assert not auth.vhost_allowed(bob, "missing") and not auth.vhost_exists("missing")
    assert not auth.can_configure(alice, "prod", "q")  # another vhost


def test_permission_regexes(auth):
    alice, bob = login(auth, "alice", "alice-pw"), login(auth, "bob", "bob-pw")
    assert auth.can_configure(alice, "/", "anything") and auth.can_read(alice, "/", "x")
    assert auth.can_configure(bob, "/", "bob.queue")
    assert not auth.can_configure(bob, "/", "alice.queue")
    assert not auth.can_configure(bob, "/", "xbob.queue")  # anchored with ^
    assert auth.can_write(bob, "/", "amq.topic") and not auth.can_write(bob, "/", "amq.topic2")
    assert not auth.can_read(bob, "/", "bob.queue")  # "" permits nothing
    assert not auth.can_read(bob, "/", "")
    assert not auth.can_configure(bob, "prod", "bob.q")


def test_search_semantics_and_default_exchange():
    perms = Permissions("queue", "^amq\\.default$", "")
    assert perms.allows("configure", "my-queue-1")  # unanchored: found anywhere
    assert not perms.allows("read", "") and not perms.allows("read", "anything")
    db = make_db()
    db.set_permissions("bob", "/", perms)
    auth = Authenticator(db)
    bob = auth.authenticate("bob", "bob-pw")
    assert auth.can_write(bob, "/", "")  # the default exchange is checked as amq.default
    assert not auth.can_write(bob, "/", "amq.direct")


def test_anonymous_amqp_permissions(clock):
    auth = Authenticator(make_db(), allow_anonymous=True, clock=clock)
    anon = auth.authenticate(None, None)
    assert auth.vhost_allowed(anon, "/") and auth.can_read(anon, "/", "public")
    assert not auth.can_read(anon, "/", "private") and not auth.can_configure(anon, "/", "q")


# -- files and startup policy -------------------------------------------------------------


def test_from_users_file_and_reload(tmp_path, clock):
    path = tmp_path / "users.json"
    auth = Authenticator.from_users_file(path, clock=clock)
    assert not auth.authentication_configured  # missing file: no users yet
    with pytest.raises(UsersFileError, match="no such users file"):
        Authenticator.from_users_file(path, missing_ok=False)
    make_db().save(path)
    assert auth.reload() and auth.authentication_configured
    assert not auth.reload()  # unchanged
    assert login(auth, "bob", "bob-pw")
    db = make_db()
    db.set_password("bob", fast_hash("new"))
    db.save(path)
    assert auth.reload()
    assert not login(auth, "bob", "bob-pw") and login(auth, "bob", "new")
    path.write_text("{broken")
    with pytest.raises(UsersFileError, match="not valid JSON"):
        auth.reload()
    assert login(auth, "bob", "new")  # the last good database stays
    path.unlink()
    assert not auth.reload() and auth.authentication_configured  # deleting never opens up


def test_every_login_picks_up_changes_to_the_users_file(tmp_path, clock, caplog):
    path = tmp_path / "users.json"
    make_db().save(path)
    auth = Authenticator.from_users_file(path, clock=clock)
    bob = login(auth, "bob", "bob-pw")
    assert auth.subscribe_decision(bob, "c1", "public/#").deny is None
    db = make_db()
    db.add_acl_rule("bob", AclRule.parse("deny public/secret/#"))
    db.save(path)  # what `lmq users acl add` does, behind the running gateway's back
    assert auth.subscribe_decision(bob, "c1", "public/#").deny is None  # not reloaded yet
    bob = login(auth, "bob", "bob-pw")  # the next login reloads
    assert auth.subscribe_decision(bob, "c1", "public/#").deny("public/secret/x")
    path.write_text("{broken")
    with caplog.at_level("WARNING", logger="gateway.auth"):
        assert login(auth, "bob", "bob-pw") and login(auth, "bob", "bob-pw")
    refused = [r for r in caplog.records if r.getMessage().startswith("users file not")]
    assert len(refused) == 1  # logged once, the last good database kept
    assert auth.subscribe_decision(bob, "c1", "public/#").deny("public/secret/x")


def test_resolve_allow_anonymous():
    assert resolve_allow_anonymous("127.0.0.1", users_configured=False, allow_anonymous_flag=False)
    assert resolve_allow_anonymous("::1", users_configured=False, allow_anonymous_flag=False)
    assert resolve_allow_anonymous("localhost", users_configured=False, allow_anonymous_flag=False)
    for bind in ("0.0.0.0", "::", "", "10.0.0.5", "gateway.example"):
        with pytest.raises(ExposureError, match="--allow-anonymous"):
            resolve_allow_anonymous(bind, users_configured=False, allow_anonymous_flag=False)
        assert resolve_allow_anonymous(bind, users_configured=False, allow_anonymous_flag=True)
    assert not resolve_allow_anonymous("0.0.0.0", users_configured=True, allow_anonymous_flag=False)
    assert not resolve_allow_anonymous(
        "127.0.0.1", users_configured=True, allow_anonymous_flag=False
    )
    assert resolve_allow_anonymous("0.0.0.0", users_configured=True, allow_anonymous_flag=True)


def test_hash_params_of_dummy_follow_the_users(clock):
    db = UsersDatabase()
    db.add_user("x", hash_password("pw", n=32, r=2, p=1))
    assert Authenticator(db)._dummy.params == (32, 2, 1)
