"""The users file: users, vhosts, AMQP permissions and MQTT topic ACLs, as JSON.

Default location ``<data-dir>/users.json`` (``lmq users --users-file`` and the gateway's
configuration can point elsewhere). Format, version 1::

    {
      "format": "lmq-users",
      "version": 1,
      "users": {
        "alice":    {"password": "$scrypt$n=16384,r=8,p=1$<salt>$<hash>",
                     "tags": ["administrator"], "certificate_subjects": []},
        "device-1": {"password": null, "tags": [],
                     "certificate_subjects": ["CN=device-1,O=Acme"]},
        "orders-app": {"password": null, "tags": [], "certificate_subjects": [],
                       "access_keys": {"LMQ4F2A9C1D0B7E": "<secret key>"}}
      },
      "vhosts": {"/": {"description": "default virtual host"}},
      "permissions": {
        "alice": {"/": {"configure": ".*", "write": ".*", "read": ".*"}}
      },
      "acl": {
        "@default":   [{"access": "both", "filter": "devices/%u/#"}],
        "@anonymous": [{"access": "subscribe", "filter": "public/#"}],
        "alice":      [{"access": "deny", "filter": "devices/+/secrets/#"}]
      }
    }

* ``password`` is a hash from :mod:`gateway.auth.passwords`, or null for a user who can
  only log in with a client certificate. ``tags`` are free-form words; only
  ``administrator`` means something to the gateway (it may read ``$SYS/#``).
* ``certificate_subjects`` are RFC 4514 subjects (:mod:`gateway.auth.subjects`); each
  subject maps to at most one user.
* ``access_keys`` (optional): access key -> secret key pairs, RocketMQ's ACL credentials:
  a client signs each request with HMAC over the secret and sends the access key. The
  secret is stored as it is, not hashed, because verifying an HMAC needs it (the file is
  written mode 0600; docs/security.md). Each access key belongs to at most one user.
* ``vhosts``: AMQP virtual hosts. ``/`` always exists and cannot be deleted.
* ``permissions``: per user (or ``@anonymous``) and vhost, three regular expressions
  with RabbitMQ's meaning (:class:`Permissions`).
* ``acl``: ordered MQTT topic rules (:mod:`gateway.auth.acl`) per user, for every
  authenticated user after their own (``@default``), and for anonymous clients
  (``@anonymous``).

Usernames are 1-255 characters without control characters, ``+``, ``#`` or ``/`` (so
``%u`` always fills exactly one topic level) and do not start with ``@``.

Unknown keys, references to unknown users or vhosts, duplicate keys and malformed values
are load errors (:class:`UsersFileError`), one line naming the file and the place.
Writes are atomic (:func:`atomic_write`); :func:`edit_users_file` also holds an advisory
lock so two ``lmq users`` commands do not lose each other's change. The gateway only
reads, and a rename is all it can observe.

Not thread-safe; the authenticator treats a loaded database as read-only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.auth.acl import Access, AclRule, InvalidRule
from gateway.auth.passwords import InvalidHash, PasswordHash
from gateway.auth.subjects import normalize_subject

FORMAT = "lmq-users"
VERSION = 1
USERS_FILE_NAME = "users.json"
DEFAULT_VHOST = "/"
#: ACL rules and AMQP permissions of clients that did not authenticate.
ANONYMOUS = "@anonymous"
#: ACL rules tried for every authenticated user after the user's own.
DEFAULT = "@default"
ADMINISTRATOR = "administrator"
_TAG = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: RocketMQ wants at least 6 characters for both (PlainAccessValidator).
_ACCESS_KEY = re.compile(r"^[A-Za-z0-9_.-]{6,128}$")
_SECRET_KEY = re.compile(r"^[\x21-\x7e]{6,128}$")
_PERMISSION_KINDS = ("configure", "write", "read")


class UsersError(ValueError):
    """A refused change or lookup (unknown user, duplicate, invalid value); one line."""


class UsersFileError(UsersError):
    """A users file that cannot be read; ``str()`` names the file and the problem."""


def default_users_file(data_dir: Path) -> Path:
    return Path(data_dir) / USERS_FILE_NAME


def check_username(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise UsersError("a username must be a non-empty string")
    if len(name) > 255:
        raise UsersError(f"username {name[:20]!r}... is longer than 255 characters")
    if name.startswith("@"):
        raise UsersError(f"username {name!r} must not start with '@' (reserved)")
    bad = next((ch for ch in name if ch in "+#/" or ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise UsersError(f"username {name!r} must not contain {bad!r}")
    return name


def check_vhost(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise UsersError("a vhost name must be a non-empty string")
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        raise UsersError(f"vhost name {name[:20]!r}... is longer than 255 bytes")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise UsersError(f"vhost name {name!r} contains a control character")
    return name


def check_access_key(access_key: object) -> str:
    if not isinstance(access_key, str) or not _ACCESS_KEY.match(access_key):
        raise UsersError(
            f"access key {access_key!r} must be 6-128 letters, digits, '_', '.' or '-'"
        )
    return access_key


def check_secret_key(secret_key: object) -> str:
    # The secret itself never goes into a message.
    if not isinstance(secret_key, str) or not _SECRET_KEY.match(secret_key):
        raise UsersError("a secret key must be 6-128 printable ASCII characters, no spaces")
    return secret_key


def generate_access_key() -> tuple[str, str]:
    """A new (access key, secret key): ``LMQ`` + 17 upper-case hex digits, and 40
    URL-safe characters (240 random bits)."""
    return "LMQ" + secrets.token_hex(9).upper()[:17], secrets.token_urlsafe(30)


def check_tag(tag: object) -> str:
    if not isinstance(tag, str) or not _TAG.match(tag):
        raise UsersError(f"tag {tag!r} must be 1-64 letters, digits, '_', '.' or '-'")
    return tag


@dataclass(frozen=True, slots=True)
class Permissions:
    """RabbitMQ permissions on one vhost: three regular expressions.

    A resource (exchange or queue name) is permitted when the expression *finds* a match
    anywhere in the name (``re.search``, as RabbitMQ's ``re:run``): anchor with ``^...$``
    for exact names, ``.*`` permits everything, and the empty string permits nothing.
    Expressions are Python ``re`` syntax, which agrees with RabbitMQ's PCRE on the usual
    anchors, classes, alternation and repetition.

    * configure: declare and delete queues and exchanges.
    * write: publish to an exchange, bind a queue to it (on the queue), unbind.
    * read: consume from or purge a queue, get, bind (on the exchange).
    """

    configure: str
    write: str
    read: str
    _compiled: tuple[re.Pattern[str] | None, ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        compiled = []
        for kind in _PERMISSION_KINDS:
            pattern = getattr(self, kind)
            if not isinstance(pattern, str):
                raise UsersError(f"{kind} permission must be a string, not {pattern!r}")
            try:
                compiled.append(re.compile(pattern) if pattern else None)
            except re.error as exc:
                raise UsersError(f"{kind} permission {pattern!r} is not a regex: {exc}") from None
        object.__setattr__(self, "_compiled", tuple(compiled))

    def allows(self, kind: str, resource: str) -> bool:
        pattern = self._compiled[_PERMISSION_KINDS.index(kind)]
        return pattern is not None and pattern.search(resource) is not None

    def to_json(self) -> dict[str, str]:
        return {"configure": self.configure, "write": self.write, "read": self.read}


@dataclass(slots=True)
class User:
    name: str
    password_hash: str | None = None
    tags: tuple[str, ...] = ()
    certificate_subjects: tuple[str, ...] = ()
    #: access key -> secret key (RocketMQ ACL signatures).
    access_keys: dict[str, str] = field(default_factory=dict)

    @property
    def is_administrator(self) -> bool:
        return ADMINISTRATOR in self.tags

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "password": self.password_hash,
            "tags": list(self.tags),
            "certificate_subjects": list(self.certificate_subjects),
        }
        if self.access_keys:  # absent when unused: files stay as they were
            out["access_keys"] = dict(sorted(self.access_keys.items()))
        return out


@dataclass(slots=True)
class UsersDatabase:
    """The contents of a users file; mutators keep it consistent or raise UsersError."""

    users: dict[str, User] = field(default_factory=dict)
    vhosts: dict[str, str] = field(default_factory=lambda: {DEFAULT_VHOST: "default virtual host"})
    permissions: dict[str, dict[str, Permissions]] = field(default_factory=dict)
    acl: dict[str, list[AclRule]] = field(default_factory=dict)

    # -- users ---------------------------------------------------------------------------

    def user(self, name: str) -> User:
        try:
            return self.users[name]
        except KeyError:
            raise UsersError(f"no user {name!r}") from None

    def add_user(
        self,
        name: str,
        password_hash: str | None,
        tags: tuple[str, ...] = (),
        certificate_subjects: tuple[str, ...] = (),
    ) -> User:
        check_username(name)
        if name in self.users:
            raise UsersError(f"user {name!r} already exists")
        user = User(name, _check_hash(password_hash), _unique(tags, check_tag))
        self.users[name] = user
        for subject in certificate_subjects:
            self.map_certificate(name, subject)
        return user

    def delete_user(self, name: str) -> None:
        self.user(name)
        del self.users[name]
        self.permissions.pop(name, None)
        self.acl.pop(name, None)

    def set_password(self, name: str, password_hash: str | None) -> None:
        self.user(name).password_hash = _check_hash(password_hash)

    def set_tags(self, name: str, tags: tuple[str, ...]) -> None:
        self.user(name).tags = _unique(tags, check_tag)

    def map_certificate(self, name: str, subject: str) -> str:
        user = self.user(name)
        subject = _subject(subject)
        owner = self.user_for_subject(subject)
        if owner is not None:
            raise UsersError(f"certificate subject {subject!r} already maps to {owner.name!r}")
        user.certificate_subjects += (subject,)
        return subject

    def unmap_certificate(self, subject: str) -> str:
        subject = _subject(subject)
        owner = self.user_for_subject(subject)
        if owner is None:
            raise UsersError(f"certificate subject {subject!r} maps to no user")
        owner.certificate_subjects = tuple(s for s in owner.certificate_subjects if s != subject)
        return owner.name

    def add_access_key(self, name: str, access_key: str, secret_key: str) -> None:
        user = self.user(name)
        check_access_key(access_key)
        check_secret_key(secret_key)
        owner = self.user_for_access_key(access_key)
        if owner is not None:
            raise UsersError(f"access key {access_key!r} already belongs to {owner.name!r}")
        user.access_keys[access_key] = secret_key

    def delete_access_key(self, access_key: str) -> str:
        """Remove ``access_key``; the name of the user who had it."""
        owner = self.user_for_access_key(access_key)
        if owner is None:
            raise UsersError(f"no access key {access_key!r}")
        del owner.access_keys[access_key]
        return owner.name

    def user_for_access_key(self, access_key: str) -> User | None:
        return next((u for u in self.users.values() if access_key in u.access_keys), None)

    def access_key_index(self) -> dict[str, User]:
        return {ak: u for u in self.users.values() for ak in u.access_keys}

    def user_for_subject(self, subject: str) -> User | None:
        return self.subject_index().get(subject)

    def subject_index(self) -> dict[str, User]:
        return {s: u for u in self.users.values() for s in u.certificate_subjects}

    # -- vhosts and permissions ----------------------------------------------------------

    def add_vhost(self, name: str, description: str = "") -> None:
        check_vhost(name)
        if name in self.vhosts:
            raise UsersError(f"vhost {name!r} already exists")
        self.vhosts[name] = description

    def delete_vhost(self, name: str) -> None:
        if name == DEFAULT_VHOST:
            raise UsersError(f"the default vhost {DEFAULT_VHOST!r} cannot be deleted")
        if name not in self.vhosts:
            raise UsersError(f"no vhost {name!r}")
        del self.vhosts[name]
        for per_vhost in self.permissions.values():
            per_vhost.pop(name, None)
        self.permissions = {u: p for u, p in self.permissions.items() if p}

    def set_permissions(self, name: str, vhost: str, permissions: Permissions) -> None:
        if name != ANONYMOUS:
            self.user(name)
        if vhost not in self.vhosts:
            raise UsersError(f"no vhost {vhost!r} (add it with 'lmq vhosts add')")
        self.permissions.setdefault(name, {})[vhost] = permissions

    def clear_permissions(self, name: str, vhost: str) -> None:
        if vhost not in self.permissions.get(name, {}):
            raise UsersError(f"{name!r} has no permissions on vhost {vhost!r}")
        del self.permissions[name][vhost]
        if not self.permissions[name]:
            del self.permissions[name]

    # -- topic ACLs ----------------------------------------------------------------------

    def acl_rules(self, name: str) -> list[AclRule]:
        return list(self.acl.get(name, ()))

    def add_acl_rule(self, name: str, rule: AclRule, position: int | None = None) -> None:
        """Add ``rule`` to ``name``'s list, at 1-based ``position`` or at the end."""
        self._check_acl_owner(name)
        rules = self.acl.setdefault(name, [])
        if position is None:
            rules.append(rule)
        elif 1 <= position <= len(rules) + 1:
            rules.insert(position - 1, rule)
        else:
            raise UsersError(f"position must be from 1 to {len(rules) + 1}")

    def remove_acl_rule(self, name: str, position: int) -> AclRule:
        rules = self.acl.get(name, [])
        if not 1 <= position <= len(rules):
            raise UsersError(f"{name!r} has no ACL rule {position} ({len(rules)} rule(s))")
        rule = rules.pop(position - 1)
        if not rules:
            del self.acl[name]
        return rule

    def _check_acl_owner(self, name: str) -> None:
        if name not in (ANONYMOUS, DEFAULT):
            self.user(name)

    # -- JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "users": {name: user.to_json() for name, user in sorted(self.users.items())},
            "vhosts": {name: {"description": d} for name, d in sorted(self.vhosts.items())},
            "permissions": {
                name: {vhost: p.to_json() for vhost, p in sorted(per_vhost.items())}
                for name, per_vhost in sorted(self.permissions.items())
            },
            "acl": {
                name: [rule.to_json() for rule in rules]
                for name, rules in sorted(self.acl.items())
                if rules
            },
        }

    @classmethod
    def from_json(cls, data: object) -> UsersDatabase:
        """Build from parsed JSON; UsersError says where (``users['bob'].tags``) and what."""
        top = _object(
            data, "the file", {"format", "version", "users", "vhosts", "permissions", "acl"}
        )
        if top.get("format") != FORMAT:
            raise UsersError(f"'format' must be {FORMAT!r} (is this a users file?)")
        if top.get("version") != VERSION:
            raise UsersError(f"'version' {top.get('version')!r} is not supported (expected 1)")
        db = cls(vhosts={})
        for name, entry in _object(top.get("vhosts", {}), "vhosts").items():
            where = f"vhosts[{name!r}]"
            entry = _object(entry, where, {"description"})
            _at(where, db.add_vhost, name, _string(entry.get("description", ""), where))
        db.vhosts.setdefault(DEFAULT_VHOST, "default virtual host")
        for name, entry in _object(top.get("users", {}), "users").items():
            where = f"users[{name!r}]"
            entry = _object(
                entry, where, {"password", "tags", "certificate_subjects", "access_keys"}
            )
            tags = tuple(_list(entry.get("tags", []), f"{where}.tags"))
            subjects = tuple(_list(entry.get("certificate_subjects", []), where))
            _at(where, db.add_user, name, entry.get("password"), tags, subjects)
            keys = _object(entry.get("access_keys", {}), f"{where}.access_keys")
            for access_key, secret_key in keys.items():
                _at(f"{where}.access_keys", db.add_access_key, name, access_key, secret_key)
        for name, per_vhost in _object(top.get("permissions", {}), "permissions").items():
            if name != ANONYMOUS:
                _at(f"permissions[{name!r}]", db.user, name)
            for vhost, perms in _object(per_vhost, f"permissions[{name!r}]").items():
                where = f"permissions[{name!r}][{vhost!r}]"
                perms = _object(perms, where, set(_PERMISSION_KINDS))
                missing = [k for k in _PERMISSION_KINDS if k not in perms]
                if missing:
                    raise UsersError(f"{where}: missing {', '.join(missing)}")
                permissions = _at(where, Permissions, **perms)
                _at(where, db.set_permissions, name, vhost, permissions)
        for name, rules in _object(top.get("acl", {}), "acl").items():
            _at(f"acl[{name!r}]", db._check_acl_owner, name)
            for i, rule in enumerate(_list(rules, f"acl[{name!r}]")):
                where = f"acl[{name!r}][{i}]"
                rule = _object(rule, where, {"access", "filter"})
                try:
                    parsed = AclRule(Access(rule.get("access")), rule.get("filter"))  # type: ignore[arg-type]
                except (ValueError, InvalidRule) as exc:
                    raise UsersError(f"{where}: {exc}") from None
                _at(where, db.add_acl_rule, name, parsed)
        return db

    # -- files ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> UsersDatabase:
        """Read a users file; any problem is a UsersFileError naming ``path``."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsersFileError(f"{path}: no such users file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsersFileError(f"{path}: cannot read: {_reason(exc)}") from None
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise UsersFileError(
                f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except UsersError as exc:
            raise UsersFileError(f"{path}: {exc}") from None
        try:
            return cls.from_json(data)
        except UsersError as exc:
            raise UsersFileError(f"{path}: {exc}") from None

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    def save(self, path: Path) -> None:
        atomic_write(Path(path), self.dumps().encode("utf-8"))


@contextlib.contextmanager
def edit_users_file(path: Path, *, create: bool = True) -> Iterator[UsersDatabase]:
    """Lock, load (or start empty if missing and ``create``), yield, and save on success."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise UsersFileError(f"{path}: cannot lock: {_reason(exc)}") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if path.exists() or not create:
            db = UsersDatabase.load(path)
        else:
            db = UsersDatabase()
        yield db
        try:
            db.save(path)
        except OSError as exc:
            raise UsersFileError(f"{path}: cannot write: {_reason(exc)}") from None
    finally:
        os.close(lock_fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename, fsync the directory.

    A reader sees the old file or the new one, never a mix; after a crash the file is
    one of the two (a stray ``.<name>.tmp-*`` may be left behind and is harmless).
    """
    directory = path.parent
    tmp = directory / f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# -- helpers -------------------------------------------------------------------------------


def _check_hash(password_hash: object) -> str | None:
    if password_hash is None:
        return None
    if not isinstance(password_hash, str):
        raise UsersError("password must be a '$scrypt$' hash string or null")
    try:
        PasswordHash.parse(password_hash)
    except InvalidHash as exc:
        raise UsersError(f"password: {exc}") from None
    return password_hash


def _subject(subject: str) -> str:
    try:
        return normalize_subject(subject)
    except ValueError as exc:
        raise UsersError(str(exc)) from None


def _unique(values: tuple[str, ...], check: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(check(v) for v in values))


def _at(where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except UsersError as exc:
        raise UsersError(f"{where}: {exc}") from None


def _object(value: object, where: str, keys: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsersError(f"{where} must be a JSON object")
    if keys is not None:
        unknown = sorted(set(value) - keys)
        if unknown:
            raise UsersError(
                f"{where}: unknown key {unknown[0]!r} (expected {', '.join(sorted(keys))})"
            )
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise UsersError(f"{where} must be a JSON array")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise UsersError(f"{where} must be a string")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise UsersError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def user_document(db: UsersDatabase, name: str) -> dict[str, Any]:
    """What ``lmq users list --json`` and the admin API show of a user (no secret: the
    access keys without their secrets, whether a password is set)."""
    user = db.user(name)
    return {
        "name": name,
        "tags": list(user.tags),
        "password": bool(user.password_hash),
        "certificate_subjects": list(user.certificate_subjects),
        "access_keys": sorted(user.access_keys),
        "vhosts": sorted(db.permissions.get(name, {})),
        "acl_rules": len(db.acl.get(name, [])),
    }


def permission_rows(db: UsersDatabase, vhost: str | None = None) -> list[dict[str, str]]:
    """AMQP permissions by user then vhost (of ``vhost`` only, when given): what
    ``lmq users permissions`` and the admin API's ``/permissions`` show."""
    return [
        {"user": name, "vhost": v, **perms.to_json()}
        for name, per_vhost in sorted(db.permissions.items())
        for v, perms in sorted(per_vhost.items())
        if vhost is None or v == vhost
    ]


def acl_rows(db: UsersDatabase, name: str | None = None) -> list[dict[str, Any]]:
    """ACL rules of ``name``, or of every name in evaluation order (users by name, then
    @default, then @anonymous), each with its 1-based position: what ``lmq users acl
    list`` and the admin API's ``/acl`` show."""
    if name:
        names = [name]
    else:
        names = [n for n in sorted(db.acl) if n not in (DEFAULT, ANONYMOUS)]
        names += [n for n in (DEFAULT, ANONYMOUS) if n in db.acl]
    return [
        {"name": owner, "position": i, "rule": str(rule)}
        for owner in names
        for i, rule in enumerate(db.acl.get(owner, []), start=1)
    ]


def vhost_rows(db: UsersDatabase) -> list[dict[str, Any]]:
    """Vhosts with their description and the users with permissions on them: what
    ``lmq vhosts list`` and the admin API's ``/vhosts`` show."""
    return [
        {
            "name": name,
            "description": description,
            "users": sorted(u for u, per_vhost in db.permissions.items() if name in per_vhost),
        }
        for name, description in sorted(db.vhosts.items())
    ]
