"""Validation of MQTT topic names, MQTT topic filters and LMQ names.

The rules are those of MQTT 3.1.1 and 5.0, section 4.7 ("Topic Names and Topic
Filters"), section 1.5.3/1.5.4 (UTF-8 encoded strings) and, for MQTT 5 only, section
4.8.2 (shared subscriptions):

* A topic name or filter is at least one character and at most 65535 UTF-8 bytes.
* It MUST NOT contain U+0000 and MUST be well-formed UTF-8. We take ``str``, so the only
  way to be ill-formed is an unpaired surrogate (``"\\ud800"``), which cannot be encoded.
* Control characters U+0001..U+001F, U+007F..U+009F and Unicode non-characters are
  "SHOULD NOT": accepted by default, rejected with ``strict=True``.
* Levels are separated by ``/``; empty levels are legal (``a//b``, ``/a``, ``/``).
* Topic names contain no wildcard character at all.
* In a filter, ``+`` occupies a whole level and ``#`` occupies a whole level that is
  the last one (``#``, ``a/#``; not ``a#``, ``a/#/b``).
* ``$share/{ShareName}/{filter}`` is a shared subscription: ShareName is at least one
  character and contains none of ``/``, ``+``, ``#``; the filter after it is validated
  like any filter. Whether a client may use it at all (MQTT 5 only) is the protocol
  layer's decision; under MQTT 3.1.1 the same string is an ordinary filter.
* Topics whose first character is ``$`` (``$SYS/...``) are "system" topics; filters that
  start with a wildcard do not match them (4.7.2), see :mod:`lmq.topic_trie`.

LMQ names (the store's queue names) are non-empty, contain no U+0000 and are at most
``max_bytes`` UTF-8 bytes (4096 by default).

Every validator raises :class:`InvalidTopic` (a ``ValueError``) whose message says what
is wrong and where, and returns its argument unchanged on success so that it can be
used inline. A non-``str`` argument is a programming error and raises ``TypeError``.
This module imports only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_LMQ_BYTES",
    "MAX_TOPIC_BYTES",
    "SHARE_PREFIX",
    "InvalidTopic",
    "SharedSubscription",
    "has_wildcards",
    "is_system_topic",
    "parse_shared_subscription",
    "split_levels",
    "validate_lmq_name",
    "validate_topic_filter",
    "validate_topic_name",
]

#: Largest topic name or filter: the MQTT string length prefix is two bytes.
MAX_TOPIC_BYTES = 65535
#: Default upper bound for an LMQ name, in UTF-8 bytes.
DEFAULT_MAX_LMQ_BYTES = 4096
#: Prefix of an MQTT 5 shared subscription filter.
SHARE_PREFIX = "$share/"

LEVEL_SEPARATOR = "/"
SINGLE_LEVEL_WILDCARD = "+"
MULTI_LEVEL_WILDCARD = "#"

# MQTT 1.5.4: "SHOULD NOT include" the C0 and C1 control characters and the Unicode
# non-characters (U+FDD0..U+FDEF and the last two code points of each of the 17 planes).
_DISCOURAGED = re.compile(
    "[\x01-\x1f\x7f-\x9f\ufdd0-\ufdef"
    + "".join(chr(plane << 16 | 0xFFFE) + chr(plane << 16 | 0xFFFF) for plane in range(17))
    + "]"
)

_SHOW_MAX = 60


class InvalidTopic(ValueError):
    """A topic name, topic filter, share name or LMQ name breaks a rule.

    The message names the rule and the position (character index or 1-based level).
    """


@dataclass(frozen=True, slots=True)
class SharedSubscription:
    """``$share/{group}/{filter}``: ``filter`` is consumed by the share group ``group``."""

    group: str
    filter: str


def _show(text: str) -> str:
    # Topics can be 64 KiB long; an error message should stay one readable line.
    if len(text) <= _SHOW_MAX:
        return repr(text)
    return f"{text[:_SHOW_MAX]!r}... ({len(text)} characters)"


def _check_string(text: str, what: str, max_bytes: int, strict: bool) -> None:
    """The checks shared by every kind of name: type, length, U+0000, UTF-8, strict."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    if not text:
        raise InvalidTopic(f"{what} must be at least one character")
    nul = text.find("\x00")
    if nul >= 0:
        raise InvalidTopic(f"{what} {_show(text)} contains U+0000 at index {nul}")
    if text.isascii():  # O(1) in CPython: one UTF-8 byte per character
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidTopic(
                f"{what} {_show(text)} is not valid UTF-8: unpaired surrogate "
                f"U+{ord(text[exc.start]):04X} at index {exc.start}"
            ) from None
    if size > max_bytes:
        raise InvalidTopic(
            f"{what} {_show(text)} is {size} UTF-8 bytes; the maximum is {max_bytes}"
        )
    if strict:
        bad = _DISCOURAGED.search(text)
        if bad is not None:
            raise InvalidTopic(
                f"{what} {_show(text)} contains U+{ord(bad.group()):04X} at index "
                f"{bad.start()} (a control character or non-character, rejected in strict mode)"
            )


