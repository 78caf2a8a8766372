"""Authentication and authorisation for the MQTT and AMQP front ends (pure, synchronous).

* :mod:`.passwords` — salted scrypt hashes, constant-time verification.
* :mod:`.users` — the users file: users, vhosts, AMQP permissions, MQTT topic ACLs.
* :mod:`.acl` — topic ACL rules and their first-match evaluation.
* :mod:`.ratelimit` — failed-login lockouts per address and per username.
* :mod:`.subjects` — client-certificate subjects (RFC 4514).
* :mod:`.authenticator` — the facade the front ends call.

See docs/security.md.
"""

from gateway.auth.acl import Access, AclRule, DenyFilter, InvalidRule, SubscribeDecision
from gateway.auth.authenticator import (
    ANONYMOUS_PRINCIPAL,
    Authenticator,
    ExposureError,
    LoginResult,
    Principal,
    Refusal,
    RefusalReason,
    is_loopback,
    resolve_allow_anonymous,
)
from gateway.auth.passwords import hash_password, verify_password
from gateway.auth.ratelimit import LoginLimits
from gateway.auth.subjects import normalize_subject, subject_from_peercert
from gateway.auth.users import (
    ANONYMOUS,
    DEFAULT,
    DEFAULT_VHOST,
    Permissions,
    User,
    UsersDatabase,
    UsersError,
    UsersFileError,
    default_users_file,
    edit_users_file,
)

__all__ = [
    "ANONYMOUS",
    "ANONYMOUS_PRINCIPAL",
    "Access",
    "AclRule",
    "Authenticator",
    "DEFAULT",
    "DEFAULT_VHOST",
    "DenyFilter",
    "ExposureError",
    "InvalidRule",
    "LoginLimits",
    "LoginResult",
    "Permissions",
    "Principal",
    "Refusal",
    "RefusalReason",
    "SubscribeDecision",
    "User",
    "UsersDatabase",
    "UsersError",
    "UsersFileError",
    "default_users_file",
    "edit_users_file",
    "hash_password",
    "is_loopback",
    "normalize_subject",
    "resolve_allow_anonymous",
    "subject_from_peercert",
    "verify_password",
]
