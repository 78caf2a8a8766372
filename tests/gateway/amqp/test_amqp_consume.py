"""AMQP consumption and publishing with pika over real sockets: acks, nack/reject with
requeue (redelivered), prefetch, basic.get, recover, requeue on channel close, confirms
and mandatory returns, TTL and dead-lettering with x-death, length limits, transactions,
bodies larger than frame_max, consumer cancel notification, single active consumer."""

from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

from ..amqp_support import ThreadGateway, drain, pika_connect


def settle(conn: pika.BlockingConnection, seconds: float) -> None:
    """Process events for ``seconds``: one ``process_data_events`` call returns at the
    first event, so a single call can see fewer deliveries than will come."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        conn.process_data_events(time_limit=left)


def test_ack_nack_reject_requeue_redelivered(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("q")
    for i in range(3):
        ch.basic_publish("", "q", f"m{i}".encode())
    first = ch.basic_get("q")
    assert first[0].redelivered is False and first[2] == b"m0"
    assert first[0].message_count == 2
    ch.basic_nack(first[0].delivery_tag, requeue=True)
    second = ch.basic_get("q")
    assert second[2] == b"m0" and second[0].redelivered is True
    ch.basic_reject(second[0].delivery_tag, requeue=False)  # gone: no DLX
    rest = drain(ch, "q", ack=False)
    assert [b for _, _, b in rest] == [b"m1", b"m2"]
    ch.basic_ack(rest[-1][0].delivery_tag, multiple=True)
    assert ch.queue_declare("q", passive=True).method.message_count == 0
    assert ch.basic_get("q") == (None, None, None)
    conn.close()


def test_channel_close_and_recover_requeue(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"one")
    ch.basic_publish("", "q", b"two")
    taken = drain(ch, "q", ack=False)
    assert len(taken) == 2
    ch.basic_recover(requeue=True)
    again = drain(ch, "q", ack=False)
    assert [m.redelivered for m, _, _ in again] == [True, True]
    ch.close()  # unacked go back
    ch = conn.channel()
    got = drain(ch, "q")
    assert sorted(b for _, _, b in got) == [b"one", b"two"]
    assert all(m.redelivered for m, _, _ in got)
    conn.close()


def test_prefetch_limits_unacked(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("q")
    for i in range(10):
        ch.basic_publish("", "q", str(i).encode())
    ch.basic_qos(prefetch_count=3)
    received: list[pika.spec.Basic.Deliver] = []
    ch.basic_consume("q", lambda c, m, p, b: received.append(m))
    settle(conn, 0.5)
    assert len(received) == 3
    ch.basic_ack(received[-1].delivery_tag, multiple=True)
    settle(conn, 0.5)
    assert len(received) == 6
    conn.close()


def test_competing_consumers_share_a_queue(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work")
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    ch.basic_qos(prefetch_count=1)
    for tag in got:
        ch.basic_consume("work", lambda c, m, p, b, tag=tag: (got[tag].append(b),
                                                                c.basic_ack(m.delivery_tag)),
                         consumer_tag=tag)
    for i in range(20):
        ch.basic_publish("", "work", str(i).encode())
    deadline = time.monotonic() + 5
    while len(got["a"]) + len(got["b"]) < 20 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert sorted(got["a"] + got["b"], key=int) == [str(i).encode() for i in range(20)]
    assert got["a"] and got["b"]
    conn.close()


def test_confirms_and_mandatory_return(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(UnroutableError) as info:  # basic.return, then the confirm
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)
    returned = info.value.messages[0]
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert returned.body == b"x"
    ch.basic_publish("amq.direct", "nowhere", b"dropped quietly")  # not mandatory: acked
    conn.close()


def test_ttl_and_dead_letter_x_death(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dead")
    ch.queue_bind("dead", "dlx")
    ch.queue_declare("short", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "dlx"})
    ch.queue_declare("plain", arguments={"x-dead-letter-exchange": "dlx",
                                         "x-dead-letter-routing-key": "rk"})
    ch.basic_publish("", "short", b"expires")
    ch.basic_publish("", "plain", b"per-message", pika.BasicProperties(expiration="30"))
    ch.basic_publish("", "plain", b"rejected")
    time.sleep(0.3)
    assert ch.basic_get("plain") is not None  # the expired one is skipped on the way
    got = drain(ch, "dead", ack=True)
    assert [b for _, _, b in got] == [b"expires", b"per-message"]
    death = got[0][1].headers["x-death"][0]
    assert death["reason"] == "expired" and death["queue"] == "short"
    assert death["count"] == 1 and death["routing-keys"] == ["short"]
    assert death["exchange"] == ""
    assert got[0][0].routing_key == "short"
    assert got[1][0].routing_key == "rk"
    assert got[1][1].expiration is None
    # reject without requeue dead-letters with reason 'rejected'
    ch.basic_publish("", "plain", b"reject me")
    method, _, _ = ch.basic_get("plain")
    ch.basic_reject(method.delivery_tag, requeue=False)
    got = drain(ch, "dead")
    assert got[0][1].headers["x-death"][0]["reason"] == "rejected"
    conn.close()


def test_max_length_drop_head_and_reject_publish(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("capped", arguments={"x-max-length": 2})
    for i in range(5):
        ch.basic_publish("", "capped", str(i).encode())
    time.sleep(0.2)
    assert [b for _, _, b in drain(ch, "capped")] == [b"3", b"4"]
    ch.queue_declare("strict", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", "strict", b"fits")
    with pytest.raises(NackError):
        ch.basic_publish("", "strict", b"refused")
    # reject-publish-dlx: refused (nacked) and dead-lettered as maxlen
    ch.queue_declare("dead")
    ch.queue_declare("strict-dlx", arguments={
        "x-max-length": 1, "x-overflow": "reject-publish-dlx",
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    ch.basic_publish("", "strict-dlx", b"fits")
    with pytest.raises(NackError):
        ch.basic_publish("", "strict-dlx", b"over")
    time.sleep(0.2)
    dead = drain(ch, "dead")
    assert [b for _, _, b in dead] == [b"over"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "maxlen"
    conn.close()


def test_transactions(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.queue_declare("txq")
    ch.tx_select()
    ch.basic_publish("", "txq", b"rolled back")
    ch.tx_rollback()
    ch.basic_publish("", "txq", b"committed")
    assert ch.queue_declare("txq", passive=True).method.message_count == 0
    ch.tx_commit()
    assert ch.queue_declare("txq", passive=True).method.message_count == 1
    method, _, body = ch.basic_get("txq")
    assert body == b"committed"
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()
    assert ch.queue_declare("txq", passive=True).method.message_count == 0
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406
    conn.close()


def test_large_body_split_across_frames(gw: ThreadGateway) -> None:
    conn = pika_connect(gw, frame_max=8192)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("big")
    body = bytes(range(256)) * 4000  # ~1 MB, > frame_max
    ch.basic_publish("", "big", body)
    method, _, got = ch.basic_get("big", auto_ack=True)
    assert got == body
    conn.close()


def test_queue_delete_cancels_consumers(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.queue_declare("doomed")
    cancelled: list[object] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame))
    ch.basic_consume("doomed", lambda *a: None)
    other = conn.channel()
    other.queue_delete("doomed")
    settle(conn, 0.3)
    assert len(cancelled) == 1
    conn.close()


def test_single_active_consumer_and_auto_delete(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("sac", auto_delete=True, arguments={"x-single-active-consumer": True})
    got: dict[str, int] = {"first": 0, "second": 0}
    for tag in got:
        ch.basic_consume("sac", lambda c, m, p, b, tag=tag: got.__setitem__(tag, got[tag] + 1),
                         auto_ack=True, consumer_tag=tag)
    for _ in range(5):
        ch.basic_publish("", "sac", b"x")
    settle(conn, 0.3)
    assert got == {"first": 5, "second": 0}
    ch.basic_cancel("first")
    ch.basic_cancel("second")
    with pytest.raises(ChannelClosedByBroker):  # auto-deleted with its last consumer
        ch.queue_declare("sac", passive=True)
    conn.close()


def test_priority_queue_delivers_highest_priority_first(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    try:
        ch = conn.channel()
        ch.queue_declare("prio", arguments={"x-max-priority": 5})
        for body, priority in [(b"low-1", 0), (b"mid", 3), (b"low-2", None), (b"high", 5),
                               (b"above-max", 9), (b"mid-2", 3)]:
            props = pika.BasicProperties(priority=priority)
            ch.basic_publish("", "prio", body, properties=props)
        assert ch.queue_declare("prio", passive=True).method.message_count == 6
        got = []
        while True:
            method, _, body = ch.basic_get("prio", auto_ack=True)
            if method is None:
                break
            got.append(body)
        # by priority (above the maximum counts as the maximum), FIFO within one
        assert got == [b"high", b"above-max", b"mid", b"mid-2", b"low-1", b"low-2"]
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare("too-many", arguments={"x-max-priority": 256})
        assert exc.value.reply_code == 406
    finally:
        conn.close()


def test_delivery_limit_dead_letters(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.queue_declare("limbo")
    ch.queue_declare("flaky", arguments={
        "x-delivery-limit": 2, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "limbo"})
    ch.basic_publish("", "flaky", b"poison")
    time.sleep(0.1)
    deliveries = 0
    for _ in range(6):
        method, _, body = ch.basic_get("flaky")
        if method is None:
            time.sleep(0.1)
            continue
        deliveries += 1
        ch.basic_nack(method.delivery_tag, requeue=True)
    # delivered once plus two redeliveries, then dead-lettered
    assert deliveries == 3
    dead = drain(ch, "limbo")
    assert [b for _, _, b in dead] == [b"poison"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "delivery_limit"
    conn.close()


def test_consumer_priorities(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.queue_declare("work")
    low: list[bytes] = []
    high: list[bytes] = []
    ch.basic_consume("work", lambda c, m, p, b: (low.append(b), c.basic_ack(m.delivery_tag)),
                     arguments={"x-priority": 1})
    ch.basic_consume("work", lambda c, m, p, b: (high.append(b), c.basic_ack(m.delivery_tag)),
                     arguments={"x-priority": 10})
    for i in range(5):
        ch.basic_publish("", "work", b"%d" % i)
    deadline = time.monotonic() + 5
    while len(low) + len(high) < 5 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    # the high-priority consumer has credit (no prefetch limit): it gets everything
    assert len(high) == 5 and low == []
    conn.close()


def test_queue_limit_per_connection(tmp_path) -> None:
    from ..amqp_support import ThreadGateway as TG

    g = TG(tmp_path / "d", max_queues_per_connection=2).start()
    try:
        conn = pika_connect(g)
        ch = conn.channel()
        ch.queue_declare("one")
        ch.queue_declare("two")
        ch.queue_declare("one")  # redeclaring is not creating
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare("three")
        assert exc.value.reply_code == 406 and "queue limit" in exc.value.reply_text
        ch = conn.channel()
        ch.queue_delete("two")
        ch.queue_declare("three")  # room again
        conn.close()
    finally:
        g.stop()


def test_ack_multiple_across_queues_consumers_and_gets(gw: ThreadGateway) -> None:
    """One multiple ack settling deliveries of two consumers on two queues and a
    basic.get, interleaved: each consumer's prefetch credit comes back, and nothing is
    left unacked (closing the channel requeues nothing)."""
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    for q in ("qa", "qb"):
        ch.queue_declare(q)
        for i in range(6):
            ch.basic_publish("", q, f"{q}{i}".encode())
    got = ch.basic_get("qa")
    ch.basic_qos(prefetch_count=2)
    received: list[tuple[str, int]] = []

    def until(n: int) -> list[str]:  # (process_data_events returns at the first event)
        deadline = time.monotonic() + 5
        while len(received) < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
        settle(conn, 0.2)  # and nothing more comes
        return sorted(q for q, _ in received)

    for q in ("qa", "qb"):
        ch.basic_consume(q, lambda c, m, p, b, q=q: received.append((q, m.delivery_tag)))
    assert until(4) == ["qa", "qa", "qb", "qb"]  # prefetch 2 each
    ch.basic_ack(max(t for _, t in received), multiple=True)  # covers the get too
    assert got[0].delivery_tag < min(t for _, t in received)
    assert until(8) == ["qa"] * 4 + ["qb"] * 4
    ch.basic_ack(0, multiple=True)
    assert until(11) == ["qa"] * 5 + ["qb"] * 6
    ch.basic_ack(0, multiple=True)
    settle(conn, 0.3)
    ch.close()
    ch = conn.channel()
    left = {q: ch.queue_declare(q, passive=True).method.message_count for q in ("qa", "qb")}
    assert left == {"qa": 0, "qb": 0}
    assert len(set(received)) == 11
    conn.close()
