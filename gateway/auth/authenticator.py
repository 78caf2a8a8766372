"""The authenticator: who a client is, and what it may do. Shared by MQTT and AMQP.

Theory of operation. An :class:`Authenticator` holds one loaded
:class:`~gateway.auth.users.UsersDatabase` (or none) and the failed-login state.

* No database and ``allow_anonymous=True`` is *open mode*, the embedded default on
  loopback: every login succeeds as the anonymous principal and every check passes
  (except publishing to ``$SYS/``, which only the gateway does, in every mode).
* No database and ``allow_anonymous=False`` refuses every login.
* With a database, a username must authenticate (a password, or a client certificate
  whose subject maps to the user); a client without a username is the anonymous
  principal only if ``allow_anonymous``. Checks use the database as it is *now*: a
  reload that deletes a user or changes a rule applies to connected clients' next
  operation, and a deleted user can do nothing. Every login re-reads the users file if
  it changed (:meth:`refresh`), so the gateway follows ``lmq users`` without a restart.

Logins return a :class:`Principal` or a :class:`Refusal` (falsy, with the reason and the
wire codes). Failed logins are counted per source address and per username
(:mod:`gateway.auth.ratelimit`); a locked-out attempt is refused without checking the
password. Failures are logged (logger ``gateway.auth``) with username, peer and client
id — never the password.

Authorisation:

* MQTT: :meth:`can_publish` / :meth:`can_subscribe` apply the principal's topic ACL
  rules, then the ``@default`` rules (anonymous clients: the ``@anonymous`` rules only),
  then, for administrators, an implicit ``subscribe $SYS/#``; first deciding rule wins,
  none means refused (:mod:`gateway.auth.acl`). :meth:`subscribe_decision` also gives
  the delivery filter of a subscription that overlaps a deny rule. Shared subscriptions
  (``$share/group/filter``) are checked on their filter.
* AMQP: :meth:`vhost_allowed` (the vhost exists and the principal has permissions there)
  and :meth:`can_configure` / :meth:`can_write` / :meth:`can_read` on a resource name
  (:class:`~gateway.auth.users.Permissions`; the default exchange ``""`` is checked as
  ``amq.default``, as RabbitMQ does).

Thread-safety: every public method is thread-safe. :meth:`authenticate` costs one scrypt
(about 70 ms of CPU with the default parameters): call it from a thread pool
(``asyncio.to_thread`` or a small dedicated executor), not on the event loop.
"""

from __future__ import annotations

import enum
import ipaddress
import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gateway.auth.acl import (
    GRANTED,
    REFUSED,
    Access,
    AclRule,
    SubscribeDecision,
    decide,
    decide_subscription,
)
from gateway.auth.passwords import PasswordHash, dummy_hash, verify_dummy
from gateway.auth.ratelimit import FailureLimiter, LoginLimits, TrustedPairs, address_key
from gateway.auth.subjects import normalize_subject
from gateway.auth.users import (
    ADMINISTRATOR,
    ANONYMOUS,
    DEFAULT,
    DEFAULT_VHOST,
    Permissions,
    UsersDatabase,
    UsersFileError,
)

log = logging.getLogger("gateway.auth")

