"""Failed-login limiting: N failures within a window lock a key out for a while.

A key is a source address (see :func:`address_key`) or a username. ``max_failures``
failures within ``window`` seconds lock the key for ``lockout`` seconds; each further
lockout of the same key doubles that, up to ``max_lockout``. A key that stays quiet for
``max_lockout`` seconds after its last lockout starts over. While a key is locked no
password is checked at all, so a guessing attacker also stops costing us scrypt work.

Memory is bounded: at most ``max_keys`` keys are tracked, the least recently used
forgotten first (an attacker inventing usernames can only push out other unlocked or
stale entries, and each address key is one per /64 for IPv6).

Not thread-safe: :class:`~gateway.auth.authenticator.Authenticator` holds the lock.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LoginLimits:
    """How failed logins are limited (see the module docstring)."""

    #: Failures from one source address (IPv4 address, IPv6 /64) within ``window``.
    max_failures_per_address: int = 10
    #: Failures for one username within ``window``, from addresses that have not logged
    #: in as that user before (see ``trust_seconds``).
    max_failures_per_user: int = 5
    #: Seconds over which failures are counted.
    window: float = 60.0
    #: First lockout, in seconds; doubled per repeated lockout.
    lockout: float = 30.0
    #: Longest lockout, in seconds.
    max_lockout: float = 900.0
    #: Seconds an address that logged in successfully as a user stays exempt from that
    #: user's lockout, so an attacker who fails a device's username on purpose cannot
    #: lock the device itself out (the per-address limit still applies to everyone).
    trust_seconds: float = 86_400.0
    #: Keys tracked per limiter (addresses, usernames, trusted pairs).
    max_keys: int = 100_000

    def __post_init__(self) -> None:
        if self.max_failures_per_address < 1 or self.max_failures_per_user < 1:
            raise ValueError("max_failures_per_address and max_failures_per_user must be >= 1")
        if self.window <= 0 or self.lockout <= 0 or self.max_lockout < self.lockout:
            raise ValueError("window and lockout must be > 0 and max_lockout >= lockout")
        if self.max_keys < 1:
            raise ValueError("max_keys must be >= 1")


@dataclass(slots=True)
class _Entry:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0
    strikes: int = 0


class FailureLimiter:
    """Failure counts and lockouts for one kind of key."""

    def __init__(
        self,
        max_failures: int,
        limits: LoginLimits,
        clock: Callable[[], float],
    ) -> None:
        self._max = max_failures
        self._limits = limits
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def retry_after(self, key: str) -> float:
        """Seconds until ``key`` may try again; 0.0 if it is not locked."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        return max(0.0, entry.locked_until - self._clock())

    def record_failure(self, key: str) -> float:
        """Count a failure; return the lockout it started in seconds, or 0.0."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            while len(self._entries) > self._limits.max_keys:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        if entry.strikes and now - entry.locked_until > self._limits.max_lockout:
            entry.strikes = 0
        while entry.failures and entry.failures[0] <= now - self._limits.window:
            entry.failures.popleft()
        entry.failures.append(now)
        if len(entry.failures) < self._max:
            return 0.0
        entry.failures.clear()
        lockout = min(self._limits.lockout * 2**entry.strikes, self._limits.max_lockout)
        entry.strikes += 1
        entry.locked_until = now + lockout
        return lockout

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)


class TrustedPairs:
    """(username, address key) pairs that logged in recently, with an expiry."""

    def __init__(self, limits: LoginLimits, clock: Callable[[], float]) -> None:
        self._limits = limits
        self._clock = clock
        self._until: OrderedDict[tuple[str, str], float] = OrderedDict()

    def add(self, username: str, address: str) -> None:
        key = (username, address)
        self._until[key] = self._clock() + self._limits.trust_seconds
        self._until.move_to_end(key)
        while len(self._until) > self._limits.max_keys:
            self._until.popitem(last=False)

    def __contains__(self, pair: tuple[str, str]) -> bool:
        until = self._until.get(pair)
        return until is not None and until > self._clock()


def address_key(peer_host: str | None) -> str:
    """The rate-limit key of a source address: the address itself for IPv4 (and
    IPv4-mapped IPv6), the /64 network for IPv6, the string itself otherwise."""
    if not peer_host:
        return "-"
    try:
        addr = ipaddress.ip_address(peer_host.split("%", 1)[0])
    except ValueError:
        return peer_host
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)
