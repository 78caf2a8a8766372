"""What remoting request code is given: :class:`RemotingServices`, one per front end.

A request family (``send``, ``pull``, ``pop``, ...) gets ``ctx.services`` and nothing
else of the front end: the gateway's RocketMQ services it uses (the store facade, the
producer, pop, send-back, the topic and group registries), the remoting state shared by
the connections (the clients and consumer groups known from heartbeats, the ordered
consumers' queue locks, the suspended pulls' store listeners), the security checks, the
counters the front end copies into its metrics, and the few settings request code reads.
The front end (:mod:`gateway.remoting.frontend`) builds it and owns its life; request
code never imports the front end (an import contract in pyproject.toml says so).

Event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gateway.cluster_id import ClusterId
from gateway.remoting.consumers import ConsumerManager
from gateway.remoting.locks import LockManager
from gateway.remoting.replies import RequestError
from protocol.remoting.codes import ResponseCode

if TYPE_CHECKING:
    from broker_core import MessageStore
    from gateway.auth import Principal
    from gateway.connection import Connection
    from gateway.context import GatewayContext

__all__ = ["Caller", "PullWaiters", "RemotingServices"]


class Caller(Protocol):
    """Who a check is made for (a :class:`~gateway.remoting.dispatch.RequestContext`)."""

    principal: Principal
    client_id: str
    conn: Connection

    @property
    def closed(self) -> bool: ...


class RemotingServices:
    """The narrow services object of the remoting request families (``ctx.services``)."""

    def __init__(self, ctx: GatewayContext, consumers: ConsumerManager) -> None:
        rocketmq = ctx.rocketmq
        cfg = ctx.config
        store = rocketmq.store
        #: The store's facade (reads, offsets, origins, lookups).
        self.store = store
        #: Every send and end of transaction (:mod:`gateway.rocketmq.producer`).
        self.producer = rocketmq.producer
        self.pop = rocketmq.pop
        #: Register ``SCHEDULE_TOPIC_XXXX`` once something is scheduled.
        self.ensure_schedule_topic = rocketmq.ensure_schedule_topic
        self.sendback = rocketmq.sendback
        #: Transaction check-backs (the front end registers its way to producers).
        self.transactions = rocketmq.transactions
        self.topics = rocketmq.topics
        self.groups = rocketmq.groups
        self._publisher = rocketmq.publisher
        self.loop = ctx.loop
        self.introspection = ctx.introspection
        self._security = ctx.security
        self._config = cfg
        #: Clients and consumer groups from heartbeats, and ordered consumers' locks.
        self.consumers = consumers
        self.locks = LockManager(cfg.rocketmq_lock_expiry)
        #: Suspended pulls by LMQ (one store listener per LMQ waited on).
        self.waiters = PullWaiters(store, ctx.loop_callback)
        #: ``host:port`` brokers are advertised at in routes ("" = the address each
        #: client connected to).
        self.advertised_address = cfg.advertised_address
        self.max_body = store.config.max_message_bytes
        #: How long a send with a dedup id finds the copy stored before it (ms).
        self.dedup_window_ms = int(cfg.remoting_dedup_window * 1000)
        #: Set by the first goodbye: suspended pulls are answered, none suspends again.
        self.stopping = False
        #: Messages stored from sends and returned by pulls, pulls suspended now, and
        #: the copies dropped: duplicates (at or below their origin's high-water mark)
        #: and loops (their ``__LMQ_PATH`` names this gateway). Plain ints on the hot
        #: paths, copied into the front end's metrics at scrape time.
        self.sent = 0
        self.pulled = 0
        self.suspended = 0
        self.copies_duplicate = 0
        self.copies_looped = 0
        self._cluster_id = ClusterId(store, cfg.cluster_id)

    # -- the connector's cluster id ----------------------------------------------------

    @property
    def cluster_id(self) -> str:
        """This gateway's id for the connector; in a broker group, the group's
        (:class:`gateway.cluster_id.ClusterId`)."""
        return self._cluster_id.value

    # -- security ----------------------------------------------------------------------

    def check_publish(self, caller: Caller, topic: str) -> None:
        """Raise NO_PERMISSION unless the principal may send to ``topic`` (open mode:
        always may)."""
        auth = self._security.authenticator
        if auth is not None and not auth.can_publish(caller.principal, caller.client_id, topic):
            raise RequestError(
                ResponseCode.NO_PERMISSION, f"no permission to send to topic {topic}"
            )

    def check_subscribe(self, caller: Caller, topic: str, group: str) -> None:
        """Raise NO_PERMISSION unless the principal may consume ``topic`` as ``group``
        (the ``subscribe`` right on ``topic/#``)."""
        auth = self._security.authenticator
        if auth is not None and not auth.can_subscribe(
            caller.principal, caller.client_id, f"{topic}/#"
        ):
            raise RequestError(
                ResponseCode.NO_PERMISSION,
                f"no permission to consume topic {topic} as group {group}",
            )

    # -- back-pressure -----------------------------------------------------------------

    def throttle(self, caller: Caller) -> None:
        """After a send: while the store lags, stop reading this connection's requests
        until it has caught up (the client's own send timeout then bounds the wait)."""
        publisher = self._publisher
        if not publisher.lagging or caller.closed:
            return
        conn = caller.conn
        if conn.flow.read_paused:
            return  # already waiting for the store
        conn.pause_reading()

        async def resume() -> None:
            await publisher.caught_up.wait()
            conn.resume_reading()

        conn.spawn(resume(), "remoting-resume")


class PullWaiters:
    """Suspended pulls by LMQ, with ONE store listener per LMQ that has any.

    The listener runs on the store's appending thread and hands over to the loop with
    ``loop_callback``; on the loop it wakes every pull waiting on that LMQ (each reads
    again and goes back to waiting if nothing it wants arrived)."""

    def __init__(
        self,
        store: MessageStore,
        loop_callback: Callable[[Callable[..., None]], Callable[..., None]],
    ) -> None:
        self._store = store
        self._waiting: dict[str, set[Callable[[], None]]] = {}
        self._remove_listener: dict[str, Callable[[], None]] = {}
        self._on_append = loop_callback(self._wake)

    def add(self, lmq: str, wake: Callable[[], None]) -> Callable[[], None]:
        waiting = self._waiting.get(lmq)
        if waiting is None:
            waiting = self._waiting[lmq] = set()
            self._remove_listener[lmq] = self._store.add_listener(lmq, self._on_append)
        waiting.add(wake)

        def remove() -> None:
            waiting.discard(wake)
            if not waiting and self._waiting.get(lmq) is waiting:
                del self._waiting[lmq]
                self._remove_listener.pop(lmq)()

        return remove

    def _wake(self, lmq: str, _next_offset: int) -> None:
        for wake in list(self._waiting.get(lmq, ())):
            wake()

    def count(self) -> int:
        return sum(len(w) for w in self._waiting.values())
