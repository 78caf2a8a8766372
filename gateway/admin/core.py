"""What an admin handler sees and gives (no HTTP here).

A handler is ``async def handler(call: Call) -> Any``: its answer is a JSON-able
document (status 200; a :class:`Result` for another status). Bad input raises
:class:`AdminError` with the status (400, 404, 409...), a one-line message and the
field at fault, which the door sends as an RFC 9457 problem document with a ``field``
member.

Lists are paged on the server (:func:`page`): ``limit`` (default 100, at most 1000),
``cursor`` (opaque: the sort key of the last row given, so a page is found without
counting the rows before it), ``sort`` (a field, ``-field`` descending) and ``filter``
(a substring of the row's name). A million LMQs are never listed whole.
"""

from __future__ import annotations

import base64
import heapq
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ADMIN_PATHS",
    "PREFIX",
    "AdminError",
    "Call",
    "Caller",
    "DEFAULT_LIMIT",
    "Handler",
    "MAX_LIMIT",
    "Paging",
    "Result",
    "page",
    "sort_key",
]

#: Path prefix of every admin route.
PREFIX = "/v1/admin"
#: The paths the dedicated ``admin_port`` answers (everything else is 404 there): the
#: API, the console, and the health and metrics endpoints.
ADMIN_PATHS = (PREFIX + "/", "/console", "/health", "/metrics")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class AdminError(Exception):
    """A refused call: ``status``, a one-line ``message`` and the ``field`` at fault."""

    def __init__(self, status: int, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: the user (``anonymous`` in open mode), how they logged in (``basic``,
    ``open``, or a kind a credential plug-in names) and from where (host)."""

    user: str
    kind: str
    peer: str


@dataclass(slots=True)
class Call:
    """One call: path parameters, query parameters (first values), the JSON body (a
    dict; ``{}`` when empty) and the caller."""

    caller: Caller
    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)

    # -- typed access, each refusal naming its field --------------------------------

    def text(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        """Body field ``name`` as a string."""
        value = self.body.get(name, default)
        if value is None:
            if required:
                raise AdminError(400, f"{name} is required", field=name)
            return None
        if not isinstance(value, str):
            raise AdminError(400, f"{name} must be a string", field=name)
        return value

    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        low: int | None = None,
        high: int | None = None,
        required: bool = False,
    ) -> int | None:
        """Body field ``name`` as an integer within ``[low, high]``."""
        value = self.body.get(name, default)
        if value is None:
            if required:
                raise AdminError(400, f"{name} is required", field=name)
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise AdminError(400, f"{name} must be an integer", field=name)
        if (low is not None and value < low) or (high is not None and value > high):
            raise AdminError(400, f"{name} must be between {low} and {high}", field=name)
        return value

    def query_integer(
        self, name: str, default: int, *, low: int = 0, high: int | None = None
    ) -> int:
        """Query parameter ``name`` as an integer within ``[low, high]`` (no upper bound
        when ``high`` is None); ``default`` when absent."""
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"of {low} or more"
            raise AdminError(400, f"{name} must be an integer {span}", field=name)
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        """Query or body flag ``name`` (``true``/``1`` in a query)."""
        if name in self.body:
            value = self.body[name]
            if not isinstance(value, bool):
                raise AdminError(400, f"{name} must be true or false", field=name)
            return value
        raw = self.query.get(name)
        if raw is None:
            return default
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no", ""):
            return False
        raise AdminError(400, f"{name} must be true or false", field=name)

    def paging(self, sorts: Iterable[str], default_sort: str) -> Paging:
        """``limit``, ``cursor``, ``sort``, ``filter`` of a list call, checked."""
        raw = self.query.get("limit")
        limit = DEFAULT_LIMIT
        if raw is not None:
            if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
                raise AdminError(
                    400, f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit"
                )
            limit = int(raw)
        sort = self.query.get("sort") or default_sort
        allowed = tuple(sorts)
        if sort.lstrip("-") not in allowed:
            raise AdminError(
                400,
                f"sort must be one of {', '.join(allowed)} (- before it: descending)",
                field="sort",
            )
        cursor: Any = None
        token = self.query.get("cursor")
        if token:
            try:
                cursor = json.loads(base64.urlsafe_b64decode(token.encode() + b"=="))
            except (ValueError, UnicodeDecodeError):
                raise AdminError(400, "cursor is not one this API gave", field="cursor") from None
        return Paging(
            limit, sort.lstrip("-"), sort.startswith("-"), cursor, self.query.get("filter") or ""
        )


@dataclass(frozen=True, slots=True)
class Paging:
    limit: int
    sort: str
    descending: bool
    #: ``[sort value, name]`` of the last row of the previous page, or None.
    cursor: Any
    filter: str


@dataclass(frozen=True, slots=True)
class Result:
    """An answer with another status than 200 (201 created, 202 accepted)."""

    status: int
    doc: Any


Handler = Callable[[Call], Awaitable[Any]]


def page(
    rows: Iterable[Any],
    paging: Paging,
    *,
    name: str = "name",
    key: Callable[[Any], tuple[Any, ...]] | None = None,
    render: Callable[[Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One page of ``rows`` as ``{"items": [...], "next": cursor or null}``: filtered by
    ``paging.filter`` on the name, in the order of ``paging.sort`` then the name, after
    ``paging.cursor``. For rows already in memory (connections, topics, groups, users);
    the LMQ listing pages in the store.

    Rows are dicts with a unique ``name`` key; or any objects with ``key`` (their sort
    tuple, unique) and ``render`` (the dict of a row on the page), so that only the
    page's rows are made. A page is a partial selection (``heapq``), not a sort of every
    row: O(rows x log limit)."""
    key_of = key or _key(paging.sort, name)
    wanted = paging.filter
    selected: Iterable[Any] = rows
    if wanted:
        selected = (r for r in selected if wanted in str(r.get(name, "")))
    if paging.cursor is not None:
        after = _tupled(paging.cursor)
        if paging.descending:
            selected = (r for r in selected if key_of(r) < after)
        else:
            selected = (r for r in selected if key_of(r) > after)
    pick = heapq.nlargest if paging.descending else heapq.nsmallest
    chosen = pick(paging.limit + 1, selected, key=key_of)
    more = len(chosen) > paging.limit
    chosen = chosen[: paging.limit]
    items = [render(r) for r in chosen] if render is not None else chosen
    return {"items": items, "next": cursor_of(list(key_of(chosen[-1]))) if more else None}


def _tupled(value: Any) -> Any:
    """A cursor read back from JSON: lists (of lists) as tuples, to compare with keys."""
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def cursor_of(value: Any) -> str:
    """The opaque cursor for a position (JSON, base64url, unpadded)."""
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def sort_key(value: Any, name: str) -> tuple[Any, ...]:
    """The key a row with ``value`` in the sorted field and ``name`` pages on
    (:func:`page`): numbers before strings, each in order, then the name."""
    if value is None:
        value = ""  # missing values sort first, with strings
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value, name)
    return (1, str(value), name)


def _key(sort: str, name: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return sort_key(row.get(sort), str(row.get(name, "")))

    return key
