"""When a remoting send is due: RocketMQ's delay properties, read as its broker reads them.

A send is delayed by one of (the broker's ``HookUtils.checkIfTimerMessage`` and
``transformTimerMessage``, in this precedence):

1. ``DELAY`` = a delay level ``n >= 1`` (RocketMQ 4's ``messageDelayLevel``, the store's
   ``StoreConfig.delay_levels``; a level past the last is the last, as the broker clamps
   it). The broker then ignores the ``TIMER_*`` properties (and removes them from the
   message); they are ignored here too, and kept.
   The store checks its due time against the maximum delay like any other (the broker
   does not; only a maximum below the longest level, 2 h by default, makes a difference).
2. ``TIMER_DELAY_SEC`` (seconds from now), else ``TIMER_DELAY_MS`` (ms from now), else
   ``TIMER_DELIVER_MS`` (an epoch ms): RocketMQ 5's timer properties. A value that is not
   an integer is refused (the broker's WHEEL_TIMER_MSG_ILLEGAL -> MESSAGE_ILLEGAL).
3. ``__STARTDELIVERTIME`` (an epoch ms): Aliyun ONS's property (ali-ons sets it), read
   like ``TIMER_DELIVER_MS`` when none of the above is there.

A due time more than ``StoreConfig.max_timer_delay_ms`` away is refused with
MESSAGE_ILLEGAL and the broker's remark (its ``timerMaxDelaySec``, 3 days; ours 40 days
by default). A due time not in the future (``TIMER_DELIVER_MS`` in the past, a zero
delay) is delivered at once, as the broker delivers it. The broker rounds timer due
times down to its 1 s precision; the store fires to the millisecond, so nothing is
rounded here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["DELAY_PROPERTIES", "DelayError", "due_time"]

#: The properties that make a send delayed, in the order they are read.
DELAY_PROPERTIES = (
    "DELAY", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS", "__STARTDELIVERTIME")


class DelayError(ValueError):
    """The delay properties are not usable; the message is the remark for the client."""


def _integer(props: Mapping[str, str], name: str) -> int:
    text = props[name].strip()
    try:
        return int(text)
    except ValueError:
        raise DelayError(
            f"timer message illegal: {name}={props[name]!r} is not an integer") from None


def due_time(
    props: Mapping[str, str], now: int, level_due: Callable[[int, int], int],
    max_delay_ms: int,
) -> int | None:
    """The epoch ms the message is due at, or None when it is not delayed (no delay
    property, a level of 0 or less, or a due time not in the future). ``level_due(level,
    now)`` is the due time of a delay level (``MessageStore.delay_level_due``). Raises
    :class:`DelayError` for an unreadable property or a delay past ``max_delay_ms``."""
    level_text = props.get("DELAY")
    if level_text is not None:
        level = _integer(props, "DELAY")
        if level > 0:
            return level_due(level, now)
    for name, relative, scale in (("TIMER_DELAY_SEC", True, 1000),
                                  ("TIMER_DELAY_MS", True, 1),
                                  ("TIMER_DELIVER_MS", False, 1),
                                  ("__STARTDELIVERTIME", False, 1)):
        if name in props:
            value = _integer(props, name)
            due = now + value * scale if relative else value
            break
    else:
        return None
    if due <= now:
        return None
    if due - now > max_delay_ms:
        raise DelayError(
            f"timer message illegal, the delay time should not be bigger than the max"
            f" delay {max_delay_ms}ms (StoreConfig.max_timer_delay_ms); this one is"
            f" {due - now}ms away")
    return due
