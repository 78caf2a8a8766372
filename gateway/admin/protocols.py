"""What the front ends and the connector show (through :mod:`gateway.admin.views`, so
nothing here imports them): MQTT sessions (subscriptions, offline backlog; kick), AMQP
vhosts, exchanges, queues and bindings (purge and delete), the connector's rules."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, page, sort_key

if TYPE_CHECKING:
    from gateway.admin.api import Admin

SESSION_SORTS = ("name", "connected", "subscriptions", "backlog", "inflight", "user")
QUEUE_SORTS = ("name", "vhost", "messages", "unacked", "consumers")


def _same(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return key


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    views = admin.ctx.views

    async def ask(view: str, field: str | None = None, **kwargs: Any) -> Any:
        """The view's answer; its LookupError is 404, its ValueError 400, naming
        ``field``."""
        try:
            return await views.ask(view, **kwargs)
        except LookupError as exc:
            raise AdminError(404, str(exc).strip("'\""), field=field) from None
        except ValueError as exc:
            raise AdminError(400, str(exc), field=field) from None

    async def sessions(call: Call) -> dict[str, Any]:
        paging = call.paging(SESSION_SORTS, "name")
        connected = call.flag("connected") if call.query.get("connected") is not None else None
        if paging.sort == "backlog":  # every row's backlog: a store lookup per subscription
            rows = await ask("mqtt.sessions", backlog=True)
            if connected is not None:
                rows = [r for r in rows if r["connected"] == connected]
            doc = page(rows, paging)
            doc["total"] = len(rows)
            return doc
        # the page is selected on (value, client id) pairs, its rows made afterwards
        pairs = await ask("mqtt.session.keys", sort=paging.sort, connected=connected)
        total = len(pairs)
        wanted = paging.filter
        keys = [sort_key(v, n) for v, n in pairs if wanted in n]
        doc = page(keys, replace(paging, filter=""), key=_same)
        if doc["items"]:
            doc["items"] = await ask("mqtt.sessions", names=[k[-1] for k in doc["items"]])
        doc["total"] = total
        return doc

    async def session(call: Call) -> Any:
        return await ask("mqtt.session", "client_id", client_id=call.params["client_id"])

    async def kick(call: Call) -> Any:
        return await ask("mqtt.kick", "client_id", client_id=call.params["client_id"])

    async def amqp_list(kind: str, call: Call, sorts: tuple[str, ...]) -> dict[str, Any]:
        paging = call.paging(sorts, sorts[0])
        # a queue's depth (a store lookup per LMQ it reads) only for the page's rows,
        # unless the list is sorted by it
        depth = kind != "queues" or paging.sort == "messages"
        objects = await ask("amqp.objects", kinds=(kind,), depth=depth)
        rows = objects[kind]
        vhost = call.query.get("vhost")
        if vhost is not None:
            rows = [r for r in rows if r.get("vhost", r.get("name")) == vhost]
        for r in rows:  # unique across vhosts: the key pages
            r["key"] = (
                f"{r.get('vhost', '')}\x00{r.get('name', '')}\x00"
                + str(r.get("destination", ""))
                + "\x00"
                + str(r.get("routing_key", ""))
            )
        doc = page(rows, paging, name="key")
        for r in doc["items"]:
            del r["key"]
        if not depth and doc["items"]:
            keys = [(r["vhost"], r["name"]) for r in doc["items"]]
            doc["items"] = await ask("amqp.queue.rows", keys=keys)
        doc["total"] = len(rows)
        return doc

    async def vhosts(call: Call) -> dict[str, Any]:
        return await amqp_list("vhosts", call, ("name", "queues", "exchanges"))

    async def exchanges(call: Call) -> dict[str, Any]:
        return await amqp_list("exchanges", call, ("name", "vhost", "type", "bindings"))

    async def queues(call: Call) -> dict[str, Any]:
        return await amqp_list("queues", call, QUEUE_SORTS)

    async def bindings(call: Call) -> dict[str, Any]:
        return await amqp_list("bindings", call, ("source", "vhost", "destination", "routing_key"))

    async def purge(call: Call) -> Any:
        return await ask(
            "amqp.queue.purge", "queue", vhost=call.params["vhost"], name=call.params["queue"]
        )

    async def delete_queue(call: Call) -> Any:
        return await ask(
            "amqp.queue.delete", "queue", vhost=call.params["vhost"], name=call.params["queue"]
        )

    async def delete_exchange(call: Call) -> Any:
        return await ask(
            "amqp.exchange.delete",
            "exchange",
            vhost=call.params["vhost"],
            name=call.params["exchange"],
        )

    async def connector(call: Call) -> dict[str, Any]:
        return {"items": await ask("connector.rules")}

    async def rule_enable(call: Call) -> Any:
        return await ask("connector.rule.enable", "rule", name=call.params["rule"])

    async def rule_disable(call: Call) -> Any:
        return await ask("connector.rule.disable", "rule", name=call.params["rule"])

    return [
        ("POST", "/connector/rules/{rule}/enable", rule_enable, "connector.enable"),
        ("POST", "/connector/rules/{rule}/disable", rule_disable, "connector.disable"),
        ("GET", "/mqtt/sessions", sessions, ""),
        ("GET", "/mqtt/sessions/{client_id}", session, ""),
        ("DELETE", "/mqtt/sessions/{client_id}", kick, "mqtt.kick"),
        ("GET", "/amqp/vhosts", vhosts, ""),
        ("GET", "/amqp/exchanges", exchanges, ""),
        ("GET", "/amqp/queues", queues, ""),
        ("GET", "/amqp/bindings", bindings, ""),
        ("POST", "/amqp/queues/{vhost}/{queue}/purge", purge, "amqp.queue.purge"),
        ("DELETE", "/amqp/queues/{vhost}/{queue}", delete_queue, "amqp.queue.delete"),
        ("DELETE", "/amqp/exchanges/{vhost}/{exchange}", delete_exchange, "amqp.exchange.delete"),
        ("GET", "/connector/rules", connector, ""),
    ]
