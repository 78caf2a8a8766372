"""RocketMQ topics: list (paged), show, create or change, delete, with the rules of
``lmq topics create|delete`` (:func:`gateway.rocketmq.topics.changed_topic`): applied
through the running gateway's :class:`~gateway.rocketmq.topics.TopicRegistry`, so every
front end sees the change at once (its listeners drop the routes' memo), and written to
the store's metadata before the answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, Result, page
from gateway.rocketmq.topics import (
    QueueInUse,
    TopicOptionError,
    changed_topic,
    perm_text,
    topic_document,
)
from lmq.rocketmq import queue_lmq

if TYPE_CHECKING:
    from gateway.admin.api import Admin

SORTS = ("name", "message_type", "read_queues", "write_queues")


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx
    registry = ctx.rocketmq_topics

    async def list_(call: Call) -> dict[str, Any]:
        paging = call.paging(SORTS, "name")
        rows = (
            {
                "name": c.name,
                "read_queues": c.read_queues,
                "write_queues": c.write_queues,
                "perm": int(c.perm),
                "perm_text": perm_text(c.perm),
                "message_type": c.message_type.value,
            }
            for c in registry.configs()
        )
        doc = page(rows, paging)
        for item in doc["items"]:  # depth of the page's topics only
            infos = [
                ctx.store.lmq(queue_lmq(item["name"], q))
                for q in range(max(item["read_queues"], item["write_queues"]))
            ]
            item["messages"] = sum(i.messages for i in infos if i is not None)
        doc["total"] = len(registry)
        return doc

    def _config(call: Call) -> Any:
        config = registry.get(call.params["topic"])
        if config is None:
            raise AdminError(
                404, f"no RocketMQ topic named {call.params['topic']!r}", field="topic"
            )
        return config

    async def show(call: Call) -> dict[str, Any]:
        return topic_document(ctx.store, _config(call))

    async def put(call: Call) -> Result:
        name = call.params["topic"]
        old = registry.get(name)
        try:
            config = changed_topic(
                name,
                old,
                queues=call.integer("queues"),
                read_queues=call.integer("read_queues"),
                write_queues=call.integer("write_queues"),
                perm=_perm(call),
                message_type=call.text("message_type"),
            )
            registry.create(config)
        except TopicOptionError as exc:
            raise AdminError(
                400, str(exc), field="topic" if exc.field == "name" else exc.field
            ) from None
        except QueueInUse as exc:
            raise AdminError(409, str(exc), field="read_queues") from None
        except ValueError as exc:
            raise AdminError(400, str(exc)) from None
        doc = topic_document(ctx.store, config)
        doc["created"] = old is None
        return Result(201 if old is None else 200, doc)

    async def delete(call: Call) -> dict[str, Any]:
        name = call.params["topic"]
        lmqs = list(ctx.store.lmqs(queue_lmq(name, 0)[:-1]))
        messages = sum(i.messages for i in lmqs)
        if not registry.delete(name):
            raise AdminError(404, f"no RocketMQ topic named {name!r}", field="topic")
        return {"name": name, "deleted": True, "queues": len(lmqs), "messages": messages}

    return [
        ("GET", "/topics", list_, ""),
        ("GET", "/topics/{topic}", show, ""),
        ("PUT", "/topics/{topic}", put, "topic.put"),
        ("DELETE", "/topics/{topic}", delete, "topic.delete"),
    ]


def _perm(call: Call) -> str | None:
    value = call.body.get("perm")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise AdminError(400, "perm must be rw, r, w, - or RocketMQ's number", field="perm")
