"""Exclusive queues, as RabbitMQ: another connection that uses one (consume, get, bind,
unbind, passive declare, redeclare, purge, delete) gets channel error 405
RESOURCE_LOCKED, and so does declaring an existing shared queue ``exclusive``; the owner
may do all of it. Checked with pika, aio-pika and kombu over real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aio_pika
import aiormq
import kombu
import pytest
from amqp.exceptions import ResourceLocked
from pika.exceptions import ChannelClosedByBroker

from ..amqp_support import BOUND, ThreadGateway, pika_connect

#: Every queue operation RabbitMQ refuses on another connection's exclusive queue.
FOREIGN_ACTIONS: dict[str, Callable[[Any, str], Any]] = {
    "declare-passive": lambda c, q: c.queue_declare(q, passive=True),
    "declare-exclusive": lambda c, q: c.queue_declare(q, exclusive=True),
    "declare-shared": lambda c, q: c.queue_declare(q),
    "consume": lambda c, q: c.basic_consume(q, lambda *a: None),
    "get": lambda c, q: c.basic_get(q),
    "bind": lambda c, q: c.queue_bind(q, "amq.direct", "k"),
    "unbind": lambda c, q: c.queue_unbind(q, "amq.direct", "k"),
    "purge": lambda c, q: c.queue_purge(q),
    "delete": lambda c, q: c.queue_delete(q),
}


@pytest.mark.parametrize("action", list(FOREIGN_ACTIONS))
def test_foreign_use_of_exclusive_queue_is_405(gw: ThreadGateway, action: str) -> None:
    owner = pika_connect(gw)
    other = pika_connect(gw)
    try:
        och = owner.channel()
        och.confirm_delivery()
        name = och.queue_declare("", exclusive=True).method.queue
        och.queue_bind(name, "amq.direct", "k")
        och.basic_publish("", name, b"kept")
        ch = other.channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            FOREIGN_ACTIONS[action](ch, name)
        assert info.value.reply_code == 405
        assert "RESOURCE_LOCKED" in info.value.reply_text
        assert other.is_open  # a channel error, not a connection error
        # nothing happened to the queue: the owner still has its message and binding
        och.basic_publish("amq.direct", "k", b"routed")
        assert och.queue_declare(name, passive=True).method.message_count == 2
    finally:
        other.close()
        owner.close()


def test_owner_may_do_everything(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        name = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_declare(name, passive=True)
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, "amq.direct", "k")
        ch.basic_publish("amq.direct", "k", b"one")
        method, _props, body = ch.basic_get(name, auto_ack=True)
        assert body == b"one"
        ch.queue_unbind(name, "amq.direct", "k")
        ch.basic_publish("", name, b"two")
        assert ch.queue_purge(name).method.message_count == 1
        tag = ch.basic_consume(name, lambda *a: None)
        ch.basic_cancel(tag)
        # RabbitMQ's strict check: even the owner cannot redeclare it shared
        with pytest.raises(ChannelClosedByBroker) as info:
            conn.channel().queue_declare(name)
        assert info.value.reply_code == 405
        ch.queue_delete(name)
    finally:
        conn.close()


def test_declaring_a_shared_queue_exclusive_is_405(gw: ThreadGateway) -> None:
    """RabbitMQ's strict ownership check: an existing queue that is not exclusive
    cannot become this connection's exclusive queue (405, not 406)."""
    conn = pika_connect(gw)
    try:
        conn.channel().queue_declare("shared")
        with pytest.raises(ChannelClosedByBroker) as info:
            conn.channel().queue_declare("shared", exclusive=True)
        assert info.value.reply_code == 405
    finally:
        conn.close()


async def test_aio_pika_foreign_exclusive_queue(gw: ThreadGateway) -> None:
    owner = await asyncio.wait_for(aio_pika.connect(gw.url), BOUND)
    other = await asyncio.wait_for(aio_pika.connect(gw.url), BOUND)
    try:
        och = await owner.channel()
        q = await och.declare_queue("", exclusive=True)
        ch = await other.channel()
        with pytest.raises(aiormq.exceptions.ChannelLockedResource):
            await ch.declare_queue(q.name, passive=True)
        ch = await other.channel()
        with pytest.raises(aiormq.exceptions.ChannelLockedResource):
            foreign = await ch.get_queue(q.name, ensure=False)
            await foreign.consume(_ignore)
        # the owner still uses it
        await och.default_exchange.publish(aio_pika.Message(b"mine"), routing_key=q.name)
        got = await q.get(timeout=BOUND)
        assert got is not None and got.body == b"mine"
        await got.ack()
    finally:
        await other.close()
        await owner.close()


async def _ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


def test_kombu_foreign_exclusive_queue(gw: ThreadGateway) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{gw.port}//"
    with kombu.Connection(url, connect_timeout=5) as owner, \
            kombu.Connection(url, connect_timeout=5) as other:
        name, _, _ = owner.default_channel.queue_declare("", exclusive=True)
        with pytest.raises(ResourceLocked):
            other.channel().queue_purge(name)
        with pytest.raises(ResourceLocked):
            other.channel().basic_get(name)
        with pytest.raises(ResourceLocked):
            other.channel().queue_bind(name, "amq.direct", "k")
