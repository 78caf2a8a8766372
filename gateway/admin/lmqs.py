"""LMQs: ``GET /v1/admin/lmqs`` pages the store's LMQ index in name order (a million
LMQs are never read whole: a page reads ``limit`` entries after the cursor, and a
``filter`` reads at most :data:`SCAN_LIMIT` names for one page), ``GET
/v1/admin/lmqs/{lmq}`` shows one with its consumers, ``PUT
/v1/admin/lmqs/{lmq}/offsets/{group}`` sets a consumer's next offset on it (``lmq
offsets set``'s rules: :func:`set_offset`), ``POST /v1/admin/lmqs/clean`` removes idle
ones by ``lmq topics clean``'s rules, with ``dry_run``."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from broker_core import LmqInfo, MessageStore
from gateway.admin.core import AdminError, Call, cursor_of

if TYPE_CHECKING:
    from gateway.admin.api import Admin

#: Names read at most for one page of a filtered listing (the next cursor continues; a
#: page may then hold fewer rows than asked, or none). 25,000 names are read in about
#: 20 ms (bench/admin_scale.py): the page answers within the list calls' budget.
SCAN_LIMIT = 25_000
#: LMQs a clean names in its answer at most.
NAMES_SHOWN = 10_000


class OffsetError(ValueError):
    """A refused offset change: its one-line message and the ``field`` at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def set_offset(
    store: MessageStore, group: str, lmq: str, offset: int | None, position: str | None
) -> tuple[int | None, int]:
    """Set ``group``'s next offset on ``lmq`` to ``offset``, or to its ``position``
    (``earliest``: the lowest held offset; ``latest``: the next one, skipping every
    message); exactly one of the two. Committed to the store before the return;
    ``(old offset or None, new offset)``. What ``lmq offsets set`` does offline and
    the admin API online. A consumer that keeps its position in memory (a connected
    MQTT session, a RocketMQ 4 remoting consumer) commits its own over it: set the
    offsets of a group that is not consuming."""
    if (offset is None) == (position is None) or position not in (None, "earliest", "latest"):
        raise OffsetError("give an offset, or position earliest or latest", "position")
    info = store.lmq(lmq)
    if info is None:
        raise OffsetError(f"no LMQ named {lmq!r}", "lmq")
    target = (
        offset
        if offset is not None
        else info.min_offset
        if position == "earliest"
        else info.max_offset
    )
    if target > info.max_offset:
        raise OffsetError(
            f"offset {target} is past the end of {lmq!r} (next offset {info.max_offset})",
            "offset",
        )
    old = store.get_offset(group, lmq)
    store.commit_offset(group, lmq, target)
    return old, target


