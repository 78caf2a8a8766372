"""MQTT sessions: ``GET /v1/admin/mqtt/sessions`` (paged, sorted, filtered on the server;
online and offline, with their subscriptions; the backlog of the page's sessions:
messages stored for their own subscriptions after their committed offsets) and
``DELETE /v1/admin/mqtt/sessions/{client_id}`` (kick: the connection closed, its will
published as on a lost connection, the session's subscriptions, offsets and state
dropped, as EMQX's "kick out" and a clean start do)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, Result, page

if TYPE_CHECKING:
    from gateway.admin.api import Admin
    from gateway.frontend import FrontEnd

SORTS = ("client_id", "connected", "user", "expiry_seconds", "offline_seconds", "inflight")


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx

    def _mqtt() -> FrontEnd:
        front = ctx.introspection.front_end("mqtt")
        if front is None:
            raise AdminError(404, "this gateway serves no MQTT")
        return front

    async def list_(call: Call) -> dict[str, Any]:
        front = _mqtt()
        paging = call.paging(SORTS, "client_id")
        rows = front.session_rows() or []
        connected = call.query.get("connected")
        if connected is not None:
            wanted = connected.lower() in ("1", "true", "yes")
            rows = [r for r in rows if r["connected"] is wanted]
        doc = page(rows, paging)
        doc["total"] = len(rows)

        wanted_lmqs = {r["client_id"]: front.subscription_lmqs(r["client_id"])
                       for r in doc["items"]}

        def backlogs() -> None:  # the page's sessions only: store reads, in a thread
            store = ctx.store
            for row in doc["items"]:
                found = wanted_lmqs[row["client_id"]]
                if found is None:
                    row["backlog"] = None
                    continue
                group, lmqs = found
                total = 0
                for lmq in lmqs:
                    info = store.lmq(lmq)
                    committed = store.get_offset(group, lmq)
                    if info is not None and committed is not None:
                        total += max(0, info.max_offset - committed)
                row["backlog"] = total

        await asyncio.to_thread(backlogs)
        return doc

    async def kick(call: Call) -> Result:
        client_id = call.params["client_id"]
        if not _mqtt().kick_session(client_id, call.caller.user):
            raise AdminError(404, f"no MQTT session {client_id!r}", field="client_id")
        return Result(202, {"client_id": client_id, "kicked": True})

    return [
        ("GET", "/mqtt/sessions", list_, ""),
        ("DELETE", "/mqtt/sessions/{client_id}", kick, "mqtt_session.kick"),
    ]
