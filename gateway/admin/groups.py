"""RocketMQ consumer groups: list with lag (paged), show (per-queue offsets, lag, blocked
FIFO message groups, messages in flight), the messages in flight on one queue (read
from the store's pop state, never changing it), reset offsets (earliest, latest or a time),
delete.

A reset commits the group's next offset on every queue of the topic in the store
before the answer; consumers that pop (RocketMQ 5 gRPC consumers, the HTTP JSON API,
the Aliyun HTTP API) read it on their next receive. A RocketMQ 4 remoting consumer
keeps its own offsets and commits them back: stop it (or its group) before a reset,
as with RocketMQ's ``mqadmin resetOffsetByTime`` on clients too old for the push."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.admin.core import MAX_LIMIT, AdminError, Call, page
from gateway.rocketmq.groups import (
    add_lag,
    blocked_row,
    group_progress,
    group_summaries,
    in_flight_rows,
    release_message_group,
)
from gateway.rocketmq.offsets import reset_targets
from lmq.rocketmq import InvalidName, validate_group

if TYPE_CHECKING:
    from gateway.admin.api import Admin

SORTS = ("name", "lag", "queues")


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx
    store = ctx.store
    registry = ctx.rocketmq_groups

    async def list_(call: Call) -> dict[str, Any]:
        paging = call.paging(SORTS, "name")
        # the lag (an LMQ read per queue) of every group when sorted by it, else of the
        # page's groups only
        by_lag = paging.sort == "lag"
        progress = await asyncio.to_thread(group_progress, store, lag=by_lag)
        rows = [{"name": row.pop("group"), **row}
                for row in group_summaries(registry, progress)]
        doc = page(rows, paging)
        if not by_lag:
            queues = [q for item in doc["items"] for q in progress.get(item["name"], [])]
            await asyncio.to_thread(add_lag, store, queues)
            for item in doc["items"]:
                item["lag"] = sum(q["lag"] for q in progress.get(item["name"], []))
        doc["total"] = len(rows)
        return doc

    def _name(call: Call) -> str:
        name = call.params["group"]
        try:
            validate_group(name)
        except InvalidName as exc:
            raise AdminError(400, str(exc), field="group") from None
        return name

    async def show(call: Call) -> dict[str, Any]:
        name = _name(call)
        config = registry.get(name)

        def read() -> tuple[list[dict[str, Any]], int, list[Any]]:
            """Offsets, in-flight counts (each a scan of the pop state) and blocked FIFO
            groups: in a worker thread, off the event loop."""
            rows = group_progress(store, name).get(name, [])
            for row in rows:
                row["in_flight"] = store.pop.inflight_count(name, row["lmq"])
            return rows, store.pop.inflight_count(name), store.pop.blocked_groups(name)

        queues, in_flight, blocked_groups = await asyncio.to_thread(read)
        if config is None and not queues:
            raise AdminError(404, f"no consumer group named {name!r}", field="group")
        blocked = [blocked_row(b) for b in blocked_groups]
        return {
            "name": name,
            "config": None
            if config is None
            else {
                "retry_max_times": config.retry_max_times,
                "consume_enable": config.consume_enable,
                "consume_from_min_enable": config.consume_from_min_enable,
            },
            "queues": queues,
            "lag": sum(r["lag"] for r in queues),
            "in_flight": in_flight,
            "blocked_message_groups": blocked,
        }

    async def inflight(call: Call) -> dict[str, Any]:
        """The group's messages in flight (popped, not acked) on one LMQ, by offset,
        paged: ``limit`` of them after offset ``after``."""
        name = _name(call)
        lmq = call.query.get("lmq")
        if not lmq:
            raise AdminError(
                400, "lmq is required (a queue's LMQ, as the group lists it)", field="lmq"
            )
        limit = call.query_integer("limit", 100, low=1, high=MAX_LIMIT)
        after = call.query_integer("after", -1, low=-1)
        if store.lmq(lmq) is None:
            raise AdminError(404, f"no LMQ named {lmq!r}", field="lmq")

        def read() -> tuple[list[dict[str, Any]], bool, bool]:
            rows, more = in_flight_rows(store, name, lmq, after, limit)
            return rows, more, bool(rows) or store.get_offset(name, lmq) is not None

        rows, more, known = await asyncio.to_thread(read)
        if not known and registry.get(name) is None:
            raise AdminError(404, f"no consumer group named {name!r}", field="group")
        return {
            "group": name,
            "lmq": lmq,
            "items": rows,
            "next": rows[-1]["offset"] if more else None,
        }

    async def reset(call: Call) -> dict[str, Any]:
        name = _name(call)
        topic = call.text("topic", required=True)
        assert topic is not None
        config = ctx.rocketmq_topics.get(topic)
        if config is None:
            raise AdminError(404, f"no RocketMQ topic named {topic!r}", field="topic")
        position = call.text("position")
        stamp = call.integer("timestamp_ms", low=0)
        if (position is None) == (stamp is None) or position not in (None, "earliest", "latest"):
            raise AdminError(
                400, "give position (earliest or latest) or timestamp_ms", field="position"
            )

        offsets = await asyncio.to_thread(reset_targets, store, config, position, stamp)
        old = {lmq: store.get_offset(name, lmq) for lmq in offsets}
        if offsets:
            store.commit_offsets(name, offsets)
        return {
            "group": name,
            "topic": topic,
            "queues": [
                {"queue_id": int(lmq.rsplit(":", 1)[1]), "old_offset": old[lmq], "offset": offset}
                for lmq, offset in offsets.items()
            ],
        }

    async def delete(call: Call) -> dict[str, Any]:
        name = _name(call)
        keep_offsets = call.flag("keep_offsets")
        queues = (await asyncio.to_thread(group_progress, store, name)).get(name, [])
        existed = registry.delete(name)
        if not existed and not queues:
            raise AdminError(404, f"no consumer group named {name!r}", field="group")
        if queues and not keep_offsets:
            store.delete_offsets(name, [r["lmq"] for r in queues])
        return {
            "name": name,
            "deleted": True,
            "offsets_removed": 0 if keep_offsets else len(queues),
        }

    async def release(call: Call) -> dict[str, Any]:
        name = _name(call)
        topic = call.text("topic", required=True)
        message_group = call.text("message_group", required=True)
        assert topic is not None and message_group is not None
        released = release_message_group(
            store, ctx.rocketmq_topics.ensure, name, topic, message_group
        )
        if released is None:
            raise AdminError(
                404,
                f"message group {message_group!r} of {name!r} has no message out on {topic}",
                field="message_group",
            )
        return {"group": name, "topic": topic, "message_group": message_group, **released._asdict()}

    return [
        ("GET", "/groups", list_, ""),
        ("POST", "/groups/{group}/release", release, "group.release"),
        ("GET", "/groups/{group}", show, ""),
        ("GET", "/groups/{group}/inflight", inflight, ""),
        ("POST", "/groups/{group}/reset", reset, "group.reset"),
        ("DELETE", "/groups/{group}", delete, "group.delete"),
    ]
