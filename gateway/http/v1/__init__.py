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

import asyncio
import base64
import binascii
import functools
import hashlib
import itertools
import json
import logging
import math
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker_core import (
    AppendResult,
    DelayTooLong,
    Message,
    MessageStore,
    MessageTooLarge,
    Outcome,
    PoppedMessage,
    Protocol,
    Record,
    StorageFull,
    StoreError,
    UnknownLmq,
)
from broker_core.errors import UnknownReceipt
from gateway.auth.authenticator import Principal, Refusal, RefusalReason
from gateway.http.messages import Request, Response
from gateway.http.mq_signature import SignatureRefused, authenticate_signed, is_signed
from gateway.http.server import problem
from gateway.http.v1.openapi import OPENAPI
from gateway.rocketmq.pop_service import OffsetOutOfRange, PollingFull, PopItem, Source
from gateway.rocketmq.records import (
    PROPS,
    SYSTEM_PROPERTIES,
    USER_PROPERTIES,
    rocketmq_properties,
    to_store_message,
)
from gateway.token_bucket import TokenBucket
from gateway.topic_space import MQTT_SHARE_PREFIX, amqp_queue_lmq, mqtt_lmq
from gateway.user_properties import encode_user_properties
from lmq.names import validate_topic_filter
from lmq.rocketmq import InvalidName, queue_lmq
from lmq.topic_space import amqp_to_mqtt
from protocol.remoting.messages import decode_properties, encode_properties

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.http.routes import Router

log = logging.getLogger(__name__)

ROUTE_ORDER = 10
JSON = "application/json"
#: Most messages in one publish request, and in one receive.
MAX_BATCH = 1000
MAX_RECEIVE = 32
#: Longest long poll, seconds (Aliyun's and SQS's limit is 20-30 s).
MAX_WAIT_SECONDS = 30.0
DEFAULT_INVISIBLE_SECONDS = 30.0
#: The property an idempotent publish's key goes to: RocketMQ's message id, which the
#: store's key index holds (StoreConfig.key_index_properties), durable with the record.
ID_PROPERTY = "UNIQ_KEY"
_round_robin = itertools.count()


