"""The Aliyun MQ HTTP API on the gateway's HTTP server: the handlers of
``POST|GET|DELETE /topics/{topic}/messages`` (:class:`AliyunHttpApi`, registered with
:meth:`AliyunHttpApi.routes`), on the RocketMQ model every RocketMQ front end shares
(``ctx.rocketmq``: topics of queue LMQs, groups, pop, timers, the transaction check
loop), so a message published here reaches remoting, gRPC, MQTT and AMQP consumers and
the other way round. The wire format is :mod:`protocol.aliyun_http`.

- **Names.** ``ns`` (the instance) prefixes the topic and the group as RocketMQ 5's
  namespaces do: ``ns%topic``; without ``ns`` the names are used as they are.
- **Publish** (201): one message to one queue of the topic (round robin; with
  ``__SHARDINGKEY`` the key's queue, CRC32 as the gRPC front end does, so one key keeps
  its order), answered once stored under the configured durability. ``__STARTDELIVERTIME``
  in the future makes it a delayed message on the store's timers; ``__TransCheckT``
  makes it a half message (its first check after that many seconds), answered with a
  ``T`` receipt handle to commit or roll back. Its ``MessageId`` is a RocketMQ
  ``UNIQ_KEY``, stored as the message id the other front ends show.
- **Consume** (200, or 404 ``MessageNotExist`` when nothing came within ``waitseconds``):
  a pop of every queue of the topic by the consumer group, invisible for
  ``aliyun_invisible_seconds``; ``tag=A||B`` filters (messages of other tags are
  acked for the group, as RocketMQ's pop moves past them); ``trans=order`` pops in
  ``__SHARDINGKEY`` order (the store's FIFO pop); ``trans=pop`` hands out the due
  check-backs of half messages of the topic (see :class:`gateway.rocketmq.half_polls.HalfPolls`).
- **Ack** (204, or 404 with per-handle ``<Errors>``): each handle acks its message;
  ``trans=commit|rollback`` ends half messages by their ``T`` handles.
- **Auth**: with a users file, every request must carry a valid ``Authorization: MQ
  ak:signature`` by an access key of a gateway user (``lmq users``), a ``Date`` within
  15 minutes, and the ACL's ``publish`` (publish, commit, rollback) or ``subscribe`` on
  ``topic/#`` (consume, ack); open mode checks nothing, as the other front ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import ipaddress
import logging
import os
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from broker_core import DelayTooLong, MessageTooLarge, StorageFull
from broker_core.clock import now_ms
from broker_core.errors import UnknownReceipt
from gateway.auth import Refusal
from gateway.http.auth import HttpLogin, HttpLogins
from gateway.http.counts import MessageCounts
from gateway.http.messages import Request, Response
from gateway.http.mq_signature import SignatureRefused
from gateway.rocketmq import producer as p
from gateway.rocketmq import records as rmq_records
from gateway.rocketmq.half_polls import HalfPolls
from gateway.rocketmq.pop_receipts import pop_retry_topic, store_receipt
from gateway.rocketmq.pop_service import PollingFull
from gateway.rocketmq.producer import ProducerError, ShardingKey
from gateway.rocketmq.records import rocketmq_properties, to_store_message
from lmq.rocketmq import (
    MQTT_SECOND_TOPIC,
    SYSTEM_PROPERTIES,
    InvalidName,
    MessageType,
    TopicConfig,
    message_type_of,
)
from protocol.aliyun_http import (
    AckError,
    ApiError,
    ConsumedMessage,
    ErrorCode,
    Handle,
    HandleCodec,
    HandleKind,
    InvalidHandle,
    PropertyError,
    XmlError,
    body_md5,
    decode_properties,
    encode_properties,
    parse_publish,
    parse_receipt_handles,
    render_ack_errors,
    render_error,
    render_messages,
    render_published,
)
from protocol.aliyun_http.properties import (
    KEYS,
    SHARDING_KEY,
    START_DELIVER_TIME,
    TRANS_CHECK_TIME,
)
from protocol.aliyun_http.signature import content_md5_matches
from protocol.remoting.ids import UniqKeyFactory

if TYPE_CHECKING:
    from broker_core import Record
    from gateway.auth import Principal
    from gateway.context import GatewayContext
    from gateway.http.routes import Router

__all__ = ["AliyunHttpApi", "register_routes"]

log = logging.getLogger("lmq.http.aliyun")

CONTENT_TYPE = "text/xml;charset=utf-8"
REQUEST_ID = "x-mq-request-id"
#: ``numOfMessages`` and ``waitseconds`` limits (Aliyun's).
MAX_MESSAGES = 16
MAX_WAIT_SECONDS = 30
#: Where the handle key is kept when ``aliyun_handle_key`` is "".
HANDLE_KEY_META = "aliyun_http/handle_key"
#: The name under which the check-back loop hands half messages to HTTP pollers.
CHECK_SENDER = "aliyun-http"
#: Properties of a stored message shown to an HTTP consumer besides its user properties.
_SHOWN_SYSTEM = frozenset({KEYS, START_DELIVER_TIME, SHARDING_KEY})
_ORIGIN = "aliyun-http"
#: The producer service's refusals as the Aliyun API answers them.
_PRODUCER_CODES: dict[type[ProducerError], ErrorCode] = {
    p.InvalidTopic: ErrorCode.INVALID_ARGUMENT,
    p.SystemTopic: ErrorCode.ACCESS_DENIED,
    p.TopicNotFound: ErrorCode.TOPIC_NOT_EXIST,
    p.NotWritable: ErrorCode.ACCESS_DENIED,
    p.Forbidden: ErrorCode.ACCESS_DENIED,
    p.TypeMismatch: ErrorCode.INVALID_ARGUMENT,
    p.IllegalMessage: ErrorCode.INVALID_ARGUMENT,
    p.TransactionNotFound: ErrorCode.MESSAGE_NOT_EXIST,
    p.TransactionConflict: ErrorCode.MESSAGE_NOT_EXIST,
}


def wrap(ns: str, name: str) -> str:
    """The RocketMQ name of ``name`` in instance ``ns`` (RocketMQ 5's ``ns%name``)."""
    return f"{ns}%{name}" if ns else name


class AliyunHttpApi:
    """The handlers (see the module doc). One per gateway; :meth:`routes` adds them to
    the HTTP server's router, :meth:`close` unregisters the check-back sender."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        config = ctx.config
        self._logins = HttpLogins(ctx.security)
        self.invisible_ms = config.aliyun_invisible_seconds * 1000
        self.codec = HandleCodec(self._handle_key(config.aliyun_handle_key))
        self.host_id = f"{config.bind}"
        self.halves = HalfPolls()
        try:
            ip = str(ipaddress.ip_address(config.bind))
        except ValueError:
            ip = "127.0.0.1"
        if ip in ("0.0.0.0", "::"):
            ip = "127.0.0.1"
        self._uniq = UniqKeyFactory(ip, os.getpid(), secrets.randbits(32))
        ctx.rocketmq.transactions.register(CHECK_SENDER, self.halves.offer)
        metrics = ctx.metrics
        self._requests = metrics.counter(
            "lmq_http_aliyun_requests_total", "Aliyun MQ HTTP API requests by call and status",
            ("call", "status"))
        #: Messages published and consumed, per connection and in total (the overview).
        self.counts = MessageCounts(metrics, "lmq_http_aliyun_messages", "the Aliyun MQ HTTP API")

    @property
    def login(self) -> HttpLogin | None:
        """The HTTP logins (None in open mode; on once a users file appears)."""
        return self._logins.current()

    def _handle_key(self, configured: str) -> bytes:
        if configured:
            return hashlib.sha256(configured.encode()).digest()
        store = self.ctx.store
        kept = store.get_meta(HANDLE_KEY_META)
        if kept is None:
            kept = secrets.token_bytes(32)
            store.put_meta(HANDLE_KEY_META, kept)
        return kept

    def close(self) -> None:
        self.ctx.rocketmq.transactions.unregister(CHECK_SENDER)

    def routes(self, router: Router) -> None:
        router.add("POST", "/topics/{topic}/messages", self.publish)
        router.add("GET", "/topics/{topic}/messages", self.consume)
        router.add("DELETE", "/topics/{topic}/messages", self.ack)

    # -- the request frame ---------------------------------------------------------------

    async def publish(self, request: Request) -> Response:
        return await self._serve("publish", request, self._publish)

    async def consume(self, request: Request) -> Response:
        return await self._serve("consume", request, self._consume)

    async def ack(self, request: Request) -> Response:
        return await self._serve("ack", request, self._ack)

    async def _serve(
        self, call: str, request: Request,
        fn: Callable[[Request, Principal | None, str], Awaitable[Response]],
    ) -> Response:
        request_id = uuid.uuid4().hex.upper()
        try:
            md5 = request.header("content-md5")
            if md5 and not content_md5_matches(md5, request.body):
                # the signature covers the header, so the header must cover the body
                raise ApiError(ErrorCode.INVALID_ARGUMENT,
                               "Content-MD5 does not match the body")
            principal = self._authenticate(request)
            response = await fn(request, principal, request_id)
        except ApiError as exc:
            response = self._error(exc.code, exc.message, request_id)
        except XmlError as exc:
            response = self._error(ErrorCode.MALFORMED_XML, str(exc), request_id)
        except (InvalidName, PropertyError) as exc:
            response = self._error(ErrorCode.INVALID_ARGUMENT, str(exc), request_id)
        except PollingFull as exc:
            response = self._error(ErrorCode.TOO_MANY_REQUESTS, str(exc), request_id)
        except ProducerError as exc:
            code = _PRODUCER_CODES.get(type(exc), ErrorCode.INVALID_ARGUMENT)
            response = self._error(code, str(exc), request_id)
        except (MessageTooLarge, DelayTooLong) as exc:
            response = self._error(ErrorCode.INVALID_ARGUMENT, str(exc), request_id)
        except StorageFull as exc:
            response = self._error(ErrorCode.INTERNAL_ERROR, f"the store is full: {exc}",
                                   request_id)
        except Exception as exc:
            log.exception("Aliyun HTTP %s failed", call)
            response = self._error(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}",
                                   request_id)
        response.headers.append((REQUEST_ID, request_id))
        self._requests.inc(call=call, status=str(response.status))
        return response

    def _error(self, code: ErrorCode, message: str, request_id: str) -> Response:
        return Response.of(code.status, render_error(code.code, message, request_id,
                                                     self.host_id), CONTENT_TYPE)

    def _authenticate(self, request: Request) -> Principal | None:
        if self.login is None:
            return None
        try:
            result = self.login.signed(request)
        except SignatureRefused as exc:
            code = (ErrorCode.INVALID_ARGUMENT if exc.bad_request
                    else ErrorCode.ACCESS_DENIED if exc.denied
                    else ErrorCode.SIGNATURE_DOES_NOT_MATCH)
            raise ApiError(code, exc.message) from None
        assert not isinstance(result, Refusal)
        return result

    def _check_publish(self, principal: Principal | None, topic: str) -> None:
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_publish(
                principal, "", topic):
            raise ApiError(ErrorCode.ACCESS_DENIED, f"no permission to publish to {topic}")

    def _check_subscribe(self, principal: Principal | None, topic: str, group: str) -> None:
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_subscribe(
                principal, group, f"{topic}/#"):
            raise ApiError(ErrorCode.ACCESS_DENIED,
                           f"no permission to consume {topic} as {group}")

    # -- names ---------------------------------------------------------------------------

    def _topic(self, request: Request) -> TopicConfig:
        name = wrap(request.arg("ns", "") or "", request.params["topic"])
        topics = self.ctx.rocketmq_topics
        config = topics.get(name)
        if config is None and "%" in name and topics.auto_create:
            # RocketMQ 5 namespaces: ``ns%topic`` (the registry's ensure refuses '%')
            from lmq.rocketmq import validate_topic

            validate_topic(name)
            queues = topics.default_queues
            config = topics.create(TopicConfig(name, read_queues=queues, write_queues=queues,
                                               message_type=topics.auto_type))
        elif config is None:
            config = topics.ensure(name)
        if config is None:
            raise ApiError(ErrorCode.TOPIC_NOT_EXIST, f"topic {name} does not exist")
        return config

    def _group(self, request: Request) -> str:
        consumer = request.arg("consumer", "") or ""
        if not consumer:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, "the consumer parameter is missing")
        name = wrap(request.arg("ns", "") or "", consumer)
        groups = self.ctx.rocketmq_groups
        if groups.get(name) is None:
            from lmq.rocketmq import GroupConfig, validate_group

            validate_group(name)
            if not groups.auto_create:
                raise ApiError(ErrorCode.INVALID_ARGUMENT, f"no consumer group {name}")
            groups.create(GroupConfig(name))
        return name

    @staticmethod
    def _int_arg(request: Request, name: str, default: int, low: int, high: int) -> int:
        raw = request.arg(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{name}={raw!r} is not a number") \
                from None
        if not low <= value <= high:
            raise ApiError(ErrorCode.INVALID_ARGUMENT,
                           f"{name}={value} is out of range [{low}, {high}]")
        return value

    # -- publish -------------------------------------------------------------------------

    async def _publish(self, request: Request, principal: Principal | None,
                       _rid: str) -> Response:
        producer = self.ctx.rocketmq.producer
        topic = wrap(request.arg("ns", "") or "", request.params["topic"])
        if "%" in topic:  # RocketMQ 5's namespaces: created here when allowed
            self._topic(request)
        config = producer.resolve(topic, principal)
        sent = parse_publish(request.body)
        props = decode_properties(sent.properties, strict=True)
        now = now_ms()
        message_id = self._uniq.next(now)
        rmq = dict(props)
        rmq["UNIQ_KEY"] = message_id
        if sent.tag:
            rmq["TAGS"] = sent.tag
        kind = (MessageType.TRANSACTION if TRANS_CHECK_TIME in props
                else message_type_of(props))
        producer.check_type(config, kind)
        queue_id = ShardingKey(props.get(SHARDING_KEY, "")).select(config)
        message = to_store_message(
            topic, sent.body.encode(), rmq_records.encode_properties(rmq), rmq,
            origin=_ORIGIN, born_ms=now, born_host=request.peer)
        lmqs = producer.lmqs(topic, queue_id, rmq.get(MQTT_SECOND_TOPIC, ""))
        handle = ""
        if TRANS_CHECK_TIME in props:
            check_s = self._number(props[TRANS_CHECK_TIME], TRANS_CHECK_TIME)
            message = dataclasses.replace(message, properties={
                **(message.properties or {}),
                "CHECK_IMMUNITY_TIME_IN_SECONDS": str(check_s).encode()})
            result = await producer.send_half(message, lmqs, topic)
            first = now + max(check_s * 1000, self.ctx.store.config.txn_first_check_ms)
            handle = self.codec.encode(
                Handle(HandleKind.TRANSACTION, topic, "", 0, result.position, first))
        elif START_DELIVER_TIME in props and (
                due := self._number(props[START_DELIVER_TIME], START_DELIVER_TIME)) > now:
            await producer.send_delayed([(message, lmqs, due)])
        else:
            await producer.send(message, lmqs)
        self.counts.stored(request)
        return Response.of(201, render_published(message_id, body_md5(sent.body), handle),
                           CONTENT_TYPE)

    @staticmethod
    def _number(raw: str, name: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{name}={raw!r} is not a number") \
                from None
        if value < 0:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{name}={value} is negative")
        return value

    # -- consume -------------------------------------------------------------------------

    async def _consume(self, request: Request, principal: Principal | None,
                       _rid: str) -> Response:
        config = self._topic(request)
        topic = config.name
        group = self._group(request)
        count = self._int_arg(request, "numOfMessages", 1, 1, MAX_MESSAGES)
        wait_s = self._int_arg(request, "waitseconds", 0, 0, MAX_WAIT_SECONDS)
        trans = request.arg("trans", "") or ""
        if trans == "pop":
            self._check_publish(principal, topic)
            return await self._consume_halves(request, topic, group, count, wait_s)
        if trans not in ("", "order"):
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"trans={trans!r}: use pop or order")
        self._check_subscribe(principal, topic, group)
        tag = request.arg("tag", "") or ""
        tags = frozenset(t for t in tag.split("||") if t) if tag and tag != "*" else None

        def accept(record: Record) -> bool:
            return tags is None or record.tag in tags

        pop = self.ctx.rocketmq.pop
        result = await pop.pop(group, topic, -1, count, self.invisible_ms, wait_s * 1000,
                               accept, fifo=trans == "order")
        if not result.items:
            raise ApiError(ErrorCode.MESSAGE_NOT_EXIST, "Message not exist.")
        visible = result.pop_time + result.invisible_time
        messages = []
        for item in result.items:
            rec = item.message.record
            handle = self.codec.encode(Handle(
                HandleKind.CONSUMED, item.source.topic, group, item.source.queue_id,
                item.message.offset, visible))
            messages.append(self._consumed(rec, handle, result.pop_time, visible,
                                           item.reconsume_times + 1))
        self.counts.given(request, len(messages))
        return Response.of(200, render_messages(messages), CONTENT_TYPE)

    @staticmethod
    def _consumed(rec: Record, handle: str, first: int, next_time: int,
                  times: int) -> ConsumedMessage:
        rmq = rmq_records.decode_properties(rocketmq_properties(rec))
        shown = [(k, v) for k, v in rmq.items()
                 if k in _SHOWN_SYSTEM or k not in SYSTEM_PROPERTIES]
        message_id = rmq.get("UNIQ_KEY") or f"{rec.position:032X}"
        return ConsumedMessage(
            message_id=message_id, receipt_handle=handle,
            body=rec.body.decode("utf-8", "replace"), publish_time=rec.store_ms,
            first_consume_time=first, next_consume_time=next_time, consumed_times=times,
            tag=rec.tag, properties=encode_properties(shown))

    async def _consume_halves(self, request: Request, topic: str, group: str, count: int,
                              wait_s: int) -> Response:
        """Half messages due a check, handed back to their producer: messages given, as
        a consumer's are (the connection's and the API's count)."""
        halves = self.halves
        halves.polled(topic)
        store = self.ctx.store
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            taken = [t for t in halves.take(topic, count)
                     if store.txns.pending.get(t.position) is not None]
            if taken:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ApiError(ErrorCode.MESSAGE_NOT_EXIST, "Message not exist.")
            await halves.wait(topic, remaining)
        messages = []
        for txn in taken:
            rec = store.record_at(txn.position)
            if rec is None:
                continue
            handle = self.codec.encode(Handle(
                HandleKind.TRANSACTION, topic, group, 0, txn.position, txn.next_check_ms))
            messages.append(self._consumed(rec, handle, now_ms(), txn.next_check_ms,
                                           txn.checks))
        if not messages:
            raise ApiError(ErrorCode.MESSAGE_NOT_EXIST, "Message not exist.")
        self.counts.given(request, len(messages))
        return Response.of(200, render_messages(messages), CONTENT_TYPE)

    # -- ack, commit, rollback -------------------------------------------------------------

    async def _ack(self, request: Request, principal: Principal | None,
                   _rid: str) -> Response:
        config = self._topic(request)
        topic = config.name
        group = self._group(request)
        handles = parse_receipt_handles(request.body)
        trans = request.arg("trans", "") or ""
        if trans not in ("", "commit", "rollback"):
            raise ApiError(ErrorCode.INVALID_ARGUMENT,
                           f"trans={trans!r}: use commit or rollback")
        if not trans:
            self._check_subscribe(principal, topic, group)
        errors: list[AckError] = []
        for text in handles:
            try:
                handle = self.codec.decode(text)
            except InvalidHandle as exc:
                errors.append(AckError(ErrorCode.RECEIPT_HANDLE_ERROR.code, str(exc), text))
                continue
            if trans:  # the producer service checks the publish ACL
                problem = await self._end(handle, topic, trans == "commit", principal)
            else:
                problem = self._ack_one(handle, topic, group)
            if problem is not None:
                errors.append(AckError(problem[0].code, problem[1], text))
        if errors:
            return Response.of(404, render_ack_errors(errors), CONTENT_TYPE)
        return Response(204)

    def _ack_one(self, handle: Handle, topic: str,
                 group: str) -> tuple[ErrorCode, str] | None:
        if handle.kind != HandleKind.CONSUMED or handle.group != group or handle.topic not in (
                topic, pop_retry_topic(topic, group)):
            return (ErrorCode.RECEIPT_HANDLE_ERROR,
                    f"the receipt handle is not one of topic {topic} and consumer {group}")
        try:
            self.ctx.store.pop.ack(store_receipt(group, handle.topic, handle.queue_id,
                                             handle.offset, handle.visible_at))
        except UnknownReceipt:
            return (ErrorCode.MESSAGE_NOT_EXIST,
                    "the message is no longer in flight under this handle (acked already,"
                    " or its NextConsumeTime passed and it is delivered again)")
        return None

    async def _end(self, handle: Handle, topic: str, commit: bool,
                   principal: Principal | None) -> tuple[ErrorCode, str] | None:
        if handle.kind != HandleKind.TRANSACTION or handle.topic != topic:
            return (ErrorCode.RECEIPT_HANDLE_ERROR,
                    f"the receipt handle is not one of a half message of topic {topic}")
        try:
            await self.ctx.rocketmq.producer.end_transaction(
                handle.offset, commit, principal, topic=topic)
        except p.TransactionNotFound:
            return (ErrorCode.MESSAGE_NOT_EXIST,
                    "no half message under this handle (its log segment is gone)")
        except p.TransactionConflict as exc:
            return (ErrorCode.MESSAGE_NOT_EXIST,
                    f"the transaction already ended: {exc.outcome.value}")
        return None


def register_routes(router: Router, ctx: GatewayContext) -> None:
    """Called by the HTTP front end at start (:mod:`gateway.http`): serve the API."""
    AliyunHttpApi(ctx).routes(router)
