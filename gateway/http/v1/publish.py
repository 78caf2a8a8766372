"""The JSON API's publishes: to a RocketMQ topic (the producer service,
:mod:`gateway.rocketmq.producer`: one rule for every RocketMQ door), to an MQTT topic,
to an AMQP queue or exchange; idempotent publishes (``Idempotency-Key``); the end of a
transaction."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from typing import Any

from broker_core import (
    AppendResult,
    Message,
    Protocol,
    StoreError,
)
from gateway.http.messages import Request, Response
from gateway.http.v1.base import ApiBase
from gateway.http.v1.documents import (
    ID_PROPERTY,
    MAX_BATCH,
    ApiError,
    body_of,
    common_status,
    half_group,
    int_field,
    json_body,
    json_object,
    json_response,
    producer_error,
    properties_of,
    store_error,
    text_field,
)
from gateway.rocketmq import producer as p
from gateway.rocketmq.producer import ProducerError, ShardingKey
from gateway.rocketmq.records import (
    USER_PROPERTIES,
    rocketmq_properties,
    to_store_message,
)
from gateway.topic_space import amqp_queue_lmq
from gateway.user_properties import encode_user_properties
from lmq.rocketmq import (
    MQTT_SECOND_TOPIC,
    TopicConfig,
    message_type_of,
)
from lmq.topic_space import amqp_to_mqtt
from protocol.remoting.messages import decode_properties, encode_properties

log = logging.getLogger("gateway.http.v1")


def _new_id() -> str:
    """A new message id: 32 random hex digits, upper case (what ``uuid4().hex.upper()``
    gave, less the version digits, in a quarter of its time: one is made per publish)."""
    return os.urandom(16).hex().upper()


class Publishing(ApiBase):
    """Publishes, idempotent publishes and the end of a transaction."""

    def _topic(self, request: Request, name: str) -> TopicConfig:
        """The topic the caller may send to (the producer service's resolve)."""
        principal = self.principal(request)
        try:
            return self.ctx.rocketmq.producer.resolve(name, principal, "http")
        except ProducerError as exc:
            raise producer_error(exc) from None

    async def publish(self, request: Request) -> Response:
        topic = request.params["topic"]
        config = self._topic(request, topic)
        doc = json_body(request)
        key = request.header("idempotency-key")
        if isinstance(doc, dict) and "messages" in doc:
            entries = doc["messages"]
            if not isinstance(entries, list) or not entries:
                raise ApiError(400, "'messages' must be a non-empty array")
            if len(entries) > MAX_BATCH:
                raise ApiError(413, f"{len(entries)} messages; at most {MAX_BATCH} a request")
            if key is not None:
                raise ApiError(400, "Idempotency-Key names one message; in a batch give"
                                    " each entry its own 'idempotency_key'")
            self.check_rate(request, len(entries))
            results = await asyncio.gather(
                *(self._publish_one(topic, config, entry, None, request)
                  for entry in entries))
            failed = sum(1 for r in results if r["status"] >= 300)
            status = 200 if not failed else (207 if failed < len(results) else
                                             common_status(results))
            return json_response(status, {"results": results})
        self.check_rate(request)
        result = await self._publish_one(topic, config, doc, key, request)
        if result["status"] >= 300:
            raise ApiError(result["status"], result["detail"])
        return json_response(200 if result.get("duplicate") else 201, result)

    async def publish_mqtt(self, request: Request) -> Response:
        """An MQTT-named publish: the MQTT subscribers, amq.topic queues and RocketMQ
        queue of the MQTT topic (as an MQTT QoS 1 publish is routed)."""
        topic = request.params["topic"]
        if not topic or "+" in topic or "#" in topic or "\x00" in topic:
            raise ApiError(400, "an MQTT topic name without wildcards is required")
        self.check_publish(request, topic)
        self.check_rate(request)
        doc = json_object(request)
        try:
            body = body_of(doc)
            user = properties_of(doc)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        props = {USER_PROPERTIES: encode_user_properties(list(user.items()))} if user else {}
        message = Message(topic, body, props, "http", str(doc.get("tag") or ""), 1, False,
                          Protocol.MQTT, int(time.time() * 1000))
        lmqs = list(self.ctx.topic_space.route_mqtt(topic))
        try:
            result = await self.ctx.publisher.submit(message, lmqs)
        except Exception as exc:
            raise store_error(exc) from None
        self.counts.stored(request)
        return json_response(201, {"status": 201, "topic": topic, "position": result.position,
                                   "routed_to": len(lmqs)})

    async def publish_amqp_queue(self, request: Request) -> Response:
        """Straight to an AMQP queue (the default exchange's routing): the queue must
        exist (declared over AMQP). Stored as a RocketMQ-style record whose topic is the
        queue name; AMQP consumers read it with its properties as headers."""
        vhost, queue = request.params["vhost"], request.params["queue"]
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_write(
                principal, vhost, "amq.default"):
            raise ApiError(403, f"not allowed to publish in vhost {vhost!r}")
        lmq = amqp_queue_lmq(vhost, queue)
        if self.ctx.store.lmq(lmq) is None:
            raise ApiError(404, f"no queue {queue!r} in vhost {vhost!r} (declare it over"
                                " AMQP first)")
        self.check_rate(request)
        doc = json_object(request)
        try:
            body = body_of(doc)
            props = dict(properties_of(doc))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        message_id = _new_id()
        props[ID_PROPERTY] = message_id
        message = to_store_message(queue, body, encode_properties(props), props,
                                   origin="http", born_ms=int(time.time() * 1000))
        try:
            result = await self.ctx.publisher.submit(message, [lmq])
        except Exception as exc:
            raise store_error(exc) from None
        self.counts.stored(request)
        return json_response(201, {"status": 201, "message_id": message_id, "topic": queue,
                                   "position": result.position, "offset": result.offsets[0]})

    async def publish_amqp_exchange(self, request: Request) -> Response:
        """Through an AMQP exchange (any type: direct, fanout, topic, headers,
        ``x-delayed-message``), routed by the AMQP front end's own bindings (the topic
        space's exchange router: ``gateway.http`` does not import ``gateway.amqp``).
        ``routing_key``; the ``properties`` are the message's headers (a headers
        exchange matches on them); ``delay_ms`` is ``x-delay`` (honoured on an
        ``x-delayed-message`` exchange only, as the plugin). 404 for an unknown vhost or
        exchange; checked against the user's AMQP write permission on the exchange, and
        the MQTT publish ACL when it passes through ``amq.topic``."""
        vhost, exchange = request.params["vhost"], request.params["exchange"]
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_write(
                principal, vhost, exchange or "amq.default"):
            raise ApiError(403, f"not allowed to publish to exchange {exchange!r} in vhost"
                                f" {vhost!r}")
        doc = json_object(request)
        key = doc.get("routing_key", "")
        if not isinstance(key, str):
            raise ApiError(400, "routing_key must be a string")
        try:
            body = body_of(doc)
            props = dict(properties_of(doc))
            delay = int_field(doc["delay_ms"], "delay_ms") if "delay_ms" in doc else 0
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        if delay < 0:
            raise ApiError(400, "delay_ms must not be negative")
        route = self.ctx.topic_space.route_exchange(vhost, exchange, key, props or None)
        if route is None:
            raise ApiError(404, f"no exchange {exchange!r} in vhost {vhost!r} (declare it"
                                " over AMQP first)")
        if route.internal:
            raise ApiError(403, f"cannot publish to internal exchange {exchange!r} in vhost"
                                f" {vhost!r}")
        if route.mqtt:
            self.check_publish(request, amqp_to_mqtt(key))
        self.check_rate(request)
        message_id = _new_id()
        props[ID_PROPERTY] = message_id
        now = int(time.time() * 1000)
        # stored under the MQTT name of its routing key, as AMQP consumers read a
        # foreign record's routing key back (mqtt_to_amqp) and MQTT subscribers its topic
        name = amqp_to_mqtt(key)
        message = to_store_message(name, body, encode_properties(props), props,
                                   origin="http", born_ms=now)
        out: dict[str, Any] = {"status": 201, "message_id": message_id, "topic": name,
                               "routed_to": len(route.lmqs)}
        if route.refused:
            out["refused"] = route.refused
        if not route.lmqs:
            out["status"] = 200  # unroutable: dropped, as AMQP does without mandatory
            out["detail"] = "routed to no queue: not stored"
            return json_response(200, out)
        try:
            if delay and route.delayed:
                result = await self._submit_delayed(message, route.lmqs, now + delay)
                out["deliver_at_ms"] = now + delay
            else:
                result = await self.ctx.publisher.submit(message, route.lmqs)
        except Exception as exc:
            raise store_error(exc) from None
        out["position"] = result.position
        self.counts.stored(request)
        return json_response(201, out)

    async def _publish_one(self, topic: str, config: TopicConfig, entry: object,
                           key: str | None, request: Request) -> dict[str, Any]:
        try:
            if not isinstance(entry, dict):
                raise ApiError(400, "a message is a JSON object")
            if key is None and entry.get("idempotency_key") is not None:
                key = str(entry["idempotency_key"])
            message_id, message, queue_id, lmqs, due_ms = self._message(
                topic, config, entry, key)
        except ProducerError as exc:
            error = producer_error(exc)
            return {"status": error.status, "detail": error.detail}
        except ApiError as exc:
            return {"status": exc.status, "detail": exc.detail}
        except ValueError as exc:
            return {"status": 400, "detail": str(exc)}
        if key is None:
            return await self._store(request, topic, message_id, message, queue_id, lmqs, due_ms)
        flight_key = (topic, message_id)
        pending = self._inflight.get(flight_key)
        if pending is not None:  # the same key, concurrently: one store, the same answer
            try:
                return {**await asyncio.shield(pending), "duplicate": True}
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request itself is cancelled
                # the first attempt's client went away: look again, else store it here
        found = self._find(topic, message_id)
        if found is not None:
            return found
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._inflight[flight_key] = future
        try:
            result = await self._store(request, topic, message_id, message, queue_id, lmqs, due_ms)
            future.set_result(result)
            return result
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            del self._inflight[flight_key]

    def _find(self, topic: str, message_id: str) -> dict[str, Any] | None:
        """The answer to an idempotent publish already stored within the window."""
        since = int(time.time() * 1000) - self.window_ms
        for record in self.ctx.store.find_by_key(topic, message_id, 4, since):
            props = decode_properties(rocketmq_properties(record))
            if props.get(ID_PROPERTY) == message_id and record.topic.split("/")[0] == topic:
                return {"status": 200, "message_id": message_id, "topic": topic,
                        "position": record.position, "duplicate": True}
        return None

    def _message(self, topic: str, config: TopicConfig, entry: dict[str, Any],
                 key: str | None) -> tuple[str, Message, int, list[str], int | None]:
        body = body_of(entry)
        props: dict[str, str] = dict(properties_of(entry))
        tag = entry.get("tag")
        if tag is not None:
            props["TAGS"] = text_field(tag, "tag")
        keys = entry.get("keys")
        if keys is not None:
            keys_list = [keys] if isinstance(keys, str) else keys
            if not isinstance(keys_list, list) or not all(
                    isinstance(k, str) and k and " " not in k for k in keys_list):
                raise ValueError("'keys' is a string or an array of strings without spaces")
            props["KEYS"] = " ".join(keys_list)
        if key is not None:
            if not key or len(key) > 256:
                raise ValueError("an idempotency key is 1-256 characters")
            digest = hashlib.sha256(f"{topic}\n{key}".encode()).hexdigest()[:32].upper()
            message_id = digest
        else:
            message_id = _new_id()
        props[ID_PROPERTY] = message_id
        group = entry.get("message_group")
        if group is not None:
            props["__SHARDINGKEY"] = text_field(group, "message_group")
        if entry.get("transaction"):
            props["TRAN_MSG"] = "true"
            props["PGROUP"] = text_field(entry.get("producer_group", "http"), "producer_group")
        due_ms: int | None = None
        now = int(time.time() * 1000)
        if entry.get("delay_ms") is not None:
            due_ms = now + int_field(entry["delay_ms"], "delay_ms")
        elif entry.get("deliver_at_ms") is not None:
            due_ms = int_field(entry["deliver_at_ms"], "deliver_at_ms")
        if due_ms is not None and "TRAN_MSG" in props:
            raise ValueError("a transactional message cannot be delayed")
        if due_ms is not None:
            if due_ms <= now:
                due_ms = None
            else:
                props["__STARTDELIVERTIME"] = str(due_ms)
        producer = self.ctx.rocketmq.producer
        producer.check_type(config, message_type_of(props))
        queue_id = ShardingKey(props.get("__SHARDINGKEY", "")).select(config)
        lmqs = producer.lmqs(topic, queue_id, props.get(MQTT_SECOND_TOPIC, ""))
        message = to_store_message(topic, body, encode_properties(props), props,
                                   origin="http", born_ms=now)
        return message_id, message, queue_id, lmqs, due_ms

    async def _store(self, request: Request, topic: str, message_id: str, message: Message,
                     queue_id: int, lmqs: list[str],
                     due_ms: int | None) -> dict[str, Any]:
        producer = self.ctx.rocketmq.producer
        producer_group = half_group(message)
        try:
            if producer_group is not None:
                result = await producer.send_half(message, lmqs, producer_group)
            elif due_ms is None:
                result = await producer.send(message, lmqs)
            else:
                [result] = await producer.send_delayed([(message, lmqs, due_ms)])
        except Exception as exc:
            error = store_error(exc)
            return {"status": error.status, "detail": error.detail}
        self.counts.stored(request)
        out: dict[str, Any] = {"status": 201, "message_id": message_id, "topic": topic,
                               "queue_id": queue_id, "position": result.position}
        if producer_group is not None:
            out["transaction_id"] = str(result.position)
        elif due_ms is None:
            out["offset"] = result.offsets[0]
        else:
            out["deliver_at_ms"] = due_ms
        return out

    def _submit_delayed(self, message: Message, lmqs: list[str], due_ms: int
                        ) -> asyncio.Future[AppendResult]:
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()

        def done(result: AppendResult | None, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                assert result is not None
                future.set_result(result)

        self.ctx.publisher.submit_delayed(message, lmqs, due_ms, done)
        return future

    async def end_transaction(self, request: Request) -> Response:
        """Commit or roll back a half message by its transaction id (its position)."""
        raw, action = request.params["transaction"], request.params["action"]
        if action not in ("commit", "rollback"):
            raise ApiError(404, f"no action {action!r}: commit or rollback")
        if not raw.isdigit():
            raise ApiError(404, f"no transaction {raw!r}")
        principal = self.principal(request)
        try:
            result = await self.ctx.rocketmq.producer.end_transaction(
                int(raw), action == "commit", principal, "http")
        except p.TransactionNotFound:
            raise ApiError(404, f"no transaction {raw} (never, or its segment is gone)") \
                from None
        except p.TransactionConflict as exc:
            raise ApiError(409, f"transaction {raw} already ended: {exc.outcome.value}") \
                from None
        except ProducerError as exc:
            raise producer_error(exc) from None
        except StoreError as exc:
            raise ApiError(503, str(exc)) from None
        return json_response(200, {"transaction_id": raw, "outcome": result.outcome.value})