class ApiError(Exception):
    def __init__(self, status: int, detail: str, *, title: str | None = None,
                 headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title
        self.headers = headers

    def response(self) -> Response:
        return problem(self.status, self.detail, title=self.title, headers=self.headers)


def json_response(status: int, doc: object, headers: list[tuple[str, str]] | None = None
                  ) -> Response:
    return Response.of(status, json.dumps(doc, separators=(",", ":")).encode(), JSON, headers)


def _json_body(request: Request) -> Any:
    if not request.body:
        return {}
    ctype = (request.header("content-type") or JSON).split(";")[0].strip().lower()
    if ctype not in (JSON, "application/*+json", "text/json") and not ctype.endswith("+json"):
        raise ApiError(415, f"the body must be JSON (application/json), not {ctype}")
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None


def _json_object(request: Request) -> dict[str, Any]:
    """The request's JSON body, which must be an object (400 otherwise)."""
    doc = _json_body(request)
    if not isinstance(doc, dict):
        raise ApiError(400, "the body is a JSON object")
    return doc


# -- receipt handles ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Receipt:
    topic: str
    queue_id: int
    offset: int
    extra_info: str

    def encode(self) -> str:
        raw = f"{self.topic}\n{self.queue_id}\n{self.offset}\n{self.extra_info}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, handle: object) -> Receipt:
        if not isinstance(handle, str) or not handle:
            raise ValueError("a receipt handle is a non-empty string")
        handle = handle.partition(".")[0]  # an event id's stream cursor
        try:
            raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
            topic, queue_id, offset, extra = raw.split("\n")
            return cls(topic, int(queue_id), int(offset), extra)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise ValueError(f"not a receipt handle of this gateway: {handle[:64]!r}") from None


# -- the API --------------------------------------------------------------------------


class JsonApi:
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.window_ms = int(cfg.http_idempotency_window * 1000)
        #: Idempotent publishes in flight: (topic, message id) -> their answer.
        self._inflight: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        #: MQTT topic filters this node added to the topic space for HTTP groups.
        self._mqtt_filters: set[str] = set()

    # -- auth ---------------------------------------------------------------------

    def principal(self, request: Request) -> Principal | None:
        """The caller, from HTTP Basic credentials or an Aliyun MQ signature
        (``Authorization: MQ ak:sig``, `gateway/http/mq_signature.py`); None in open mode.
        Raises 401."""
        auth = self.ctx.authenticator
        if auth is None:
            return None
        cached = request.context.get("principal")
        if isinstance(cached, Principal):
            return cached
        if is_signed(request):
            try:
                signed = authenticate_signed(auth, request)
            except SignatureRefused as exc:
                if exc.retry_after is not None:
                    wait = max(1, math.ceil(exc.retry_after))
                    raise ApiError(429, exc.message,
                                   headers=[("Retry-After", str(wait))]) from None
                raise ApiError(400 if exc.bad_request else 401, exc.message,
                               headers=[] if exc.bad_request else _CHALLENGE) from None
            assert not isinstance(signed, Refusal)
            request.context["principal"] = signed
            return signed
        username = password = None
        header = request.header("authorization")
        if header and header[:6].lower() == "basic ":
            try:
                username, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise ApiError(401, "malformed Basic credentials", headers=_CHALLENGE) from None
        result = auth.authenticate(username, password, client_id="http",
                                   peer_host=request.peer.rpartition(":")[0].strip("[]"))
        if isinstance(result, Refusal):
            if result.reason is RefusalReason.RATE_LIMITED:
                wait = max(1, math.ceil(result.retry_after))
                raise ApiError(429, "too many failed logins from this address or for this"
                                    f" user; retry in {wait} s",
                               headers=[("Retry-After", str(wait))])
            raise ApiError(401, "authentication failed: Basic credentials of a gateway user"
                                " are required", headers=_CHALLENGE)
        request.context["principal"] = result
        return result

    def check_publish(self, request: Request, topic: str) -> None:
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_publish(
                principal, "http", topic):
            raise ApiError(403, f"not allowed to publish to {topic!r}")

    def check_consume(self, request: Request, topic: str) -> None:
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_subscribe(
                principal, "http", topic):
            raise ApiError(403, f"not allowed to consume from {topic!r}")

    def check_rate(self, request: Request, count: int = 1) -> None:
        """``max_publish_rate`` per connection, as MQTT has it: a publish beyond the
        budget is refused with 429 and the wait as ``Retry-After`` (a batch costs one
        token a message, at most a full bucket)."""
        bucket = request.context.get("publish_bucket")
        if not isinstance(bucket, TokenBucket):
            return
        wait = bucket.try_take(self.ctx.loop.time(), min(count, int(bucket.rate)))
        if wait:
            seconds = max(1, math.ceil(wait))
            raise ApiError(429, f"more than {bucket.rate:g} messages a second on this"
                                f" connection (max_publish_rate); retry in {seconds} s",
                           headers=[("Retry-After", str(seconds))])

    # -- publish ------------------------------------------------------------------

    def _topic(self, name: str) -> Any:
        try:
            config = self.ctx.rocketmq_topics.ensure(name)
        except InvalidName as exc:
            raise ApiError(400, f"invalid topic name: {exc}") from None
        if config is None:
            raise ApiError(404, f"topic {name!r} does not exist (and is not created"
                                " automatically)")
        return config

    async def publish(self, request: Request) -> Response:
        topic = request.params["topic"]
        self.check_publish(request, topic)
        config = self._topic(topic)
        doc = _json_body(request)
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
                                             _common_status(results))
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
        doc = _json_object(request)
        try:
            body = _body_of(doc)
            user = _properties_of(doc)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        props = {USER_PROPERTIES: encode_user_properties(list(user.items()))} if user else {}
        message = Message(topic, body, props, "http", str(doc.get("tag") or ""), 1, False,
                          Protocol.MQTT, int(time.time() * 1000))
        lmqs = list(self.ctx.topic_space.route_mqtt(topic))
        try:
            result = await self.ctx.publisher.submit(message, lmqs)
        except Exception as exc:
            raise _store_error(exc) from None
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
        doc = _json_object(request)
        try:
            body = _body_of(doc)
            props = dict(_properties_of(doc))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        message_id = uuid.uuid4().hex.upper()
        props[ID_PROPERTY] = message_id
        message = to_store_message(queue, body, encode_properties(props), props,
                                   origin="http", born_ms=int(time.time() * 1000))
        try:
            result = await self.ctx.publisher.submit(message, [lmq])
        except Exception as exc:
            raise _store_error(exc) from None
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
        doc = _json_object(request)
        key = doc.get("routing_key", "")
        if not isinstance(key, str):
            raise ApiError(400, "routing_key must be a string")
        try:
            body = _body_of(doc)
            props = dict(_properties_of(doc))
            delay = _int(doc["delay_ms"], "delay_ms") if "delay_ms" in doc else 0
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
        message_id = uuid.uuid4().hex.upper()
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
            raise _store_error(exc) from None
        out["position"] = result.position
        return json_response(201, out)

    async def _publish_one(self, topic: str, config: Any, entry: object, key: str | None,
                           request: Request) -> dict[str, Any]:
        try:
            if not isinstance(entry, dict):
                raise ApiError(400, "a message is a JSON object")
            if key is None and entry.get("idempotency_key") is not None:
                key = str(entry["idempotency_key"])
            message_id, message, queue_id, due_ms = self._message(topic, config, entry, key)
        except ApiError as exc:
            return {"status": exc.status, "detail": exc.detail}
        except ValueError as exc:
            return {"status": 400, "detail": str(exc)}
        if key is None:
            return await self._store(topic, message_id, message, queue_id, due_ms)
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
            result = await self._store(topic, message_id, message, queue_id, due_ms)
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

    def _message(self, topic: str, config: Any, entry: dict[str, Any], key: str | None
                 ) -> tuple[str, Message, int, int | None]:
        body = _body_of(entry)
        props: dict[str, str] = dict(_properties_of(entry))
        tag = entry.get("tag")
        if tag is not None:
            props["TAGS"] = _text(tag, "tag")
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
            message_id = uuid.uuid4().hex.upper()
        props[ID_PROPERTY] = message_id
        group = entry.get("message_group")
        if group is not None:
            props["__SHARDINGKEY"] = _text(group, "message_group")
        if entry.get("transaction"):
            props["TRAN_MSG"] = "true"
            props["PGROUP"] = _text(entry.get("producer_group", "http"), "producer_group")
        due_ms: int | None = None
        now = int(time.time() * 1000)
        if entry.get("delay_ms") is not None:
            due_ms = now + _int(entry["delay_ms"], "delay_ms")
        elif entry.get("deliver_at_ms") is not None:
            due_ms = _int(entry["deliver_at_ms"], "deliver_at_ms")
        if due_ms is not None and "TRAN_MSG" in props:
            raise ValueError("a transactional message cannot be delayed")
        if due_ms is not None:
            if due_ms <= now:
                due_ms = None
            else:
                props["__STARTDELIVERTIME"] = str(due_ms)
        queues = max(1, config.write_queues)
        queue_id = (zlib.crc32(props["__SHARDINGKEY"].encode()) % queues
                    if "__SHARDINGKEY" in props else next(_round_robin) % queues)
        message = to_store_message(topic, body, encode_properties(props), props,
                                   origin="http", born_ms=now)
        return message_id, message, queue_id, due_ms

    async def _store(self, topic: str, message_id: str, message: Message, queue_id: int,
                     due_ms: int | None) -> dict[str, Any]:
        ctx = self.ctx
        lmqs = [queue_lmq(topic, queue_id), *ctx.topic_space.route_rocketmq(topic)]
        producer_group = _half_group(message)
        try:
            if producer_group is not None:
                store = ctx.store
                result = store.append_half(message, lmqs, producer_group, wait=False)
                if store.waits_for_ack:
                    await asyncio.wrap_future(store.acknowledged(result.end))
            elif due_ms is None:
                result = await ctx.publisher.submit(message, lmqs)
            else:
                result = await self._submit_delayed(message, lmqs, due_ms)
        except Exception as exc:
            error = _store_error(exc)
            return {"status": error.status, "detail": error.detail}
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
        position = int(raw)
        store = self.ctx.store
        pending = store.pending_transaction(position)
        if pending is not None:
            self.check_publish(request, pending.topic)
        else:
            self.principal(request)
        try:
            result = store.end_transaction(position, action == "commit", wait=False)
            if result.control_end and store.waits_for_ack:
                await asyncio.wrap_future(store.acknowledged(result.control_end))
        except StoreError as exc:
            raise ApiError(503, str(exc)) from None
        if result.outcome == Outcome.UNKNOWN:
            raise ApiError(404, f"no transaction {raw} (never, or its segment is gone)")
        conflict = (action == "commit" and result.outcome in (
            Outcome.ALREADY_ROLLED_BACK, Outcome.ALREADY_DEAD_LETTERED)) or (
            action == "rollback" and result.outcome == Outcome.ALREADY_COMMITTED)
        if conflict:
            raise ApiError(409, f"transaction {raw} already ended: {result.outcome.value}")
        return json_response(200, {"transaction_id": raw, "outcome": result.outcome.value})

    # -- consume ------------------------------------------------------------------

    def _group(self, name: str) -> None:
        try:
            config = self.ctx.rocketmq_groups.ensure(name)
        except InvalidName as exc:
            raise ApiError(400, f"invalid group name: {exc}") from None
        if config is None:
            raise ApiError(404, f"group {name!r} does not exist")

    async def receive(self, request: Request) -> Response:
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        if self.ctx.rocketmq_topics.get(topic) is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        doc = _json_object(request)
        q = request.query
        option = functools.partial(number_option, doc, q)

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        invisible = option("invisible_seconds", DEFAULT_INVISIBLE_SECONDS, 1, 12 * 3600)
        tag = doc.get("tag", q.get("tag", [None])[0])
        ordered = bool(doc.get("ordered", (q.get("ordered", [""])[0] in ("1", "true"))))
        accept = _tag_filter(tag) if tag else None
        try:
            result = await self.ctx.rocketmq.pop.pop(
                group, topic, -1, count, int(invisible * 1000), int(wait * 1000),
                accept=accept, fifo=ordered)
        except PollingFull as exc:
            raise ApiError(429, str(exc), headers=[("Retry-After", "1")]) from None
        except (UnknownLmq, ValueError) as exc:
            raise ApiError(404, str(exc)) from None
        visible = result.pop_time + result.invisible_time
        return json_response(200, {"messages": [
            _message_doc(item, visible) for item in result.items]})

    # -- MQTT topic filters -------------------------------------------------------

    def _mqtt_subscription(self, group: str, topic_filter: str) -> str:
        """The filter's LMQ, dispatched to by the topic space like an MQTT
        subscription's: registered durably on first use (store meta, re-registered at
        start), the group starting at the end of the LMQ."""
        lmq = mqtt_lmq(topic_filter)
        if topic_filter not in self._mqtt_filters:
            self.ctx.topic_space.add_filter(topic_filter)
            self._mqtt_filters.add(topic_filter)
        store = self.ctx.store
        key = f"{_MQTT_SUB_META}{group}\n{topic_filter}"
        if store.get_meta(key) is None:
            info = store.lmq(lmq) or store.create_lmq(lmq)
            store_group = MQTT_SHARE_PREFIX + group
            if store.get_offset(store_group, lmq) is None:
                store.commit_offset(store_group, lmq, info.max_offset)
            store.put_meta(key, b"1")
        return lmq

    async def delete_mqtt_subscription(self, request: Request) -> Response:
        """Drop the group's subscription to the filter: publishes no longer go to the
        filter's LMQ for it (they still do while another HTTP group or an MQTT session
        subscribes to the same filter). The group's offset stays (an MQTT
        ``$share/<group>/<filter>`` subscription shares it)."""
        group, topic_filter = request.params["group"], request.params["filter"]
        self.check_consume(request, topic_filter)
        store = self.ctx.store
        key = f"{_MQTT_SUB_META}{group}\n{topic_filter}"
        existed = store.get_meta(key) is not None
        if existed:
            store.delete_meta(key)
        others = any(k.partition("\n")[2] == topic_filter
                     for k, _ in store.iter_meta(_MQTT_SUB_META))
        if not others and topic_filter in self._mqtt_filters:
            self._mqtt_filters.discard(topic_filter)
            self.ctx.topic_space.remove_filter(topic_filter)
        if not existed:
            raise ApiError(404, f"group {group!r} has no subscription to {topic_filter!r}")
        return json_response(200, {"group": group, "filter": topic_filter})

    def restore_mqtt_subscriptions(self) -> None:
        for key, _ in self.ctx.store.iter_meta(_MQTT_SUB_META):
            topic_filter = key[len(_MQTT_SUB_META):].partition("\n")[2]
            if topic_filter and topic_filter not in self._mqtt_filters:
                self.ctx.topic_space.add_filter(topic_filter)
                self._mqtt_filters.add(topic_filter)

    async def receive_mqtt(self, request: Request) -> Response:
        """Pop an MQTT topic filter's messages as ``group`` (the group an MQTT
        ``$share/<group>/<filter>`` subscription pops as: the two share the work)."""
        group, topic_filter = request.params["group"], request.params["filter"]
        try:
            validate_topic_filter(topic_filter)
        except ValueError as exc:
            raise ApiError(400, f"invalid MQTT topic filter: {exc}") from None
        if not group or "/" in group or "+" in group or "#" in group:
            raise ApiError(400, "invalid group name")
        self.check_consume(request, topic_filter)
        doc = _json_object(request)
        q = request.query
        option = functools.partial(number_option, doc, q)

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        invisible = int(option("invisible_seconds", DEFAULT_INVISIBLE_SECONDS, 1,
                               12 * 3600) * 1000)
        lmq = self._mqtt_subscription(group, topic_filter)
        store, store_group = self.ctx.store, MQTT_SHARE_PREFIX + group
        deadline = time.monotonic() + wait
        while True:
            popped = store.pop(store_group, lmq, count, invisible)
            left = deadline - time.monotonic()
            if popped or left <= 0:
                break
            woken = asyncio.get_running_loop().create_future()

            def wake(*_: object, f: asyncio.Future[None] = woken) -> None:
                if not f.done():
                    f.set_result(None)

            remove = store.add_listener(lmq, self.ctx.loop_callback(wake))
            try:  # (woken by an append; a message coming back is seen within 1 s)
                async with asyncio.timeout(min(left, 1.0)):
                    await woken
            except TimeoutError:
                pass
            finally:
                remove()
        return json_response(200, {"messages": [
            _mqtt_message_doc(topic_filter, p) for p in popped]})

    def _mqtt_settle(self, request: Request, group: str, handle: str,
                     invisible_ms: int | None) -> dict[str, Any]:
        """Ack (``invisible_ms`` None) or change the visibility of a message received
        from an MQTT topic filter."""
        try:
            topic_filter, receipt = _decode_mqtt_handle(handle)
            self.check_consume(request, topic_filter)
            if invisible_ms is None:
                self.ctx.store.ack(receipt)
                return {"status": 200, "receipt_handle": handle}
            renewed = self.ctx.store.change_invisible_time(receipt, max(invisible_ms, 1))
            return {"status": 200, "receipt_handle": handle,
                    "new_receipt_handle": _encode_mqtt_handle(topic_filter, renewed),
                    "next_visible_ms": self.ctx.store.receipt_visible_at(renewed)}
        except ApiError as exc:
            return {"status": exc.status, "receipt_handle": handle, "detail": exc.detail}
        except UnknownReceipt:
            return {"status": 410, "receipt_handle": handle, "detail": "no longer in flight"}
        except (ValueError, StoreError) as exc:
            return {"status": 400, "receipt_handle": handle, "detail": str(exc)}

    def _settle(self, request: Request) -> tuple[str, list[object]]:
        group = request.params["group"]
        doc = _json_body(request)
        handles = doc.get("receipt_handles") if isinstance(doc, dict) else None
        if not isinstance(handles, list) or not handles:
            raise ApiError(400, "'receipt_handles' must be a non-empty array")
        if len(handles) > MAX_BATCH:
            raise ApiError(413, f"at most {MAX_BATCH} receipt handles a request")
        self._group(group)
        return group, handles

    async def ack(self, request: Request) -> Response:
        group, handles = self._settle(request)
        results = []
        pop = self.ctx.rocketmq.pop
        for handle in handles:
            if isinstance(handle, str) and handle.startswith(_MQTT_HANDLE):
                results.append(self._mqtt_settle(request, group, handle, None))
                continue
            try:
                receipt = Receipt.decode(handle)
                self.check_consume(request, receipt.topic)
                in_flight = pop.ack(group, receipt.topic, receipt.queue_id, receipt.offset,
                                    receipt.extra_info)
                results.append({"status": 200 if in_flight else 410, "receipt_handle": handle,
                                **({} if in_flight else {
                                    "detail": "no longer in flight (acked already, or its"
                                              " invisible time ran out)"})})
            except ApiError as exc:
                results.append({"status": exc.status, "receipt_handle": handle,
                                "detail": exc.detail})
            except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError) as exc:
                results.append({"status": 400, "receipt_handle": handle, "detail": str(exc)})
        return _per_entry(results)

    async def change_visibility(self, request: Request) -> Response:
        group, handles = self._settle(request)
        doc = _json_body(request)
        seconds = doc.get("invisible_seconds", 0)
        if not isinstance(seconds, int | float) or not 0 <= seconds <= 12 * 3600:
            raise ApiError(400, "invisible_seconds must be a number from 0 to 43200")
        return self._visibility(request, group, handles, int(seconds * 1000))

    async def nack(self, request: Request) -> Response:
        group, handles = self._settle(request)
        return self._visibility(request, group, handles, 0)

    def _visibility(self, request: Request, group: str, handles: list[object],
                    invisible_ms: int) -> Response:
        results = []
        pop = self.ctx.rocketmq.pop
        for handle in handles:
            if isinstance(handle, str) and handle.startswith(_MQTT_HANDLE):
                results.append(self._mqtt_settle(request, group, handle, invisible_ms))
                continue
            try:
                receipt = Receipt.decode(handle)
                self.check_consume(request, receipt.topic)
                pop_time, invisible = pop.change_invisible_time(
                    group, receipt.topic, receipt.queue_id, receipt.offset,
                    receipt.extra_info, max(invisible_ms, 1))
                extra = receipt.extra_info.split(" ")
                extra[1], extra[2] = str(pop_time), str(invisible)
                renewed = Receipt(receipt.topic, receipt.queue_id, receipt.offset,
                                  " ".join(extra))
                results.append({"status": 200, "receipt_handle": handle,
                                "new_receipt_handle": renewed.encode(),
                                "next_visible_ms": pop_time + invisible})
            except ApiError as exc:
                results.append({"status": exc.status, "receipt_handle": handle,
                                "detail": exc.detail})
            except UnknownReceipt:
                results.append({"status": 410, "receipt_handle": handle,
                                "detail": "no longer in flight"})
            except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError, IndexError) as exc:
                results.append({"status": 400, "receipt_handle": handle, "detail": str(exc)})
        return _per_entry(results)

    async def seek(self, request: Request) -> Response:
        """Set the group's next offset on every queue of the topic: ``earliest``,
        ``latest``, or the first message stored at or after ``timestamp_ms``."""
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        config = self.ctx.rocketmq_topics.get(topic)
        if config is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        doc = _json_object(request)
        position = doc.get("position")
        stamp = doc.get("timestamp_ms")
        if (position is None) == (stamp is None) or position not in (
                None, "earliest", "latest"):
            raise ApiError(400, "give either 'position' (earliest or latest) or"
                                " 'timestamp_ms'")
        store = self.ctx.store
        offsets: dict[str, int] = {}
        for q in range(config.read_queues):
            lmq = queue_lmq(topic, q)
            info = store.lmq(lmq)
            if info is None:
                continue
            if position == "earliest":
                offsets[lmq] = info.min_offset
            elif position == "latest":
                offsets[lmq] = info.max_offset
            else:
                try:
                    when = _int(stamp, "timestamp_ms")
                except ValueError as exc:
                    raise ApiError(400, str(exc)) from None
                offsets[lmq] = _offset_at(store, lmq, info.min_offset, info.max_offset, when)
        if offsets:
            store.commit_offsets(group, offsets)
        return json_response(200, {"group": group, "topic": topic, "offsets": {
            lmq.rsplit(":", 1)[1]: off for lmq, off in offsets.items()}})

    # -- streaming ----------------------------------------------------------------

    async def stream(self, request: Request) -> Response:
        """Server-sent events: each message is popped, sent as an event whose id is its
        receipt handle and the stream's cursor (``handle.cursor``: the last offset
        written on each queue of the topic), and acked once written. A client that
        reconnects with ``Last-Event-ID`` gets that message acked if it was not yet, the
        messages the group took after that cursor read again from the store (marked
        ``replayed``), then the rest. ``ack=manual`` leaves acking to the client (the
        events then come back after their invisible time unless acked; no replay)."""
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        if self.ctx.rocketmq_topics.get(topic) is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        manual = request.arg("ack") == "manual"
        raw_limit = request.arg("max_events") or "0"
        if not raw_limit.isdigit():
            raise ApiError(400, "max_events must be a non-negative integer")
        limit = int(raw_limit)
        pop = self.ctx.rocketmq.pop
        store = self.ctx.store
        last = request.header("last-event-id")
        cursor: dict[int, int] = {}
        if last:
            receipt_part, _, cursor_part = last.partition(".")
            try:
                cursor = _decode_cursor(cursor_part) if cursor_part else {}
            except ValueError:
                cursor = {}
            if not manual:
                try:
                    receipt = Receipt.decode(receipt_part)
                    if receipt.extra_info:
                        pop.ack(group, receipt.topic, receipt.queue_id, receipt.offset,
                                receipt.extra_info)
                except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError):
                    pass
        # the rewind (auto mode): what this stream wrote and acked after the event the
        # client saw last is read again from the store, from the cursor in its id up to
        # the group's committed offset on each queue (the rest is popped as usual)
        replay: list[tuple[int, int, int]] = []
        if cursor and not manual:
            for queue_id, seen in sorted(cursor.items()):
                committed = store.get_offset(group, queue_lmq(topic, queue_id))
                if committed is not None and committed > seen + 1:
                    replay.append((queue_id, seen + 1, committed))

        # the cursor starts where the group is on every queue of the topic (so a queue
        # first written to after an event the client saw is rewound too)
        config = self.ctx.rocketmq_topics.get(topic)
        for queue_id in range(config.read_queues if config is not None else 0):
            committed = store.get_offset(group, queue_lmq(topic, queue_id))
            if committed is not None and queue_id not in cursor:
                cursor[queue_id] = committed - 1

        def event(doc: dict[str, Any]) -> bytes:
            cursor[doc["queue_id"]] = max(cursor.get(doc["queue_id"], -1), doc["offset"])
            doc["receipt_handle"] = doc["receipt_handle"] + "." + _encode_cursor(cursor)
            data = json.dumps(doc, separators=(",", ":"))
            return f"id: {doc['receipt_handle']}\nevent: message\ndata: {data}\n\n".encode()

        async def events() -> AsyncIterator[bytes]:
            sent = 0
            yield b": lmq-gateway stream\nretry: 1000\n\n"
            for queue_id, start, end in replay:
                lmq = queue_lmq(topic, queue_id)
                for offset in range(start, end):
                    if limit and sent >= limit:
                        return
                    stored = store.read_at(lmq, offset)
                    if stored is None:
                        continue  # (removed by retention)
                    item = PopItem(stored, Source(lmq, topic, queue_id, "0"), 0)
                    doc = _message_doc(item, 0)
                    doc["replayed"] = True
                    yield event(doc)
                    sent += 1
            while not limit or sent < limit:
                want = min(MAX_RECEIVE, limit - sent) if limit else MAX_RECEIVE
                result = await pop.pop(group, topic, -1, want, 30_000, 15_000)
                if not result.items:
                    yield b": keep-alive\n\n"
                    continue
                visible = result.pop_time + result.invisible_time
                for item in result.items:
                    doc = _message_doc(item, visible)
                    if item.source.topic != topic:  # (a retry: no cursor position)
                        data = json.dumps(doc, separators=(",", ":"))
                        yield (f"id: {doc['receipt_handle']}\nevent: message\n"
                               f"data: {data}\n\n").encode()
                    else:
                        yield event(doc)
                    if not manual:
                        pop.ack(group, item.source.topic, item.source.queue_id,
                                item.message.offset, item.extra_info)
                    sent += 1

        return Response(200, [("content-type", "text/event-stream"),
                              ("cache-control", "no-store")], events())

    async def openapi(self, request: Request) -> Response:
        return json_response(200, OPENAPI)


