"""The AMQP broker model: exchanges, queues, bindings, and their queue arguments.

Plain data, no I/O. :mod:`gateway.amqp.broker` owns the objects, routes through them
and persists the durable ones; :mod:`gateway.amqp.queues` runs consumption.

Also the small interfaces through which lower objects call upward (ownership points
down: front end -> broker -> queues; handler -> channels): :class:`QueueOwner` (a
queue's calls to its broker), :class:`Deliverer` (a queue's calls to a consumer's
channel) and :class:`ChannelHost` (a channel's calls to its connection handler).

Routing state per exchange type:

=========  ===============================================================
direct     ``{routing key: {destination}}``
fanout     ``{destination}``
topic      :class:`lmq.topic_space.AmqpTopicTrie` of binding key -> destination
headers    list of (arguments, destination), matched with ``x-match`` all/any
=========  ===============================================================

A destination is ``("q", queue name)`` or ``("e", exchange name)`` (exchange-to-exchange
bindings). The default exchange ``""`` has no state: it routes to the queue named by
the routing key.
"""

from __future__ import annotations

import json
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lmq.topic_space import AmqpTopicTrie
from protocol.amqp.errors import PRECONDITION_FAILED, ChannelError

if TYPE_CHECKING:
    import asyncio

    from broker_core import PoppedMessage, Record
    from gateway.amqp.queues import Consumer, Queue
    from gateway.connection import Connection
    from protocol.amqp import AMQPConnection


class QueueOwner(Protocol):
    """What a :class:`~gateway.amqp.queues.Queue` asks of its owner (the broker)."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds (TTLs, x-death times)."""
        ...

    def ack_soon(self, receipt: str) -> None:
        """Settle a pop receipt with the batch written at the end of this loop turn."""
        ...

    def ack_soon_many(self, receipts: list[str]) -> None:
        ...

    def dead_letter(self, queue: Queue, record: Record, reason: str) -> None:
        """Publish the x-death copy of ``record`` to ``queue``'s dead-letter exchange."""
        ...

    def queue_unused(self, queue: Queue) -> None:
        """``queue`` expired (x-expires) or lost its last consumer (auto-delete):
        delete it."""
        ...


class Deliverer(Protocol):
    """A consumer's channel, as its queue sees it."""

    def can_deliver(self) -> bool:
        """Open, flow active, socket writable (else it asks to be scheduled on drain)."""
        ...

    def deliver_many(self, consumer: Consumer, queue: Queue, popped: list[PoppedMessage],
                     now: int) -> None:
        ...

    def flush(self) -> None:
        """Write what is queued for the connection now."""
        ...

    def server_cancel(self, consumer: Consumer) -> None:
        """The queue is gone: cancel ``consumer`` (consumer-cancel-notify)."""
        ...

    @property
    def global_prefetch(self) -> int: ...

    @property
    def unacked_count(self) -> int: ...


class ChannelHost(Protocol):
    """A channel's connection handler, as the channel sees it."""

    proto: AMQPConnection
    conn: Connection
    vhost: str
    #: The publisher's name for the records' origin.
    origin: str
    #: When the bytes being handled were received (ms), 0 outside of a receive.
    now_ms: int
    #: Set by a channel when it submitted a publish (the handler checks back-pressure).
    published: bool

    def write(self, data: bytes) -> None:
        """Queue ``data`` in the connection's outbox."""
        ...

    def flush(self) -> None:
        ...

    def check(self, kind: str, resource: str, method: Any, exchange: bool = False) -> None:
        """403 ACCESS_REFUSED unless the user may ``kind`` (configure, write, read)."""
        ...

    def check_topic(self, key: str, method: Any, *, bind: bool) -> None:
        """403 ACCESS_REFUSED unless the MQTT topic ACL lets the user publish with
        routing key ``key`` through ``amq.topic`` of vhost ``/`` (or bind with it)."""
        ...

    def queue(self, name: str, method: Any) -> Queue:
        """The queue ``name`` of the connection's vhost (404, or 405 if exclusive to
        another connection)."""
        ...

    def want_drain(self) -> None:
        """The socket is full: schedule the consumers again once it drains."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        ...


@dataclass(slots=True)
class Stats:
    """Per-message counts, added to the metrics when they are collected (a
    ``Counter.inc`` per message was a measurable share of the CPU)."""

    published: int = 0
    delivered: int = 0

EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-delayed-message")
#: Predeclared in every vhost (plus the default exchange ``""``), all durable.
PREDECLARED = {
    "amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic",
    "amq.headers": "headers", "amq.match": "headers",
}

Destination = tuple[str, str]  # ("q" | "e", name)

#: Queue arguments the broker acts on, with the check of their value.
QUEUE_ARGS = (
    "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
    "x-single-active-consumer", "x-delivery-limit", "x-queue-type", "x-queue-mode",
)
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")


def plain(value: Any) -> Any:
    """A field-table value as JSON-able data (bytes as text, decimals as float)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


