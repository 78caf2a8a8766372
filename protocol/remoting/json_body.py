"""JSON helpers for the bodies: fastjson-tolerant reading, typed field access.

:func:`loads_lenient` is ``json.loads`` that also accepts fastjson's unquoted numeric
object keys (``{0:"ip:port"}`` in route data). The ``get_*`` accessors read a field the
way fastjson fills a Java field: missing or null gives the default, numbers may arrive
as strings; anything else wrong is a :class:`BodyError`.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import BodyError


def loads_lenient(data: bytes | str) -> Any:
    """``json.loads`` that also accepts fastjson's unquoted numeric object keys."""
    try:
        text = data.decode() if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise BodyError(f"JSON body is not UTF-8: {exc.reason}") from None
    try:
        return json.loads(_quote_numeric_keys(text))
    except (ValueError, RecursionError) as exc:
        raise BodyError(f"bad JSON body: {exc}") from None


_DIGITS = frozenset("0123456789")


def _quote_numeric_keys(text: str) -> str:
    # One pass, tracking strings and the container stack: a number right after '{' or
    # ',' inside an object is a key and gets quotes; numbers in arrays are left alone.
    if "{" not in text:
        return text
    out: list[str] = []
    stack: list[str] = []
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif expect_key and (c in _DIGITS or c == "-"):
            j = i + 1
            while j < n and text[j] in _DIGITS:
                j += 1
            if text[i:j] != "-":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
            expect_key = False
        elif not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def load_object(data: bytes | str, what: str) -> dict[str, Any]:
    obj = loads_lenient(data)
    if not isinstance(obj, dict):
        raise BodyError(f"{what} body is not a JSON object")
    return obj


def get_str(obj: dict[str, Any], key: str, default: str | None = None) -> Any:
    value = obj.get(key, default)
    if value is not None and not isinstance(value, str):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise BodyError(f"body field {key}: not a string")
    return value


def get_int(obj: dict[str, Any], key: str, default: int = 0) -> int:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        raise BodyError(f"body field {key}: not an int")
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise BodyError(f"body field {key}: not an int") from None
    if not isinstance(value, int):
        raise BodyError(f"body field {key}: not an int")
    return value


def get_bool(obj: dict[str, Any], key: str, default: bool = False) -> bool:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, str):
        return value.lower() == "true"
    if not isinstance(value, (bool, int)):
        raise BodyError(f"body field {key}: not a boolean")
    return bool(value)


def get_list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"body field {key}: not a list")
    return value


def get_objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = get_list(obj, key)
    for item in items:
        if not isinstance(item, dict):
            raise BodyError(f"body field {key}: an element is not an object")
    return items


def dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
