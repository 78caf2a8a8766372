"""The AMQP topology: vhosts, exchanges, queues and bindings; routing; persistence.

Every operation raises the error RabbitMQ raises (``ChannelError`` 403/404/405/406,
``ConnectionLevelError`` 503/530), with RabbitMQ's reply text.

Durable topology lives in the store's metadata (the state RocksDB) under ``amqp/``::

    amqp/x/<vhost>\\0<exchange>                               -> exchange JSON
    amqp/q/<vhost>\\0<queue>                                  -> queue JSON
    amqp/b/<vhost>\\0<source>\\0<q|e>\\0<dest>\\0<key>\\0<args>  -> binding arguments JSON

A binding is durable when both its ends are. At start :meth:`Broker.load` rebuilds the
durable topology, and removes the LMQ of every queue that was not durable (the queues'
LMQs are named ``amqp:<vhost>:<queue>``): non-durable queues do not survive a restart.

The broker owns its queues (ownership points down: front end -> broker -> queues) and
is their :class:`~gateway.amqp.model.QueueOwner`: it batches their settlements into
one store write per loop turn and publishes their dead letters.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core import MessageStore, Record, StoreError
from gateway.amqp.delayed import TYPE as DELAYED_TYPE
from gateway.amqp.delayed import delayed_type
from gateway.amqp.messages import dead_letter_message
from gateway.amqp.model import (
    EQUIVALENCE_ARGS,
    EXCHANGE_TYPES,
    PREDECLARED,
    Destination,
    Exchange,
    QueueArgs,
    QueueDef,
    args_key,
    describe,
)
from gateway.amqp.queues import GROUP, Queue
from gateway.publisher import Publisher
from gateway.topic_space import AMQP_PREFIX, ExchangeRoute, TopicSpace
from lmq.topic_space import mqtt_to_amqp
from protocol.amqp.errors import (
    ACCESS_REFUSED,
    COMMAND_INVALID,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    AMQPError,
    ChannelError,
    ConnectionLevelError,
)

log = logging.getLogger(__name__)

META = "amqp/"
DEFAULT_VHOST = "/"


@dataclass(slots=True)
class VHost:
    name: str
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    #: Reverse index: destination -> {(source exchange, key, args key)}.
    bound_to: dict[Destination, set[tuple[str, str, str]]] = field(default_factory=dict)


def _no_queue(vhost: str, name: str) -> ChannelError:
    return ChannelError(NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")


def _no_exchange(vhost: str, name: str) -> ChannelError:
    return ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")


def _default_refused() -> ChannelError:
    return ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")


class Broker:
    def __init__(self, store: MessageStore, publisher: Publisher, topic_space: TopicSpace,
                 loop: asyncio.AbstractEventLoop, *, max_queues_per_connection: int = 0,
                 ) -> None:
        self.store = store
        self.publisher = publisher
        self.topic_space = topic_space
        self.loop = loop
        #: Queues one connection may have created and not deleted (0: no limit).
        self.max_queues_per_connection = max_queues_per_connection
        self.vhosts: dict[str, VHost] = {}
        self.exclusive: dict[int, set[Queue]] = {}
        self._acks: list[str] = []
        self._acks_scheduled = False

    # -- for the queues (QueueOwner) ---------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def ack_soon(self, receipt: str) -> None:
        """Queue an ack for the batch written at the end of this loop turn. A crash
        before it is written redelivers the message (at least once, as for any unacked
        delivery)."""
        self._acks.append(receipt)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            self.loop.call_soon(self.flush_acks)

    def ack_soon_many(self, receipts: list[str]) -> None:
        self._acks.extend(receipts)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            self.loop.call_soon(self.flush_acks)

    def flush_acks(self) -> None:
        self._acks_scheduled = False
        acks, self._acks = self._acks, []
        if acks:
            try:
                self.store.pop.ack_many(acks)
            except StoreError as exc:
                log.warning("acks not recorded: %s", exc, extra={"acks": len(acks)})

    def dead_letter(self, queue: Queue, record: Record, reason: str) -> None:
        """Publish the x-death copy of ``record`` to ``queue``'s dead-letter exchange
        (one append, to every queue it routes to). Dropped if it routes nowhere."""
        a = queue.args
        assert a.dlx is not None
        message, key, headers = dead_letter_message(
            record, queue.name, reason, a.dlx, a.dlrk, self.now_ms())
        try:
            targets, mqtt = self.route(queue.vhost, a.dlx, key, headers)
        except AMQPError:
            return  # the DLX does not exist: RabbitMQ drops the message too
        lmqs = [q.lmq for q in targets]
        if mqtt:
            lmqs += self.topic_space.route_amq_topic(key)
        if lmqs:
            self.publisher.submit_callback(message, lmqs, _log_dead_letter_failure)

    def queue_unused(self, queue: Queue) -> None:
        self.delete_queue_now(queue)

    # -- vhosts ------------------------------------------------------------------------

    def vhost(self, name: str) -> VHost:
        vh = self.vhosts.get(name)
        if vh is None:
            vh = self.vhosts[name] = VHost(name)
            for xname, xtype in PREDECLARED.items():
                vh.exchanges[xname] = Exchange(name, xname, xtype)
        return vh

    # -- exchanges ---------------------------------------------------------------------

    def exchange(self, vhost: str, name: str) -> Exchange:
        x = self.vhost(vhost).exchanges.get(name)
        if x is None:
            raise _no_exchange(vhost, name)
        return x

    def declare_exchange(
        self, vhost: str, name: str, xtype: str, *, passive: bool, durable: bool,
        auto_delete: bool, internal: bool, arguments: dict[str, Any],
    ) -> None:
        vh = self.vhost(vhost)
        if name == "":  # passive too, as RabbitMQ (check_not_default_exchange)
            raise _default_refused()
        existing = vh.exchanges.get(name)
        if passive:
            if existing is None:
                raise _no_exchange(vhost, name)
            return
        if existing is None and name.startswith("amq."):
            raise ChannelError(
                ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if xtype not in EXCHANGE_TYPES:
            raise ConnectionLevelError(COMMAND_INVALID, f"unknown exchange type '{xtype}'")
        if xtype == DELAYED_TYPE:
            delayed_type(arguments)  # the plugin's 406 / 503 for a bad x-delayed-type
        if existing is not None:
            for arg, theirs, ours in (
                ("type", xtype, existing.type), ("durable", durable, existing.durable),
                ("auto_delete", auto_delete, existing.auto_delete),
                ("internal", internal, existing.internal),
            ):
                if theirs != ours:
                    raise ChannelError(
                        PRECONDITION_FAILED,
                        f"inequivalent arg '{arg}' for exchange '{name}' in vhost '{vhost}':"
                        f" received '{describe(theirs)}' but current is '{describe(ours)}'")
            return
        x = Exchange(vhost, name, xtype, durable, auto_delete, internal, dict(arguments))
        vh.exchanges[name] = x
        if durable:
            self._put(f"x/{vhost}\x00{name}", x.to_json())

    def delete_exchange(self, vhost: str, name: str, if_unused: bool) -> None:
        vh = self.vhost(vhost)
        if name == "" or name in PREDECLARED:
            raise ChannelError(
                ACCESS_REFUSED, f"operation not permitted on reserved exchange '{name}'")
        x = vh.exchanges.get(name)
        if x is None:
            return  # idempotent, as RabbitMQ 3.x
        if if_unused and x.bindings:
            raise ChannelError(PRECONDITION_FAILED, f"exchange '{name}' in vhost '{vhost}' in use")
        self._drop_exchange(vh, x)

    def _drop_exchange(self, vh: VHost, x: Exchange) -> None:
        for dest, key, _ in list(x.bindings):
            self._unbind(vh, x, dest, key, x.bindings[(dest, key, _)])
        for source, key, akey in list(vh.bound_to.get(("e", x.name), ())):
            src = vh.exchanges.get(source)
            if src is not None:
                arguments = src.bindings.get((("e", x.name), key, akey), {})
                self._unbind(vh, src, ("e", x.name), key, arguments)
        del vh.exchanges[x.name]
        if x.durable:
            self._delete(f"x/{vh.name}\x00{x.name}")

    # -- bindings ----------------------------------------------------------------------

    def bind(self, vhost: str, source: str, dest: Destination, key: str,
             arguments: dict[str, Any], conn_id: int) -> None:
        vh = self.vhost(vhost)
        if source == "" or dest == ("e", ""):
            raise _default_refused()
        durable_dest = self._check_destination(vh, dest, conn_id)
        x = vh.exchanges.get(source)
        if x is None:
            raise _no_exchange(vhost, source)
        if x.add_binding(dest, key, arguments):
            vh.bound_to.setdefault(dest, set()).add((source, key, args_key(arguments)))
            if x.durable and durable_dest:
                self._put(self._binding_key(vhost, source, dest, key, arguments), arguments)

    def unbind(self, vhost: str, source: str, dest: Destination, key: str,
               arguments: dict[str, Any], conn_id: int) -> None:
        vh = self.vhost(vhost)
        if source == "" or dest == ("e", ""):
            raise _default_refused()
        self._check_destination(vh, dest, conn_id)
        x = vh.exchanges.get(source)
        if x is None:
            raise _no_exchange(vhost, source)
        self._unbind(vh, x, dest, key, arguments)

    def _check_destination(self, vh: VHost, dest: Destination, conn_id: int) -> bool:
        kind, name = dest
        if kind == "q":
            q = vh.queues.get(name)
            if q is None:
                raise _no_queue(vh.name, name)
            self._check_owner(q, conn_id)
            return q.defn.durable
        x = vh.exchanges.get(name)
        if x is None:
            raise _no_exchange(vh.name, name)
        return x.durable

    def _unbind(self, vh: VHost, x: Exchange, dest: Destination, key: str,
                arguments: dict[str, Any]) -> None:
        if not x.remove_binding(dest, key, arguments):
            return
        refs = vh.bound_to.get(dest)
        if refs is not None:
            refs.discard((x.name, key, args_key(arguments)))
            if not refs:
                del vh.bound_to[dest]
        self._delete(self._binding_key(vh.name, x.name, dest, key, arguments))
        if x.auto_delete and not x.bindings and x.name in vh.exchanges:
            self._drop_exchange(vh, x)

    @staticmethod
    def _binding_key(vhost: str, source: str, dest: Destination, key: str,
                     arguments: dict[str, Any]) -> str:
        return f"b/{vhost}\x00{source}\x00{dest[0]}\x00{dest[1]}\x00{key}\x00{args_key(arguments)}"

    # -- queues ------------------------------------------------------------------------

    def queue(self, vhost: str, name: str, conn_id: int) -> Queue:
        q = self.vhost(vhost).queues.get(name)
        if q is None:
            raise _no_queue(vhost, name)
        self._check_owner(q, conn_id)
        return q

    @staticmethod
    def _check_owner(q: Queue, conn_id: int, strict: bool = False) -> None:
        """405 RESOURCE_LOCKED unless connection ``conn_id`` may use ``q``: any
        connection may use a shared queue, only its owner an exclusive one. ``strict``
        (a non-passive redeclare) also requires ``conn_id`` to be the queue's owner
        (0 for a shared queue), as RabbitMQ's ``check_exclusive_access``."""
        if (strict or q.defn.exclusive) and q.defn.owner != conn_id:
            raise ChannelError(
                RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{q.name}' in vhost "
                f"'{q.vhost}'. It could be originally declared on another connection or "
                "the exclusive property value does not match that of the original "
                "declaration.")

    def declare_queue(
        self, vhost: str, name: str, *, passive: bool, durable: bool, exclusive: bool,
        auto_delete: bool, arguments: dict[str, Any], conn_id: int,
    ) -> Queue:
        vh = self.vhost(vhost)
        if not name and not passive:
            name = "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        existing = vh.queues.get(name)
        if passive:
            if existing is None:
                raise _no_queue(vhost, name)
            self._check_owner(existing, conn_id)
            existing.touch()
            return existing
        if existing is None and name.startswith("amq.") and not name.startswith("amq.gen-"):
            raise ChannelError(
                ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'")
        if existing is not None:
            # RabbitMQ's strict ownership check: the declaring connection must own the
            # queue exactly as declared, so another connection's exclusive queue, a
            # shared queue declared exclusive, and the owner's exclusive queue declared
            # shared are all 405, before the equivalence of the other fields.
            self._check_owner(existing, conn_id if exclusive else 0, strict=True)
            d = existing.defn
            checks: list[tuple[str, Any, Any]] = [
                ("durable", durable, d.durable), ("auto_delete", auto_delete, d.auto_delete)]
            checks += [(a, arguments.get(a), d.arguments.get(a)) for a in EQUIVALENCE_ARGS]
            for arg, theirs, ours in checks:
                if describe(theirs) != describe(ours):
                    raise ChannelError(
                        PRECONDITION_FAILED,
                        f"inequivalent arg '{arg}' for queue '{name}' in vhost '{vhost}':"
                        f" received '{describe(theirs)}' but current is '{describe(ours)}'")
            existing.touch()
            return existing
        limit = self.max_queues_per_connection
        if limit and conn_id and sum(
            1 for v in self.vhosts.values() for q in v.queues.values() if q.creator == conn_id
        ) >= limit:
            raise ChannelError(
                PRECONDITION_FAILED,
                f"cannot declare queue '{name}': queue limit per connection ({limit}) is reached")
        qargs = QueueArgs.parse(vhost, name, arguments)
        defn = QueueDef(vhost, name, durable, exclusive, auto_delete, dict(arguments), qargs,
                        owner=conn_id if exclusive else 0)
        q = self._add_queue(vh, defn)
        q.creator = conn_id
        if durable and not exclusive:
            self._put(f"q/{vhost}\x00{name}", defn.to_json())
        return q

    def _add_queue(self, vh: VHost, defn: QueueDef) -> Queue:
        q = Queue(self.store, self.loop, defn, self)
        q.open()
        vh.queues[defn.name] = q
        if defn.exclusive:
            self.exclusive.setdefault(defn.owner, set()).add(q)
        return q

    def delete_queue(self, vhost: str, name: str, if_unused: bool, if_empty: bool,
                     conn_id: int) -> int:
        q = self.vhost(vhost).queues.get(name)
        if q is None:
            return 0  # idempotent, as RabbitMQ 3.x
        self._check_owner(q, conn_id)
        if if_unused and q.consumers:
            raise ChannelError(PRECONDITION_FAILED, f"queue '{name}' in vhost '{vhost}' in use")
        count = q.ready()
        if if_empty and count:
            raise ChannelError(
                PRECONDITION_FAILED, f"queue '{name}' in vhost '{vhost}' is not empty")
        self.delete_queue_now(q)
        return count

    def delete_queue_now(self, q: Queue) -> None:
        """Delete ``q``: cancel its consumers (consumer-cancel-notify), drop its
        bindings, its metadata and its LMQ."""
        vh = self.vhost(q.vhost)
        if vh.queues.get(q.name) is not q:
            return
        del vh.queues[q.name]
        q.close()
        for consumer in list(q.consumers):
            consumer.channel.server_cancel(consumer)
        q.consumers.clear()
        dest = ("q", q.name)
        for source, key, akey in list(vh.bound_to.get(dest, ())):
            x = vh.exchanges.get(source)
            if x is not None:
                self._unbind(vh, x, dest, key, x.bindings.get((dest, key, akey), {}))
        if q.defn.exclusive:
            owned = self.exclusive.get(q.defn.owner)
            if owned is not None:
                owned.discard(q)
        if q.defn.durable:
            self._delete(f"q/{q.vhost}\x00{q.name}")
        # Publishes routed here earlier in this loop turn are appended first: appended
        # after the removal, they would create the queue's LMQ again, orphaned.
        self.publisher.flush()
        self.store.remove_lmqs(q.lmqs)

    def purge(self, q: Queue) -> int:
        """Drop the ready messages (unacknowledged ones stay), as RabbitMQ does."""
        count = q.ready()
        for lmq in q.lmqs:
            info = self.store.lmq(lmq)
            if info is not None:
                self.store.commit_offset(GROUP, lmq, info.max_offset)
            while True:  # what is left to pop now is the requeued messages
                popped = self.store.pop.pop(GROUP, lmq, 256, 60_000)
                if not popped:
                    break
                for p in popped:
                    q.ack(p.receipt)
        return count

    def connection_closed(self, conn_id: int) -> None:
        for q in list(self.exclusive.pop(conn_id, ())):
            self.delete_queue_now(q)

    # -- routing -----------------------------------------------------------------------

    def route(self, vhost: str, exchange: str, routing_key: str,
              headers: dict[str, Any] | None) -> tuple[list[Queue], bool]:
        """The queues a message reaches, through exchange-to-exchange bindings and
        alternate exchanges; and whether it passed through ``amq.topic`` of the default
        vhost (then MQTT subscribers get it too)."""
        vh = self.vhosts.get(vhost)
        if vh is None:
            vh = self.vhost(vhost)
        if exchange == "":
            q = vh.queues.get(routing_key)
            return ([q] if q is not None else []), False
        start = vh.exchanges.get(exchange)
        if start is None:
            raise _no_exchange(vhost, exchange)
        names: set[str] = set()
        seen: set[str] = set()
        mqtt = False
        stack = [start]
        while stack:
            x = stack.pop()
            if x.name in seen:
                continue
            seen.add(x.name)
            if x.name == "amq.topic" and vhost == DEFAULT_VHOST:
                mqtt = True
            dests = x.match(routing_key, headers)
            if not dests and x.alternate is not None:
                ae = vh.exchanges.get(x.alternate)
                if ae is not None:
                    stack.append(ae)
            for kind, name in dests:
                if kind == "q":
                    names.add(name)
                else:
                    nxt = vh.exchanges.get(name)
                    if nxt is not None:
                        stack.append(nxt)
        queues = [q for q in (vh.queues.get(n) for n in names) if q is not None]
        return queues, mqtt

    def exchange_route(self, vhost: str, exchange: str, routing_key: str,
                       headers: Mapping[str, Any] | None) -> ExchangeRoute | None:
        """:meth:`route` for the topic space's exchange router (the JSON API's publish
        through an exchange): None for an unknown vhost or exchange; full queues that
        reject publishes (``x-overflow`` ``reject-publish``) left out and counted."""
        vh = self.vhosts.get(vhost)
        if vh is None or (exchange and exchange not in vh.exchanges):
            return None
        if exchange and vh.exchanges[exchange].internal:
            return ExchangeRoute([], internal=True)
        queues, mqtt = self.route(vhost, exchange, routing_key,
                                  dict(headers) if headers is not None else None)
        kept = [q for q in queues if not (q.rejects_when_full and q.is_full())]
        delayed = bool(exchange) and vh.exchanges[exchange].delayed
        return ExchangeRoute([q.lmq_for(None) for q in kept], delayed, mqtt,
                             len(queues) - len(kept))

    def amq_topic_lmqs(self, mqtt_topic: str) -> list[str]:
        """For the shared topic space: queue LMQs ``amq.topic`` of vhost ``/`` routes an
        MQTT publish on ``mqtt_topic`` to (routing key ``mqtt_to_amqp(mqtt_topic)``)."""
        vh = self.vhosts.get(DEFAULT_VHOST)
        if vh is None:
            return []
        amq_topic = vh.exchanges.get("amq.topic")
        if amq_topic is None or not amq_topic.bindings:
            return []  # the common MQTT-only case: no per-publish routing work
        return [q.lmq for q in self.route(
            DEFAULT_VHOST, "amq.topic", mqtt_to_amqp(mqtt_topic), None)[0]]

    # -- persistence -------------------------------------------------------------------

    def _put(self, key: str, value: Any) -> None:
        self.store.put_meta(META + key, json.dumps(value).encode())

    def _delete(self, key: str) -> None:
        self.store.delete_meta(META + key)

    def _items(self, kind: str) -> Iterator[tuple[list[str], Any]]:
        prefix = META + kind + "/"
        for key, raw in self.store.iter_meta(prefix):
            yield key[len(prefix):].split("\x00"), json.loads(raw)

    def load(self) -> None:
        """Rebuild the durable topology; drop the LMQs of queues that were not durable."""
        self.vhost(DEFAULT_VHOST)
        for (vhost, name), data in self._items("x"):
            self.vhost(vhost).exchanges[name] = Exchange(
                vhost, name, data["type"], True, data["auto_delete"], data["internal"],
                data["arguments"])
        for (vhost, name), data in self._items("q"):
            arguments = data["arguments"]
            defn = QueueDef(vhost, name, True, False, data["auto_delete"], arguments,
                            QueueArgs.parse(vhost, name, arguments))
            self._add_queue(self.vhost(vhost), defn)
        for (vhost, source, kind, dest, key, _), arguments in self._items("b"):
            vh = self.vhost(vhost)
            x = vh.exchanges.get(source)
            target = vh.queues.get(dest) if kind == "q" else vh.exchanges.get(dest)
            if x is not None and target is not None and x.add_binding((kind, dest), key,
                                                                       arguments):
                vh.bound_to.setdefault((kind, dest), set()).add(
                    (source, key, args_key(arguments)))
        live = {lmq for vh in self.vhosts.values() for q in vh.queues.values() for lmq in q.lmqs}
        stale = [i.name for i in self.store.lmqs(AMQP_PREFIX) if i.name not in live]
        if self.store.replica is not None and self.store.replica.fenced is not None:
            stale = []  # a slave of a broker group removes nothing: its master does
        if stale:
            self.store.remove_lmqs(stale)
        queues = sum(len(vh.queues) for vh in self.vhosts.values())
        if queues or stale:
            log.info("amqp topology loaded", extra={"queues": queues, "removed": len(stale)})

    def all_queues(self) -> Iterator[Queue]:
        for vh in self.vhosts.values():
            yield from vh.queues.values()


def _log_dead_letter_failure(_result: Any, exc: BaseException | None) -> None:
    if exc is not None:
        log.warning("dead-letter publish failed: %s", exc)
