"""The admin API over one gateway context: its routes, authentication and audit log."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core import StoreError
from gateway.admin import (
    connections,
    groups,
    lmqs,
    messages,
    overview,
    protocols,
    topics,
    users,
)
from gateway.admin.audit import AuditLog
from gateway.admin.auth import AdminAuth
from gateway.admin.core import AdminError, Call, Handler, Result

if TYPE_CHECKING:
    from gateway.context import GatewayContext

__all__ = ["Admin", "Route"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    #: After :data:`PREFIX`: ``/topics/{topic}``.
    pattern: str
    handler: Handler
    #: The audit action of a change (``topic.create``); "" for a read.
    action: str = ""


class Admin:
    """The admin API of one gateway (module :mod:`gateway.admin`)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.auth = AdminAuth(ctx.security)
        audit_path = (
            Path(cfg.admin_audit_log) if cfg.admin_audit_log else Path(cfg.data_dir) / "audit.log"
        )
        self.audit = AuditLog(audit_path)
        self.routes: list[Route] = []
        for family in (overview, connections, topics, groups, lmqs, messages, users, protocols):
            for method, pattern, handler, action in family.routes(self):
                self.routes.append(Route(method, pattern, handler, action))

    async def call(self, route: Route, call: Call) -> Result:
        """Run ``route``'s handler; a change is written to the audit log, refused or
        not, before the answer. A store error (full, closed) is 503."""
        try:
            try:
                doc: Any = await route.handler(call)
            except StoreError as exc:
                raise AdminError(503, f"store: {exc}") from None
        except AdminError as exc:
            if route.action:
                self.audit.record(
                    call.caller,
                    route.action,
                    _target(call),
                    _details(call),
                    exc.status,
                    exc.message,
                )
            raise
        result = doc if isinstance(doc, Result) else Result(200, doc)
        if route.action:
            self.audit.record(
                call.caller, route.action, _target(call), _details(call), result.status
            )
        return result


#: Body fields never written to the audit log (their presence is).
SECRETS = frozenset({"password", "secret_key"})


def _details(call: Call) -> dict[str, Any]:
    return {k: "(secret)" if k in SECRETS else v for k, v in call.body.items()}


def _target(call: Call) -> str:
    """The path's parameters; a call that names what it makes in its body (``POST
    /users {"name"}``): that name."""
    name = call.body.get("name")
    return "/".join(call.params.values()) or (name if isinstance(name, str) else "")
