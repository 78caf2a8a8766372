"""AMQP 0-9-1 brokers as connector endpoints: :class:`AmqpSource` and :class:`AmqpTarget`,
on aiormq (asyncio, publisher confirms, manual acks).

Source (what a RabbitMQ shovel's ``ack-mode = on-confirm`` does): ``basic.consume`` of the
rule's queue with manual acks and a prefetch (``prefetch``, default 1000 as the shovel's
``src-prefetch-count``); a delivery is acked (``basic.ack`` with ``multiple``) only when
the runner calls :meth:`AmqpSource.acknowledge` for it, i.e. once the target stored it.
A connector that dies before leaves it unacked and the broker requeues it (redelivered):
at-least-once. The queue must exist (the connector declares nothing). The one source
queue is the AMQP queue; offsets number the deliveries as they are read, starting at the
wall clock in microseconds when the endpoint opens and never below ``after + 1`` (they
grow across restarts, as a gateway target's high-water mark needs). ``msg_id`` is the
``message-id`` property ("" without one: such messages cannot be deduplicated).

Mapping: body; topic = the routing key it was published with; properties = the headers
whose values are strings (others are turned into text; the connector's ``__LMQ_PATH``
header is the copy's path); ``TAGS`` and ``KEYS`` headers are the tag and keys (as the
gateway maps RocketMQ messages to AMQP headers); ``born_ms`` from the header
``timestamp_in_ms`` (milliseconds), else ``timestamp`` (seconds), either marking the copy
``stamped`` (the rule's delay is measured from it), else the time of delivery.

Target: ``basic.publish`` to ``exchange`` (default the default exchange, so the topic is
a queue name) with routing key = the topic, ``mandatory``, persistent (delivery mode 2),
headers = the properties (plus ``TAGS``, ``KEYS``, ``__LMQ_PATH``), ``message-id`` = the
msg_id, ``timestamp``; on a channel in confirm mode. :meth:`AmqpTarget.write` returns when
every confirm is in; a ``basic.nack`` or a returned (unroutable) message is
:class:`MessageRefused`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from gateway.connector.endpoints import (
    CONNECTOR_PROPERTIES,
    PATH,
    CopyMessage,
    EndpointUnavailable,
    MessageRefused,
    SourceRecord,
)
from gateway.connector.heartbeat import HEARTBEAT
from gateway.connector.tls import peer_settings, verify_failure

log = logging.getLogger(__name__)

#: The header RabbitMQ's ``rabbitmq_message_timestamp`` plugin stamps a message's arrival
#: with, epoch milliseconds: preferred to the ``timestamp`` property (whole seconds).
TIMESTAMP_IN_MS = "timestamp_in_ms"

#: What aiormq raises when the connection or channel is gone or cannot be had.
_UNAVAILABLE = (aiormq.exceptions.AMQPError, OSError, ConnectionError, TimeoutError,
                RuntimeError)


@dataclass(frozen=True, slots=True)
class AmqpPeer:
    """An AMQP 0-9-1 broker (a rules file's cluster of ``kind = "amqp"``)."""

    host: str = "127.0.0.1"
    port: int = 5672
    vhost: str = "/"
    user: str = "guest"
    password: str = "guest"
    #: the source's basic.qos prefetch count
    prefetch: int = 1000
    #: the target's exchange ("" is the default exchange: the topic names a queue)
    exchange: str = ""
    #: seconds; 0 = none
    heartbeat: int = 60
    #: seconds to connect, and to wait for a confirm
    timeout: float = 10.0
    #: AMQP over TLS, ``amqps`` (the cluster's ``tls``: ``gateway.connector.tls``)
    ssl_context: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        scheme = "amqps" if self.ssl_context is not None else "amqp"
        return (f"{scheme}://{quote(self.user, safe='')}:{quote(self.password, safe='')}"
                f"@{self.host}:{self.port}/{quote(self.vhost, safe='')}"
                f"?heartbeat={self.heartbeat}")


async def _connect(peer: AmqpPeer) -> aiormq.abc.AbstractConnection:
    try:
        async with asyncio.timeout(peer.timeout):
            return await aiormq.connect(peer.url, context=peer.ssl_context)
    except _UNAVAILABLE as exc:
        failure = verify_failure(exc, f"AMQP broker {peer.host}:{peer.port}")
        if failure is not None:
            raise failure from None
        raise EndpointUnavailable(
            f"AMQP broker {peer.host}:{peer.port} vhost {peer.vhost!r}: {exc!r}") from None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def copy_message(delivered: DeliveredMessage) -> CopyMessage:
    """A delivery as a protocol-neutral copy (the mapping of the module doc)."""
    props = delivered.header.properties
    headers = {k: _text(v) for k, v in (props.headers or {}).items()}
    path = tuple(p for p in headers.pop(PATH, "").split(",") if p)
    tag = headers.pop("TAGS", "")
    keys = tuple(headers.pop("KEYS", "").split())
    for name in CONNECTOR_PROPERTIES:
        headers.pop(name, None)
    # RabbitMQ's message_timestamp plugin adds ``timestamp_in_ms``; the AMQP property
    # has whole seconds only
    stamp_ms = headers.get(TIMESTAMP_IN_MS, "")
    stamp = props.timestamp
    if stamp_ms.isdigit() and len(stamp_ms) < 16:
        born_ms, stamped = int(stamp_ms), True
    elif isinstance(stamp, datetime):
        born_ms, stamped = int(stamp.timestamp() * 1000), True
    else:
        born_ms, stamped = int(time.time() * 1000), False
    return CopyMessage(body=delivered.body, topic=delivered.routing_key or "", tag=tag,
                       keys=keys, properties=headers, born_ms=born_ms,
                       msg_id=props.message_id or "", path=path, stamped=stamped)


class AmqpSource:
    """An AMQP queue as a connector source (see the module doc)."""

    def __init__(self, name: str, peer: AmqpPeer, queue: str) -> None:
        self.name = name
        self.peer = peer
        self.queue = queue
        self._connection: aiormq.abc.AbstractConnection | None = None
        self._channel: aiormq.abc.AbstractChannel | None = None
        #: (delivery tag, message) delivered, not read yet
        self._received: deque[tuple[int, CopyMessage]] = deque()
        #: (offset, delivery tag) read, not acked yet, in delivery order
        self._pending: deque[tuple[int, int]] = deque()
        self._arrived = asyncio.Event()
        self._next_offset = time.time_ns() // 1000

    async def open(self) -> None:
        await self._connect()

    def _usable(self) -> bool:
        ch = self._channel
        return ch is not None and not ch.is_closed and self._connection is not None and (
            not self._connection.is_closed)

    async def _connect(self) -> None:
        await self._drop()
        # What the old channel delivered and we did not ack, the broker requeues.
        self._received.clear()
        self._pending.clear()
        self._connection = await _connect(self.peer)
        try:
            self._channel = await self._connection.channel(publisher_confirms=False)
            await self._channel.basic_qos(prefetch_count=self.peer.prefetch)
            await self._channel.basic_consume(self.queue, self._on_message, no_ack=False)
        except _UNAVAILABLE as exc:
            await self._drop()
            raise EndpointUnavailable(f"cannot consume AMQP queue {self.queue!r}: {exc!r}"
                                      ) from None

    async def _on_message(self, delivered: DeliveredMessage) -> None:
        self._received.append((delivered.delivery_tag or 0, copy_message(delivered)))
        self._arrived.set()

    async def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.peer.timeout):
                    await connection.close()

    async def close(self) -> None:
        await self._drop()

    async def cluster_id(self) -> str:
        return self.name

    async def queues(self) -> list[str]:
        return [self.queue]

    async def read(self, queue: str, after: int | None, start: str, max_messages: int,
                   wait_ms: int) -> list[SourceRecord]:
        """What was delivered (``after`` only raises the next offset, ``start`` does not
        apply: a queue gives what it holds)."""
        if queue != self.queue:
            raise ValueError(f"unknown source queue {queue!r} (the queue is {self.queue!r})")
        if after is not None and after + 1 > self._next_offset:
            self._next_offset = after + 1
        if not self._usable():
            await self._connect()
        if not self._received and wait_ms > 0:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):
                    await self._arrived.wait()
        out: list[SourceRecord] = []
        while self._received and len(out) < max_messages:
            tag, message = self._received.popleft()
            offset = self._next_offset
            self._next_offset += 1
            self._pending.append((offset, tag))
            out.append(SourceRecord(self.queue, offset, message))
        if not out and not self._usable():
            raise EndpointUnavailable(f"AMQP connection to {self.peer.host} lost")
        return out

    async def acknowledge(self, queue: str, up_to: int) -> None:
        """basic.ack (multiple) up to the delivery read at offset ``up_to``: deliveries
        are read in delivery-tag order, so every earlier tag is read and acked with it."""
        pending = self._pending
        last = None
        while pending and pending[0][0] <= up_to:
            last = pending.popleft()[1]
        if last is None or not self._usable():
            return  # the broker requeues them when the channel goes: they come again
        assert self._channel is not None
        try:
            await self._channel.basic_ack(last, multiple=True)
        except _UNAVAILABLE as exc:
            raise EndpointUnavailable(f"cannot ack on {self.peer.host}: {exc!r}") from None

    async def end_offset(self, queue: str) -> int | None:
        return None


