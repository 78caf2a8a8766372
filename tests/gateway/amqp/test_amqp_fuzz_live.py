"""A live-socket AMQP fuzzer: after a real handshake, malformed, truncated and
out-of-order frames (random, or mutations of valid ones) go to a running gateway. Each
bad connection is closed or answered with a close; a good client keeps working
throughout; the gateway's memory stays bounded."""

from __future__ import annotations

import os
import socket

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from ..amqp_support import Raw, ThreadGateway, pika_connect

VALID = [
    frame.marshal(commands.Basic.Publish(exchange="", routing_key="fuzz"), 1),
    frame.marshal(commands.Queue.Declare(queue="fuzz"), 1),
    frame.marshal(commands.Basic.Ack(delivery_tag=1), 1),
    frame.marshal(commands.Channel.Open(), 2),
    b"\x08\x00\x00\x00\x00\x00\x00\xce",  # heartbeat
]


def mutate(data: bytes, where: int, value: int) -> bytes:
    if not data:
        return bytes([value])
    i = where % len(data)
    return data[:i] + bytes([value]) + data[i + 1 :]


frames = st.one_of(
    st.binary(min_size=1, max_size=64),
    st.tuples(st.sampled_from(VALID), st.integers(0, 1 << 16), st.integers(0, 255)).map(
        lambda t: mutate(*t)),
    st.tuples(st.sampled_from(VALID), st.integers(1, 40)).map(lambda t: t[0][: t[1]]),
    st.tuples(st.integers(1, 8), st.integers(0, 65535), st.integers(0, 2**32 - 1),
              st.binary(max_size=16)).map(
        lambda t: bytes([t[0]]) + t[1].to_bytes(2, "big") + t[2].to_bytes(4, "big") + t[3]),
)


@pytest.mark.slow
def test_live_amqp_fuzz(gw: ThreadGateway) -> None:
    port = gw.port
    good = pika_connect(gw)
    ch = good.channel()
    ch.queue_declare("alive")
    proc = psutil.Process(os.getpid())  # the gateway runs in this process (a thread)
    rss_start = proc.memory_info().rss
    count = 0

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(frames, min_size=1, max_size=4))
    def attack(chunks: list[bytes]) -> None:
        nonlocal count
        count += 1
        raw = Raw(port)
        try:
            raw.handshake()
            for chunk in chunks:
                raw.send(chunk)
            raw.sock.shutdown(socket.SHUT_WR)
            raw.sock.settimeout(5)
            while raw.sock.recv(65536):  # the gateway must end the connection
                pass
        except OSError:
            pass  # reset while sending or reading: closed by the gateway
        finally:
            raw.close()
        if count % 20 == 0:
            ch.basic_publish("", "alive", b"%d" % count)
            method, _, body = ch.basic_get("alive", auto_ack=True)
            assert body == b"%d" % count

    attack()
    growth = proc.memory_info().rss - rss_start
    assert growth < 64 * 1024 * 1024, f"RSS grew by {growth / 2**20:.1f} MiB"
    good.close()