def number_option(doc: dict[str, Any], query: dict[str, list[str]], name: str,
                  default: float, low: float, high: float) -> float:
    """A numeric request option from the JSON body, else the query string (400 when it is
    not a number in [low, high]); ``default`` when given in neither."""
    raw = doc.get(name, query.get(name, [None])[0])
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must be a number") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low:g} and {high:g}")
    return value


_CHALLENGE = [("WWW-Authenticate", 'Basic realm="lmq-gateway", charset="UTF-8"')]


def _half_group(message: Message) -> str | None:
    """The producer group of a transactional message (None for any other)."""
    props = decode_properties(message.properties[PROPS].decode()) if message.properties and (
        PROPS in message.properties) else {}
    return props.get("PGROUP") if props.get("TRAN_MSG") == "true" else None


def _per_entry(results: list[dict[str, Any]]) -> Response:
    failed = sum(1 for r in results if r["status"] >= 300)
    status = 200 if not failed else (207 if failed < len(results) else _common_status(results))
    return json_response(status, {"results": results})


def _common_status(results: list[dict[str, Any]]) -> int:
    statuses = {r["status"] for r in results}
    return statuses.pop() if len(statuses) == 1 else 207


def _offset_at(store: Any, lmq: str, low: int, high: int, stamp: int) -> int:
    """The first offset of ``lmq`` whose message was stored at or after ``stamp`` (ms),
    by binary search over store times (non-decreasing along an LMQ)."""
    while low < high:
        mid = (low + high) // 2
        got = store.pull(lmq, mid, 1).messages
        if not got:
            low = mid + 1
            continue
        if got[0].record.store_ms < stamp:
            low = got[0].offset + 1
        else:
            high = mid
    return low