def info_row(info: LmqInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "min_offset": info.min_offset,
        "max_offset": info.max_offset,
        "messages": info.messages,
        "bytes": info.bytes,
        "created_ms": info.created_ms,
        "last_write_ms": info.last_write_ms,
        "touched_ms": info.touched_ms,
    }


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    store = admin.ctx.store

    def _page(prefix: str, after: str, wanted: str, limit: int) -> dict[str, Any]:
        if wanted:
            return _filtered(prefix, after, wanted, limit)
        items: list[dict[str, Any]] = []
        next_after: str | None = None
        for info in store.lmqs(prefix, after=after):
            if len(items) == limit:  # one more: there is a next page
                next_after = items[-1]["name"]
                break
            items.append(info_row(info))
        return _with_consumers(items, next_after, len(items) + (next_after is not None))

    def _filtered(prefix: str, after: str, wanted: str, limit: int) -> dict[str, Any]:
        """A page of the names containing ``wanted``: the names alone are scanned (no
        metadata read per LMQ), at most SCAN_LIMIT of them; the matches are read."""
        names: list[str] = []
        scanned = 0
        next_after: str | None = None
        for name in store.lmq_names(prefix, after=after):
            scanned += 1
            if wanted in name:
                if len(names) == limit:  # one more: there is a next page
                    next_after = names[-1]
                    break
                names.append(name)
            if scanned >= SCAN_LIMIT:  # a filter that matches little: go on from here
                next_after = name
                break
        infos = (store.lmq(name) for name in names)
        items = [info_row(info) for info in infos if info is not None]  # (removed since)
        return _with_consumers(items, next_after, scanned)

    def _with_consumers(
        items: list[dict[str, Any]], next_after: str | None, scanned: int
    ) -> dict[str, Any]:
        for item in items:  # the page's rows only: one index lookup each
            item["consumers"] = sum(1 for _ in store.offsets(item["name"]))
        return {
            "items": items,
            "next": cursor_of([next_after]) if next_after is not None else None,
            "scanned": scanned,
        }

    async def list_(call: Call) -> dict[str, Any]:
        paging = call.paging(("name",), "name")
        if paging.descending:
            raise AdminError(400, "LMQs are listed in name order only", field="sort")
        after = ""
        if paging.cursor is not None:
            if not (
                isinstance(paging.cursor, list)
                and paging.cursor
                and isinstance(paging.cursor[-1], str)
            ):
                raise AdminError(400, "cursor is not one this API gave", field="cursor")
            after = paging.cursor[-1]
        prefix = call.query.get("prefix", "")
        return await asyncio.to_thread(_page, prefix, after, paging.filter, paging.limit)

    async def show(call: Call) -> dict[str, Any]:
        name = call.params["lmq"]
        info = store.lmq(name)
        if info is None:
            raise AdminError(404, f"no LMQ named {name!r}", field="lmq")
        doc = info_row(info)
        doc["consumers"] = [
            {"group": group, "offset": offset, "lag": max(0, info.max_offset - offset)}
            for _, group, offset in store.offsets(name)
        ]
        return doc

    async def put_offset(call: Call) -> dict[str, Any]:
        lmq, group = call.params["lmq"], call.params["group"]
        if not group:
            raise AdminError(400, "group must not be empty", field="group")
        offset = call.integer("offset", low=0)
        position = call.text("position")
        try:
            old, new = set_offset(store, group, lmq, offset, position)
        except OffsetError as exc:
            status = 404 if exc.field == "lmq" else 400
            raise AdminError(status, str(exc), field=exc.field) from None
        return {"group": group, "lmq": lmq, "old_offset": old, "offset": new}

    async def clean(call: Call) -> dict[str, Any]:
        prefix = call.text("prefix", "") or ""
        idle_ms = call.integer("idle_ms", low=0)
        dry_run = call.flag("dry_run")
        if not prefix and idle_ms is None:
            raise AdminError(
                400, "give prefix and/or idle_ms (refusing to remove all)", field="prefix"
            )

        def select() -> list[LmqInfo]:
            now = int(time.time() * 1000)
            return [
                i
                for i in store.lmqs(prefix)
                if idle_ms is None
                or max(i.last_write_ms, i.touched_ms, i.created_ms) < now - idle_ms
            ]

        doomed = await asyncio.to_thread(select)
        doc: dict[str, Any] = {
            "dry_run": dry_run,
            "lmqs": len(doomed),
            "messages": sum(i.messages for i in doomed),
            "bytes": sum(i.bytes for i in doomed),
            # the first NAMES_SHOWN, with their depth (a dry run's list)
            "items": [{"name": i.name, "messages": i.messages} for i in doomed[:NAMES_SHOWN]],
        }
        if not dry_run and doomed:
            report = await asyncio.to_thread(store.remove_lmqs, [i.name for i in doomed])
            doc["removed"] = {
                "lmqs": report.lmqs,
                "messages": report.entries,
                "bytes": report.bytes,
                "offsets": report.offsets,
            }
        return doc

    return [
        ("GET", "/lmqs", list_, ""),
        ("GET", "/lmqs/{lmq}", show, ""),
        ("PUT", "/lmqs/{lmq}/offsets/{group}", put_offset, "offset.set"),
        ("POST", "/lmqs/clean", clean, "lmq.clean"),
    ]