_SYS_READ = (AclRule(Access.SUBSCRIBE, "$SYS/#"),)
_SHARE_PREFIX = "$share/"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated (or anonymous) client identity.

    ``username`` is None for the anonymous principal. ``method`` is ``"password"``,
    ``"certificate"``, ``"access_key"`` (a RocketMQ signed request) or ``"anonymous"``.
    ``tags`` are the user's tags at login (the checks themselves read the current
    database).
    """

    username: str | None
    method: str
    tags: frozenset[str] = frozenset()

    @property
    def anonymous(self) -> bool:
        return self.username is None

    @property
    def is_administrator(self) -> bool:
        return ADMINISTRATOR in self.tags


ANONYMOUS_PRINCIPAL = Principal(None, "anonymous")


class RefusalReason(enum.Enum):
    #: Unknown user, wrong password, or a certificate subject that maps to no user.
    BAD_CREDENTIALS = "bad credentials"
    #: No credentials and anonymous access is off (or there is no users file at all).
    NOT_AUTHORIZED = "not authorized"
    #: Too many failed logins from this address or for this username.
    RATE_LIMITED = "rate limited"


_MQTT5 = {
    RefusalReason.BAD_CREDENTIALS: 0x86,  # Bad User Name or Password
    RefusalReason.NOT_AUTHORIZED: 0x87,  # Not authorized
    RefusalReason.RATE_LIMITED: 0x9F,  # Connection rate exceeded
}
_MQTT3 = {
    RefusalReason.BAD_CREDENTIALS: 0x04,  # bad user name or password
    RefusalReason.NOT_AUTHORIZED: 0x05,  # not authorized
    RefusalReason.RATE_LIMITED: 0x05,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused login. Falsy, so ``if not result`` treats it like a failed lookup."""

    reason: RefusalReason
    #: Seconds until a rate-limited client may try again (0.0 for other reasons).
    retry_after: float = 0.0

    def __bool__(self) -> bool:
        return False

    @property
    def mqtt5_reason_code(self) -> int:
        """CONNACK reason code: 0x86, 0x87, or 0x9F when rate limited."""
        return _MQTT5[self.reason]

    @property
    def mqtt3_return_code(self) -> int:
        """MQTT 3.1/3.1.1 CONNACK return code: 4 (bad credentials) or 5 (not authorised)."""
        return _MQTT3[self.reason]

    @property
    def amqp_reply_code(self) -> int:
        """AMQP connection.close reply code: always 403 ACCESS_REFUSED."""
        return 403


LoginResult = Principal | Refusal


