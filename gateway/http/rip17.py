"""RIP-17's HTTP producer (``POST /`` with a ``Code`` header; :mod:`protocol.rip17`) on
the gateway's HTTP server, storing as a RocketMQ send does (:mod:`gateway.rocketmq`):
a message sent here is read by remoting, gRPC, MQTT, AMQP and Aliyun HTTP consumers.

- ``MSG_SEND`` (101): one message to one queue of ``topic`` (round robin; the topic is
  auto-created as for the other RocketMQ front ends), with ``tag`` as its tag,
  ``bizSeqNo`` as its key (``KEYS``: queryable), ``uniqueId``, ``bizSeqNo`` and the
  ``extfields`` as user properties, ``ttl`` as the ``TTL`` property, the ``GroupName``
  as its producer group; answered ``retCode`` 0 once stored under the configured
  durability.
- ``MSG_BATCH_SEND`` (102): every entry of ``contents`` in one append: all stored, or
  none (``retCode`` 14).
- The codes the proxy declares and never implemented (201-207, 301) answer ``retCode``
  2, as unknown codes.
- With a users file, the ``Username`` and ``Passwd`` headers (the proxy's "reserved for
  future auth") log a gateway user in, and the topic ACL's ``publish`` right is checked;
  a refusal is ``retCode`` 6. Open mode checks nothing, as the other front ends.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from broker_core import Message, StoreError
from broker_core.clock import now_ms
from gateway.auth import Refusal
from gateway.http import landing
from gateway.http.auth import HttpLogin, HttpLogins, peer_host
from gateway.http.counts import MessageCounts
from gateway.http.messages import Request, Response
from gateway.rocketmq import records as rmq_records
from gateway.rocketmq.producer import (
    ROUND_ROBIN,
    Forbidden,
    InvalidTopic,
    ProducerError,
)
from lmq.rocketmq import MQTT_SECOND_TOPIC, InvalidName, message_type_of
from protocol.remoting.ids import UniqKeyFactory
from protocol.rip17 import (
    ProtocolError,
    RequestCode,
    RetCode,
    parse_batch,
    parse_headers,
    parse_send,
    reply,
)

if TYPE_CHECKING:
    from gateway.auth import Principal
    from gateway.context import GatewayContext
    from gateway.http.routes import Router

__all__ = ["Rip17Api", "register_routes"]

log = logging.getLogger("lmq.http.rip17")

CONTENT_TYPE = "application/json"


class Rip17Api:
    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._uniq = UniqKeyFactory("127.0.0.1", os.getpid(), secrets.randbits(32))
        self._logins = HttpLogins(ctx.security)
        #: Messages sent, per connection and in total (the overview; nothing is given).
        self.counts = MessageCounts(ctx.metrics, "lmq_http_rip17_messages", "RIP-17's HTTP API",
                                    gives=False)

    @property
    def login(self) -> HttpLogin | None:
        """The HTTP logins (None in open mode; on once a users file appears)."""
        return self._logins.current()

    def routes(self, router: Router) -> None:
        router.add("POST", "/", self.handle)
        router.add("GET", "/", self.handle)

    async def handle(self, request: Request) -> Response:
        if landing.wants_page(request):  # a browser, not a RIP-17 client
            return landing.page()
        try:
            code, message = await self._handle(request)
        except ProtocolError as exc:
            code, message = exc.code, str(exc)
        except InvalidName as exc:
            code, message = RetCode.BODY_ERROR, str(exc)
        except StoreError as exc:
            code, message = RetCode.SEND_ERROR, f"the store refused the message: {exc}"
        except Exception as exc:
            log.exception("RIP-17 request failed")
            code, message = RetCode.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}"
        return Response.of(200, reply(code, message), CONTENT_TYPE)

    async def _handle(self, request: Request) -> tuple[RetCode, str]:
        headers: dict[str, str] = {}
        for name, value in request.headers:
            headers.setdefault(name, value)
        head = parse_headers(headers, request.arg("code"))
        if request.method == "GET":
            form = {k: v[0] for k, v in request.query.items()}
        else:
            try:
                text = request.body.decode()
            except UnicodeDecodeError:
                raise ProtocolError(RetCode.BODY_ERROR, "the form is not UTF-8") from None
            form = dict(parse_qsl(text, keep_blank_values=True))
        principal = await self._login(request, head.username, head.password)
        if head.code == RequestCode.MSG_SEND:
            send = parse_send(form)
            props = {**send.extfields, "uniqueId": send.unique_id, "bizSeqNo": send.biz_seq_no}
            items = [self._message(send.topic, send.content, send.tag, send.biz_seq_no,
                                   send.ttl, props, head.group, request.peer, principal)]
        elif head.code == RequestCode.MSG_BATCH_SEND:
            items = [self._message(i.topic, i.content, i.tag, i.biz_seq_no, i.ttl,
                                   {"bizSeqNo": i.biz_seq_no} if i.biz_seq_no else {},
                                   head.group, request.peer, principal)
                     for i in parse_batch(form)]
        else:
            raise ProtocolError(RetCode.REQUEST_CODE_INVALID,
                                f"request code {head.code} is not served (101 and 102 are)")
        try:
            await self.ctx.rocketmq.producer.send_batch(items)  # all or none
        except StoreError as exc:
            raise ProtocolError(RetCode.SEND_ERROR, f"send failed: {exc}") from None
        self.counts.stored(request, len(items))
        return RetCode.SUCCESS, "success"

    async def _login(self, request: Request, username: str,
                     password: str) -> Principal | None:
        if self.login is None:
            return None
        result = await self.login.password(username or None, password or None,
                                           peer=peer_host(request))
        if isinstance(result, Refusal):
            raise ProtocolError(RetCode.HEADER_ERROR,
                                "not authorised: Username and Passwd of a gateway user needed")
        return result

    def _message(self, topic: str, content: str, tag: str, key: str, ttl: int | None,
                 user: dict[str, str], group: str, peer: str,
                 principal: Principal | None) -> tuple[Message, list[str]]:
        producer = self.ctx.rocketmq.producer
        try:
            config = producer.resolve(topic, principal, group)
            producer.check_type(config, message_type_of(user))
        except Forbidden as exc:
            raise ProtocolError(RetCode.HEADER_ERROR, str(exc)) from None
        except InvalidTopic as exc:
            raise ProtocolError(RetCode.BODY_ERROR, str(exc)) from None
        except ProducerError as exc:
            raise ProtocolError(RetCode.SEND_ERROR, str(exc)) from None
        now = now_ms()
        props = dict(user)
        props["UNIQ_KEY"] = self._uniq.next(now)
        if tag:
            props["TAGS"] = tag
        if key:
            props["KEYS"] = key
        if ttl is not None:
            props["TTL"] = str(ttl)
        queue_id = ROUND_ROBIN.select(config)
        message = rmq_records.to_store_message(
            config.name, content.encode(), rmq_records.encode_properties(props), props,
            origin=group, born_ms=now, born_host=peer)
        return message, producer.lmqs(config.name, queue_id, props.get(MQTT_SECOND_TOPIC, ""))


def register_routes(router: Router, ctx: GatewayContext) -> None:
    """Called by the HTTP front end at start (:mod:`gateway.http`)."""
    Rip17Api(ctx).routes(router)


