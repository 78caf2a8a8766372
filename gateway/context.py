"""What a front end is given: the :class:`GatewayContext`, built once by
:meth:`gateway.server.Gateway.start` after the store is open and before any front end
exists (uvicorn's ``Config`` / ``ServerState`` / protocol split: the context is the
built configuration, :class:`~gateway.state.ServerState` the shared connection table,
the front ends the protocols).

Every field is set and final: a front end never sees a half-started gateway, and no
field is ``None`` for "not yet". The one value that changes is ``authenticator`` (read
from ``security``): ``None`` only in open mode (no users file; see
:mod:`gateway.security`), a value the front ends act on by skipping authentication, not
a missing one; it becomes an authenticator, once, when a users file appears while the
gateway runs (:meth:`gateway.frontend.FrontEnd.authentication_on`). So read it when a
login or a check happens, never keep it beyond a connection.

Also here: :func:`loop_callback`, the one hand-off from a store thread to the event
loop (store listeners run on the appending thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker_core import MessageStore
from gateway.admin.views import AdminViews
from gateway.auth import Authenticator
from gateway.config import GatewayConfig
from gateway.metrics import Registry
from gateway.publisher import Publisher
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.services import RocketMQServices
from gateway.rocketmq.topics import TopicRegistry
from gateway.security import Security
from gateway.state import ServerState
from gateway.topic_space import TopicSpace


class Introspection(Protocol):
    """What the gateway tells about itself (``/health``, its listeners' addresses)."""

    def health(self, max_age: float = 0.0) -> Awaitable[tuple[int, dict[str, Any]]]:
        """``(HTTP status, health document)``: 200 when serving, 503 otherwise."""
        ...

    def store_stats(self, max_age: float = 0.0) -> Awaitable[dict[str, Any]]:
        """The store's statistics (also refreshes the ``lmq_store_*`` gauges); with
        ``max_age``, the last ones read without waiting while recent (a read started
        when older than ``max_age`` seconds)."""
        ...

    def overview_history(self, since: int = 0) -> dict[str, Any]:
        """The overview's samples taken after ``since`` (ms since the epoch), oldest
        first (:meth:`gateway.history.History.document`)."""
        ...

    def replication_role(self) -> str:
        """``master``, ``slave`` or ``single`` (docs/replication.md)."""
        ...

    def replication_master(self, listener: str) -> str:
        """``host:port`` of the group's master for clients of ``listener`` ("" when
        unknown or not in a group)."""
        ...

    def replication_slaves(self, listener: str) -> list[str]:
        """A master: its connected slaves' addresses for clients of ``listener`` (else
        their unified ones); [] elsewhere."""
        ...

    def replication_following(self) -> bool:
        """A slave whose stream from the master is live now (False elsewhere)."""
        ...

    def listener_address(self, name: str) -> tuple[str, int] | None:
        """``(host, port)`` the listener ``name`` (``unified``, ``remoting``...) is bound
        to, ``None`` when it is not listening (yet)."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class GatewayContext:
    #: The gateway's configuration (the store's is ``config.store``).
    config: GatewayConfig
    #: The open store; closed by the gateway after every front end has stopped.
    store: MessageStore
    #: Appends batched per loop turn; ``caught_up`` is the back-pressure signal.
    publisher: Publisher
    #: MQTT filters, AMQP ``amq.topic`` bindings and RocketMQ topics: one topic space.
    topic_space: TopicSpace
    #: RocketMQ topics (their queue LMQs) and consumer groups, loaded from the store.
    rocketmq_topics: TopicRegistry
    rocketmq_groups: GroupRegistry
    #: The schedule, pop and send-back every RocketMQ front end shares (one pop state
    #: per gateway); started before the front ends, stopped after them.
    rocketmq: RocketMQServices
    #: Where front ends register their counters and gauges (at construction or start).
    metrics: Registry
    #: The event loop everything but the store's threads runs on.
    loop: asyncio.AbstractEventLoop
    #: Logins and permissions now (:attr:`authenticator`) and the users file's watch.
    security: Security
    #: The shared connection table and the gateway's tasks.
    state: ServerState
    #: The gateway's own health document.
    introspection: Introspection
    #: What front ends and services show the admin API (gateway.admin.views): they
    #: register providers at start.
    views: AdminViews = field(default_factory=AdminViews)

    @property
    def authenticator(self) -> Authenticator | None:
        """Logins and permissions; ``None`` = open mode (no users file yet)."""
        return self.security.authenticator

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a gateway-owned task (cancelled at shutdown)."""
        return self.state.tasks.spawn(coro, name)

    def loop_callback(self, fn: Callable[..., None]) -> Callable[..., None]:
        """:func:`loop_callback` on this context's loop."""
        return loop_callback(self.loop, fn)


def loop_callback(loop: asyncio.AbstractEventLoop, fn: Callable[..., None]) -> Callable[..., None]:
    """``fn`` made callable from any thread: called at once on the loop's own thread
    (an append made on the loop), handed over with ``call_soon_threadsafe`` from any
    other (the store's appending or flushing threads). For store listeners.

    Must be created on the loop's thread (it records which thread that is)."""
    loop_thread = threading.get_ident()

    def call(*args: Any) -> None:
        if threading.get_ident() == loop_thread:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    return call
