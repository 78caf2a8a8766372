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

import asyncio
import itertools
import logging
import os
import secrets
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from broker_core import Message, StoreError
from broker_core.clock import now_ms
from gateway.auth import Refusal
from gateway.http.messages import Request, Response
from gateway.rocketmq import records as rmq_records
from lmq.rocketmq import InvalidName, queue_lmq
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
        self._round_robin = itertools.count()

    def routes(self, router: Router) -> None:
        router.add("POST", "/", self.handle)
        router.add("GET", "/", self.handle)

    async def handle(self, request: Request) -> Response:
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
                                   send.ttl, props, head.group, request.peer)]
        elif head.code == RequestCode.MSG_BATCH_SEND:
            items = [self._message(i.topic, i.content, i.tag, i.biz_seq_no, i.ttl,
                                   {"bizSeqNo": i.biz_seq_no} if i.biz_seq_no else {},
                                   head.group, request.peer)
                     for i in parse_batch(form)]
        else:
            raise ProtocolError(RetCode.REQUEST_CODE_INVALID,
                                f"request code {head.code} is not served (101 and 102 are)")
        auth = self.ctx.authenticator
        if auth is not None and principal is not None:
            for message, _ in items:
                if not auth.can_publish(principal, head.group, message.topic):
                    raise ProtocolError(RetCode.HEADER_ERROR,
                                        f"no permission to send to {message.topic}")
        store = self.ctx.store
        try:
            if len(items) == 1:
                await self.ctx.publisher.submit(*items[0])
            else:
                results = store.append_batch(items, wait=False)
                if store.waits_for_ack:
                    await asyncio.wrap_future(store.acknowledged(results[-1].end))
        except StoreError as exc:
            raise ProtocolError(RetCode.SEND_ERROR, f"send failed: {exc}") from None
        return RetCode.SUCCESS, "success"

    async def _login(self, request: Request, username: str,
                     password: str) -> Principal | None:
        auth = self.ctx.authenticator
        if auth is None:
            return None
        peer_host = request.peer.rpartition(":")[0].strip("[]") or None
        result = await asyncio.to_thread(auth.authenticate, username or None,
                                         password or None, peer_host=peer_host)
        if isinstance(result, Refusal):
            raise ProtocolError(RetCode.HEADER_ERROR,
                                "not authorised: Username and Passwd of a gateway user needed")
        return result

    def _message(self, topic: str, content: str, tag: str, key: str, ttl: int | None,
                 user: dict[str, str], group: str, peer: str) -> tuple[Message, list[str]]:
        config = self.ctx.rocketmq_topics.ensure(topic)
        if config is None:
            raise ProtocolError(RetCode.SEND_ERROR, f"topic {topic} does not exist")
        now = now_ms()
        props = dict(user)
        props["UNIQ_KEY"] = self._uniq.next(now)
        if tag:
            props["TAGS"] = tag
        if key:
            props["KEYS"] = key
        if ttl is not None:
            props["TTL"] = str(ttl)
        queue_id = next(self._round_robin) % config.write_queues
        message = rmq_records.to_store_message(
            config.name, content.encode(), rmq_records.encode_properties(props), props,
            origin=group, born_ms=now, born_host=peer)
        lmqs = [queue_lmq(config.name, queue_id),
                *self.ctx.topic_space.route_rocketmq(config.name)]
        return message, lmqs


def register_routes(router: Router, ctx: GatewayContext) -> None:
    """Called by the HTTP front end at start (:mod:`gateway.http`)."""
    Rip17Api(ctx).routes(router)