_MQTT_SUB_META = "http.mqtt-sub:"
#: Receipt handles of messages received from an MQTT topic filter start with this.
_MQTT_HANDLE = "m."


def _encode_mqtt_handle(topic_filter: str, receipt: str) -> str:
    raw = f"{topic_filter}\n{receipt}".encode()
    return _MQTT_HANDLE + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_mqtt_handle(handle: str) -> tuple[str, str]:
    text = handle[len(_MQTT_HANDLE):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        topic_filter, receipt = raw.split("\n")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a receipt handle of this gateway: {handle[:64]!r}") from None
    return topic_filter, receipt


def _mqtt_message_doc(topic_filter: str, popped: PoppedMessage) -> dict[str, Any]:
    """A message received from an MQTT topic filter (``topic`` its MQTT topic name)."""
    record = popped.message.record
    props = decode_properties(rocketmq_properties(record))
    user = {k: v for k, v in props.items() if k not in _SYSTEM}
    doc: dict[str, Any] = {
        "receipt_handle": _encode_mqtt_handle(topic_filter, popped.receipt),
        "message_id": props.get(ID_PROPERTY, str(record.position)),
        "topic": record.topic,
        "queue_id": 0,
        "offset": popped.message.offset,
        "properties": user,
        "delivery_count": popped.deliveries,
        "born_ms": record.born_ms,
        "store_ms": record.store_ms,
        "next_visible_ms": MessageStore.receipt_visible_at(popped.receipt),
    }
    return with_body(doc, record.body)


def _encode_cursor(cursor: Mapping[int, int]) -> str:
    """An SSE event id's stream cursor: the last offset written per queue."""
    raw = ",".join(f"{q}:{o}" for q, o in sorted(cursor.items())).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(text: str) -> dict[int, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        pairs = (item.split(":") for item in raw.split(",") if item)
        cursor = {int(q): int(o) for q, o in pairs}
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("not a stream cursor") from None
    if len(cursor) > 1024 or any(q < 0 or o < -1 for q, o in cursor.items()):
        raise ValueError("not a stream cursor")
    return cursor


def _message_doc(item: PopItem, visible_ms: int) -> dict[str, Any]:
    record: Record = item.message.record
    props = decode_properties(rocketmq_properties(record))
    user = {k: v for k, v in props.items() if k not in _SYSTEM}
    doc: dict[str, Any] = {
        "receipt_handle": Receipt(item.source.topic, item.source.queue_id,
                                  item.message.offset, item.extra_info).encode(),
        "message_id": props.get(ID_PROPERTY, str(record.position)),
        "topic": item.source.topic,
        "queue_id": item.source.queue_id,
        "offset": item.message.offset,
        "tag": record.tag,
        "keys": props["KEYS"].split() if props.get("KEYS") else [],
        "properties": user,
        "delivery_count": item.reconsume_times + 1,
        "born_ms": record.born_ms,
        "store_ms": record.store_ms,
        "next_visible_ms": visible_ms,
    }
    if record.properties.get("__SHARDINGKEY"):
        doc["message_group"] = record.properties["__SHARDINGKEY"].decode()
    return with_body(doc, record.body)


#: Not user properties: RocketMQ's own (records.SYSTEM_PROPERTIES) and Aliyun's __TransCheckT.
_SYSTEM = SYSTEM_PROPERTIES | {"__TransCheckT"}


def _tag_filter(expression: str) -> Any:
    tags = {t.strip() for t in str(expression).split("||") if t.strip()}
    if not tags or "*" in tags:
        return None
    return lambda record: record.tag in tags


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty string")
    return value


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"'{name}' must be a non-negative number")
    return int(value)


def with_body(doc: dict[str, Any], body: bytes) -> dict[str, Any]:
    """``doc`` with the message body as ``body`` (UTF-8 text) or else ``body_base64``
    (what :func:`_body_of` reads back)."""
    try:
        doc["body"] = body.decode()
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(body).decode()
    return doc


def _body_of(entry: Mapping[str, Any]) -> bytes:
    if "body" in entry and "body_base64" in entry:
        raise ValueError("give 'body' or 'body_base64', not both")
    if "body_base64" in entry:
        raw = entry["body_base64"]
        if not isinstance(raw, str):
            raise ValueError("'body_base64' must be a string")
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"'body_base64' is not base64: {exc}") from None
    body = entry.get("body")
    if body is None:
        raise ValueError("a message needs 'body' (text or any JSON value) or 'body_base64'")
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()


