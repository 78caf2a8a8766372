"""The message connector's rules (docs/connector.md) as the gateway runs them:
``GET /v1/admin/connector/rules`` (paged, sorted, filtered: each rule's state, lag,
delay, rates, errors and last error, per-queue positions), ``POST
/v1/admin/connector/rules/{rule}/disable`` and ``.../enable`` (on the running connector;
the rules file is not changed, so a restart runs the file's rules)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, page

if TYPE_CHECKING:
    from gateway.admin.api import Admin

SORTS = ("name", "state", "lag", "delay_ms", "errors", "messages")


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx

    def _connector() -> Any:
        connector = ctx.introspection.connector()
        if connector is None:
            raise AdminError(404, "no message connector runs in this gateway ([connector])")
        return connector

    def _rows(connector: Any) -> list[dict[str, Any]]:
        enabled = {r.rule.name: r.rule.enabled for r in connector.runners}
        return [
            {"name": doc["rule"], "enabled": enabled.get(doc["rule"], False), **doc}
            for doc in connector.snapshot()
        ]

    async def list_(call: Call) -> dict[str, Any]:
        rows = _rows(_connector())
        doc = page(rows, call.paging(SORTS, "name"))
        doc["total"] = len(rows)
        return doc

    def _switch(enabled: bool) -> Any:
        async def handler(call: Call) -> dict[str, Any]:
            connector = _connector()
            name = call.params["rule"]
            if not await connector.set_enabled(name, enabled):
                raise AdminError(404, f"no connector rule {name!r}", field="rule")
            row = next(r for r in _rows(connector) if r["name"] == name)
            return row

        handler.__name__ = "enable" if enabled else "disable"
        return handler

    return [
        ("GET", "/connector/rules", list_, ""),
        ("POST", "/connector/rules/{rule}/enable", _switch(True), "connector_rule.enable"),
        ("POST", "/connector/rules/{rule}/disable", _switch(False), "connector_rule.disable"),
    ]
