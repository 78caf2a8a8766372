"""SASL responses of Connection.StartOk: PLAIN and AMQPLAIN, to (username, password).

- PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``; pika and aiormq send
  ``"\\x00user\\x00pass"``. The authorization identity is ignored, as RabbitMQ does.
- AMQPLAIN (RabbitMQ, py-amqp, kombu): a field table with ``LOGIN`` and ``PASSWORD``
  *without* the table's 4-octet length prefix.

pamqp decodes the longstr ``response`` to ``str`` when it is valid UTF-8 and leaves
it ``bytes`` otherwise; both are accepted. A malformed response is a 403.
"""

from __future__ import annotations

import struct

from pamqp import decode

from .errors import ACCESS_REFUSED, ConnectionLevelError

MECHANISMS = ("PLAIN", "AMQPLAIN")


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def parse_response(mechanism: str, response: str | bytes) -> tuple[str, str]:
    """(username, password) from a StartOk response; ConnectionLevelError(403) if bad."""
    raw = response.encode("utf-8", "surrogateescape") if isinstance(response, str) else response
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise ConnectionLevelError(ACCESS_REFUSED, "malformed PLAIN response")
        return _text(parts[1]), _text(parts[2])
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
        except (ValueError, struct.error, IndexError, RecursionError) as exc:
            raise ConnectionLevelError(ACCESS_REFUSED, "malformed AMQPLAIN response") from exc
        if "LOGIN" not in table or "PASSWORD" not in table:
            raise ConnectionLevelError(ACCESS_REFUSED, "AMQPLAIN response lacks LOGIN/PASSWORD")
        return _text(table["LOGIN"]), _text(table["PASSWORD"])
    raise ConnectionLevelError(
        ACCESS_REFUSED, f"unsupported authentication mechanism {mechanism!r}")
