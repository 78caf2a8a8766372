"""The AMQP front end's views for the admin API (:mod:`gateway.admin.views`): vhosts,
exchanges, queues (depth, unacked, consumers, rates) and bindings; purge and delete a
queue, delete an exchange (the broker's own operations, as an AMQP client's would be,
with no connection owning them).

A queue's rates (:class:`QueueRates`) are read off the store, not counted on the hot
path: messages stored into its LMQs (their end offsets) and messages settled (its
committed offsets: acked, or purged) per second, between two looks at the queue at
least :data:`MIN_GAP_S` apart (the console reloads a page every 5 s); none on the first
look."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.amqp.queues import GROUP
from protocol.amqp.errors import ChannelError

if TYPE_CHECKING:
    from gateway.amqp.broker import Broker, VHost
    from gateway.amqp.frontend import AmqpFrontEnd
    from gateway.amqp.queues import Queue

__all__ = ["register"]


#: Seconds between the two looks a queue's rates are measured over, at least.
MIN_GAP_S = 1.0


class QueueRates:
    """Per queue: the last look (time, messages stored, messages settled) and the rates
    measured up to it (module doc)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._looks: dict[tuple[str, str], tuple[float, int, int]] = {}
        self._rates: dict[tuple[str, str], tuple[float, float]] = {}

    def rates(self, q: Queue) -> tuple[float, float] | None:
        """(stored per second, settled per second) of ``q``, or None on a first look."""
        stored = settled = 0
        for lmq in q.lmqs:
            info = q.store.lmq(lmq)
            if info is not None:
                stored += info.max_offset
            settled += q.store.get_offset(GROUP, lmq) or 0
        key, now = (q.vhost, q.name), self._clock()
        last = self._looks.get(key)
        if last is None or now - last[0] >= MIN_GAP_S:
            self._looks[key] = (now, stored, settled)
            if last is not None:
                gap = now - last[0]
                self._rates[key] = (
                    max(0, stored - last[1]) / gap,
                    max(0, settled - last[2]) / gap,
                )
        return self._rates.get(key)

    def forget(self, known: Callable[[str, str], bool]) -> None:
        """Drop the looks of queues ``known`` says are gone."""
        for key in [k for k in self._looks if not known(*k)]:
            self._looks.pop(key, None)
            self._rates.pop(key, None)


def register(front: AmqpFrontEnd) -> None:
    broker = front.broker
    views = front.ctx.views
    rates = QueueRates()
    views.provide("amqp.objects", lambda **kw: _objects(broker, rates, **kw))
    views.provide("amqp.queue.rows", lambda keys: _queue_rows(broker, rates, keys))
    views.provide("amqp.queue.purge", lambda vhost, name: _purge(broker, vhost, name))
    views.provide("amqp.queue.delete", lambda vhost, name: _delete_queue(broker, vhost, name))
    views.provide("amqp.exchange.delete", lambda vhost, name: _delete_exchange(broker, vhost, name))


def _vhost(broker: Broker, name: str) -> VHost:
    vh = broker.vhosts.get(name)
    if vh is None:
        raise LookupError(f"no AMQP vhost {name!r}")
    return vh


def _queue(broker: Broker, vhost: str, name: str) -> Queue:
    q = _vhost(broker, vhost).queues.get(name)
    if q is None:
        raise LookupError(f"no queue {name!r} in vhost {vhost!r}")
    return q


def _queue_row(q: Queue, rates: QueueRates | None = None) -> dict[str, Any]:
    """A queue's row; ``messages`` (its depth: a store lookup per LMQ it reads) and
    the rates only with ``rates``."""
    d = q.defn
    row = {
        "vhost": q.vhost,
        "name": q.name,
        "durable": d.durable,
        "exclusive": d.exclusive,
        "auto_delete": d.auto_delete,
        "unacked": q.unacked,
        "consumers": len(q.consumers),
        "arguments": {k: str(v) for k, v in d.arguments.items()},
        "lmq": q.lmq,
    }
    if rates is not None:
        row["messages"] = q.ready()
        measured = rates.rates(q)
        row["stored_per_s"] = None if measured is None else round(measured[0], 2)
        row["settled_per_s"] = None if measured is None else round(measured[1], 2)
    return row


def _queue_rows(
    broker: Broker, rates: QueueRates, keys: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The full rows (with depth and rates) of the queues ``keys`` names (vhost, name),
    in that order; a queue gone since is left out."""
    rows = []
    for vhost, name in keys:
        vh = broker.vhosts.get(vhost)
        q = vh.queues.get(name) if vh is not None else None
        if q is not None:
            rows.append(_queue_row(q, rates))
    rates.forget(lambda vhost, name: name in getattr(broker.vhosts.get(vhost), "queues", ()))
    return rows


def _objects(
    broker: Broker, rates: QueueRates, kinds: tuple[str, ...] | None = None, depth: bool = True
) -> dict[str, Any]:
    """The vhosts, exchanges, queues and bindings (only ``kinds`` when given); the
    queues' depths only with ``depth`` (a list call pages first, then asks
    ``amqp.queue.rows`` for its page)."""
    wanted = set(kinds) if kinds is not None else {"vhosts", "exchanges", "queues", "bindings"}
    vhosts: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    queues: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for vh in broker.vhosts.values():
        if "vhosts" in wanted:
            vhosts.append(
                {"name": vh.name, "exchanges": len(vh.exchanges), "queues": len(vh.queues)}
            )
        if "queues" in wanted:
            queues.extend(_queue_row(q, rates if depth else None) for q in vh.queues.values())
        if "exchanges" not in wanted and "bindings" not in wanted:
            continue
        for x in vh.exchanges.values():
            if "exchanges" in wanted:
                exchanges.append(
                    {
                        "vhost": vh.name,
                        "name": x.name,
                        "type": x.type,
                        "durable": x.durable,
                        "auto_delete": x.auto_delete,
                        "internal": x.internal,
                        "bindings": len(x.bindings),
                    }
                )
            if "bindings" not in wanted:
                continue
            for dest, key, _akey in x.bindings:
                bindings.append(
                    {
                        "vhost": vh.name,
                        "source": x.name,
                        "destination_type": "queue" if dest[0] == "q" else "exchange",
                        "destination": dest[1],
                        "routing_key": key,
                    }
                )
    return {"vhosts": vhosts, "exchanges": exchanges, "queues": queues, "bindings": bindings}


def _purge(broker: Broker, vhost: str, name: str) -> dict[str, Any]:
    q = _queue(broker, vhost, name)
    return {"vhost": vhost, "name": name, "purged": broker.purge(q)}


def _delete_queue(broker: Broker, vhost: str, name: str) -> dict[str, Any]:
    q = _queue(broker, vhost, name)
    count = q.ready()
    broker.delete_queue_now(q)
    return {"vhost": vhost, "name": name, "deleted": True, "messages": count}


def _delete_exchange(broker: Broker, vhost: str, name: str) -> dict[str, Any]:
    vh = _vhost(broker, vhost)
    if name not in vh.exchanges:
        raise LookupError(f"no exchange {name!r} in vhost {vhost!r}")
    try:
        broker.delete_exchange(vhost, name, if_unused=False)
    except ChannelError as exc:  # a predeclared exchange
        raise ValueError(str(exc)) from None
    return {"vhost": vhost, "name": name, "deleted": True}
