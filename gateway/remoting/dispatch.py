"""The remoting front end's request table: request code -> handler.

RocketMQ's proxy serves remoting as a table from request code to an *activity*, one per
family of requests; this is that table. Each family lives in its own module under
``gateway/remoting/`` (``send``, ``pull``, ``offsets``, ``clients``, ``route``,
``query``, and the pop family) and registers its codes when the front end starts.

Writing a handler
-----------------
A handler is a plain or ``async`` function::

    def handle(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None
    async def handle(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None

``ctx`` is the connection the request came on (:class:`RequestContext`: the services,
the connection, the authenticated identity, :meth:`~RequestContext.reply`), ``cmd`` the
decoded request (:class:`protocol.remoting.RemotingCommand`).

- A plain function runs inline, on the event loop, in the order requests arrive: use it
  for anything that does not wait (offset queries, heartbeats, routes).
- An ``async`` function runs in a task owned by the connection (cancelled when it
  closes), so requests that wait (a send until the store acknowledges it, a suspended
  pull) do not hold up the connection's other requests. Replies may therefore leave out
  of order; the opaque pairs them, as in RocketMQ.
- The returned command is the response: the handler builds it with
  :func:`gateway.remoting.replies.response` / :func:`~gateway.remoting.replies.error`
  (code, remark, header fields, body); the connection sets the request's opaque and the
  response flag and writes it. ``None`` means "no response now": the request was
  oneway, or the handler replies later itself with ``ctx.reply(cmd, response)``
  (e.g. from a store callback). A response to a oneway request is dropped.
- Exceptions: :class:`RequestError` becomes an error response with its code and remark
  (a missing or bad header field: ``INVALID_PARAMETER``); any other exception is logged
  and answered with ``SYSTEM_ERROR``. The connection stays open either way.

Registering codes
-----------------
A handler module defines ``register(table: DispatchTable) -> None`` and calls
``table.register(RequestCode.X, handle_x)`` for each code it serves; its module name is
listed in :data:`MODULES` (one line per module). A code registered twice is a
programming error (``ValueError`` at start). Codes nobody registered are answered
``REQUEST_CODE_NOT_SUPPORTED`` with a remark naming the code.

A family whose work must run without a request (the transaction check-backs reach
producers' connections) appends ``fn(services)`` to ``table.on_start`` and
``table.on_stop``; the front end calls them when it starts and stops.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, Union

# raised by handlers; defined below them, with the replies (the services raise it too)
from gateway.remoting.replies import RequestError

if TYPE_CHECKING:
    from gateway.auth import Principal
    from gateway.connection import Connection
    from gateway.remoting.services import RemotingServices
    from protocol.remoting import RemotingCommand

__all__ = [
    "MODULES",
    "DispatchTable",
    "Handler",
    "RequestContext",
    "RequestError",
    "build_table",
]

#: The modules whose ``register(table)`` fill the table, in this order.
MODULES: tuple[str, ...] = (
    "gateway.remoting.send",
    "gateway.remoting.transactions",
    "gateway.remoting.pull",
    "gateway.remoting.offsets",
    "gateway.remoting.clients",
    "gateway.remoting.route",
    "gateway.remoting.query",
    "gateway.remoting.origins",
    "gateway.remoting.pop",
)


class RequestContext(Protocol):
    """What a handler knows of the connection a request came on (implemented by
    :class:`gateway.remoting.handler.RemotingHandler`). Event-loop thread only."""

    #: What request code uses (:class:`~gateway.remoting.services.RemotingServices`):
    #: the store facade, the producer, pop, the registries, the consumer and lock
    #: managers, the pull waiters, the security checks and the counters. Request code
    #: never reaches the front end.
    services: RemotingServices
    #: The gateway connection (``conn.peer_host``, ``conn.log_fields()``, ``spawn``).
    conn: Connection
    #: Who sent the request: the access key's user when signatures are checked, else
    #: anonymous (open mode).
    principal: Principal
    #: The client id of the last heartbeat on this connection ("" before one).
    client_id: str
    #: Callbacks that end a suspended request early (shutdown, close): a handler that
    #: waits adds one while it waits and removes it after.
    wakers: set[Callable[[], None]]

    def reply(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Send ``response`` to ``request`` (its opaque, the response flag), unless the
        request was oneway or the connection is gone."""
        ...

    def reply_send_ok(
        self, request: RemotingCommand, msg_id: str, queue_id: int, queue_offset: int
    ) -> None:
        """Answer a send SUCCESS with its msgId, queueId and queueOffset: :meth:`reply`
        without building a command (the send hot path)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Finish a request in a task owned by the connection (cancelled when it
        closes; a graceful shutdown waits for it a bounded time): a handler that
        returned None and replies later from the task."""
        ...

    def send_request(self, request: RemotingCommand) -> None:
        """Send a server-to-client request (oneway: NOTIFY_CONSUMER_IDS_CHANGED,
        CHECK_TRANSACTION_STATE); the connection assigns its opaque."""
        ...

    @property
    def local_address(self) -> tuple[str, int]:
        """The gateway address this client connected to (host, port)."""
        ...

    @property
    def store_address(self) -> tuple[str, int]:
        """The store host of message ids and stored-message layouts: the advertised
        address when configured, else :attr:`local_address` (the gRPC front end uses
        the same, so a message without UNIQ_KEY has one id on both)."""
        ...

    def msg_id(self, position: int) -> str:
        """The offsetMsgId of the record at log ``position`` (store address: the
        address this client connected to)."""
        ...

    @property
    def closed(self) -> bool:
        ...


Response = Union["RemotingCommand", None]
Handler = Callable[[RequestContext, "RemotingCommand"], Response | Awaitable[Response]]


class DispatchTable:
    """Request code -> (handler, whether it is a coroutine function)."""

    def __init__(self) -> None:
        self._handlers: dict[int, tuple[Handler, bool]] = {}
        #: Called with the services when the front end starts and stops (a family's
        #: work that must run without a request: the transaction check-backs).
        self.on_start: list[Callable[[RemotingServices], None]] = []
        self.on_stop: list[Callable[[RemotingServices], None]] = []

    def register(self, code: int, handler: Handler) -> None:
        if code in self._handlers:
            raise ValueError(f"request code {code} is registered twice")
        self._handlers[int(code)] = (handler, inspect.iscoroutinefunction(handler))

    def get(self, code: int) -> tuple[Handler, bool] | None:
        return self._handlers.get(code)

    def codes(self) -> list[int]:
        return sorted(self._handlers)

    def __contains__(self, code: object) -> bool:
        return code in self._handlers


def build_table(modules: tuple[str, ...] = MODULES) -> DispatchTable:
    """A table filled by every module of ``modules`` (each must define ``register``)."""
    table = DispatchTable()
    for name in modules:
        importlib.import_module(name).register(table)
    return table
