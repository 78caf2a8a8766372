"""Password hashes: salted scrypt in a self-describing string.

Format (one line, ASCII)::

    $scrypt$n=16384,r=8,p=1$<salt>$<hash>

``salt`` (16 random bytes) and ``hash`` (32 bytes) are standard base64 without ``=``
padding. ``n`` (CPU/memory cost, a power of two), ``r`` (block size) and ``p``
(parallelism) are stored with every hash, so the defaults can be raised later without
invalidating existing hashes (:func:`needs_rehash` says which ones are old).

Default parameters: n=2**14, r=8, p=1 — the scrypt paper's "interactive login" setting:
16 MiB of memory and about 70 ms of one core per verification on the development
machine. That cost is paid on every password login, so a fleet of 10,000 devices
reconnecting at once costs about 700 core-seconds; deployments with reconnect storms
should prefer client certificates (no hash per login) or more cores, not weaker hashes.

Verification is constant-time in the password (:func:`hmac.compare_digest`), and
:func:`verify_dummy` burns the same work as a real verification so that the unknown-user
path costs the same as a wrong password for a known user.

Thread-safety: every function is pure; ``hashlib.scrypt`` releases the GIL, so callers
on an event loop should run :func:`verify_password` in a thread pool.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

SCHEME = "scrypt"
#: Default cost parameters for new hashes (module attributes so tests can lower them).
DEFAULT_N = 2**14
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
#: Upper bounds accepted when *reading* a hash: a tampered users file must not make one
#: login allocate gigabytes (128 * r * n bytes; the bounds allow up to 256 MiB).
MAX_N = 2**20
MAX_R = 32
MAX_P = 16
_MAX_MEMORY = 256 * 1024 * 1024

_FORMAT = re.compile(r"^\$scrypt\$n=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")


class InvalidHash(ValueError):
    """A string that is not a well-formed ``$scrypt$`` hash; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A parsed ``$scrypt$`` hash."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def __post_init__(self) -> None:
        if self.n < 2 or self.n > MAX_N or self.n & (self.n - 1):
            raise InvalidHash(f"scrypt n must be a power of two from 2 to {MAX_N}, not {self.n}")
        if not 1 <= self.r <= MAX_R:
            raise InvalidHash(f"scrypt r must be from 1 to {MAX_R}, not {self.r}")
        if not 1 <= self.p <= MAX_P:
            raise InvalidHash(f"scrypt p must be from 1 to {MAX_P}, not {self.p}")
        if 128 * self.r * self.n > _MAX_MEMORY:
            raise InvalidHash(f"scrypt n={self.n}, r={self.r} needs more than 256 MiB")
        if len(self.salt) < 8:
            raise InvalidHash("scrypt salt must be at least 8 bytes")
        if not 16 <= len(self.digest) <= 64:
            raise InvalidHash("scrypt hash must be 16 to 64 bytes")

    @property
    def params(self) -> tuple[int, int, int]:
        return self.n, self.r, self.p

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        match = _FORMAT.match(text) if isinstance(text, str) else None
        if not match:
            raise InvalidHash("not a '$scrypt$n=...,r=...,p=...$salt$hash' string")
        n, r, p, salt, digest = match.groups()
        try:
            return cls(int(n), int(r), int(p), _b64decode(salt), _b64decode(digest))
        except binascii.Error:
            raise InvalidHash("salt or hash is not valid base64") from None

    def format(self) -> str:
        return (
            f"${SCHEME}$n={self.n},r={self.r},p={self.p}"
            f"${_b64encode(self.salt)}${_b64encode(self.digest)}"
        )

    def matches(self, password: str | bytes) -> bool:
        candidate = _scrypt(
            _to_bytes(password), self.salt, self.n, self.r, self.p, len(self.digest)
        )
        return hmac.compare_digest(candidate, self.digest)


def hash_password(
    password: str | bytes, *, n: int | None = None, r: int | None = None, p: int | None = None
) -> str:
    """A new salted hash of ``password`` (str is encoded as UTF-8, bytes used as given)."""
    n = DEFAULT_N if n is None else n
    r = DEFAULT_R if r is None else r
    p = DEFAULT_P if p is None else p
    salt = secrets.token_bytes(SALT_BYTES)
    PasswordHash(n, r, p, salt, b"\0" * HASH_BYTES)  # validate the parameters first
    digest = _scrypt(_to_bytes(password), salt, n, r, p, HASH_BYTES)
    return PasswordHash(n, r, p, salt, digest).format()


def verify_password(password: str | bytes, stored: str | PasswordHash) -> bool:
    """Whether ``password`` matches ``stored``; a malformed ``stored`` is False, not an error."""
    try:
        parsed = stored if isinstance(stored, PasswordHash) else PasswordHash.parse(stored)
    except InvalidHash:
        return False
    return parsed.matches(password)


def dummy_hash(n: int | None = None, r: int | None = None, p: int | None = None) -> PasswordHash:
    """A hash no password matches (random digest), for equal-cost failed lookups."""
    return PasswordHash(
        DEFAULT_N if n is None else n,
        DEFAULT_R if r is None else r,
        DEFAULT_P if p is None else p,
        secrets.token_bytes(SALT_BYTES),
        secrets.token_bytes(HASH_BYTES),
    )


def verify_dummy(password: str | bytes, dummy: PasswordHash) -> bool:
    """Spend the work of one verification and return False (unknown user, no password)."""
    dummy.matches(password)
    return False


def needs_rehash(stored: str) -> bool:
    """Whether ``stored`` uses weaker parameters than the current defaults."""
    try:
        parsed = PasswordHash.parse(stored)
    except InvalidHash:
        return True
    return parsed.n < DEFAULT_N or parsed.r < DEFAULT_R or parsed.p < DEFAULT_P


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    maxmem = 128 * r * n * (p + 1) + 1024 * 1024
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=dklen)


def _to_bytes(password: str | bytes) -> bytes:
    if isinstance(password, str):
        return password.encode("utf-8", "surrogatepass")
    return bytes(password)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