def _properties_of(entry: Mapping[str, Any]) -> dict[str, str]:
    props = entry.get("properties") or {}
    if not isinstance(props, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in props.items()):
        raise ValueError("'properties' is an object of strings")
    bad = [k for k in props if k in _SYSTEM or "\x01" in k + props[k] or "\x02" in k + props[k]]
    if bad:
        raise ValueError(f"property {bad[0]!r} is reserved or has a control character")
    return props


def _store_error(exc: BaseException) -> ApiError:
    if isinstance(exc, MessageTooLarge):
        return ApiError(413, str(exc))
    if isinstance(exc, DelayTooLong):
        return ApiError(400, str(exc))
    if isinstance(exc, StorageFull):
        return ApiError(507, f"the store is full: {exc}")
    if isinstance(exc, StoreError):
        return ApiError(503, f"the store refused the message: {exc}")
    log.exception("http publish failed", exc_info=exc)
    return ApiError(500, f"{type(exc).__name__}: {exc}")


def _guard(fn: Any) -> Any:
    async def handler(request: Request) -> Response:
        try:
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
    from gateway.http.v1 import amqp_queues, transactions  # (they import this module)

    for method, pattern, fn in (*routes, *amqp_queues.routes(api), *transactions.routes(api)):
        router.add(method, pattern, _guard(fn))
