"""Consuming AMQP queues over the JSON API: ``/v1/amqp/{vhost}/queues/{queue}/receive``
and the ``ack``, ``nack`` and ``visibility`` of what it gave.

The queue delivers (``gateway/amqp/queues.py`` decides order, TTL, dead-lettering,
``x-delivery-limit``, priorities, single-active-consumer and message groups) to a
consumer the AMQP front end attaches for the long poll; the deliveries are held under
receipt handles for ``invisible_seconds``, then requeued unless settled. All of it is
reached through the topic space's seam (:mod:`gateway.queue_consumers`):
``gateway.http`` does not import ``gateway.amqp``. Permissions are the vhost's, as
RabbitMQ's: ``read`` on the queue for every call.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gateway.http.messages import Request, Response
from gateway.http.v1.documents import (
    MAX_BATCH,
    MAX_RECEIVE,
    MAX_WAIT_SECONDS,
    ApiError,
    json_body,
    json_object,
    json_response,
    number_option,
    per_entry,
    with_body,
)
from gateway.queue_consumers import Handle, QueueConsumeError, QueueConsumers, QueueDelivery

if TYPE_CHECKING:
    from gateway.http.v1 import JsonApi

DEFAULT_INVISIBLE_SECONDS = 30.0


class AmqpQueueApi:
    def __init__(self, api: JsonApi) -> None:
        self.api = api
        self.ctx = api.ctx

    def _consumers(self) -> QueueConsumers:
        consumers = self.ctx.topic_space.queue_consumers
        if consumers is None:
            raise ApiError(404, "AMQP queues are not served (the AMQP front end is off)")
        return consumers

    def _check_read(self, request: Request, vhost: str, queue: str) -> None:
        principal = self.api.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_read(
                principal, vhost, queue):
            raise ApiError(403, f"not allowed to consume from queue {queue!r} in vhost"
                                f" {vhost!r}")

    async def receive(self, request: Request) -> Response:
        vhost, queue = request.params["vhost"], request.params["queue"]
        self._check_read(request, vhost, queue)
        consumers = self._consumers()
        doc = json_object(request)
        option = functools.partial(number_option, doc, request.query)
        max_invisible = consumers.max_invisible_ms / 1000

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        invisible = option("invisible_seconds", DEFAULT_INVISIBLE_SECONDS, 1, max_invisible)
        try:
            got = await consumers.receive(vhost, queue, count, int(invisible * 1000), wait)
        except QueueConsumeError as exc:
            raise ApiError(exc.status, str(exc)) from None
        self.api.counts.given(request, len(got))
        return json_response(200, {"messages": [_message_doc(vhost, queue, d) for d in got]})

    def _handles(self, request: Request) -> tuple[str, str, dict[str, Any], list[object]]:
        vhost, queue = request.params["vhost"], request.params["queue"]
        self._check_read(request, vhost, queue)
        doc = json_body(request)
        handles = doc.get("receipt_handles") if isinstance(doc, dict) else None
        if not isinstance(handles, list) or not handles:
            raise ApiError(400, "'receipt_handles' must be a non-empty array")
        if len(handles) > MAX_BATCH:
            raise ApiError(413, f"at most {MAX_BATCH} receipt handles a request")
        return vhost, queue, doc, handles

    def _each(self, vhost: str, queue: str, handles: list[object], settle: Any) -> Response:
        consumers = self._consumers()
        results: list[dict[str, Any]] = []
        for raw in handles:
            result: dict[str, Any] = {"status": 200, "receipt_handle": raw}
            try:
                handle = Handle.decode(raw)
                if handle.vhost != vhost or handle.queue != queue:
                    raise ValueError(f"a receipt handle of queue {handle.queue!r} in vhost"
                                     f" {handle.vhost!r}, not of this one")
                result.update(settle(consumers, handle) or {})
            except QueueConsumeError as exc:
                result.update(status=exc.status, detail=str(exc))
            except ValueError as exc:
                result.update(status=400, detail=str(exc))
            if not isinstance(raw, str):
                result["receipt_handle"] = str(raw)
            results.append(result)
        return per_entry(results)

    async def ack(self, request: Request) -> Response:
        vhost, queue, _doc, handles = self._handles(request)
        return self._each(vhost, queue, handles, lambda c, h: c.settle(h, "ack"))

    async def nack(self, request: Request) -> Response:
        """Back to the queue (``requeue``, the default), or rejected: dead-lettered when
        the queue has a dead-letter exchange, else dropped (``"requeue": false``)."""
        vhost, queue, doc, handles = self._handles(request)
        requeue = doc.get("requeue", True)
        if not isinstance(requeue, bool):
            raise ApiError(400, "requeue must be true or false")
        action = "requeue" if requeue else "reject"
        return self._each(vhost, queue, handles, lambda c, h: c.settle(h, action))

    async def change_visibility(self, request: Request) -> Response:
        vhost, queue, doc, handles = self._handles(request)
        limit = self._consumers().max_invisible_ms / 1000
        seconds = doc.get("invisible_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
                0 <= seconds <= limit):
            raise ApiError(400, f"invisible_seconds must be a number from 0 to {limit:g}")
        ms = int(seconds * 1000)

        def extend(c: QueueConsumers, h: Handle) -> dict[str, Any]:
            visible = c.extend(h, ms)
            if not ms:  # back in the queue: the handle is spent
                return {"next_visible_ms": visible}
            # the handle stays the same (held by this node until settled or due)
            return {"new_receipt_handle": h.encode(), "next_visible_ms": visible}

        return self._each(vhost, queue, handles, extend)


def _message_doc(vhost: str, queue: str, d: QueueDelivery) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "receipt_handle": d.handle,
        "vhost": vhost,
        "queue": queue,
        "exchange": d.exchange,
        "routing_key": d.routing_key,
        "redelivered": d.redelivered,
        "delivery_count": d.delivery_count,
        "properties": d.properties,
        "next_visible_ms": d.next_visible_ms,
    }
    return with_body(doc, d.body)


def routes(api: JsonApi) -> list[tuple[str, str, Any]]:
    q = AmqpQueueApi(api)
    base = "/v1/amqp/{vhost}/queues/{queue}"
    return [
        ("POST", f"{base}/receive", q.receive),
        ("POST", f"{base}/ack", q.ack),
        ("POST", f"{base}/nack", q.nack),
        ("POST", f"{base}/visibility", q.change_visibility),
    ]
