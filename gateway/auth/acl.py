"""MQTT topic ACLs: ordered allow/deny rules on topic filters, first match wins.

A rule is an *access* and a topic *filter*::

    publish   devices/%c/telemetry     may publish to matching topics
    subscribe commands/%u/#            may subscribe to filters the rule covers
    both      home/%u/#                publish and subscribe
    deny      home/%u/secrets/#        neither (stops the search for both operations)

``%c`` is replaced by the client identifier and ``%u`` by the username before matching
(mosquitto's ``pattern`` lines). A rule whose placeholder cannot be filled safely — no
username (anonymous), an empty identifier, or a value holding ``+``, ``#`` or ``/``,
which would widen the rule — is skipped when it allows and *applies* when it denies, so
an odd client identifier never escapes a deny.

Theory of operation. For one operation the rules that concern it are tried in order
(``publish``/``both``/``deny`` for a publish, ``subscribe``/``both``/``deny`` for a
subscribe); the first rule that decides, decides:

* a ``deny`` rule decides (refuse) when its filter *intersects* the requested one, i.e.
  some topic matches both. Subscribing to ``#`` is refused by ``deny secret/#``, since
  the subscription would otherwise receive ``secret/...`` messages.
* an allowing rule decides (grant) when its filter *covers* the requested one, i.e.
  every topic the requested filter matches is matched by the rule. ``subscribe a/#``
  grants ``a/+/b``; ``subscribe a/b`` does not grant ``a/+`` and the search goes on.

A publish names one topic, for which "intersects" and "covers" both mean "matches".
No deciding rule means refuse. Standard MQTT matching applies throughout, including
[MQTT-4.7.2-1]: a filter starting with ``+`` or ``#`` does not match topics starting with
``$``, so ``$SYS/...`` is reachable only through rules that name ``$SYS`` explicitly.

Everything here is pure and thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

_PLACEHOLDERS = ("%c", "%u")
_UNSAFE = ("+", "#", "/")


class Access(enum.Enum):
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    BOTH = "both"
    DENY = "deny"


class InvalidRule(ValueError):
    """A rule that cannot be used; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class AclRule:
    access: Access
    filter: str

    def __post_init__(self) -> None:
        if not isinstance(self.access, Access):
            raise InvalidRule(f"access must be an Access, not {self.access!r}")
        check_filter(self.filter)

    @classmethod
    def parse(cls, text: str) -> AclRule:
        """``"<publish|subscribe|both|deny> <filter>"`` (the ``lmq users acl list`` form)."""
        access, _, topic_filter = text.strip().partition(" ")
        try:
            return cls(Access(access), topic_filter.strip())
        except ValueError:
            raise InvalidRule(
                f"{text!r}: expected '<publish|subscribe|both|deny> <topic filter>'"
            ) from None

    def __str__(self) -> str:
        return f"{self.access.value} {self.filter}"

    def to_json(self) -> dict[str, str]:
        return {"access": self.access.value, "filter": self.filter}


def check_filter(topic_filter: str) -> str:
    """Return ``topic_filter`` if valid as an ACL filter (placeholders allowed), else raise."""
    if not isinstance(topic_filter, str) or not topic_filter:
        raise InvalidRule("topic filter must be a non-empty string")
    if "\0" in topic_filter:
        raise InvalidRule(f"topic filter {topic_filter!r} contains U+0000")
    if len(topic_filter.encode("utf-8", "surrogatepass")) > 65535:
        raise InvalidRule("topic filter is longer than 65535 bytes")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if level in ("+", "#"):
            if level == "#" and i != len(levels) - 1:
                raise InvalidRule(f"'#' must be the last level in {topic_filter!r}")
        elif "+" in level or "#" in level:
            raise InvalidRule(f"wildcards must occupy a whole level in {topic_filter!r}")
    return topic_filter


def substitute(topic_filter: str, *, client_id: str, username: str | None) -> str | None:
    """``topic_filter`` with ``%c``/``%u`` filled in; None if a placeholder cannot be filled."""
    if "%" not in topic_filter:
        return topic_filter
    result = topic_filter
    for placeholder, value in (("%c", client_id), ("%u", username)):
        if placeholder not in result:
            continue
        if not value or any(ch in value for ch in _UNSAFE):
            return None
        result = result.replace(placeholder, value)
    return result


def covers(outer: str, inner: str) -> bool:
    """Whether every topic matched by filter ``inner`` is matched by filter ``outer``."""
    a = outer.split("/")
    s = inner.split("/")
    if a[0] in ("+", "#") and s[0].startswith("$"):
        return False
    for i, level in enumerate(a):
        if level == "#":
            return True
        if i >= len(s):
            return False
        if s[i] == "#":
            return False
        if level == "+":
            continue
        if s[i] == "+" or s[i] != level:
            return False
    return len(a) == len(s)


def intersects(one: str, other: str) -> bool:
    """Whether some topic name is matched by both filters."""
    a = one.split("/")
    b = other.split("/")
    if (a[0] in ("+", "#") and b[0].startswith("$")) or (
        b[0] in ("+", "#") and a[0].startswith("$")
    ):
        return False
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == "#" or y == "#":
            return True
        if x is None or y is None:
            return False
        if x != "+" and y != "+" and x != y:
            return False
    return True


def decide(
    rules: Iterable[AclRule],
    requested: str,
    *,
    subscribe: bool,
    client_id: str,
    username: str | None,
) -> bool | None:
    """Apply ``rules`` to a publish topic or a subscription filter.

    True = granted, False = refused by a deny rule, None = no rule decided (the caller
    refuses, or tries further rules).
    """
    wanted = Access.SUBSCRIBE if subscribe else Access.PUBLISH
    for rule in rules:
        if rule.access is not wanted and rule.access not in (Access.BOTH, Access.DENY):
            continue
        topic_filter = substitute(rule.filter, client_id=client_id, username=username)
        if rule.access is Access.DENY:
            if topic_filter is None or intersects(topic_filter, requested):
                return False
        elif topic_filter is not None and covers(topic_filter, requested):
            return True
    return None
