"""Messages, read-only: find by id (``offsetMsgId`` or ``UNIQ_KEY``) or by key, and peek
an LMQ (a RocketMQ queue is ``rmq:<topic>:<queue>``; an MQTT topic ``mqtt:<topic>``)
from an offset. Nothing is consumed: no offset is committed, nothing is popped."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call
from gateway.rocketmq.lookup import find_message, record_dict

if TYPE_CHECKING:
    from gateway.admin.api import Admin

#: Messages a peek or a find returns at most.
MAX_MESSAGES = 100


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx
    store = ctx.store

    async def by_id(call: Call) -> dict[str, Any]:
        msgid = call.params["msgid"]
        topic = call.query.get("topic")
        topics = [topic] if topic else ctx.rocketmq_topics.names()
        found = await asyncio.to_thread(find_message, store, msgid, topics)
        if not found:
            raise AdminError(
                404, f"no message with offsetMsgId or UNIQ_KEY {msgid!r}", field="msgid"
            )
        return {"items": found}

    async def by_key(call: Call) -> dict[str, Any]:
        topic, key = call.query.get("topic"), call.query.get("key")
        if not topic:
            raise AdminError(400, "topic is required", field="topic")
        if not key:
            raise AdminError(400, "key is required", field="key")
        limit = call.query_integer("limit", 64, low=1, high=MAX_MESSAGES)
        records = await asyncio.to_thread(store.find_by_key, topic, key, limit)
        return {"items": [record_dict(r, "key") for r in records]}

    async def peek(call: Call) -> dict[str, Any]:
        name = call.params["lmq"]
        info = store.lmq(name)
        if info is None:
            raise AdminError(404, f"no LMQ named {name!r}", field="lmq")
        offset = call.query_integer("offset", info.min_offset)
        limit = call.query_integer("limit", 20, low=1, high=MAX_MESSAGES)
        result = await asyncio.to_thread(store.pull, name, max(offset, info.min_offset), limit)
        items = []
        for message in result.messages:
            doc = record_dict(message.record, "peek")
            doc["offset"] = message.offset
            items.append(doc)
        return {
            "lmq": name,
            "min_offset": info.min_offset,
            "max_offset": info.max_offset,
            "items": items,
            "next_offset": result.next_offset,
        }

    return [
        ("GET", "/messages", by_key, ""),
        ("GET", "/messages/{msgid}", by_id, ""),
        ("GET", "/lmqs/{lmq}/messages", peek, ""),
    ]
