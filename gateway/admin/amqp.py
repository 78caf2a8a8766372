"""AMQP: ``GET /v1/admin/amqp/queues`` (paged, sorted, filtered; depth, unacked and
consumers; the depth of the page's queues only), ``GET /v1/admin/amqp/exchanges`` (with
their bindings), ``DELETE /v1/admin/amqp/vhosts/{vhost}/queues/{queue}/messages``
(purge: the ready messages, as queue.purge) and ``DELETE
/v1/admin/amqp/vhosts/{vhost}/queues/{queue}`` (as queue.delete: its consumers
cancelled, its bindings and messages dropped)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, page

if TYPE_CHECKING:
    from gateway.admin.api import Admin
    from gateway.frontend import FrontEnd

QUEUE_SORTS = ("id", "vhost", "name", "consumers", "messages_unacked")
EXCHANGE_SORTS = ("id", "vhost", "name", "type")


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx

    def _amqp() -> FrontEnd:
        front = ctx.introspection.front_end("amqp")
        if front is None:
            raise AdminError(404, "this gateway serves no AMQP")
        return front

    def _rows(rows: list[dict[str, Any]], call: Call) -> list[dict[str, Any]]:
        vhost = call.query.get("vhost")
        return rows if vhost is None else [r for r in rows if r["vhost"] == vhost]

    async def queues(call: Call) -> dict[str, Any]:
        front = _amqp()
        rows = _rows(front.queue_rows() or [], call)
        doc = page(rows, call.paging(QUEUE_SORTS, "id"), name="id")
        for row in doc["items"]:
            row["messages_ready"] = front.queue_depth(row["vhost"], row["name"])
        doc["total"] = len(rows)
        return doc

    async def exchanges(call: Call) -> dict[str, Any]:
        rows = _rows(_amqp().exchange_rows() or [], call)
        doc = page(rows, call.paging(EXCHANGE_SORTS, "id"), name="id")
        doc["total"] = len(rows)
        return doc

    def _missing(call: Call) -> AdminError:
        vhost, queue = call.params["vhost"], call.params["queue"]
        return AdminError(404, f"no queue {queue!r} in vhost {vhost!r}", field="queue")

    async def purge(call: Call) -> dict[str, Any]:
        count = _amqp().purge_queue(call.params["vhost"], call.params["queue"])
        if count is None:
            raise _missing(call)
        return {"vhost": call.params["vhost"], "queue": call.params["queue"], "purged": count}

    async def delete(call: Call) -> dict[str, Any]:
        count = _amqp().delete_queue(call.params["vhost"], call.params["queue"])
        if count is None:
            raise _missing(call)
        return {
            "vhost": call.params["vhost"],
            "queue": call.params["queue"],
            "deleted": True,
            "messages": count,
        }

    base = "/amqp/vhosts/{vhost}/queues/{queue}"
    return [
        ("GET", "/amqp/queues", queues, ""),
        ("GET", "/amqp/exchanges", exchanges, ""),
        ("DELETE", base + "/messages", purge, "amqp_queue.purge"),
        ("DELETE", base, delete, "amqp_queue.delete"),
    ]
