"""MQTT delayed publish topics: ``$delayed/{seconds}/{topic}`` and ``$delayed/@{time}/{topic}``.

The relative form is EMQX's: a PUBLISH to ``$delayed/15/a/b`` reaches the subscribers
of ``a/b`` 15 seconds later. The interval is a whole number of seconds (decimal digits
only: no sign, no fraction, no spaces), 0 included (due at once). The absolute form is
ours: ``$delayed/@1767225600/a/b`` is due at that Unix time (seconds; an optional
fraction of up to three digits gives milliseconds, ``@1767225600.250``); a time already
past is due at once.

Either form is refused (:class:`InvalidDelayedTopic`) when the delay is malformed, the
real topic is missing or empty, the real topic is itself a ``$delayed`` topic, or the
due time is more than ``max_delay_ms`` from now (the store's ``max_timer_delay_ms``).
Pure functions, no I/O.
"""

from __future__ import annotations

import re

PREFIX = "$delayed/"

_RELATIVE = re.compile(r"[0-9]{1,12}")
_ABSOLUTE = re.compile(r"@([0-9]{1,12})(?:\.([0-9]{1,3}))?")


class InvalidDelayedTopic(ValueError):
    """A ``$delayed/...`` topic that cannot be scheduled (the reason is the message)."""


def is_delayed(topic: str) -> bool:
    return topic.startswith(PREFIX)


def parse_delayed(topic: str, now_ms: int, max_delay_ms: int) -> tuple[str, int]:
    """``(real topic, due time in epoch ms)`` of a ``$delayed/...`` topic; raises
    :class:`InvalidDelayedTopic` (see the module docstring)."""
    rest = topic[len(PREFIX):] if topic.startswith(PREFIX) else None
    if rest is None:
        raise InvalidDelayedTopic(f"not a $delayed topic: {topic!r}")
    delay, sep, real = rest.partition("/")
    if not sep or not real:
        raise InvalidDelayedTopic("a $delayed topic needs a topic after the delay")
    if real.startswith(PREFIX) or real == "$delayed":
        raise InvalidDelayedTopic("a $delayed topic cannot delay a $delayed topic")
    if _RELATIVE.fullmatch(delay):
        due = now_ms + int(delay) * 1000
    else:
        match = _ABSOLUTE.fullmatch(delay)
        if match is None:
            raise InvalidDelayedTopic(
                f"bad delay {delay!r}: whole seconds (e.g. 15) or @unix-seconds[.mmm]")
        fraction = (match.group(2) or "").ljust(3, "0")
        due = max(int(match.group(1)) * 1000 + int(fraction), now_ms)
    if due - now_ms > max_delay_ms:
        raise InvalidDelayedTopic(
            f"delay of {(due - now_ms) // 1000} s exceeds the maximum of"
            f" {max_delay_ms // 1000} s")
    return real, due


__all__ = ["PREFIX", "InvalidDelayedTopic", "is_delayed", "parse_delayed"]
