"""The users file: JSON round trip, atomic writes, locking edits, and one-line errors for
every kind of malformed file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from gateway.auth import users as users_module
from gateway.auth.acl import AclRule
from gateway.auth.passwords import hash_password
from gateway.auth.users import (
    ANONYMOUS,
    DEFAULT,
    Permissions,
    UsersDatabase,
    UsersError,
    UsersFileError,
    atomic_write,
    check_username,
    edit_users_file,
)

HASH = hash_password("pw", n=16, r=1, p=1)


def sample() -> UsersDatabase:
    db = UsersDatabase()
    db.add_user("alice", HASH, ("administrator", "monitoring"))
    db.add_user("dev-1", None, (), ("CN=dev-1,O=Acme",))
    db.add_vhost("prod", "production")
    db.set_permissions("alice", "prod", Permissions("^a", ".*", ""))
    db.set_permissions(ANONYMOUS, "/", Permissions("", "", "^public$"))
    db.add_acl_rule(DEFAULT, AclRule.parse("both devices/%c/#"))
    db.add_acl_rule("alice", AclRule.parse("deny x/#"))
    db.add_acl_rule("alice", AclRule.parse("subscribe $SYS/#"), position=1)
    return db


def test_round_trip(tmp_path):
    path = tmp_path / "users.json"
    db = sample()
    db.save(path)
    loaded = UsersDatabase.load(path)
    assert loaded.to_json() == db.to_json()
    assert loaded.acl_rules("alice") == [
        AclRule.parse("subscribe $SYS/#"),
        AclRule.parse("deny x/#"),
    ]
    assert loaded.user_for_subject("CN=dev-1,O=Acme").name == "dev-1"
    data = json.loads(path.read_text())
    assert data["format"] == "lmq-users" and data["version"] == 1
    assert data["users"]["dev-1"]["password"] is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_minimal_file_gets_the_default_vhost(tmp_path):
    path = tmp_path / "u.json"
    path.write_text('{"format": "lmq-users", "version": 1}')
    db = UsersDatabase.load(path)
    assert db.users == {} and "/" in db.vhosts


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "users.json"
    atomic_write(path, b"old")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new" and len(synced) == 2  # the file, then the directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "users.json"
    atomic_write(path, b"old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.json"]


def test_edit_saves_on_success_only(tmp_path):
    path = tmp_path / "sub" / "users.json"
    with edit_users_file(path) as db:
        db.add_user("alice", HASH)
    assert "alice" in UsersDatabase.load(path).users
    with pytest.raises(RuntimeError), edit_users_file(path) as db:
        db.add_user("bob", HASH)
        raise RuntimeError("interrupted")
    assert "bob" not in UsersDatabase.load(path).users
    with pytest.raises(UsersFileError), edit_users_file(tmp_path / "none.json", create=False):
        pass


def test_edit_refuses_a_malformed_file_without_touching_it(tmp_path):
    path = tmp_path / "users.json"
    path.write_text("{nope")
    with pytest.raises(UsersFileError), edit_users_file(path):
        pass
    assert path.read_text() == "{nope"


def valid() -> dict:
    return sample().to_json()


def broken(mutate):
    data = valid()
    mutate(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{nope", "not valid JSON: Expecting property name enclosed in double quotes at line 1"),
        ("[]", "the file must be a JSON object"),
        ('{"format": "x", "version": 1}', "'format' must be 'lmq-users'"),
        ('{"format": "lmq-users", "version": 2}', "'version' 2 is not supported"),
        ('{"format": "lmq-users", "version": 1, "version": 1}', "duplicate key 'version'"),
        (broken(lambda d: d.update(extra=1)), "unknown key 'extra'"),
        (
            broken(lambda d: d["users"]["alice"].update(password="plain")),
            "users['alice']: password: not a '$scrypt$",
        ),
        (
            broken(lambda d: d["users"]["alice"].update(tags=["bad tag"])),
            "users['alice']: tag 'bad tag'",
        ),
        (
            broken(lambda d: d["users"]["alice"].update(tags="administrator")),
            "users['alice'].tags must be a JSON array",
        ),
        (broken(lambda d: d["users"].update({"a/b": {}})), "must not contain '/'"),
        (broken(lambda d: d["users"].update({"@x": {}})), "must not start with '@'"),
        (
            broken(lambda d: d["users"]["alice"].update(certificate_subjects=["CN=dev-1,O=Acme"])),
            "already maps to",
        ),
        (
            broken(lambda d: d["permissions"].update(ghost={"/": {}})),
            "permissions['ghost']: no user 'ghost'",
        ),
        (
            broken(
                lambda d: d["permissions"]["alice"].update(
                    nope={"configure": "", "write": "", "read": ""}
                )
            ),
            "no vhost 'nope'",
        ),
        (
            broken(lambda d: d["permissions"]["alice"]["prod"].update(read="(")),
            "permissions['alice']['prod']: read permission '(' is not a regex",
        ),
        (broken(lambda d: d["permissions"]["alice"]["prod"].pop("read")), "missing read"),
        (broken(lambda d: d["acl"].update(ghost=[])), "acl['ghost']: no user 'ghost'"),
        (
            broken(lambda d: d["acl"]["alice"].append({"access": "read", "filter": "a"})),
            "acl['alice'][2]",
        ),
        (
            broken(lambda d: d["acl"]["alice"].append({"access": "deny", "filter": "a/#/b"})),
            "'#' must be the last level",
        ),
    ],
)
def test_malformed_files_give_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "users.json"
    path.write_text(text)
    with pytest.raises(UsersFileError) as info:
        UsersDatabase.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    assert message in text


def test_unreadable_and_missing(tmp_path):
    with pytest.raises(UsersFileError, match="no such users file"):
        UsersDatabase.load(tmp_path / "missing.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(UsersFileError, match="cannot read"):
        UsersDatabase.load(tmp_path / "dir.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    with pytest.raises(UsersFileError, match="cannot read"):
        UsersDatabase.load(tmp_path / "bin.json")


def test_mutators_keep_the_database_consistent():
    db = sample()
    with pytest.raises(UsersError, match="already exists"):
        db.add_user("alice", None)
    with pytest.raises(UsersError, match="cannot be deleted"):
        db.delete_vhost("/")
    db.delete_vhost("prod")
    assert "alice" not in db.permissions
    db.delete_user("alice")
    assert "alice" not in db.acl
    with pytest.raises(UsersError, match="no user"):
        db.add_acl_rule("alice", AclRule.parse("both a"))
    with pytest.raises(UsersError, match="position"):
        db.add_acl_rule(DEFAULT, AclRule.parse("both a"), position=5)
    with pytest.raises(UsersError, match="no ACL rule 3"):
        db.remove_acl_rule(DEFAULT, 3)
    assert db.remove_acl_rule(DEFAULT, 1) == AclRule.parse("both devices/%c/#")
    assert DEFAULT not in db.acl
    assert db.unmap_certificate("cn=dev-1, o=Acme") == "dev-1"
    with pytest.raises(UsersError, match="maps to no user"):
        db.unmap_certificate("CN=dev-1,O=Acme")


@pytest.mark.parametrize("name", ["", "a+b", "a#", "a/b", "@x", "tab\there", "x" * 256])
def test_bad_usernames(name):
    with pytest.raises(UsersError):
        check_username(name)


def test_default_users_file():
    assert users_module.default_users_file("data") == users_module.Path("data/users.json")
