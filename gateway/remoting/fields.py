"""Reading request header fields (``extFields``) the way RocketMQ's clients send them.

Java clients send every value as a string; ali-ons sends numbers and booleans as JSON
numbers and booleans (``"queueId":0``, ``"k":false``). These helpers accept both and
raise :class:`~gateway.remoting.dispatch.RequestError` with ``INVALID_PARAMETER`` (as
RocketMQ's ``decodeCommandCustomHeader`` fails on a missing ``@CFNotNull`` field) for
a required field that is missing or unreadable.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gateway.remoting.replies import RequestError
from protocol.remoting.codes import ResponseCode

if TYPE_CHECKING:
    from protocol.remoting import RemotingCommand

_MISSING = object()


def _raw(cmd: RemotingCommand, name: str) -> Any:
    fields = cmd.ext_fields
    if not fields:
        return _MISSING
    value = fields.get(name, _MISSING)
    return _MISSING if value is None else value


def get_str(cmd: RemotingCommand, name: str, default: str | None = None) -> str:
    value = _raw(cmd, name)
    if value is _MISSING:
        if default is None:
            raise RequestError(
                ResponseCode.INVALID_PARAMETER, f"the request header has no {name!r} field")
        return default
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def get_int(cmd: RemotingCommand, name: str, default: int | None = None) -> int:
    value = _raw(cmd, name)
    if value is _MISSING or value == "":
        if default is None:
            raise RequestError(
                ResponseCode.INVALID_PARAMETER, f"the request header has no {name!r} field")
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise RequestError(
            ResponseCode.INVALID_PARAMETER,
            f"the request header field {name!r} is not an integer: {value!r}") from None


def get_bool(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    value = _raw(cmd, name)
    if value is _MISSING:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() == "true"


def json_body(cmd: RemotingCommand) -> Any:
    """The request body as JSON (RocketMQ bodies are fastjson: tolerate its unquoted
    numeric keys by failing clearly rather than guessing)."""
    if not cmd.body:
        raise RequestError(ResponseCode.INVALID_PARAMETER, "the request has no body")
    try:
        return json.loads(cmd.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(
            ResponseCode.INVALID_PARAMETER, f"the request body is not JSON: {exc}") from None
