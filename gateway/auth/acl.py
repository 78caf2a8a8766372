"""MQTT topic ACLs: ordered allow/deny rules on topic filters, first match wins.

A rule is an *access* and a topic *filter*::

    publish   devices/%c/telemetry     may publish to matching topics
    subscribe commands/%u/#            may subscribe to filters the rule covers
    both      home/%u/#                publish and subscribe
    deny      home/%u/secrets/#        neither

``%c`` is replaced by the client identifier and ``%u`` by the username before matching
(mosquitto's ``pattern`` lines). A rule whose placeholder cannot be filled safely — no
username (anonymous), an empty identifier, or a value holding ``+``, ``#`` or ``/``,
which would widen the rule — is skipped when it allows and, when it denies, matches
*every* topic, so an odd client identifier never escapes a deny.

Theory of operation. For one operation only the rules that concern it are tried, in
order: ``publish``/``both``/``deny`` for a publish, ``subscribe``/``both``/``deny`` for
a subscribe. The meaning is defined per topic name:

    **T is allowed iff the first of those rules whose filter matches T allows.**
    No matching rule means refused.

A publish names one topic and is decided exactly so (:func:`decide`). A subscription
names a filter F that may match many topics; :func:`decide_subscription` grants or
refuses F and, when it grants, gives the per-topic part as a delivery filter:

* F is **granted** iff some allowing rule *covers* F (every topic F matches, the rule
  matches too) and no ``deny`` rule before the first such rule A covers F. Otherwise F
  is refused: without a covering allow (``subscribe a/b`` does not grant ``a/+``), or
  when a deny covers F, since nothing could be delivered (``deny secret/#`` refuses
  ``secret/+``; an unfillable deny covers everything).
* A granted F carries a :class:`DenyFilter` iff some ``deny`` rule before A
  *intersects* F (some topic matches both). It holds the rules before A that intersect
  F, in order, up to the last such deny, and denies T iff the first of them matching T
  is a deny. Every topic T that F matches is therefore delivered iff the first rule
  matching T allows it: rules before A decide T when one matches it (the filter holds
  every one that can match a topic of F), and A matches T otherwise. Allowing rules that
  only intersect F are kept because they can shadow a later deny: with ``subscribe
  a/b``, ``deny a/#``, ``subscribe #`` the filter ``+/+`` is granted and delivers
  ``a/b`` and ``c/d`` but not ``a/c``; ``a/+`` is refused (the deny covers it, although
  ``a/b`` alone would pass: subscribe to ``a/b`` for that).
* A granted F with no such deny has no filter (None): delivery costs nothing extra.

So "allow ``#`` except ``secret/#``" is ``deny secret/#`` then ``subscribe #``: ``#``
is granted and ``secret/...`` is never delivered to it; ``secret/#`` and ``secret/x``
are refused. A filter whose topics several denies cover together (``deny a`` and ``deny
a/+/#`` before ``subscribe #``, asked for ``a/#``) is granted and receives nothing.

Standard MQTT matching applies throughout, including [MQTT-4.7.2-1]: a filter starting
with ``+`` or ``#`` does not match topics starting with ``$``, so ``$SYS/...`` is
reachable only through rules that name ``$SYS`` explicitly.

Everything here is pure and thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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
            # "#" also matches the parent level, which "+/#" misses, unless that parent
            # is the empty topic name, which no topic is ("#" and "+/#", "/#" and "/+/#")
            return level == "+" and a[i + 1 :] == ["#"] and not "/".join(s[:i])
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
            # the topics in common are the other filter's from here on, or its parent
            # level; only the empty topic name can be missing ("/#" and "+" share none)
            return not (
                (x is None or y is None)
                and i == 1
                and "" in (a[0], b[0])
                and a[0] in ("", "+")
                and b[0] in ("", "+")
            )
        if x is None or y is None:
            return False
        if x != "+" and y != "+" and x != y:
            return False
    return True


def matches(levels: tuple[str, ...] | list[str], topic: list[str]) -> bool:
    """Whether the filter split into ``levels`` matches the topic name split into ``topic``."""
    if levels[0] in ("+", "#") and topic[0].startswith("$"):
        return False
    n = len(topic)
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i >= n or (level != "+" and level != topic[i]):
            return False
    return len(levels) == n


@dataclass(frozen=True, slots=True)
class DenyFilter:
    """The delivery filter of a granted subscription (see the module docstring).

    ``rules`` are ``(allows, filter levels)`` in rule order, placeholders filled; the
    last one denies. Calling it with a topic name the subscription matches returns True
    when that topic must not be delivered.
    """

    rules: tuple[tuple[bool, tuple[str, ...]], ...]

    def __call__(self, topic: str) -> bool:
        levels = topic.split("/")
        for allows, rule in self.rules:
            if matches(rule, levels):
                return not allows
        return False

    def __str__(self) -> str:
        return ", ".join(
            f"{'allow' if allows else 'deny'} {'/'.join(rule)}" for allows, rule in self.rules
        )

    def __deepcopy__(self, _memo: Any) -> DenyFilter:  # immutable: share it
        return self


def deny_all(_topic: str) -> bool:
    """The delivery filter of a subscription its rules no longer grant."""
    return True


@dataclass(frozen=True, slots=True)
class SubscribeDecision:
    """Whether a subscription is granted, and what its delivery must filter out.

    ``deny`` is None when nothing needs filtering (always, when refused). True in a
    boolean context iff granted.
    """

    granted: bool
    deny: Callable[[str], bool] | None = None

    def __bool__(self) -> bool:
        return self.granted


GRANTED = SubscribeDecision(True)
REFUSED = SubscribeDecision(False)


def decide_subscription(
    rules: Iterable[AclRule], requested: str, *, client_id: str, username: str | None
) -> SubscribeDecision | None:
    """Apply ``rules`` to a subscription to filter ``requested`` (the module docstring
    gives the exact meaning). None = no rule decided (the caller refuses)."""
    before: list[tuple[bool, str]] = []  # rules before the deciding one that intersect
    for rule in rules:
        access = rule.access
        if access is Access.PUBLISH:
            continue
        topic_filter = substitute(rule.filter, client_id=client_id, username=username)
        if access is Access.DENY:
            if topic_filter is None or covers(topic_filter, requested):
                return REFUSED
            if intersects(topic_filter, requested):
                before.append((False, topic_filter))
        elif topic_filter is not None:
            if covers(topic_filter, requested):
                while before and before[-1][0]:
                    before.pop()  # allows after the last deny change nothing
                if not before:
                    return GRANTED
                return SubscribeDecision(
                    True, DenyFilter(tuple((a, tuple(f.split("/"))) for a, f in before))
                )
            if intersects(topic_filter, requested):
                before.append((True, topic_filter))
    return None


def decide(
    rules: Iterable[AclRule],
    requested: str,
    *,
    subscribe: bool,
    client_id: str,
    username: str | None,
) -> bool | None:
    """Apply ``rules`` to a publish topic or a subscription filter.

    True = granted, False = refused, None = no rule decided (the caller refuses). For a
    subscription, True may come with a delivery filter: see :func:`decide_subscription`.
    """
    if subscribe:
        decision = decide_subscription(rules, requested, client_id=client_id, username=username)
        return None if decision is None else decision.granted
    for rule in rules:
        if rule.access is Access.SUBSCRIBE:
            continue
        topic_filter = substitute(rule.filter, client_id=client_id, username=username)
        if rule.access is Access.DENY:
            if topic_filter is None or covers(topic_filter, requested):
                return False
        elif topic_filter is not None and covers(topic_filter, requested):
            return True
    return None
