"""The ``x-delayed-message`` exchange type, as RabbitMQ's delayed-message plugin has it.

``exchange.declare`` with type ``x-delayed-message`` and the argument ``x-delayed-type``
(``direct``, ``fanout``, ``topic`` or ``headers``): the exchange binds and routes as
that type. A message published to it with an ``x-delay`` header of ``d`` ms, ``0 < d <=
2**32 - 1`` (the plugin's range: an Erlang timer's), is delivered ``d`` ms later; any
other value, a missing header or a header of a type the plugin does not read is "no
delay", routed at once (an integer of any width; a string of digits or a float/decimal
is converted, as the plugin does).

Unlike the plugin (one Mnesia table on one node, every pending message in it, no
mandatory flag), the message is the store's durable timer: one record written at
publish, a RocksDB index entry, dispatched when due; the publisher confirm comes once
the record is durable; millions may be pending. The routes are those at publish time
(the plugin routes when the delay ends): see docs/amqp.md. A delay past the store's
``max_timer_delay_ms`` (40 days by default, the plugin allows 49.7) is refused: nacked
under publisher confirms, dropped with a log line otherwise.

Pure functions; no I/O.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from protocol.amqp.errors import (
    COMMAND_INVALID,
    PRECONDITION_FAILED,
    ChannelError,
    ConnectionLevelError,
)

TYPE = "x-delayed-message"
ROUTING_TYPES = ("direct", "fanout", "topic", "headers")
#: The plugin's largest delay (Erlang's largest timer), in ms.
MAX_DELAY_MS = 2**32 - 1
#: A delay given as a string: what Erlang's binary_to_integer reads.
_INTEGER = re.compile(r"[+-]?[0-9]+")


def delayed_type(arguments: dict[str, Any]) -> str:
    """The routing type of an ``x-delayed-message`` exchange from its declare arguments;
    the plugin's errors otherwise: 406 for a missing or non-string ``x-delayed-type``,
    503 (connection) for an unknown exchange type."""
    value = arguments.get("x-delayed-type")
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str) or value == TYPE:
        raise ChannelError(
            PRECONDITION_FAILED,
            "Invalid argument, 'x-delayed-type' must be an existing exchange type")
    if value not in ROUTING_TYPES:
        raise ConnectionLevelError(COMMAND_INVALID, f"unknown exchange type '{value}'")
    return value


def delay_ms(headers: dict[str, Any] | None) -> int:
    """The ``x-delay`` of a message's headers in ms; 0 = no delay (absent, not positive,
    past the plugin's maximum, or of a type the plugin ignores)."""
    if not headers:
        return 0
    value = headers.get("x-delay")
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, bytes | bytearray | str):
        text = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
        if _INTEGER.fullmatch(text) is None:  # (int() would take "1_0", " 5", "٥")
            return 0
        value = int(text)
    elif isinstance(value, float | Decimal):
        try:
            value = int(value)  # truncated, as the plugin's trunc/1
        except (ValueError, OverflowError):
            return 0
    if not isinstance(value, int) or not 0 < value <= MAX_DELAY_MS:
        return 0
    return value


__all__ = ["MAX_DELAY_MS", "ROUTING_TYPES", "TYPE", "delay_ms", "delayed_type"]
