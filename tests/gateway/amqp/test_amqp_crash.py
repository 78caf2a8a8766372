"""Crash test: a gateway subprocess is killed with SIGKILL while a pika client publishes
with confirms to a durable queue and another holds unacknowledged deliveries; after a
restart on the same data directory every confirmed message is consumed exactly once,
and the ones that were delivered but unacknowledged come back flagged redelivered."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pika
import pytest

from ..gateway_process import GatewayProcess

pytestmark = pytest.mark.slow


def connect(gateway: GatewayProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", gateway.ports["amqp"], socket_timeout=10, blocked_connection_timeout=10))


def close_quietly(conn: pika.BlockingConnection) -> None:
    try:
        conn.close()
    except Exception:
        pass
    sock = getattr(getattr(conn, "_impl", None), "_transport", None)
    sock = getattr(sock, "_sock", None)
    if sock is not None:
        sock.close()


def test_kill_9_mid_stream_loses_no_confirmed_message(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        conn = connect(gateway)
        ch = conn.channel()
        ch.queue_declare("crash", durable=True)
        conn.close()

        confirmed: list[int] = []
        stop = threading.Event()

        def publish() -> None:
            c = connect(gateway)
            try:
                pch = c.channel()
                pch.confirm_delivery()
                i = 0
                while not stop.is_set():
                    pch.basic_publish("", "crash", str(i).encode(),
                                      pika.BasicProperties(delivery_mode=2))
                    confirmed.append(i)  # basic_publish returns once the ack is in
                    i += 1
            except Exception:
                pass  # the gateway died under us
            finally:
                close_quietly(c)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        deadline = time.monotonic() + 20
        while len(confirmed) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        # hold some deliveries unacknowledged when the gateway dies
        holder = connect(gateway)
        hch = holder.channel()
        held = []
        for _ in range(5):
            method, _, body = hch.basic_get("crash")
            assert method is not None
            held.append(int(body))
        gateway.kill()
        close_quietly(holder)
        stop.set()
        publisher.join(10)
        assert len(confirmed) >= 300

        gateway.ports = {}
        gateway.start()
        conn = connect(gateway)
        ch = conn.channel()
        received: list[int] = []
        redelivered: set[int] = set()
        for method, _, body in ch.consume("crash", inactivity_timeout=1.0):
            if method is None:
                break
            received.append(int(body))
            if method.redelivered:
                redelivered.add(int(body))
            ch.basic_ack(method.delivery_tag)
        conn.close()
        assert len(received) == len(set(received)), "a message was delivered twice"
        assert set(confirmed) <= set(received), "a confirmed message was lost"
        assert set(held) <= redelivered
    finally:
        gateway.stop()


def test_kill_9_redelivers_exactly_the_unacked(tmp_path: Path) -> None:
    """In-flight deliveries are tracked in memory with one compact record per pop: after
    kill -9 every delivered-unacked message (in order or not, requeued or not) comes back
    once, flagged redelivered; no acked one does; undelivered ones come back unflagged."""
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        conn = connect(gateway)
        ch = conn.channel()
        ch.queue_declare("inflight", durable=True)
        ch.confirm_delivery()
        for i in range(300):
            ch.basic_publish("", "inflight", str(i).encode(),
                             pika.BasicProperties(delivery_mode=2))
        ch.basic_qos(prefetch_count=200)
        got: list[tuple[int, int]] = []  # (body, delivery tag)
        for method, _, body in ch.consume("inflight", inactivity_timeout=2.0):
            if method is None:
                break
            got.append((int(body), method.delivery_tag))
            if len(got) == 200:
                break
        assert [b for b, _ in got] == list(range(200))
        tags = dict(got)
        ch.basic_ack(tags[99], multiple=True)  # 0..99
        for b in range(101, 150, 2):  # out of order: odd ones of 101..149
            ch.basic_ack(tags[b])
        ch.basic_nack(tags[150], requeue=True)  # requeued: delivered again at once
        later: dict[int, bool] = {}  # 150 again, then 200.. (credit opened by the acks)
        for method, _, body in ch.consume("inflight", inactivity_timeout=1.0):
            if method is None:
                break
            later[int(body)] = method.redelivered
        assert later == {150: True, **{b: False for b in range(200, 300)}}
        ch.cancel()  # consumer gone, its deliveries stay unacked
        for i in range(300, 350):  # never delivered before the crash
            ch.basic_publish("", "inflight", str(i).encode(),
                             pika.BasicProperties(delivery_mode=2))
        time.sleep(0.3)  # the acks were written at the end of their loop turn
        gateway.kill()
        close_quietly(conn)

        acked = set(range(100)) | set(range(101, 150, 2))
        gateway.ports = {}
        gateway.start()
        conn = connect(gateway)
        ch = conn.channel()
        received: dict[int, bool] = {}
        for method, _, body in ch.consume("inflight", inactivity_timeout=1.5):
            if method is None:
                break
            assert int(body) not in received, "a message was delivered twice"
            received[int(body)] = method.redelivered
            ch.basic_ack(method.delivery_tag)
        conn.close()
        assert not acked & set(received), "an acked message came back"
        assert set(received) == set(range(350)) - acked
        assert all(received[b] for b in range(100, 300) if b not in acked)
        assert not any(received[b] for b in range(300, 350))
    finally:
        gateway.stop()
