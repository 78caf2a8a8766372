"""``lmq users``: users, passwords, tags, certificate subjects, RocketMQ access keys, AMQP
permissions and MQTT topic ACLs in the users file (``<data-dir>/users.json`` unless
``--users-file``).

With a gateway running on the data directory (or named by ``--server``) every command
goes through its admin API (:mod:`gateway.admin.users`): the change takes effect at once
and is in the audit log; passwords travel in the request's body, never in a URL.
With none, the command edits the file (locked, saved atomically) and a gateway started
later reads it. ``--users-file`` names a file to edit directly (offline, also beside a
running gateway, which reloads the file if it is its own; no audit entry then).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from cli.context import data_dir_option
from cli.remote import Remote, find_remote, seg, server_option
from gateway.auth.acl import Access, AclRule, InvalidRule
from gateway.auth.passwords import hash_password
from gateway.auth.users import (
    DEFAULT_VHOST,
    Permissions,
    UsersDatabase,
    UsersError,
    acl_rows,
    default_users_file,
    edit_users_file,
    generate_access_key,
    permission_rows,
    user_document,
)

users_file_option = click.option(
    "--users-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar="LMQ_USERS_FILE",
    help="The users file (default: <data-dir>/users.json; env LMQ_USERS_FILE).",
)


def users_file_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--data-dir``, ``--users-file`` and ``--server``, resolved into ``path`` (the
    file, offline) and ``remote`` (the running gateway to ask, or None)."""

    @data_dir_option
    @users_file_option
    @server_option
    @functools.wraps(fn)
    def wrapper(
        *args: Any, data_dir: Path, users_file: Path | None, server: str | None, **kwargs: Any
    ) -> Any:
        if users_file is not None and server:
            raise click.UsageError(
                "--users-file and --server exclude each other (a gateway edits its own file)"
            )
        remote = None if users_file is not None else find_remote(data_dir, server)
        return fn(*args, path=users_file or default_users_file(data_dir), remote=remote, **kwargs)

    return wrapper


def all_users(remote: Remote, name_part: str | None = None) -> list[dict[str, Any]]:
    """Every user's document from the admin API (page after page), by name; only those
    whose name contains ``name_part``, if given."""
    docs: list[dict[str, Any]] = []
    cursor = None
    while True:
        answer = remote.call("GET", "/users", limit=1000, cursor=cursor, filter=name_part)
        docs += answer["items"]
        cursor = answer["next"]
        if cursor is None:
            return docs


def user_docs(path: Path, remote: Remote | None) -> list[dict[str, Any]]:
    """Every user's document (:func:`user_document`), by name."""
    if remote is not None:
        return all_users(remote)
    db = reading(path)
    return [user_document(db, name) for name in sorted(db.users)]


def user_exists(path: Path, remote: Remote | None, name: str) -> bool:
    if remote is None:
        return name in reading(path).users
    return any(d["name"] == name for d in all_users(remote, name))


@contextmanager
def editing(path: Path) -> Iterator[UsersDatabase]:
    """Load, change and atomically save the users file; errors become one line."""
    try:
        with edit_users_file(path) as db:
            yield db
    except UsersError as exc:
        raise click.ClickException(str(exc)) from None


def change(
    path: Path,
    remote: Remote | None,
    request: tuple[str, str, dict[str, Any] | None],
    edit: Callable[[UsersDatabase], Any],
    answer: str | None = None,
) -> Any:
    """One change: ``request`` (method, path, body) to the running gateway's admin API
    (the answer's member ``answer``), or else ``edit`` of the file (its result)."""
    if remote is not None:
        doc = remote.call(*request)
        return doc if answer is None else doc[answer]
    with editing(path) as db:
        return edit(db)


def reading(path: Path) -> UsersDatabase:
    if not path.exists():
        return UsersDatabase()
    try:
        return UsersDatabase.load(path)
    except UsersError as exc:
        raise click.ClickException(str(exc)) from None


password_stdin_option = click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of standard input (for scripts:"
    " printf '%s\\n' \"$PW\" | lmq users add NAME --password-stdin).",
)


def _new_password(password: str | None, no_password: bool, from_stdin: bool) -> str | None:
    """The password the options give, prompted for if none (None: no password)."""
    if sum((password is not None, no_password, from_stdin)) > 1:
        raise click.UsageError("--password, --password-stdin and --no-password exclude each other")
    if no_password:
        return None
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    if password is None:
        password = click.prompt(
            "Password", hide_input=True, confirmation_prompt=True, show_default=False
        )
    if not password:
        raise click.ClickException("the password must not be empty")
    return password