class AmqpTarget:
    """An AMQP broker as a connector target, with publisher confirms."""

    def __init__(self, name: str, peer: AmqpPeer) -> None:
        self.name = name
        self.peer = peer
        self._connection: aiormq.abc.AbstractConnection | None = None
        self._channel: aiormq.abc.AbstractChannel | None = None

    async def open(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        await self.close()
        self._connection = await _connect(self.peer)
        try:
            self._channel = await self._connection.channel(
                publisher_confirms=True, on_return_raises=True)
        except _UNAVAILABLE as exc:
            await self.close()
            raise EndpointUnavailable(f"cannot open an AMQP channel: {exc!r}") from None

    async def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.peer.timeout):
                    await connection.close()

    async def cluster_id(self) -> str:
        return self.name

    async def high_water(self, origin_cluster: str, queues: Sequence[str]) -> None:
        return None  # a broker keeps no origins: the rule is at-least-once

    @staticmethod
    def properties(message: CopyMessage) -> spec.Basic.Properties:
        headers: dict[str, Any] = {k: v for k, v in message.properties.items()
                                   if k not in CONNECTOR_PROPERTIES}
        if message.tag:
            headers["TAGS"] = message.tag
        if message.keys:
            headers["KEYS"] = " ".join(message.keys)
        if message.path:
            headers[PATH] = ",".join(message.path)
        stamp = datetime.fromtimestamp((message.born_ms or time.time() * 1000) / 1000, UTC)
        return spec.Basic.Properties(headers=headers or None, delivery_mode=2,
                                     message_id=message.msg_id or None, timestamp=stamp)

    async def write(self, topic: str, source_queue: str,
                    messages: Sequence[CopyMessage]) -> None:
        """Publish every message (in order, on one channel) and return when every
        publisher confirm is in."""
        # The runner's heartbeats (gateway.connector.heartbeat) stop here: the delay is
        # measured when they are read, and a broker's subscribers would only see empty
        # messages (MQTT 3.1.1 could not even tell them apart).
        indexes = [i for i, m in enumerate(messages) if HEARTBEAT not in m.properties]
        if len(indexes) < len(messages):
            try:
                await self.write(topic, source_queue, [messages[i] for i in indexes])
            except MessageRefused as exc:
                raise MessageRefused(indexes[exc.index], exc.reason) from None
            return
        if not messages:
            return
        if self._channel is None or self._channel.is_closed:
            await self._connect()
        channel = self._channel
        assert channel is not None
        exchange = self.peer.exchange
        tasks = [asyncio.ensure_future(channel.basic_publish(
            m.body, exchange=exchange, routing_key=topic, properties=self.properties(m),
            mandatory=True, timeout=self.peer.timeout)) for m in messages]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for index, result in enumerate(results):
            if isinstance(result, aiormq.exceptions.PublishError):
                raise MessageRefused(index, f"returned by the broker: no queue bound to"
                                            f" {topic!r} on exchange {exchange!r}")
            if isinstance(result, spec.Basic.Nack) or isinstance(
                    result, aiormq.exceptions.DeliveryError):
                raise MessageRefused(index, "nacked by the broker")
            if isinstance(result, aiormq.exceptions.ChannelNotFoundEntity):
                raise MessageRefused(index, f"no exchange {exchange!r}: {result!r}")
            if isinstance(result, _UNAVAILABLE):
                await self.close()
                raise EndpointUnavailable(f"AMQP publish to {self.peer.host}: {result!r}")
            if isinstance(result, BaseException):
                raise result


def peer_of(cluster: Any) -> AmqpPeer:
    """An :class:`AmqpPeer` from a rules file's cluster (``gateway.connector.rules``)."""
    options = ("vhost", "prefetch", "exchange", "heartbeat")
    return AmqpPeer(**peer_settings(cluster, user="user", password="password",
                                    options=[(key, key) for key in options]))


def make_source(cluster: Any, rule: Any) -> AmqpSource:
    return AmqpSource(cluster.name, peer_of(cluster), rule.read)


def make_target(cluster: Any, rule: Any) -> AmqpTarget:
    return AmqpTarget(cluster.name, peer_of(cluster))
