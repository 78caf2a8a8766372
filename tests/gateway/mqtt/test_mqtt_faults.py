"""Faults: kill -9 mid-stream loses no PUBACKed message; malformed input from many
connections closes each of them and the gateway keeps serving, in bounded memory."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.mqtt import (
    Connack,
    Connect,
    MQTTVersion,
    Puback,
    Publish,
    packet_bytes,
)

from ..mqtt_clients import Paho, RawClient

V5 = MQTTVersion.V5


class Publisher(threading.Thread):
    """Publishes QoS 1 with a window of 32 until the gateway dies; records PUBACKed ids."""

    def __init__(self, port: int, name: str) -> None:
        super().__init__(daemon=True)
        self.port, self.name_ = port, name
        self.acked: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            c = RawClient(self.port)
            c.send(Connect(client_id=self.name_, protocol_version=MQTTVersion.V3_1_1))
            assert isinstance(c.recv(), Connack)
            inflight: dict[int, str] = {}
            seq = 0
            while not self.stop.is_set():
                while len(inflight) < 32:
                    seq += 1
                    pid = seq % 65535 + 1
                    payload = f"{self.name_}-{seq}"
                    inflight[pid] = payload
                    c.send(
                        Publish(
                            topic=f"crash/{self.name_}",
                            payload=payload.encode(),
                            qos=1,
                            packet_id=pid,
                        )
                    )
                ack = c.recv(timeout=5)
                if isinstance(ack, Puback):
                    self.acked.append(inflight.pop(ack.packet_id))
                else:
                    return
        except (OSError, TimeoutError, AssertionError):
            return


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_message(gateway):
    sub = Paho(gateway.mqtt_port, "crash-sub", clean=False)
    sub.subscribe("crash/#", qos=1)
    sub.disconnect()
    pubs = [Publisher(gateway.mqtt_port, f"p{i}") for i in range(2)]
    for p in pubs:
        p.start()
    time.sleep(1.5)
    gateway.kill()  # SIGKILL mid-stream
    for p in pubs:
        p.stop.set()
        p.join(timeout=10)
    acked = {payload for p in pubs for payload in p.acked}
    assert len(acked) > 100
    gateway.start()
    sub = Paho(gateway.mqtt_port, "crash-sub", clean=False)
    assert sub.session_present
    received: set[str] = set()
    deadline = time.monotonic() + 60
    while not acked <= received and time.monotonic() < deadline:
        try:
            received.add(sub.get(timeout=2).payload.decode())
        except Exception:
            break
    missing = acked - received
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"


def _handshake(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(packet_bytes(Connect(client_id="", protocol_version=V5), V5))
    data = b""
    while len(data) < 2 or len(data) < 2 + data[1]:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return sock


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


packets = st.one_of(
    st.binary(min_size=1, max_size=64),
    # a plausible fixed header with a lying remaining length
    st.tuples(st.integers(0, 255), st.binary(min_size=1, max_size=4), st.binary(max_size=32)).map(
        lambda t: bytes([t[0]]) + t[1] + t[2]
    ),
)


@pytest.mark.slow
def test_live_fuzz_closes_bad_connections_and_keeps_serving(gateway):
    port = gateway.mqtt_port
    proc = psutil.Process(gateway.proc.pid)
    good = Paho(port, "good")
    good.subscribe("alive", qos=1)
    pub = Paho(port, "pub")
    rss_start = proc.memory_info().rss
    count = 0

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(packets, min_size=1, max_size=4))
    def attack(chunks: list[bytes]) -> None:
        nonlocal count
        count += 1
        sock = _handshake(port)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)  # then EOF: the server must close its side
            assert _closed_by_server(sock, timeout=5)
        except OSError:
            pass  # reset or not connected: the server closed it while we were sending
        finally:
            sock.close()
        if count % 25 == 0:
            pub.publish("alive", b"%d" % count, qos=1)
            assert good.get().payload == b"%d" % count

    attack()
    growth = proc.memory_info().rss - rss_start
    assert growth < 64 * 1024 * 1024, f"RSS grew by {growth / 2**20:.1f} MiB"
    pub.publish("alive", b"end", qos=1)
    assert good.get().payload == b"end"


def test_garbage_before_connect_is_closed(gateway):
    c = RawClient(gateway.mqtt_port)
    c.send_raw(b"\x20\x02\x00\x00")  # a CONNACK from a client: not a CONNECT
    assert c.closed_by_server()