def access_key_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--access-key``, ``--secret-key``, ``--generate-access-key``."""
    for option in reversed(
        (
            click.option(
                "--access-key", help="A RocketMQ access key (6-128 of A-Z a-z 0-9 _ . -)."
            ),
            click.option(
                "--secret-key",
                help="Its secret key (prompted for, hidden, when --access-key is given without"
                " it; generated with --generate-access-key).",
            ),
            click.option(
                "--generate-access-key",
                "generate",
                is_flag=True,
                help="Generate the access key and secret key missing (printed once).",
            ),
        )
    ):
        fn = option(fn)
    return fn


def _access_key_pair(
    access_key: str | None, secret_key: str | None, generate: bool, *, required: bool
) -> tuple[str, str, bool] | None:
    """The (access key, secret key, whether the secret was generated) the options ask
    for; None when none (and not ``required``)."""
    if access_key is None and secret_key is None and not generate:
        if not required:
            return None
        generate = True
    if access_key is None and not generate:
        raise click.UsageError("--secret-key needs --access-key (or --generate-access-key)")
    new_access, new_secret = generate_access_key()
    access_key = access_key or new_access
    if secret_key is not None:
        return access_key, secret_key, False
    if generate:
        return access_key, new_secret, True
    secret_key = click.prompt(
        "Secret key", hide_input=True, confirmation_prompt=True, show_default=False
    )
    return access_key, secret_key, False


def _echo_pair(pair: tuple[str, str, bool]) -> None:
    click.echo(f"access key: {pair[0]}")
    if pair[2]:  # a secret the operator typed is not echoed
        click.echo(f"secret key: {pair[1]}  (shown once; stored in the users file)")


@click.group()
def users() -> None:
    """Manage users, their AMQP permissions and MQTT topic ACLs."""


@users.command("add")
@users_file_options
@click.argument("name")
@click.option("--password", help="The password (prompted for, hidden, when not given).")
@password_stdin_option
@click.option("--no-password", is_flag=True, help="Certificate login only.")
@click.option("--tag", "tags", multiple=True, help="A tag, e.g. administrator (repeatable).")
@click.option(
    "--cert-subject", "subjects", multiple=True, help="A client-certificate subject (repeatable)."
)
@access_key_options
def add(
    path: Path,
    remote: Remote | None,
    name: str,
    password: str | None,
    password_stdin: bool,
    no_password: bool,
    tags: tuple[str, ...],
    subjects: tuple[str, ...],
    access_key: str | None,
    secret_key: str | None,
    generate: bool,
) -> None:
    """Add user NAME (optionally with a RocketMQ access key)."""
    if user_exists(path, remote, name):  # before prompting; checked again under the lock
        raise click.ClickException(f"user {name!r} already exists")
    new_password = _new_password(password, no_password, password_stdin)
    pair = _access_key_pair(access_key, secret_key, generate, required=False)
    if remote is not None:
        body: dict[str, Any] = {
            "name": name,
            "tags": list(tags),
            "password": new_password,
            "certificate_subjects": list(subjects),
        }
        if pair is not None:
            body.update(access_key=pair[0], secret_key=pair[1])
        path = Path(remote.call("POST", "/users", body)["users_file"])
    else:
        password_hash = None if new_password is None else hash_password(new_password)
        with editing(path) as db:
            db.add_user(name, password_hash, tags, subjects)
            if pair is not None:
                db.add_access_key(name, pair[0], pair[1])
    click.echo(f"added user {name} to {path}")
    if pair is not None:
        _echo_pair(pair)


@users.command("delete")
@users_file_options
@click.argument("name")
def delete(path: Path, remote: Remote | None, name: str) -> None:
    """Delete user NAME with their permissions and ACL rules."""
    change(path, remote, ("DELETE", f"/users/{seg(name)}", None), lambda db: db.delete_user(name))
    click.echo(f"deleted user {name}")


@users.command("passwd")
@users_file_options
@click.argument("name")
@click.option("--password", help="The new password (prompted for, hidden, when not given).")
@password_stdin_option
@click.option("--no-password", is_flag=True, help="Remove the password (certificate only).")
def passwd(
    path: Path,
    remote: Remote | None,
    name: str,
    password: str | None,
    password_stdin: bool,
    no_password: bool,
) -> None:
    """Change the password of user NAME."""
    if not user_exists(path, remote, name):
        raise click.ClickException(f"no user {name!r}")
    new_password = _new_password(password, no_password, password_stdin)
    if remote is not None:
        if new_password is None:
            remote.call("DELETE", f"/users/{seg(name)}/password")
        else:
            remote.call("PUT", f"/users/{seg(name)}/password", {"password": new_password})
    else:
        password_hash = None if new_password is None else hash_password(new_password)
        with editing(path) as db:
            db.set_password(name, password_hash)
    click.echo(f"password of {name} {'removed' if no_password else 'changed'}")


@users.command("set-tags")
@users_file_options
@click.argument("name")
@click.argument("tags", nargs=-1)
def set_tags(path: Path, remote: Remote | None, name: str, tags: tuple[str, ...]) -> None:
    """Replace the tags of user NAME (none given: remove all)."""
    request = ("PUT", f"/users/{seg(name)}/tags", {"tags": list(tags)})
    change(path, remote, request, lambda db: db.set_tags(name, tags))
    click.echo(f"tags of {name}: {', '.join(tags) or '-'}")


@users.command("list")
@users_file_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(path: Path, remote: Remote | None, as_json: bool) -> None:
    """List users with their tags, login methods and vhosts."""
    docs = user_docs(path, remote)
    if not as_json:
        click.echo(f"{'NAME':24} {'TAGS':20} {'LOGIN':20} VHOSTS")
    for doc in docs:
        if as_json:
            click.echo(json.dumps(doc))
            continue
        login = ["password"] if doc["password"] else []
        login += ["certificate"] if doc["certificate_subjects"] else []
        login += ["access-key"] if doc["access_keys"] else []
        click.echo(
            f"{doc['name']:24} {','.join(doc['tags']) or '-':20} {'+'.join(login) or 'none':20}"
            f" {' '.join(doc['vhosts']) or '-'}"
        )
    if not as_json:
        click.echo(f"{len(docs)} user(s)")


@users.command("map-cert")
@users_file_options
@click.argument("name")
@click.argument("subject")
def map_cert(path: Path, remote: Remote | None, name: str, subject: str) -> None:
    """Let a client certificate with SUBJECT (e.g. 'CN=dev-1,O=Acme') log in as NAME."""
    request = ("POST", f"/users/{seg(name)}/certificates", {"subject": subject})
    subject = change(path, remote, request, lambda db: db.map_certificate(name, subject), "subject")
    click.echo(f"certificate {subject} -> {name}")


@users.command("unmap-cert")
@users_file_options
@click.argument("subject")
def unmap_cert(path: Path, remote: Remote | None, subject: str) -> None:
    """Stop a certificate subject from logging in."""
    request = ("DELETE", f"/certificates/{seg(subject)}", None)
    name = change(path, remote, request, lambda db: db.unmap_certificate(subject), "user")
    click.echo(f"certificate {subject} no longer maps to {name}")


@users.group("access-keys")
def access_keys() -> None:
    """RocketMQ access keys: a client signs its requests with the secret key and sends
    the access key (docs/security.md). The secret is kept in the users file as is
    (an HMAC cannot be verified against a hash), so protect that file."""


@access_keys.command("add")
@users_file_options
@click.argument("name")
@access_key_options
def access_keys_add(
    path: Path,
    remote: Remote | None,
    name: str,
    access_key: str | None,
    secret_key: str | None,
    generate: bool,
) -> None:
    """Give user NAME an access key (generated when none is given)."""
    pair = _access_key_pair(access_key, secret_key, generate, required=True)
    assert pair is not None
    body = {"access_key": pair[0], "secret_key": pair[1]}
    request = ("POST", f"/users/{seg(name)}/access-keys", body)
    change(path, remote, request, lambda db: db.add_access_key(name, pair[0], pair[1]))
    click.echo(f"access key {pair[0]} -> {name}")
    _echo_pair(pair)


@access_keys.command("delete")
@users_file_options
@click.argument("access_key")
def access_keys_delete(path: Path, remote: Remote | None, access_key: str) -> None:
    """Revoke ACCESS_KEY."""
    request = ("DELETE", f"/access-keys/{seg(access_key)}", None)
    name = change(path, remote, request, lambda db: db.delete_access_key(access_key), "user")
    click.echo(f"access key {access_key} of {name} deleted")


@access_keys.command("list")
@users_file_options
@click.argument("name", required=False)
def access_keys_list(path: Path, remote: Remote | None, name: str | None) -> None:
    """List access keys (never their secrets), of NAME or of every user."""
    docs = user_docs(path, remote)
    if name is not None and all(d["name"] != name for d in docs):
        raise click.ClickException(f"no user {name!r}")
    for doc in docs:
        if name is None or doc["name"] == name:
            for key in doc["access_keys"]:
                click.echo(f"{key:32} {doc['name']}")


@users.command("set-permissions")
@users_file_options
@click.argument("name")
@click.option("--vhost", default=DEFAULT_VHOST, show_default=True)
@click.option("--configure", "configure", required=True, metavar="REGEX")
@click.option("--write", "write", required=True, metavar="REGEX")
@click.option("--read", "read", required=True, metavar="REGEX")
def set_permissions(
    path: Path,
    remote: Remote | None,
    name: str,
    vhost: str,
    configure: str,
    write: str,
    read: str,
) -> None:
    """Set NAME's (or @anonymous's) AMQP permissions on a vhost, as RabbitMQ does:
    '.*' permits every resource, '' none, '^name$' one."""
    body = {"configure": configure, "write": write, "read": read}
    request = ("PUT", f"/users/{seg(name)}/permissions/{seg(vhost)}", body)

    def edit(db: UsersDatabase) -> None:
        db.set_permissions(name, vhost, Permissions(configure, write, read))

    change(path, remote, request, edit)
    perms = Permissions(configure, write, read)
    click.echo(f"permissions of {name} on {vhost}: {_perm_text(perms.to_json())}")


@users.command("clear-permissions")
@users_file_options
@click.argument("name")
@click.option("--vhost", default=DEFAULT_VHOST, show_default=True)
def clear_permissions(path: Path, remote: Remote | None, name: str, vhost: str) -> None:
    """Remove NAME's permissions on a vhost (and with them access to it)."""
    request = ("DELETE", f"/users/{seg(name)}/permissions/{seg(vhost)}", None)
    change(path, remote, request, lambda db: db.clear_permissions(name, vhost))
    click.echo(f"permissions of {name} on {vhost} cleared")


