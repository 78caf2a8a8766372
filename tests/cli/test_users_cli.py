"""``lmq users`` and ``lmq vhosts`` through click's runner, on the groups themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.users import users
from cli.vhosts import vhosts
from gateway.auth import Authenticator, RefusalReason, UsersDatabase
from gateway.auth import passwords as passwords_module


@pytest.fixture(autouse=True)
def cheap_hashes(monkeypatch):
    monkeypatch.setattr(passwords_module, "DEFAULT_N", 16)
    monkeypatch.setattr(passwords_module, "DEFAULT_R", 1)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def run(group, data_dir, *args, input=None):
    result = CliRunner().invoke(group, [*args, "--data-dir", str(data_dir)], input=input)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def load(data_dir) -> UsersDatabase:
    return UsersDatabase.load(data_dir / "users.json")


def test_add_with_prompted_hidden_password(data_dir):
    code, out = run(
        users, data_dir, "add", "alice", "--tag", "administrator", input="s3cret\ns3cret\n"
    )
    assert code == 0 and "added user alice" in out and "s3cret" not in out
    auth = Authenticator(load(data_dir))
    assert auth.authenticate("alice", "s3cret").is_administrator
    assert "s3cret" not in (data_dir / "users.json").read_text()


def test_prompt_confirmation_mismatch_and_empty_password(data_dir):
    code, out = run(users, data_dir, "add", "bob", input="a\nb\na\na\n")
    assert code == 0 and "do not match" in out
    code, out = run(users, data_dir, "add", "carol", "--password", "")
    assert code == 1 and out == "Error: the password must not be empty\n"


def test_password_from_stdin(data_dir):
    """For scripts without a terminal: the first line of stdin, no prompt, no echo."""
    code, out = run(users, data_dir, "add", "alice", "--password-stdin", input="s3cret\n")
    assert code == 0 and "added user alice" in out and "s3cret" not in out
    code, _ = run(users, data_dir, "passwd", "alice", "--password-stdin", input="n3w\r\n")
    assert code == 0
    auth = Authenticator(load(data_dir))
    assert auth.authenticate("alice", "n3w")
    code, out = run(users, data_dir, "add", "bob", "--password-stdin", input="")
    assert code == 1 and out == "Error: the password must not be empty\n"
    code, out = run(users, data_dir, "add", "bob", "--password-stdin", "--password", "x")
    assert code == 2 and "exclude each other" in out


def test_add_errors_are_one_line(data_dir):
    run(users, data_dir, "add", "alice", "--password", "pw")
    for args, message in [
        (("add", "alice", "--password", "x"), "user 'alice' already exists"),
        (("add", "a/b", "--password", "x"), "must not contain '/'"),
        (("add", "x", "--password", "x", "--tag", "no spaces"), "tag 'no spaces'"),
        (("add", "x", "--password", "x", "--no-password"), "exclude each other"),
        (("delete", "ghost"), "no user 'ghost'"),
        (("passwd", "ghost", "--password", "x"), "no user 'ghost'"),
    ]:
        code, out = run(users, data_dir, *args)
        assert code in (1, 2) and message in out, (args, out)
        assert "Traceback" not in out


def test_passwd_delete_list(data_dir):
    run(users, data_dir, "add", "alice", "--password", "old")
    run(users, data_dir, "add", "dev1", "--no-password", "--cert-subject", "cn=dev1, o=Acme")
    code, out = run(users, data_dir, "passwd", "alice", input="new\nnew\n")
    assert code == 0
    auth = Authenticator(load(data_dir))
    assert not auth.authenticate("alice", "old") and auth.authenticate("alice", "new")
    assert auth.authenticate_certificate("CN=dev1,O=Acme").username == "dev1"
    run(users, data_dir, "set-tags", "alice", "administrator", "monitoring")
    code, out = run(users, data_dir, "list")
    assert code == 0 and "administrator,monitoring" in out and "certificate" in out
    assert "2 user(s)" in out
    code, out = run(users, data_dir, "list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert rows["dev1"]["certificate_subjects"] == ["CN=dev1,O=Acme"]
    assert rows["alice"]["password"] is True and rows["dev1"]["password"] is False
    code, out = run(users, data_dir, "delete", "alice")
    assert code == 0 and set(load(data_dir).users) == {"dev1"}


def test_certificate_mapping(data_dir):
    run(users, data_dir, "add", "dev1", "--no-password")
    code, out = run(users, data_dir, "map-cert", "dev1", "CN=dev1,O=Acme")
    assert code == 0 and "CN=dev1,O=Acme -> dev1" in out
    run(users, data_dir, "add", "dev2", "--no-password")
    code, out = run(users, data_dir, "map-cert", "dev2", "CN=dev1, O=Acme")
    assert code == 1 and "already maps to 'dev1'" in out
    code, out = run(users, data_dir, "unmap-cert", "CN=dev1,O=Acme")
    assert code == 0 and load(data_dir).user("dev1").certificate_subjects == ()


def test_vhosts_and_permissions(data_dir):
    run(users, data_dir, "add", "bob", "--password", "pw")
    code, out = run(vhosts, data_dir, "add", "prod", "--description", "production")
    assert code == 0
    code, out = run(
        users,
        data_dir,
        "set-permissions",
        "bob",
        "--vhost",
        "prod",
        "--configure",
        "^bob\\.",
        "--write",
        ".*",
        "--read",
        "",
    )
    assert code == 0, out
    auth = Authenticator(load(data_dir))
    bob = auth.authenticate("bob", "pw")
    assert auth.vhost_allowed(bob, "prod") and not auth.vhost_allowed(bob, "/")
    assert auth.can_configure(bob, "prod", "bob.q") and not auth.can_read(bob, "prod", "bob.q")
    code, out = run(users, data_dir, "permissions")
    assert 'bob                      prod             "^bob\\\\." / ".*" / ""' in out
    code, out = run(vhosts, data_dir, "list")
    assert "production" in out and "/" in out
    code, out = run(vhosts, data_dir, "list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert rows["prod"]["users"] == ["bob"] and rows["/"]["users"] == []
    for args, message in [
        (
            (
                "set-permissions",
                "bob",
                "--vhost",
                "nope",
                "--configure",
                "",
                "--write",
                "",
                "--read",
                "",
            ),
            "no vhost 'nope'",
        ),
        (
            ("set-permissions", "bob", "--configure", "(", "--write", "", "--read", ""),
            "is not a regex",
        ),
        (("set-permissions", "bob", "--configure", ".*"), "Missing option"),
        (("clear-permissions", "bob"), "has no permissions on vhost '/'"),
    ]:
        code, out = run(users, data_dir, *args)
        assert code in (1, 2) and message in out, (args, out)
    assert run(users, data_dir, "clear-permissions", "bob", "--vhost", "prod")[0] == 0
    assert not Authenticator(load(data_dir)).vhost_allowed(bob, "prod")
    run(
        users,
        data_dir,
        "set-permissions",
        "bob",
        "--vhost",
        "prod",
        "--configure",
        "",
        "--write",
        "",
        "--read",
        "",
    )
    code, out = run(vhosts, data_dir, "delete", "prod")
    assert code == 0 and load(data_dir).permissions == {}
    assert run(vhosts, data_dir, "delete", "/") == (
        1,
        "Error: the default vhost '/' cannot be deleted\n",
    )
    assert run(vhosts, data_dir, "add", "/")[1] == "Error: vhost '/' already exists\n"


def test_acl_commands(data_dir):
    run(users, data_dir, "add", "bob", "--password", "pw")
    assert run(users, data_dir, "acl", "add", "@default", "--both", "devices/%c/#")[0] == 0
    assert run(users, data_dir, "acl", "add", "bob", "--subscribe", "public/#")[0] == 0
    assert (
        run(users, data_dir, "acl", "add", "bob", "--deny", "public/secret", "--position", "1")[0]
        == 0
    )
    assert run(users, data_dir, "acl", "add", "@anonymous", "--publish", "inbox")[0] == 0
    code, out = run(users, data_dir, "acl", "list")
    assert out.splitlines() == [
        "bob                        1  deny public/secret",
        "bob                        2  subscribe public/#",
        "@default                   1  both devices/%c/#",
        "@anonymous                 1  publish inbox",
    ]
    assert run(users, data_dir, "acl", "list", "bob")[1].count("\n") == 2
    auth = Authenticator(load(data_dir))
    bob = auth.authenticate("bob", "pw")
    assert auth.can_publish(bob, "c9", "devices/c9/t") and not auth.can_publish(
        bob, "c9", "devices/c8/t"
    )
    assert auth.can_subscribe(bob, "c9", "public/news")
    assert not auth.can_subscribe(bob, "c9", "public/secret")
    decision = auth.subscribe_decision(bob, "c9", "public/#")  # the deny filters delivery
    assert decision.deny("public/secret") and not decision.deny("public/news")
    code, out = run(users, data_dir, "acl", "remove", "bob", "1")
    assert code == 0 and "removed deny public/secret" in out
    after = Authenticator(load(data_dir)).subscribe_decision(bob, "c9", "public/#")
    assert after.granted and after.deny is None
    for args, message in [
        (("acl", "add", "bob", "x/#"), "exactly one of --publish"),
        (("acl", "add", "bob", "--publish", "--deny", "x"), "exactly one of"),
        (("acl", "add", "bob", "--publish", "a/#/b"), "'#' must be the last level"),
        (("acl", "add", "ghost", "--publish", "x"), "no user 'ghost'"),
        (("acl", "remove", "bob", "9"), "has no ACL rule 9"),
    ]:
        code, out = run(users, data_dir, *args)
        assert code in (1, 2) and message in out, (args, out)


def test_users_file_option_and_malformed_file(tmp_path, data_dir):
    other = tmp_path / "elsewhere" / "auth.json"
    result = CliRunner().invoke(users, ["add", "x", "--password", "p", "--users-file", str(other)])
    assert result.exit_code == 0 and "x" in UsersDatabase.load(other).users
    data_dir.mkdir()
    (data_dir / "users.json").write_text('{"format": "lmq-users", "version": 1, "users": []}')
    for group, args in [
        (users, ("list",)),
        (users, ("add", "y", "--password", "p")),
        (vhosts, ("list",)),
        (vhosts, ("add", "v")),
    ]:
        code, out = run(group, data_dir, *args)
        assert code == 1
        assert out == f"Error: {data_dir / 'users.json'}: users must be a JSON object\n"


def test_listing_without_a_file(data_dir):
    assert run(users, data_dir, "list")[1].endswith("0 user(s)\n")
    assert "/" in run(vhosts, data_dir, "list")[1]
    assert not data_dir.exists()


def test_rate_limit_reason_is_reported(data_dir):
    run(users, data_dir, "add", "bob", "--password", "pw")
    auth = Authenticator(load(data_dir))
    for _ in range(5):
        auth.authenticate("bob", "wrong", peer_host="192.0.2.1")
    assert (
        auth.authenticate("bob", "pw", peer_host="192.0.2.2").reason is RefusalReason.RATE_LIMITED
    )


def test_access_keys(data_dir):
    # given on add: the typed secret is stored, never echoed
    code, out = run(
        users, data_dir, "add", "orders-app", "--no-password",
        "--access-key", "AK_orders_1", "--secret-key", "typed-secret",
    )
    assert code == 0 and "access key: AK_orders_1" in out and "typed-secret" not in out
    auth = Authenticator(load(data_dir))
    principal, secret = auth.lookup_access_key("AK_orders_1")
    assert principal.username == "orders-app" and secret == "typed-secret"
    # generated: shown once
    code, out = run(users, data_dir, "access-keys", "add", "orders-app")
    assert code == 0
    generated = dict(
        line.split(": ", 1) for line in out.splitlines()
        if line.startswith(("access key: ", "secret key: "))
    )
    access_key, secret_key = generated["access key"], generated["secret key"].split()[0]
    found = Authenticator(load(data_dir)).lookup_access_key(access_key)
    assert found is not None and found[1] == secret_key
    # an access key with its secret prompted for, hidden
    code, out = run(
        users, data_dir, "access-keys", "add", "orders-app", "--access-key", "AK_orders_3",
        input="prompted-1\nprompted-1\n",
    )
    assert code == 0 and "prompted-1" not in out.replace("Secret key", "")
    assert load(data_dir).user("orders-app").access_keys["AK_orders_3"] == "prompted-1"
    # add --generate-access-key
    code, out = run(users, data_dir, "add", "bob", "--no-password", "--generate-access-key")
    assert code == 0 and "secret key: " in out
    code, out = run(users, data_dir, "access-keys", "list")
    listed = [line.split() for line in out.splitlines()]
    assert sorted(listed) == sorted(
        [["AK_orders_1", "orders-app"], [access_key, "orders-app"],
         ["AK_orders_3", "orders-app"], [next(iter(load(data_dir).user("bob").access_keys)),
                                         "bob"]]
    )
    assert "typed-secret" not in out and secret_key not in out
    code, out = run(users, data_dir, "list", "--json")
    rows = {r["name"]: r for r in map(json.loads, out.splitlines())}
    assert rows["orders-app"]["access_keys"] == sorted([access_key, "AK_orders_1", "AK_orders_3"])
    code, out = run(users, data_dir, "list")
    assert "access-key" in out
    # errors, one line each
    for args, message in [
        (("access-keys", "add", "bob", "--access-key", "AK_orders_1", "--secret-key", "xxxxxx"),
         "already belongs to 'orders-app'"),
        (("access-keys", "add", "ghost"), "no user 'ghost'"),
        (("access-keys", "add", "bob", "--access-key", "ab", "--secret-key", "xxxxxx"),
         "must be 6-128"),
        (("access-keys", "add", "bob", "--secret-key", "xxxxxxx"), "needs --access-key"),
        (("access-keys", "delete", "AK_nope_1"), "no access key 'AK_nope_1'"),
        (("access-keys", "list", "ghost"), "no user 'ghost'"),
    ]:
        code, out = run(users, data_dir, *args)
        assert code in (1, 2) and message in out, (args, out)
    code, out = run(users, data_dir, "access-keys", "delete", "AK_orders_1")
    assert code == 0 and Authenticator(load(data_dir)).lookup_access_key("AK_orders_1") is None
