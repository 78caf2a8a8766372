"""The AMQP front end's views for the admin API (:mod:`gateway.admin.views`): vhosts,
exchanges, queues (depth, unacked, consumers) and bindings; purge and delete a queue,
delete an exchange (the broker's own operations, as an AMQP client's would be, with
no connection owning them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.amqp.errors import ChannelError

if TYPE_CHECKING:
    from gateway.amqp.broker import Broker, VHost
    from gateway.amqp.frontend import AmqpFrontEnd
    from gateway.amqp.queues import Queue

__all__ = ["register"]


def register(front: AmqpFrontEnd) -> None:
    broker = front.broker
    views = front.ctx.views
    views.provide("amqp.objects", lambda: _objects(broker))
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


def _queue_row(q: Queue) -> dict[str, Any]:
    d = q.defn
    return {
        "vhost": q.vhost,
        "name": q.name,
        "durable": d.durable,
        "exclusive": d.exclusive,
        "auto_delete": d.auto_delete,
        "messages": q.ready(),
        "unacked": q.unacked,
        "consumers": len(q.consumers),
        "arguments": {k: str(v) for k, v in d.arguments.items()},
        "lmq": q.lmq,
    }


def _objects(broker: Broker) -> dict[str, Any]:
    vhosts: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    queues: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for vh in broker.vhosts.values():
        vhosts.append({"name": vh.name, "exchanges": len(vh.exchanges), "queues": len(vh.queues)})
        for x in vh.exchanges.values():
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
        queues.extend(_queue_row(q) for q in vh.queues.values())
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
