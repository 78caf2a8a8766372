"""``lmq users`` and ``lmq vhosts`` against a running gateway (through its admin API,
found by the address it records in the data directory) and against a data directory
no gateway serves (the users file edited directly): same output, same exit codes,
one-line errors. Online, each change is in the audit log (no secret in it) and takes
effect at once: a user added logs in over MQTT without waiting for the file's watch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from gateway.auth import passwords as passwords_module

from ..mqtt_clients import Paho
from .support import AdminClient, admin_gateway, audit_lines

ENV = {
    "LMQ_SERVER": None,
    "LMQ_USERS_FILE": None,
    "LMQ_ADMIN_USER": "root",
    "LMQ_ADMIN_PASSWORD": "root-pw",
}


@pytest.fixture(autouse=True)
def cheap_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, the CLI hashes (in this process): cheaply, for the tests."""
    monkeypatch.setattr(passwords_module, "DEFAULT_N", 16)
    monkeypatch.setattr(passwords_module, "DEFAULT_R", 1)


def run(data: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--data-dir", str(data)], env=ENV, input=input)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output.replace(str(data), "D")


def operations(data: Path) -> list[tuple[int, str]]:
    """Every ``lmq users`` and ``lmq vhosts`` command, with refusals; (code, output)."""
    return [
        run(data, "users", "add", "root", "--password", "root-pw", "--tag", "administrator"),
        run(data, "users", "add", "app", "--password-stdin", input="app-pw\n"),
        run(data, "users", "add", "app", "--password", "x"),
        run(data, "users", "add", "cert", "--no-password", "--cert-subject", "CN=dev-1,O=Acme"),
        run(
            data,
            "users",
            "add",
            "keyed",
            "--no-password",
            "--access-key",
            "AKkeyed123",
            "--secret-key",
            "SKsecret123",
        ),
        run(data, "users", "add", "@bad", "--password", "x"),
        run(data, "users", "passwd", "app", "--password", "app-pw2"),
        run(data, "users", "passwd", "nobody", "--password", "x"),
        run(data, "users", "passwd", "app", "--password", "x", "--no-password"),
        run(data, "users", "passwd", "cert", "--no-password"),
        run(data, "users", "set-tags", "app", "monitoring", "ops"),
        run(data, "users", "set-tags", "app", "bad tag!"),
        run(data, "users", "map-cert", "app", "CN=app-1,O=Acme"),
        run(data, "users", "map-cert", "app", "CN=dev-1,O=Acme"),
        run(data, "users", "unmap-cert", "CN=app-1,O=Acme"),
        run(data, "users", "unmap-cert", "CN=nobody"),
        run(
            data,
            "users",
            "access-keys",
            "add",
            "app",
            "--access-key",
            "AKapp12345",
            "--secret-key",
            "SKapp12345",
        ),
        run(
            data,
            "users",
            "access-keys",
            "add",
            "cert",
            "--access-key",
            "AKapp12345",
            "--secret-key",
            "SKother123",
        ),
        run(data, "users", "access-keys", "list"),
        run(data, "users", "access-keys", "list", "nobody"),
        run(data, "users", "access-keys", "delete", "AKapp12345"),
        run(data, "users", "access-keys", "delete", "AKapp12345"),
        run(data, "vhosts", "add", "prod", "--description", "Production"),
        run(data, "vhosts", "add", "prod"),
        run(
            data,
            "users",
            "set-permissions",
            "app",
            "--vhost",
            "prod",
            "--configure",
            ".*",
            "--write",
            "^orders$",
            "--read",
            "",
        ),
        run(
            data,
            "users",
            "set-permissions",
            "app",
            "--vhost",
            "nowhere",
            "--configure",
            ".*",
            "--write",
            ".*",
            "--read",
            ".*",
        ),
        run(
            data, "users", "set-permissions", "app", "--configure", "(", "--write", "", "--read", ""
        ),
        run(data, "users", "permissions"),
        run(data, "users", "permissions", "--vhost", "prod"),
        run(data, "vhosts", "list"),
        run(data, "vhosts", "list", "--json"),
        run(data, "users", "acl", "add", "app", "--publish", "sensors/%c/#"),
        run(data, "users", "acl", "add", "app", "--deny", "#"),
        run(data, "users", "acl", "add", "@default", "--subscribe", "public/#"),
        run(data, "users", "acl", "add", "app", "--both", "a/#", "--position", "9"),
        run(data, "users", "acl", "add", "app", "--publish", "a/#/b"),
        run(data, "users", "acl", "list"),
        run(data, "users", "acl", "remove", "app", "2"),
        run(data, "users", "acl", "remove", "app", "5"),
        run(data, "users", "acl", "list", "app"),
        run(data, "users", "clear-permissions", "app", "--vhost", "prod"),
        run(data, "users", "clear-permissions", "app", "--vhost", "prod"),
        run(data, "vhosts", "delete", "prod"),
        run(data, "vhosts", "delete", "/"),
        run(data, "users", "list"),
        run(data, "users", "list", "--json"),
        run(data, "users", "delete", "keyed"),
        run(data, "users", "delete", "keyed"),
    ]


#: The exit codes of :func:`operations`: 1 a refusal (one line), 2 a usage error.
CODES = [
    0,
    0,
    1,
    0,
    0,
    1,
    0,
    1,
    2,
    0,
    0,
    1,
    0,
    1,
    0,
    1,
    0,
    1,
    0,
    1,
    0,
    1,
    0,
    1,
    0,
    1,
    1,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    1,
    1,
    0,
    0,
    1,
    0,
    0,
    1,
    0,
    1,
    0,
    0,
    0,
    1,
]


#: (method, path, body, field) of calls refused with 400.
BAD_CALLS = [
    ("POST", "/users", {"password": "pw"}, "name"),
    ("POST", "/users", {"name": "n", "password": ""}, "password"),
    ("POST", "/users", {"name": "n", "tags": "admin"}, "tags"),
    ("POST", "/users", {"name": "n", "secret_key": "SKsecret123"}, "secret_key"),
    ("POST", "/users", {"name": "n", "access_key": "x"}, "access_key"),
    ("PUT", "/users/app/password", {}, "password"),
    ("PUT", "/users/app/password", {"password": 5}, "password"),
    ("PUT", "/users/app/tags", {}, "tags"),
    ("PUT", "/users/app/tags", {"tags": ["bad tag!"]}, "tags"),
    ("POST", "/users/app/certificates", {}, "subject"),
    ("PUT", "/vhosts/v", {"description": 1}, "description"),
    ("PUT", "/vhosts/%01", {}, "vhost"),
]


def test_users_and_vhosts_online_and_offline_alike(tmp_path: Path) -> None:
    online_dir, offline_dir = tmp_path / "on", tmp_path / "off"
    gw = admin_gateway(online_dir).start()
    try:
        online = operations(online_dir)
        # a user added online logs in over MQTT at once; a password changed holds at once
        assert run(online_dir, "users", "add", "mq", "--password", "mq-pw")[0] == 0
        client = Paho(gw.mqtt_port, "mq-client", username="mq", password="mq-pw")
        assert client.rc == 0
        client.close()
        assert run(online_dir, "users", "passwd", "mq", "--password", "mq-pw2")[0] == 0
        refused = Paho(gw.mqtt_port, "mq-client-2", username="mq", password="mq-pw")
        assert refused.rc != 0
        refused.close()
        again = Paho(gw.mqtt_port, "mq-client-3", username="mq", password="mq-pw2")
        assert again.rc == 0
        again.close()
        # the API forms the CLI uses refuse bad input naming the field
        api = AdminClient(gw.ports["admin"], ("root", "root-pw"))
        for method, path, body, field in BAD_CALLS:
            answer = api.call(method, path, body)
            assert answer.status_code == 400 and answer.json()["field"] == field, answer.text
        app = AdminClient(gw.ports["admin"], ("mq", "mq-pw2"))
        assert app.call("PUT", "/vhosts/x", {}).status_code == 403  # not an administrator
        assert api.call("DELETE", "/users/nobody/password").status_code == 404
        assert api.call("PUT", "/vhosts/%2F", {}).status_code == 409
        taken = api.call("POST", "/users", {"name": "app"})
        assert taken.status_code == 409 and taken.json()["field"] == "name"
        # a prompted password and a generated secret key: neither in the audit log
        code, _ = run(online_dir, "users", "passwd", "app", input="prompted-pw\nprompted-pw\n")
        assert code == 0
        prompted = Paho(gw.mqtt_port, "app-1", username="app", password="prompted-pw")
        assert prompted.rc == 0
        prompted.close()
        code, out = run(online_dir, "users", "access-keys", "add", "app", "--generate-access-key")
        generated = out.split("secret key: ")[1].split()[0]
        assert code == 0 and len(generated) > 16
        code, out = run(online_dir, "users", "list", "--users-file", "x.json", "--server", "y")
        assert code == 2 and "exclude each other" in out
        entries = audit_lines(online_dir)
    finally:
        gw.stop()
    offline = operations(offline_dir)
    assert not (offline_dir / "audit.log").exists()  # offline: the file itself
    assert online == offline
    assert [code for code, _ in online] == CODES, online
    for code, out in online:
        if code == 1:
            assert out.startswith("Error: ") and out.count("\n") == 1, out
    by_line = dict(enumerate(online))
    assert by_line[0][1] == "added user root to D/users.json\n"
    assert by_line[2][1] == "Error: user 'app' already exists\n"
    assert by_line[4][1] == "added user keyed to D/users.json\naccess key: AKkeyed123\n"
    assert by_line[7][1] == "Error: no user 'nobody'\n"
    assert by_line[9][1] == "password of cert removed\n"
    assert by_line[13][1] == "Error: certificate subject 'CN=dev-1,O=Acme' already maps to 'cert'\n"
    assert by_line[18][1].split() == ["AKapp12345", "app", "AKkeyed123", "keyed"]
    assert by_line[25][1] == "Error: no vhost 'nowhere' (add it with 'lmq vhosts add')\n"
    assert by_line[28][1].splitlines()[1:] == [
        'app                      prod             ".*" / "^orders$" / ""'
    ]
    assert json.loads(by_line[30][1].splitlines()[1]) == {
        "name": "prod",
        "description": "Production",
        "users": ["app"],
    }
    assert by_line[36][1].splitlines() == [
        "app                        1  publish sensors/%c/#",
        "app                        2  deny #",
        "@default                   1  subscribe public/#",
    ]
    assert by_line[37][1] == "app: removed deny #\n"
    users = [json.loads(line) for line in by_line[45][1].splitlines()]
    assert [u["name"] for u in users] == ["app", "cert", "keyed", "root"]
    assert users[0]["tags"] == ["monitoring", "ops"] and users[1]["password"] is False
    # online: every change in the audit log (who, what, from where), refusals too
    actions = {e["action"] for e in entries}
    assert actions >= {
        "user.add",
        "password.set",
        "password.remove",
        "tags.set",
        "certificate.map",
        "certificate.unmap",
        "access_key.add",
        "access_key.delete",
        "vhost.add",
        "vhost.delete",
        "permissions.set",
        "permissions.clear",
        "acl.add",
        "acl.remove",
        "user.delete",
    }
    first = entries[0]
    assert first["target"] == "root" and first["details"]["password"] == "(secret)"
    assert (first["user"], first["via"], first["action"], first["status"]) == (
        "anonymous",
        "open",
        "user.add",
        201,
    )  # the first user: open mode still
    last = [e for e in entries if e["action"] == "password.set" and e["status"] == 200][-1]
    assert (last["user"], last["via"], last["peer"], last["target"]) == (
        "root",
        "basic",
        "127.0.0.1",
        "app",
    )
    assert last["details"] == {"password": "(secret)"}
    refusals = {(e["action"], e["status"]) for e in entries if "error" in e}
    assert {("user.add", 400), ("vhost.add", 409), ("acl.remove", 400)} <= refusals
    text = (online_dir / "audit.log").read_text()
    secrets = ("root-pw", "app-pw", "mq-pw", "prompted-pw", "SKsecret123", "SKapp12345")
    for secret in (*secrets, "SKother123", generated):
        assert secret not in text