TOPIC_MEMO_SIZE = 65536


def args_key(arguments: dict[str, Any] | None) -> str:
    """A canonical text for an arguments table (bindings are keyed by it)."""
    return json.dumps(plain(arguments or {}), sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class Exchange:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    # routing state
    direct: dict[str, set[Destination]] = field(default_factory=dict)
    fanout: set[Destination] = field(default_factory=set)
    topic: AmqpTopicTrie[Destination] = field(default_factory=AmqpTopicTrie)
    headers: list[tuple[dict[str, Any], Destination]] = field(default_factory=list)
    #: Bindings with this exchange as source: (destination, key, args_key) -> arguments.
    bindings: dict[tuple[Destination, str, str], dict[str, Any]] = field(default_factory=dict)
    #: Topic exchanges: routing key -> the destinations the trie matched, until the next
    #: binding change (producers reuse a small set of keys; the trie walk is the cost).
    _memo: dict[str, frozenset[Destination]] = field(default_factory=dict, repr=False)
    #: How it binds and routes: its type, or an ``x-delayed-message`` exchange's
    #: ``x-delayed-type`` (:mod:`gateway.amqp.delayed`; validated at declare).
    kind: str = ""

    def __post_init__(self) -> None:
        if self.type == "x-delayed-message":
            kind = self.arguments.get("x-delayed-type")
            self.kind = bytes(kind).decode() if isinstance(kind, bytes | bytearray) else str(kind)
        else:
            self.kind = self.type

    @property
    def delayed(self) -> bool:
        """An ``x-delayed-message`` exchange (its messages' ``x-delay`` is honoured)."""
        return self.type == "x-delayed-message"

    @property
    def alternate(self) -> str | None:
        ae = self.arguments.get("alternate-exchange")
        if isinstance(ae, bytes):
            ae = ae.decode()
        return ae if isinstance(ae, str) and ae else None

    def add_binding(self, dest: Destination, key: str, arguments: dict[str, Any]) -> bool:
        bkey = (dest, key, args_key(arguments))
        if bkey in self.bindings:
            return False
        self.bindings[bkey] = dict(arguments)
        self._memo.clear()
        if self.kind == "direct":
            self.direct.setdefault(key, set()).add(dest)
        elif self.kind == "fanout":
            self.fanout.add(dest)
        elif self.kind == "topic":
            self.topic.add(key, dest)
        else:
            self.headers.append((dict(arguments), dest))
        return True

    def remove_binding(self, dest: Destination, key: str, arguments: dict[str, Any]) -> bool:
        bkey = (dest, key, args_key(arguments))
        if self.bindings.pop(bkey, None) is None:
            return False
        self._memo.clear()
        still = any(d == dest and k == key for d, k, _ in self.bindings)
        if self.kind == "direct" and not still:
            dests = self.direct.get(key)
            if dests is not None:
                dests.discard(dest)
                if not dests:
                    del self.direct[key]
        elif self.kind == "fanout" and not any(d == dest for d, _, _ in self.bindings):
            self.fanout.discard(dest)
        elif self.kind == "topic" and not still:
            self.topic.remove(key, dest)
        elif self.kind == "headers":
            target = args_key(arguments)
            for i, (hargs, hdest) in enumerate(self.headers):
                if hdest == dest and args_key(hargs) == target:
                    del self.headers[i]
                    break
        return True

    def remove_destination(self, dest: Destination) -> int:
        """Drop every binding to ``dest``; returns how many there were."""
        doomed = [b for b in self.bindings if b[0] == dest]
        for d, key, _ in doomed:
            self.remove_binding(d, key, self.bindings[(d, key, _)])
        return len(doomed)

    def match(
        self, routing_key: str, headers: dict[str, Any] | None
    ) -> set[Destination] | frozenset[Destination]:
        """The destinations bound for this message. Read-only: do not modify it."""
        t = self.kind
        if t == "direct":
            return set(self.direct.get(routing_key, ()))
        if t == "fanout":
            return set(self.fanout)
        if t == "topic":
            memo = self._memo
            found = memo.get(routing_key)
            if found is None:
                found = frozenset(self.topic.matches(routing_key))
                if len(memo) >= TOPIC_MEMO_SIZE:
                    memo.clear()
                memo[routing_key] = found
            return found
        return {dest for hargs, dest in self.headers if headers_match(hargs, headers or {})}

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "durable": self.durable, "auto_delete": self.auto_delete,
                "internal": self.internal, "arguments": plain(self.arguments)}