@users.command("permissions")
@users_file_options
@click.option("--vhost", help="Only this vhost.")
def permissions(path: Path, remote: Remote | None, vhost: str | None) -> None:
    """List AMQP permissions."""
    if remote is not None:
        rows = remote.call("GET", "/permissions", vhost=vhost)["items"]
    else:
        rows = permission_rows(reading(path), vhost)
    click.echo(f"{'USER':24} {'VHOST':16} CONFIGURE / WRITE / READ")
    for row in rows:
        click.echo(f"{row['user']:24} {row['vhost']:16} {_perm_text(row)}")


def _perm_text(perms: dict[str, str]) -> str:
    return " / ".join(json.dumps(perms[k]) for k in ("configure", "write", "read"))


@users.group("acl")
def acl() -> None:
    """MQTT topic ACLs: ordered rules, first match wins (docs/security.md).

    NAME is a user, @default (every authenticated user, after their own rules) or
    @anonymous (clients without a username). Filters may use %c (client id) and %u
    (username)."""


@acl.command("add")
@users_file_options
@click.argument("name")
@click.option("--publish", is_flag=True, help="Allow publishing to matching topics.")
@click.option("--subscribe", is_flag=True, help="Allow subscribing to covered filters.")
@click.option("--both", is_flag=True, help="Allow publishing and subscribing.")
@click.option("--deny", is_flag=True, help="Deny both (stops the search).")
@click.option("--position", type=click.IntRange(min=1), help="Insert at this place (1 = first).")
@click.argument("topic_filter", metavar="FILTER")
def acl_add(
    path: Path,
    remote: Remote | None,
    name: str,
    publish: bool,
    subscribe: bool,
    both: bool,
    deny: bool,
    position: int | None,
    topic_filter: str,
) -> None:
    """Add a rule for NAME on topic FILTER (at the end unless --position)."""
    chosen = [a for a, on in zip(Access, (publish, subscribe, both, deny), strict=True) if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --publish, --subscribe, --both, --deny")
    try:
        rule = AclRule(chosen[0], topic_filter)
    except InvalidRule as exc:
        raise click.ClickException(str(exc)) from None
    body = {"access": chosen[0].value, "filter": topic_filter, "position": position}
    request = ("POST", f"/users/{seg(name)}/acl", body)
    change(path, remote, request, lambda db: db.add_acl_rule(name, rule, position))
    click.echo(f"{name}: {rule}")


@acl.command("remove")
@users_file_options
@click.argument("name")
@click.argument("position", type=click.IntRange(min=1))
def acl_remove(path: Path, remote: Remote | None, name: str, position: int) -> None:
    """Remove NAME's rule number POSITION (as 'acl list' numbers them)."""
    request = ("DELETE", f"/users/{seg(name)}/acl/{position}", None)
    removed = change(
        path, remote, request, lambda db: str(db.remove_acl_rule(name, position)), "removed"
    )
    click.echo(f"{name}: removed {removed}")


@acl.command("list")
@users_file_options
@click.argument("name", required=False)
def acl_list(path: Path, remote: Remote | None, name: str | None) -> None:
    """List the rules of NAME, or all rules in evaluation order per name."""
    if remote is not None:
        rows = remote.call("GET", "/acl", user=name)["items"]
    else:
        rows = acl_rows(reading(path), name)
    for row in rows:
        click.echo(f"{row['name']:24} {row['position']:>3}  {row['rule']}")