class Authenticator:
    def __init__(
        self,
        database: UsersDatabase | None = None,
        *,
        allow_anonymous: bool = False,
        users_file: Path | None = None,
        limits: LoginLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``users_file`` is where ``database`` came from (for :meth:`reload`)."""
        self.allow_anonymous = allow_anonymous
        self.users_file = Path(users_file) if users_file is not None else None
        self.limits = limits or LoginLimits()
        self._lock = threading.Lock()
        self._by_address = FailureLimiter(self.limits.max_failures_per_address, self.limits, clock)
        self._by_user = FailureLimiter(self.limits.max_failures_per_user, self.limits, clock)
        self._trusted = TrustedPairs(self.limits, clock)
        self._stamp: tuple[int, int, int] | None = None
        #: The stamp of a malformed file :meth:`refresh` refused (not parsed again).
        self._refused: tuple[int, int, int] | None = None
        self._install(database)

    @classmethod
    def from_users_file(
        cls,
        path: Path,
        *,
        allow_anonymous: bool = False,
        missing_ok: bool = True,
        limits: LoginLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Authenticator:
        """Load ``path``; a missing file means no database if ``missing_ok`` (a later
        :meth:`reload` picks it up), else UsersFileError. Malformed: UsersFileError."""
        path = Path(path)
        auth = cls(
            None, allow_anonymous=allow_anonymous, users_file=path, limits=limits, clock=clock
        )
        if not auth.reload() and not missing_ok:
            raise UsersFileError(f"{path}: no such users file")
        return auth

    # -- database -----------------------------------------------------------------------

    @property
    def database(self) -> UsersDatabase | None:
        return self._db

    @property
    def authentication_configured(self) -> bool:
        """Whether a users database is loaded (else: open mode or refuse everything)."""
        return self._db is not None

    def reload(self) -> bool:
        """Re-read the users file if it changed; True if a new database was installed.

        A missing file keeps the current database (deleting the file never opens the
        gateway). A malformed file raises UsersFileError and keeps the current one.
        """
        if self.users_file is None:
            return False
        try:
            st = os.stat(self.users_file)
        except FileNotFoundError:
            if self._db is not None:
                log.warning(
                    "users file missing, keeping the loaded one",
                    extra={"path": str(self.users_file)},
                )
            return False
        except OSError as exc:
            raise UsersFileError(f"{self.users_file}: cannot read: {exc.strerror}") from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return False
        database = UsersDatabase.load(self.users_file)
        with self._lock:
            self._install(database)
            self._stamp = stamp
        log.info(
            "users file loaded", extra={"path": str(self.users_file), "users": len(database.users)}
        )
        return True

    def refresh(self) -> None:
        """:meth:`reload` for the login path: a malformed file is logged once and the
        loaded database kept. Every login calls it, so a change made with ``lmq users``
        applies from the next login on (a ``stat`` when nothing changed)."""
        if self.users_file is None:
            return
        if self._refused is not None and self._file_stamp() == self._refused:
            return
        try:
            self.reload()
        except UsersFileError as exc:
            self._refused = self._file_stamp()
            log.warning(
                "users file not reloaded, keeping the loaded one",
                extra={"path": str(self.users_file), "error": str(exc)},
            )

    def _file_stamp(self) -> tuple[int, int, int] | None:
        assert self.users_file is not None
        try:
            st = os.stat(self.users_file)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _install(self, database: UsersDatabase | None) -> None:
        self._db = database
        self._subjects = database.subject_index() if database is not None else {}
        self._access_keys = database.access_key_index() if database is not None else {}
        self._dummy = _dummy_for(database)

    # -- logins -------------------------------------------------------------------------

    def authenticate(
        self,
        username: str | None,
        password: str | bytes | None,
        *,
        client_id: str = "",
        peer_host: str | None = None,
    ) -> LoginResult:
        """Check a username and password. ``username`` None or ``""`` asks for anonymous
        access (a password without a username is ignored)."""
        self.refresh()
        db = self._db
        if not username:
            if self.allow_anonymous:
                return ANONYMOUS_PRINCIPAL
            self._log_refusal(None, peer_host, client_id, RefusalReason.NOT_AUTHORIZED)
            return Refusal(RefusalReason.NOT_AUTHORIZED)
        if db is None:
            if self.allow_anonymous:
                return ANONYMOUS_PRINCIPAL  # open mode: any name is accepted, as nobody
            self._log_refusal(username, peer_host, client_id, RefusalReason.NOT_AUTHORIZED)
            return Refusal(RefusalReason.NOT_AUTHORIZED)
        address = address_key(peer_host)
        with self._lock:
            wait = self._by_address.retry_after(address)
            if (username, address) not in self._trusted:
                wait = max(wait, self._by_user.retry_after(username))
        if wait > 0:
            log.debug(
                "login refused: locked out",
                extra={"user": username, "peer": peer_host, "client_id": client_id},
            )
            return Refusal(RefusalReason.RATE_LIMITED, retry_after=wait)

        user = db.users.get(username)
        stored = _parse(user.password_hash) if user is not None else None
        if stored is not None and password is not None:
            ok = stored.matches(password)
        else:
            ok = verify_dummy(password or b"", self._dummy)  # same cost as a real check

        if ok:
            assert user is not None
            with self._lock:
                self._by_user.reset(username)
                self._trusted.add(username, address)
            return Principal(username, "password", frozenset(user.tags))
        self._record_failure(username, address, peer_host, client_id)
        return Refusal(RefusalReason.BAD_CREDENTIALS)

    def authenticate_certificate(
        self, subject: str, *, client_id: str = "", peer_host: str | None = None
    ) -> LoginResult:
        """The user a verified client certificate's subject (RFC 4514) maps to.

        The TLS layer has already proven the key; an unmapped subject is refused (whether
        to fall back to password login is the front end's choice)."""
        self.refresh()
        try:
            normalized = normalize_subject(subject)
        except ValueError:
            normalized = None
        user = self._subjects.get(normalized) if normalized else None
        if user is None or self._db is None or self._db.users.get(user.name) is not user:
            log.warning(
                "certificate login failed",
                extra={
                    "subject": subject,
                    "peer": peer_host,
                    "client_id": client_id,
                    "reason": "subject maps to no user",
                },
            )
            return Refusal(RefusalReason.BAD_CREDENTIALS)
        return Principal(user.name, "certificate", frozenset(user.tags))

    def lookup_access_key(self, access_key: str) -> tuple[Principal, str] | None:
        """The user ``access_key`` belongs to, as a principal (method ``access_key``),
        with its secret key, to verify a request's signature; None when no user has it.
        A dictionary lookup and a ``stat`` of the users file: fine on the event loop.
        Prefer :meth:`authenticate_signature`, which also counts failures."""
        self.refresh()
        db = self._db
        user = self._access_keys.get(access_key)
        if user is None or db is None or db.users.get(user.name) is not user:
            return None
        secret = user.access_keys.get(access_key)
        if secret is None:
            return None
        return Principal(user.name, "access_key", frozenset(user.tags)), secret

    def authenticate_signature(
        self,
        access_key: str | None,
        verify: Callable[[str], bool],
        *,
        client_id: str = "",
        peer_host: str | None = None,
    ) -> LoginResult:
        """A request signed with an access key: ``verify(secret_key)`` says whether the
        request's signature is right (the caller computes it over the request, e.g. with
        RocketMQ's HMAC). No access key asks for anonymous access, as :meth:`authenticate`
        without a username. An unknown key or a wrong signature is a failed login,
        counted per address and per user like a wrong password (so locked out alike).
        Cheap (one HMAC, no scrypt): callable on the event loop."""
        if not access_key:
            return self.authenticate(None, None, client_id=client_id, peer_host=peer_host)
        self.refresh()
        if self._db is None:
            if self.allow_anonymous:
                return ANONYMOUS_PRINCIPAL  # open mode: signatures are not checked
            self._log_refusal(access_key, peer_host, client_id, RefusalReason.NOT_AUTHORIZED)
            return Refusal(RefusalReason.NOT_AUTHORIZED)
        found = self.lookup_access_key(access_key)
        # an unknown key is counted under the key itself: it names no user to lock
        username = found[0].username if found is not None else access_key
        assert username is not None
        address = address_key(peer_host)
        with self._lock:
            wait = self._by_address.retry_after(address)
            if (username, address) not in self._trusted:
                wait = max(wait, self._by_user.retry_after(username))
        if wait > 0:
            return Refusal(RefusalReason.RATE_LIMITED, retry_after=wait)
        if found is not None and verify(found[1]):
            with self._lock:
                self._by_user.reset(username)
                self._trusted.add(username, address)
            return found[0]
        self._record_failure(username, address, peer_host, client_id)
        return Refusal(RefusalReason.BAD_CREDENTIALS)

    def _record_failure(
        self, username: str, address: str, peer_host: str | None, client_id: str
    ) -> None:
        with self._lock:
            locked_address = self._by_address.record_failure(address)
            locked_user = 0.0
            if (username, address) not in self._trusted:
                locked_user = self._by_user.record_failure(username)
        self._log_refusal(username, peer_host, client_id, RefusalReason.BAD_CREDENTIALS)
        if locked_address:
            log.warning(
                "too many failed logins: address locked out",
                extra={"peer": peer_host, "address": address, "seconds": locked_address},
            )
        if locked_user:
            log.warning(
                "too many failed logins: username locked out",
                extra={"user": username, "peer": peer_host, "seconds": locked_user},
            )

    @staticmethod
    def _log_refusal(
        username: str | None, peer_host: str | None, client_id: str, reason: RefusalReason
    ) -> None:
        # The username is attacker-chosen text: it goes in a field, which the formatters of
        # gateway.logs quote, never into the message. The password goes nowhere.
        log.warning(
            "login failed",
            extra={
                "user": username if username is not None else "-",
                "peer": peer_host or "-",
                "client_id": client_id,
                "reason": reason.value,
            },
        )

    # -- MQTT ---------------------------------------------------------------------------

    def can_publish(self, principal: Principal, client_id: str, topic: str) -> bool:
        """Whether ``principal`` may publish to topic name ``topic``."""
        if topic.startswith("$SYS/") or topic == "$SYS":
            return False
        return self._topic_access(principal, client_id, topic, subscribe=False)

    def can_subscribe(self, principal: Principal, client_id: str, topic_filter: str) -> bool:
        """Whether ``principal`` may subscribe to ``topic_filter`` (see
        :meth:`subscribe_decision`, which also says what delivery must filter out)."""
        return self.subscribe_decision(principal, client_id, topic_filter).granted

    def subscribe_decision(
        self, principal: Principal, client_id: str, topic_filter: str
    ) -> SubscribeDecision:
        """Grant or refuse a subscription to ``topic_filter`` and give its delivery
        filter (:func:`gateway.auth.acl.decide_subscription` over the principal's rules)."""
        if topic_filter.startswith(_SHARE_PREFIX):
            _group, sep, inner = topic_filter[len(_SHARE_PREFIX) :].partition("/")
            if not sep or not inner:
                return REFUSED
            topic_filter = inner
        db = self._db
        if db is None:
            return GRANTED if self.allow_anonymous and principal.anonymous else REFUSED
        rules = self._rules(db, principal)
        if rules is None:
            return REFUSED
        decision = decide_subscription(
            rules, topic_filter, client_id=client_id, username=principal.username
        )
        return REFUSED if decision is None else decision

    def _topic_access(
        self, principal: Principal, client_id: str, requested: str, *, subscribe: bool
    ) -> bool:
        db = self._db
        if db is None:
            return self.allow_anonymous and principal.anonymous
        rules = self._rules(db, principal)
        if rules is None:
            return False
        verdict = decide(
            rules,
            requested,
            subscribe=subscribe,
            client_id=client_id,
            username=principal.username,
        )
        return verdict is True

    def _rules(self, db: UsersDatabase, principal: Principal) -> Iterator[AclRule] | None:
        """The principal's ACL rules in evaluation order (one first-match list), or None
        if the principal may do nothing."""
        if principal.anonymous:
            if not self.allow_anonymous:
                return None
            return iter(db.acl.get(ANONYMOUS, ()))
        user = db.users.get(principal.username)  # type: ignore[arg-type]
        if user is None:
            return None
        lists: list[Iterable[AclRule]] = [db.acl.get(user.name, ()), db.acl.get(DEFAULT, ())]
        if user.is_administrator:
            lists.append(_SYS_READ)
        return itertools.chain.from_iterable(lists)

    # -- AMQP ---------------------------------------------------------------------------

    def vhost_exists(self, vhost: str) -> bool:
        db = self._db
        return vhost == DEFAULT_VHOST if db is None else vhost in db.vhosts

    def vhost_allowed(self, principal: Principal, vhost: str) -> bool:
        """connection.open: the vhost exists and the principal has permissions on it."""
        db = self._db
        if db is None:
            return self.allow_anonymous and principal.anonymous and vhost == DEFAULT_VHOST
        return vhost in db.vhosts and self._permissions(principal, vhost) is not None

    def can_configure(self, principal: Principal, vhost: str, resource: str) -> bool:
        """Declare or delete the queue or exchange ``resource``."""
        return self._amqp(principal, vhost, "configure", resource)

    def can_write(self, principal: Principal, vhost: str, resource: str) -> bool:
        """Publish to exchange ``resource``; bind/unbind queue ``resource``."""
        return self._amqp(principal, vhost, "write", resource)

    def can_read(self, principal: Principal, vhost: str, resource: str) -> bool:
        """Consume, get or purge queue ``resource``; bind from exchange ``resource``."""
        return self._amqp(principal, vhost, "read", resource)

    def _amqp(self, principal: Principal, vhost: str, kind: str, resource: str) -> bool:
        if self._db is None:
            return self.vhost_allowed(principal, vhost)
        perms = self._permissions(principal, vhost)
        return perms is not None and perms.allows(kind, resource or "amq.default")

    def _permissions(self, principal: Principal, vhost: str) -> Permissions | None:
        db = self._db
        assert db is not None
        if principal.anonymous:
            if not self.allow_anonymous:
                return None
            name = ANONYMOUS
        elif principal.username in db.users:
            name = principal.username
        else:
            return None
        if vhost not in db.vhosts:
            return None
        return db.permissions.get(name, {}).get(vhost)


def _parse(password_hash: str | None) -> PasswordHash | None:
    return PasswordHash.parse(password_hash) if password_hash else None


def _dummy_for(database: UsersDatabase | None) -> PasswordHash:
    """A dummy hash with the parameters most users have, so an unknown name costs what a
    known one does."""
    params: Counter[tuple[int, int, int]] = Counter()
    if database is not None:
        for user in database.users.values():
            if user.password_hash:
                params[PasswordHash.parse(user.password_hash).params] += 1
    if not params:
        return dummy_hash()
    n, r, p = params.most_common(1)[0][0]
    return dummy_hash(n, r, p)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` exposes listeners to this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ExposureError(ValueError):
    """Refusal to listen beyond loopback without authentication; one line."""


def resolve_allow_anonymous(
    bind: str, *, users_configured: bool, allow_anonymous_flag: bool
) -> bool:
    """The startup rule of docs/security.md: what ``allow_anonymous`` should be.

    * no users file, loopback bind: True (open mode, the embedded default);
    * no users file, any other bind: ExposureError unless ``--allow-anonymous``;
    * a users file: the flag (anonymous clients then get the ``@anonymous`` rules).
    """
    if users_configured:
        return allow_anonymous_flag
    if is_loopback(bind) or allow_anonymous_flag:
        return True
    raise ExposureError(
        f"refusing to listen on {bind or 'all addresses'} without authentication: add users "
        "with 'lmq users add' or pass --allow-anonymous to allow anyone in"
    )
