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

from .gateway_process import GatewayProcess

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