def split_levels(topic: str) -> list[str]:
    """Split on ``/``. Never an empty list: ``""`` gives ``[""]``, ``"/"`` gives ``["", ""]``."""
    return topic.split(LEVEL_SEPARATOR)


def is_system_topic(topic: str) -> bool:
    """True for ``$``-topics (``$SYS/...``), which leading wildcards do not match."""
    return topic.startswith("$")


def has_wildcards(topic_filter: str) -> bool:
    """True if a (valid) filter contains ``+`` or ``#``, i.e. can match other topics."""
    return SINGLE_LEVEL_WILDCARD in topic_filter or MULTI_LEVEL_WILDCARD in topic_filter


def validate_topic_name(topic: str, *, strict: bool = False) -> str:
    """Return ``topic`` if it is a valid MQTT topic name (a PUBLISH target), else raise."""
    _check_string(topic, "topic name", MAX_TOPIC_BYTES, strict)
    for wildcard in (SINGLE_LEVEL_WILDCARD, MULTI_LEVEL_WILDCARD):
        index = topic.find(wildcard)
        if index >= 0:
            raise InvalidTopic(
                f"topic name {_show(topic)} contains wildcard {wildcard!r} at index {index}; "
                "wildcards are only allowed in topic filters"
            )
    return topic


def validate_topic_filter(topic_filter: str, *, strict: bool = False) -> str:
    """Return ``topic_filter`` if it is a valid MQTT topic filter, else raise.

    ``$share/...`` is not interpreted here (it is a valid plain filter); use
    :func:`parse_shared_subscription` first where shared subscriptions are allowed.
    """
    _check_string(topic_filter, "topic filter", MAX_TOPIC_BYTES, strict)
    _check_wildcards(topic_filter)
    return topic_filter


def _check_wildcards(topic_filter: str) -> None:
    if not has_wildcards(topic_filter):
        return  # the common case: an exact topic, nothing to place
    levels = split_levels(topic_filter)
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if len(level) == 1:
            if level == MULTI_LEVEL_WILDCARD and index != last:
                raise InvalidTopic(f"'#' must be the last level in filter {_show(topic_filter)}")
            continue
        for wildcard in (MULTI_LEVEL_WILDCARD, SINGLE_LEVEL_WILDCARD):
            if wildcard in level:
                raise InvalidTopic(
                    f"{wildcard!r} must occupy a whole level, but level {index + 1} "
                    f"is {_show(level)} in filter {_show(topic_filter)}"
                )


def parse_shared_subscription(
    topic_filter: str, *, strict: bool = False
) -> SharedSubscription | None:
    """Split ``$share/{ShareName}/{filter}``; None if ``topic_filter`` is not shared.

    Raises :class:`InvalidTopic` if it starts with ``$share/`` but is malformed: empty
    share name, ``+``/``#`` in the share name, no ``/`` and filter after the share name,
    or an invalid filter. The whole string is also held to the 65535-byte limit, since
    that is what travels in the SUBSCRIBE packet.
    """
    if not isinstance(topic_filter, str):
        raise TypeError(f"topic filter must be str, not {type(topic_filter).__name__}")
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    _check_string(topic_filter, "shared subscription", MAX_TOPIC_BYTES, strict)
    group, sep, inner = topic_filter[len(SHARE_PREFIX) :].partition(LEVEL_SEPARATOR)
    if not group:
        raise InvalidTopic(f"share name must be at least one character in {_show(topic_filter)}")
    if not sep:
        raise InvalidTopic(
            f"shared subscription {_show(topic_filter)} needs '/' and a topic filter "
            "after the share name"
        )
    for wildcard in (SINGLE_LEVEL_WILDCARD, MULTI_LEVEL_WILDCARD):
        if wildcard in group:
            raise InvalidTopic(
                f"share name {_show(group)} must not contain {wildcard!r} "
                f"(in {_show(topic_filter)})"
            )
    if not inner:
        raise InvalidTopic(
            f"topic filter after the share name must be at least one character "
            f"in {_show(topic_filter)}"
        )
    _check_wildcards(inner)
    return SharedSubscription(group, inner)


def validate_lmq_name(name: str, max_bytes: int = DEFAULT_MAX_LMQ_BYTES) -> str:
    """Return ``name`` if it can name an LMQ: non-empty, no U+0000, <= max_bytes UTF-8."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, not {max_bytes}")
    _check_string(name, "LMQ name", max_bytes, strict=False)
    return name
