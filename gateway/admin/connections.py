"""Connections: ``GET /v1/admin/connections`` (paged, sorted, filtered on the server)
and ``DELETE /v1/admin/connections/{id}``: the socket is closed after what is queued
for it is written (the client sees its connection end and reconnects as after a
network failure; an MQTT client's will is published, its session kept per its
expiry)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, Result, page

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
    "age_seconds",
)


#: How each sort field is read off a connection (numbers first, then text, by id).
_FIELDS: dict[str, Any] = {
    "id": lambda c, now: c.id,
    "protocol": lambda c, now: c.protocol or "pending",
    "listener": lambda c, now: c.listener,
    "peer": lambda c, now: c.peer,
    "client_id": lambda c, now: c.client_id,
    "user": lambda c, now: c.user,
    "bytes_in": lambda c, now: c.bytes_in,
    "bytes_out": lambda c, now: c.bytes_out,
    # by when it opened (stable across the pages of one listing), youngest first
    "age_seconds": lambda c, now: -c.opened_at,
}


def _sort_key(sort: str, now: float) -> Any:
    read = _FIELDS[sort]

    def key(conn: Connection) -> tuple[Any, ...]:
        value = read(conn, now)
        if isinstance(value, int | float):
            return (0, value, conn.id)
        return (1, value, conn.id)

    return key


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
        "age_seconds": round(now - conn.opened_at, 3),
    }


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    state = admin.ctx.state

    async def list_(call: Call) -> dict[str, Any]:
        paging = call.paging(SORTS, "id")
        protocol = call.query.get("protocol")
        now = time.monotonic()
        conns: Any = state.connections.values()
        if protocol is not None:
            conns = (c for c in conns if c.protocol == protocol)
        wanted = paging.filter
        if wanted:  # the filter matches peer, client id or user as well as the id
            conns = (
                c
                for c in conns
                if wanted in str(c.id)
                or wanted in c.peer
                or wanted in c.client_id
                or wanted in c.user
            )
            paging = replace(paging, filter="")
        doc = page(conns, paging, key=_sort_key(paging.sort, now), render=lambda c: row(c, now))
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
