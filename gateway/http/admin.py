"""The HTTP door of the admin API (:mod:`gateway.admin`): routes ``/v1/admin/...`` to
its handlers. Here only HTTP is done: the caller authenticated
(:mod:`gateway.admin.auth`), the query and the JSON body read, the answer or the
:class:`~gateway.admin.core.AdminError` written as JSON or an RFC 9457 problem document
whose ``field`` names the input at fault."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from gateway.admin.api import Admin, Route
from gateway.admin.auth import CHALLENGE, Unauthorized
from gateway.admin.core import ADMIN_PATHS, PREFIX, AdminError, Call
from gateway.http.messages import Request, Response
from gateway.http.routes import Router
from gateway.http.server import problem
from gateway.http.v1.documents import json_response

if TYPE_CHECKING:
    from gateway.context import GatewayContext

__all__ = ["ADMIN_PATHS", "ROUTE_ORDER", "admin_of", "register_routes"]

#: Before the JSON API's routes (none of its patterns matches an admin path; the order
#: only saves the tries).
ROUTE_ORDER = 50


_ADMINS: WeakKeyDictionary[Router, Admin] = WeakKeyDictionary()


def admin_of(router: Router) -> Admin:
    """The admin API routed by ``router`` (an API registered after it, the console,
    plugs its login in with ``admin_of(router).auth.add(...)``)."""
    return _ADMINS[router]


def register_routes(router: Router, ctx: GatewayContext) -> None:
    admin = Admin(ctx)
    _ADMINS[router] = admin
    for route in admin.routes:
        router.add(route.method, PREFIX + route.pattern, _door(admin, route))


def _door(admin: Admin, route: Route) -> Any:
    async def handler(request: Request) -> Response:
        try:
            caller = await admin.auth.authenticate(request)
            call = Call(
                caller,
                dict(request.params),
                {k: v[0] for k, v in request.query.items()},
                _body(request),
            )
            result = await admin.call(route, call)
        except Unauthorized as exc:
            # the console's calls (X-Lmq-Console) get no challenge: a browser would
            # answer it with its own login popup instead of the console's form
            console = request.header("x-lmq-console") is not None
            return problem(401, exc.message, headers=None if console else CHALLENGE)
        except AdminError as exc:
            if exc.field:
                return problem(exc.status, exc.message, field=exc.field)
            return problem(exc.status, exc.message)
        return json_response(result.status, result.doc)

    handler.__name__ = getattr(route.handler, "__name__", "admin")
    return handler


def _body(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        doc = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise AdminError(400, "the body is not JSON") from None
    if not isinstance(doc, dict):
        raise AdminError(400, "the body must be a JSON object")
    return doc
