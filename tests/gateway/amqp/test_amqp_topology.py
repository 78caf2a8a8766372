"""AMQP topology over real sockets with pika: exchanges of every type, the default and
predeclared exchanges, exchange-to-exchange bindings, alternate exchanges, queue flags,
RabbitMQ's errors, and durable topology across a restart."""

from __future__ import annotations

import json

import pika
import pytest
from click.testing import CliRunner
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from cli.queues import queues

from ..amqp_support import ThreadGateway, drain, pika_connect


def bodies(ch, queue: str) -> list[bytes]:
    return sorted(body for _, _, body in drain(ch, queue, timeout=0.3))


def test_exchange_types_route(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    for name, xtype in (("d", "direct"), ("f", "fanout"), ("t", "topic"), ("h", "headers")):
        ch.exchange_declare(name, xtype)
    for q in ("qd", "qf1", "qf2", "qt1", "qt2", "qh_all", "qh_any"):
        ch.queue_declare(q)
    ch.queue_bind("qd", "d", "red")
    ch.queue_bind("qf1", "f")
    ch.queue_bind("qf2", "f", "ignored")
    ch.queue_bind("qt1", "t", "a.*.c")
    ch.queue_bind("qt2", "t", "a.#")
    ch.queue_bind("qh_all", "h", arguments={"x-match": "all", "k1": "v1", "k2": "v2"})
    ch.queue_bind("qh_any", "h", arguments={"x-match": "any", "k1": "v1", "k2": "v2"})

    ch.basic_publish("d", "red", b"red")
    ch.basic_publish("d", "blue", b"blue")
    ch.basic_publish("f", "x", b"fan")
    ch.basic_publish("t", "a.b.c", b"abc")
    ch.basic_publish("t", "a.b.d.e", b"abde")
    ch.basic_publish("t", "b.b.c", b"bbc")
    ch.basic_publish("h", "", b"both", pika.BasicProperties(headers={"k1": "v1", "k2": "v2"}))
    ch.basic_publish("h", "", b"one", pika.BasicProperties(headers={"k1": "v1"}))
    ch.basic_publish("", "qd", b"default")
    ch.basic_publish("amq.fanout", "", b"nothing bound")

    assert bodies(ch, "qd") == [b"default", b"red"]
    assert bodies(ch, "qf1") == [b"fan"] and bodies(ch, "qf2") == [b"fan"]
    assert bodies(ch, "qt1") == [b"abc"]
    assert bodies(ch, "qt2") == [b"abc", b"abde"]
    assert bodies(ch, "qh_all") == [b"both"]
    assert bodies(ch, "qh_any") == [b"both", b"one"]
    conn.close()


def test_exchange_to_exchange_and_alternate(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("unrouted", "fanout")
    ch.exchange_declare("main", "direct", arguments={"alternate-exchange": "unrouted"})
    ch.exchange_declare("downstream", "topic")
    ch.exchange_bind("downstream", "main", "k")
    for q in ("q_down", "q_alt", "q_main"):
        ch.queue_declare(q)
    ch.queue_bind("q_down", "downstream", "#")
    ch.queue_bind("q_alt", "unrouted")
    ch.queue_bind("q_main", "main", "k")
    ch.basic_publish("main", "k", b"routed")
    ch.basic_publish("main", "other", b"alternate")
    assert bodies(ch, "q_down") == [b"routed"]
    assert bodies(ch, "q_main") == [b"routed"]
    assert bodies(ch, "q_alt") == [b"alternate"]
    ch.exchange_unbind("downstream", "main", "k")
    ch.basic_publish("main", "k", b"again")
    assert bodies(ch, "q_down") == []
    conn.close()


def test_errors_as_rabbitmq(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    cases = [
        (lambda ch: ch.exchange_declare("amq.mine", "direct"), 403, "reserved prefix"),
        (lambda ch: ch.exchange_declare("amq.direct", "fanout"), 406, "inequivalent arg 'type'"),
        (lambda ch: ch.exchange_declare("nope", passive=True), 404, "no exchange 'nope'"),
        (lambda ch: ch.queue_declare("nope", passive=True), 404, "no queue 'nope'"),
        (lambda ch: ch.queue_bind("nope", "amq.direct"), 404, "no queue 'nope'"),
        (lambda ch: ch.queue_declare("amq.q"), 403, "reserved prefix"),
        (lambda ch: ch.basic_consume("nope", lambda *a: None), 404, "no queue 'nope'"),
        (lambda ch: ch.queue_bind("q", ""), 403, "default exchange"),
        (lambda ch: ch.exchange_declare("", passive=True), 403, "default exchange"),
        (lambda ch: ch.exchange_declare("", "direct"), 403, "default exchange"),
        (lambda ch: ch.basic_ack(99), 406, "unknown delivery tag 99"),
    ]
    ch = conn.channel()
    ch.queue_declare("q", durable=False)
    for action, code, text in cases:
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            action(ch)
            ch.basic_qos(prefetch_count=1)  # a synchronous round trip after async methods
        assert info.value.reply_code == code, (text, info.value)
        assert text in info.value.reply_text
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("q", durable=True)
    assert info.value.reply_code == 406 and "inequivalent arg 'durable'" in info.value.reply_text
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("missing", "k", b"x")
    assert info.value.reply_code == 404
    assert conn.is_open
    conn.close()


def test_unknown_exchange_type_closes_connection(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    with pytest.raises(ConnectionClosedByBroker) as info:
        conn.channel().exchange_declare("x", "nonsense")
    assert info.value.reply_code == 503


def test_exclusive_queue_and_server_names(gw: ThreadGateway) -> None:
    owner = pika_connect(gw)
    other = pika_connect(gw)
    ch = owner.channel()
    name = ch.queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-")
    for action in (lambda c: c.queue_declare(name, passive=True),
                   lambda c: c.basic_consume(name, lambda *a: None),
                   lambda c: c.queue_delete(name)):
        with pytest.raises(ChannelClosedByBroker) as info:
            action(other.channel())
        assert info.value.reply_code == 405
    owner.close()  # exclusive queues go with their connection
    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().queue_declare(name, passive=True)
    assert info.value.reply_code == 404
    other.close()


def test_purge_delete_if_unused_if_empty(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("p")
    for i in range(3):
        ch.basic_publish("", "p", str(i).encode())
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_delete("p", if_empty=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    assert ch.queue_purge("p").method.message_count == 3
    assert ch.queue_declare("p", passive=True).method.message_count == 0
    ch.basic_consume("p", lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_delete("p", if_unused=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    assert ch.queue_delete("p").method.message_count == 0
    conn.close()


def test_durable_topology_survives_restart(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("dx", "topic", durable=True)
    ch.queue_declare("durable_q", durable=True, arguments={"x-max-length": 100})
    ch.queue_declare("transient_q")
    ch.queue_bind("durable_q", "dx", "a.#")
    ch.queue_bind("transient_q", "dx", "a.#")
    ch.basic_publish("dx", "a.b", b"kept", pika.BasicProperties(delivery_mode=2))
    conn.close()
    gw.restart()
    conn = pika_connect(gw)
    ch = conn.channel()
    assert ch.queue_declare("durable_q", passive=True).method.message_count == 1
    ch.queue_declare("durable_q", durable=True, arguments={"x-max-length": 100})
    with pytest.raises(ChannelClosedByBroker):
        ch.queue_declare("transient_q", passive=True)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("dx", "a.c", b"after")
    assert bodies(ch, "durable_q") == [b"after", b"kept"]
    names = {info.name for info in gw.store.lmqs("amqp:")}
    assert names == {"amqp:/:durable_q"}
    conn.close()


def test_internal_exchange_refuses_publish(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.exchange_declare("inner", "fanout", internal=True)
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("inner", "", b"x")
    assert info.value.reply_code == 403
    conn.close()


def test_lmq_queues_list(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("listed", durable=True)
    for i in range(3):
        ch.basic_publish("", "listed", str(i).encode())
    ch.basic_get("listed")  # unacked, then requeued by the connection close
    conn.close()
    gw.stop()
    result = CliRunner().invoke(queues, ["list", "--data-dir", str(gw.data_dir), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["queue"], r["durable"], r["ready"] + r["unacked"]) for r in rows] == [
        ("listed", True, 3)]


def test_topic_routes_follow_binding_changes(gw: ThreadGateway) -> None:
    """A topic exchange remembers which queues a routing key reached; every bind and
    unbind (and a deleted queue) must be seen by the next publish with that key."""
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("tm", "topic")
    for q in ("tm1", "tm2"):
        ch.queue_declare(q)
    ch.queue_bind("tm1", "tm", "k.*")

    def publish(body: bytes) -> None:
        ch.basic_publish("tm", "k.x", body)

    publish(b"1")  # only tm1 bound
    ch.queue_bind("tm2", "tm", "#.x")
    publish(b"2")  # both
    ch.queue_unbind("tm1", "tm", "k.*")
    publish(b"3")  # tm2 only
    ch.queue_delete("tm2")
    ch.queue_declare("tm2")  # re-created, not bound
    publish(b"4")  # nobody
    ch.queue_bind("tm1", "tm", "k.x")
    publish(b"5")  # tm1 again
    assert bodies(ch, "tm1") == [b"1", b"2", b"5"]
    assert bodies(ch, "tm2") == []
    conn.close()
