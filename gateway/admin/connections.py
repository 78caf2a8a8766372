"""Connections: ``GET /v1/admin/connections`` (paged, sorted, filtered on the server)
and ``DELETE /v1/admin/connections/{id}``: the socket is closed after what is queued
for it is written (the client sees its connection end and reconnects as after a
network failure; an MQTT client's will is published, its session kept per its
expiry)."""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, Paging, Result, cursor_of

if TYPE_CHECKING:
    from gateway.admin.api import Admin
    from gateway.connection import Connection

SORTS = (
    "id",
    "protocol",
    "listener",
    "peer",
    "client_id",
    "user",
    "bytes_in",
    "bytes_out",
    "messages_in",
    "messages_out",
    "age_seconds",
)


#: How each sort field is read off a connection: its sort key is ``(value, id)``, read
#: by ``operator.attrgetter`` (in C: no Python call per connection). ``age_seconds``
#: sorts by when it opened, descending (youngest first: stable across the pages of one
#: listing); ``protocol`` is None while sniffing ("pending" in a row), so it has its
#: own key.
_KEYS: dict[str, Any] = {
    name: attrgetter(name, "id") for name in SORTS if name not in ("protocol", "age_seconds")
}
_KEYS["protocol"] = lambda c: (c.protocol or "pending", c.id)
_KEYS["age_seconds"] = attrgetter("opened_at", "id")


def _after(paging: Paging) -> tuple[Any, int] | None:
    """The cursor as a key ``(value, id)``, or None; another shape is a 400."""
    cursor = paging.cursor
    if cursor is None:
        return None
    if (
        not isinstance(cursor, list)
        or len(cursor) != 2
        or isinstance(cursor[1], bool)
        or not isinstance(cursor[1], int)
    ):
        raise AdminError(400, "cursor is not one this API gave", field="cursor")
    return (cursor[0], cursor[1])


def select(table: dict[int, Connection], paging: Paging) -> tuple[list[Connection], Any]:
    """The page's connections and the cursor of the next page (None at the end): the
    keys of every connection are made in C (``map`` of an ``attrgetter``), the cursor
    and the selection of ``limit + 1`` (``heapq``) work on the keys, and only the
    page's connections are looked up. O(connections x log limit), no copy of the
    connection objects."""
    descending = paging.descending != (paging.sort == "age_seconds")
    keys: Iterable[tuple[Any, int]] = map(_KEYS[paging.sort], table.values())
    after = _after(paging)
    if after is not None:
        try:
            keys = [k for k in keys if k < after] if descending else [k for k in keys if k > after]
        except TypeError:  # a cursor of another sort
            raise AdminError(400, "cursor is not one this API gave", field="cursor") from None
    chosen = (heapq.nlargest if descending else heapq.nsmallest)(paging.limit + 1, keys)
    more = len(chosen) > paging.limit
    chosen = chosen[: paging.limit]
    return [table[k[1]] for k in chosen], (cursor_of(list(chosen[-1])) if more else None)


def _first_ids(table: dict[int, Connection], paging: Paging) -> tuple[list[Connection], Any]:
    """The default sort (by id): the table is kept in id order (ids count up and a
    connection is added as it is made; a filtered copy keeps the order), so a page is
    a bisection of its keys and a slice."""
    ids = list(table)  # a copy of the int keys (C), no key per connection
    limit = paging.limit
    after = _after(paging)
    if paging.descending:
        end = len(ids) if after is None else bisect_left(ids, after[1])
        chosen = ids[max(0, end - limit - 1) : end][::-1]
    else:
        start = 0 if after is None else bisect_right(ids, after[1])
        chosen = ids[start : start + limit + 1]
    more = len(chosen) > limit
    chosen = chosen[:limit]
    return [table[i] for i in chosen], (cursor_of([chosen[-1], chosen[-1]]) if more else None)


def row(conn: Connection, now: float) -> dict[str, Any]:
    return {
        "id": conn.id,
        "name": str(conn.id),
        "protocol": conn.protocol or "pending",
        "listener": conn.listener,
        "peer": conn.peer,
        "client_id": conn.client_id,
        "user": conn.user,
        "established": conn.is_established,
        "bytes_in": conn.bytes_in,
        "bytes_out": conn.bytes_out,
        "messages_in": conn.messages_in,
        "messages_out": conn.messages_out,
        "age_seconds": round(now - conn.opened_at, 3),
    }


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    state = admin.ctx.state

    async def list_(call: Call) -> dict[str, Any]:
        paging = call.paging(SORTS, "id")
        protocol = call.query.get("protocol")
        now = time.monotonic()
        table = state.connections
        if protocol is not None:
            table = {i: c for i, c in table.items() if c.protocol == protocol}
        wanted = paging.filter
        if wanted:  # the filter matches peer, client id or user as well as the id
            table = {
                i: c
                for i, c in table.items()
                if wanted in str(i) or wanted in c.peer or wanted in c.client_id or wanted in c.user
            }
        if paging.sort == "id":  # any table here keeps the id order
            chosen, after = _first_ids(table, paging)
        else:
            chosen, after = select(table, paging)
        doc = {"items": [row(c, now) for c in chosen], "next": after}
        doc["total"] = len(state.connections)
        return doc

    def _find(call: Call) -> Connection:
        raw = call.params["id"]
        if not raw.isdigit():
            raise AdminError(400, "id must be a connection id (a number)", field="id")
        conn = state.connections.get(int(raw))
        if conn is None:
            raise AdminError(404, f"no connection {raw}", field="id")
        return conn

    async def show(call: Call) -> dict[str, Any]:
        return row(_find(call), time.monotonic())

    async def close(call: Call) -> Result:
        conn = _find(call)
        conn.close(f"closed by {call.caller.user} (admin API)")
        return Result(202, {"id": conn.id, "closing": True})

    return [
        ("GET", "/connections", list_, ""),
        ("GET", "/connections/{id}", show, ""),
        ("DELETE", "/connections/{id}", close, "connection.close"),
    ]
