"""The JSON API under ``/v1/`` (issue 18; docs/http.md, the OpenAPI document at
``/v1/openapi.json``).

Publish to a RocketMQ topic (``POST /v1/topics/{topic}/messages``: one message or a
batch, per-entry results, 207 when mixed) or to an MQTT topic (``POST
/v1/mqtt/{topic}/messages``, the topic one URL-encoded segment), answered once stored
under the configured durability; ``Idempotency-Key`` stores a retried publish once.
Consume by group with long polling (``POST /v1/groups/{group}/topics/{topic}/receive``)
and receipt handles; ack, nack, change of visibility; seek a group's offsets; a
server-sent-event stream. Errors are RFC 9457 ``application/problem+json``.

A message published here is stored as a RocketMQ send is (:func:`to_store_message`): its
tag, keys, message id (``UNIQ_KEY``), message group (``__SHARDINGKEY``) and user
properties, so remoting, gRPC, MQTT and AMQP consumers read it as they read a RocketMQ
message, and it reaches the MQTT subscribers and ``amq.topic`` queues of its name.

Consumers are stateless on the server: the group's progress and what is in flight are
the store's pop state, and a receipt handle carries everything an ack needs (topic,
queue, offset, the pop's ExtraInfo), so it works on any gateway node sharing the store
and across a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.http.messages import Request, Response
from gateway.http.v1 import amqp_queues, transactions
from gateway.http.v1.documents import ROUTE_ORDER, ApiError, json_response
from gateway.http.v1.openapi import OPENAPI
from gateway.http.v1.publish import Publishing
from gateway.http.v1.receive import Receiving
from gateway.http.v1.stream import Streaming

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.http.routes import Router

__all__ = ["ROUTE_ORDER", "JsonApi", "register_routes"]


class JsonApi(Publishing, Receiving, Streaming):
    """The API, its parts over one context (:mod:`.base`, :mod:`.publish`,
    :mod:`.receive`, :mod:`.stream`; :mod:`.transactions` and :mod:`.amqp_queues`
    take it)."""

    async def openapi(self, request: Request) -> Response:
        return json_response(200, OPENAPI)


def _guard(fn: Any, api: JsonApi | None = None) -> Any:
    """``fn`` answering its ApiError as a problem document; with ``api``, after the
    caller is authenticated."""

    async def handler(request: Request) -> Response:
        try:
            if api is not None and api.login is not None:  # (open mode: nothing to await)
                await api.authenticate(request)
            response: Response = await fn(request)
            return response
        except ApiError as exc:
            return exc.response()

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def register_routes(router: Router, ctx: GatewayContext) -> None:
    api = JsonApi(ctx)
    api.restore_mqtt_subscriptions()
    routes = (
        ("GET", "/v1/openapi.json", api.openapi),
        ("POST", "/v1/topics/{topic}/messages", api.publish),
        ("POST", "/v1/mqtt/{topic}/messages", api.publish_mqtt),
        ("POST", "/v1/amqp/{vhost}/queues/{queue}/messages", api.publish_amqp_queue),
        ("POST", "/v1/amqp/{vhost}/exchanges/{exchange}/messages", api.publish_amqp_exchange),
        ("POST", "/v1/groups/{group}/topics/{topic}/receive", api.receive),
        ("POST", "/v1/groups/{group}/mqtt/{filter}/receive", api.receive_mqtt),
        ("DELETE", "/v1/groups/{group}/mqtt/{filter}", api.delete_mqtt_subscription),
        ("GET", "/v1/groups/{group}/topics/{topic}/stream", api.stream),
        ("POST", "/v1/groups/{group}/topics/{topic}/seek", api.seek),
        ("POST", "/v1/transactions/{transaction}/{action}", api.end_transaction),
        ("POST", "/v1/groups/{group}/ack", api.ack),
        ("POST", "/v1/groups/{group}/nack", api.nack),
        ("POST", "/v1/groups/{group}/visibility", api.change_visibility),
    )
    for method, pattern, fn in (*routes, *amqp_queues.routes(api), *transactions.routes(api)):
        router.add(method, pattern, _guard(fn, None if fn == api.openapi else api))