def headers_match(binding: dict[str, Any], headers: dict[str, Any]) -> bool:
    """RabbitMQ's headers exchange: ``x-match`` all (default) or any; ``x-`` keys of the
    binding are not matched; a binding value of void matches presence alone."""
    mode = binding.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode()
    pairs = [(k, v) for k, v in binding.items() if not k.startswith("x-")]
    if mode in ("any", "any-with-x"):
        return any(k in headers and (v is None or _eq(headers[k], v)) for k, v in pairs)
    return all(k in headers and (v is None or _eq(headers[k], v)) for k, v in pairs)


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, bytes):
        a = a.decode("utf-8", "replace")
    if isinstance(b, bytes):
        b = b.decode("utf-8", "replace")
    return bool(a == b)


@dataclass(slots=True)
class QueueArgs:
    """The queue arguments the broker acts on, parsed once at declare."""

    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dlx: str | None = None
    dlrk: str | None = None
    max_priority: int | None = None
    single_active: bool = False
    delivery_limit: int | None = None

    @classmethod
    def parse(cls, vhost: str, queue: str, arguments: dict[str, Any]) -> QueueArgs:
        out = cls()

        def bad(name: str, why: str) -> ChannelError:
            return ChannelError(
                PRECONDITION_FAILED,
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {why}")

        def non_negative(name: str, positive: bool = False) -> int | None:
            value = arguments.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, f"{{unacceptable_type,{type(value).__name__}}}")
            if value < 0 or (positive and value == 0):
                raise bad(name, f"{{value_negative,{value}}}" if value < 0
                          else f"{{value_zero,{value}}}")
            return value

        out.message_ttl = non_negative("x-message-ttl")
        out.expires = non_negative("x-expires", positive=True)
        out.max_length = non_negative("x-max-length")
        out.max_length_bytes = non_negative("x-max-length-bytes")
        out.max_priority = non_negative("x-max-priority")
        if out.max_priority is not None and out.max_priority > 255:
            raise bad("x-max-priority", f"{{value_too_large,{out.max_priority}}}")
        out.delivery_limit = non_negative("x-delivery-limit")
        overflow = _text(arguments.get("x-overflow"))
        if overflow is not None:
            if overflow not in OVERFLOW_MODES:
                raise bad("x-overflow", f"{{unacceptable_value,<<\"{overflow}\">>}}")
            out.overflow = overflow
        out.dlx = _text(arguments.get("x-dead-letter-exchange"))
        out.dlrk = _text(arguments.get("x-dead-letter-routing-key"))
        if out.dlrk is not None and out.dlx is None:
            raise bad("x-dead-letter-routing-key",
                      "Key x-dead-letter-exchange should be present")
        sac = arguments.get("x-single-active-consumer")
        if sac is not None and not isinstance(sac, bool):
            raise bad("x-single-active-consumer", "{unacceptable_type,non_boolean}")
        out.single_active = bool(sac)
        qtype = _text(arguments.get("x-queue-type"))
        if qtype is not None and qtype not in ("classic", "quorum"):
            raise bad("x-queue-type", f"unsupported queue type '{qtype}'")
        return out


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


@dataclass(slots=True)
class QueueDef:
    """A queue's declaration (what is persisted for a durable queue)."""

    vhost: str
    name: str
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict[str, Any]
    args: QueueArgs
    #: Connection id of the owner of an exclusive queue (0 = none).
    owner: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"durable": self.durable, "auto_delete": self.auto_delete,
                "arguments": plain(self.arguments)}


#: Queue arguments compared on redeclare (RabbitMQ's "inequivalent arg").
EQUIVALENCE_ARGS = (
    "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
    "x-single-active-consumer", "x-delivery-limit", "x-queue-type",
)


def describe(value: Any) -> str:
    """A value as RabbitMQ's "inequivalent arg" message prints it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
