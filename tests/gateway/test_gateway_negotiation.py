"""Negotiation over real sockets: the PROXY protocol header in front of MQTT (the real
MQTT front end) and remoting, who may send it, the forwarded address in the connection
table, logs and limits; the sniff timeout; the HTTP/2 preface refused with GOAWAY;
remoting frames reaching the remoting front end on the unified port, the dedicated
remoting port and both of their TLS twins.

The remoting front end here is a recording stand-in (FrontEndSpec.factory), so these
tests pin the negotiation whether or not gateway.remoting exists."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from gateway.config import AUTO, GatewayConfig
from gateway.connection import Connection
from gateway.context import GatewayContext
from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.frontends import FRONT_ENDS, FrontEndSpec
from gateway.server import Gateway
from gateway.sniff import H2_PREFACE, sniff_remoting
from protocol.mqtt import Connect, MQTTVersion, packet_bytes
from protocol.proxy import V2_SIGNATURE

from .gateway_process import GatewayProcess

BOUND = 10.0
CONNECT = packet_bytes(Connect(client_id="behind-lb", protocol_version=MQTTVersion.V3_1_1))
CONNACK_OK = b"\x20\x02\x00\x00"


class RecordingFrontEnd(FrontEnd):
    """Stands in for gateway.remoting: records each connection's bytes and echoes them."""

    name = "remoting"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        self.received: list[tuple[Connection, bytearray]] = []

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        record = bytearray()
        self.received.append((conn, record))
        return _Recorder(conn, record)


class _Recorder(ConnectionHandler):
    def __init__(self, conn: Connection, record: bytearray) -> None:
        super().__init__(conn)
        self.record = record

    def data_received(self, data: bytes) -> None:
        self.conn.established()
        self.record += data
        self.conn.queue(data)


def _specs() -> tuple[FrontEndSpec, ...]:
    by_name = {spec.name: spec for spec in FRONT_ENDS}
    return (
        by_name["mqtt"],
        by_name["http"],
        FrontEndSpec("remoting", "-", sniff_remoting, factory=RecordingFrontEnd),
        # the real grpc spec (its refusal), with a module that surely does not exist
        dataclasses.replace(by_name["grpc"], module="tests_gateway_no_such_module.grpc"),
    )


Starter = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Starter]:
    gateways: list[Gateway] = []

    async def start_gateway(**options: object) -> Gateway:
        options = {
            "data_dir": tmp_path / "data",
            "mqtt_port": AUTO,
            "amqp_port": 0,
            "unified_port": AUTO,
            "grpc_port": 0,  # a gateway listener: 8081 would collide between test workers
            "shutdown_timeout": 2.0,
            **options,
        }
        gateway = Gateway(GatewayConfig(**options), front_ends=_specs())  # type: ignore[arg-type]
        gateways.append(gateway)
        await asyncio.wait_for(gateway.start(), BOUND)
        return gateway

    yield start_gateway
    for gateway in gateways:
        await asyncio.wait_for(gateway.stop(), BOUND)


def port(gateway: Gateway, name: str = "unified") -> int:
    listener = gateway.listener(name)
    assert listener is not None, name
    return listener.port


async def connect(gateway: Gateway, name: str = "unified", tls: ssl.SSLContext | None = None):
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port(gateway, name), ssl=tls), BOUND
    )


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), BOUND)
    except ConnectionResetError:
        return b"<reset>"


def proxy_v1(source: str, sport: int) -> bytes:
    family = "TCP4" if ipaddress.ip_address(source).version == 4 else "TCP6"
    return f"PROXY {family} {source} 127.0.0.1 {sport} 8080\r\n".encode()


def proxy_v2(source: str, sport: int, *, local: bool = False) -> bytes:
    """A v2 header from ``source`` to the balancer's 192.0.2.80:8080 (or [2001:db8::80])."""
    address = ipaddress.ip_address(source)
    family = 0x11 if address.version == 4 else 0x21
    balancer = ipaddress.ip_address("192.0.2.80" if address.version == 4 else "2001:db8::80")
    body = address.packed + balancer.packed + struct.pack(">HH", sport, 8080)
    body += b"\x04\x00\x03pad"  # a PP2_TYPE_NOOP TLV, to be skipped
    command = 0x20 if local else 0x21
    return V2_SIGNATURE + bytes([command, family]) + struct.pack(">H", len(body)) + body


def remoting_frame(code: int = 105, opaque: int = 1) -> bytes:
    header = json.dumps(
        {"code": code, "extFields": {"topic": "orders"}, "flag": 0, "language": "JAVA",
         "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": 479}
    ).encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


def rejected(gateway: Gateway, reason: str) -> float:
    return gateway.metrics.get("lmq_connections_rejected_total").value(reason=reason)


async def mqtt_connection(gateway: Gateway) -> Connection:
    (conn,) = [c for c in gateway.connections.values() if c.protocol == "mqtt"]
    return conn


# -- PROXY protocol ---------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["unified", "mqtt"])
async def test_proxy_v1_and_v2_then_mqtt_connect(start, caplog, listener):
    caplog.set_level(logging.INFO)
    gateway = await start(proxy_protocol="any", proxy_protocol_networks=("127.0.0.0/8",))
    cases = (
        (proxy_v1("203.0.113.7", 40001), "203.0.113.7:40001"),
        (proxy_v2("2001:db8::7", 40002), "[2001:db8::7]:40002"),
    )
    for header, forwarded in cases:
        reader, writer = await connect(gateway, listener)
        data, h = header + CONNECT, len(header)
        for piece in (data[: h - 3], data[h - 3 : h + 2], data[h + 2 :]):  # split in and after
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        assert await asyncio.wait_for(reader.readexactly(4), BOUND) == CONNACK_OK
        conn = await mqtt_connection(gateway)
        assert conn.peer == forwarded
        assert conn.peer_host == forwarded.rsplit(":", 1)[0].strip("[]")
        writer.close()
        await asyncio.wait_for(conn.wait_closed(), BOUND)
        closed = [r for r in caplog.records if r.getMessage() == "connection closed"]
        assert closed[-1].peer == forwarded and closed[-1].protocol == "mqtt"
        proxied = [r for r in caplog.records if r.getMessage() == "PROXY header"]
        assert proxied[-1].peer == forwarded and proxied[-1].via.startswith("127.0.0.1:")
    assert rejected(gateway, "bad_proxy_header") == 0


async def test_trusted_peer_must_send_the_header(start):
    gateway = await start(proxy_protocol="v1", proxy_protocol_networks=("127.0.0.1",))
    for listener, data in (
        ("unified", CONNECT),
        ("mqtt", CONNECT),
        ("unified", proxy_v2("198.51.100.1", 1) + CONNECT),  # v2 where only v1 is accepted
    ):
        reader, writer = await connect(gateway, listener)
        writer.write(data)
        assert await read_to_eof(reader) == b""
        writer.close()
    assert rejected(gateway, "bad_proxy_header") == 3
    assert not any(c.protocol == "mqtt" for c in gateway.connections.values())


async def test_header_from_untrusted_peer_is_unknown_bytes(start):
    gateway = await start(proxy_protocol="any", proxy_protocol_networks=("10.0.0.0/8",))
    reader, writer = await connect(gateway)
    writer.write(proxy_v1("203.0.113.7", 1) + CONNECT)
    assert await read_to_eof(reader) == b""
    writer.close()
    assert rejected(gateway, "unknown_protocol") == 1
    # a real client from the same (untrusted, so direct) address is served as itself
    await asyncio.to_thread(_paho_connects, port(gateway))


def _paho_connects(port: int) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="direct")
    assert client.connect("127.0.0.1", port) == 0
    try:
        for _ in range(100):
            client.loop(0.05)
            if client.is_connected():
                break
        assert client.is_connected()
    finally:
        client.disconnect()


async def test_header_when_proxy_protocol_is_off(start):
    gateway = await start()
    for header in (proxy_v1("203.0.113.7", 1), proxy_v2("203.0.113.7", 1)):
        reader, writer = await connect(gateway)
        writer.write(header + CONNECT)
        assert await read_to_eof(reader) == b""
        writer.close()
    assert rejected(gateway, "unknown_protocol") == 2


async def test_local_header_keeps_the_balancer_address(start):
    gateway = await start(proxy_protocol="v2", proxy_protocol_networks=("127.0.0.0/8",))
    reader, writer = await connect(gateway)
    writer.write(proxy_v2("203.0.113.7", 9, local=True) + CONNECT)
    assert await asyncio.wait_for(reader.readexactly(4), BOUND) == CONNACK_OK
    conn = await mqtt_connection(gateway)
    assert conn.peer_host == "127.0.0.1"
    writer.close()


async def test_per_address_limit_counts_the_forwarded_address(start):
    gateway = await start(
        proxy_protocol="v1", proxy_protocol_networks=("127.0.0.0/8",),
        max_connections_per_address=1,
    )
    first = await connect(gateway)
    first[1].write(proxy_v1("203.0.113.7", 1) + CONNECT)
    assert await asyncio.wait_for(first[0].readexactly(4), BOUND) == CONNACK_OK
    # the same client behind the same balancer: over its limit
    second = await connect(gateway)
    second[1].write(proxy_v1("203.0.113.7", 2) + CONNECT)
    assert await read_to_eof(second[0]) == b""
    assert rejected(gateway, "max_connections_per_address") == 1
    # another client through the same balancer socket address: its own count
    third = await connect(gateway)
    third[1].write(proxy_v1("203.0.113.8", 3) + packet_bytes(
        Connect(client_id="other", protocol_version=MQTTVersion.V3_1_1)))
    assert await asyncio.wait_for(third[0].readexactly(4), BOUND) == CONNACK_OK
    for _, writer in (first, second, third):
        writer.close()


async def test_proxy_header_in_front_of_remoting(start):
    gateway = await start(proxy_protocol="v2", proxy_protocol_networks=("127.0.0.1/32",))
    front_end = gateway.front_ends["remoting"]
    assert isinstance(front_end, RecordingFrontEnd)
    frame = remoting_frame()
    reader, writer = await connect(gateway)
    writer.write(proxy_v2("192.0.2.44", 5000) + frame)
    assert await asyncio.wait_for(reader.readexactly(len(frame)), BOUND) == frame
    ((conn, record),) = front_end.received
    assert bytes(record) == frame and conn.peer == "192.0.2.44:5000"
    # what a route reply advertises by default: the balancer the client connected to
    assert conn.local_address == ("192.0.2.80", 8080)
    writer.close()


# -- timeouts and refusals --------------------------------------------------------------


async def test_silent_connections_closed_after_sniff_timeout(start, caplog):
    caplog.set_level(logging.INFO)
    gateway = await start(
        sniff_timeout=0.3, connect_timeout=30,
        proxy_protocol="v1", proxy_protocol_networks=("127.0.0.1",),
        proxy_protocol_listeners=("mqtt",),
    )
    loop = asyncio.get_running_loop()
    silent = await connect(gateway)
    partial = await connect(gateway)
    partial[1].write(b"\x00\x00\x00")  # could be remoting: never finishes
    no_header = await connect(gateway, "mqtt")  # a PROXY header is expected here
    began = loop.time()
    for reader, _ in (silent, partial, no_header):
        assert await read_to_eof(reader) == b""
    assert loop.time() - began < 5
    assert rejected(gateway, "sniff_timeout") == 3
    assert rejected(gateway, "connect_timeout") == 0
    lines = [r for r in caplog.records if r.getMessage().startswith("no protocol identified")]
    assert sorted(r.first_bytes for r in lines) == ["", "", "000000"]
    for _, writer in (silent, partial, no_header):
        writer.close()


async def test_h2_preface_gets_goaway(start, caplog):
    caplog.set_level(logging.INFO)
    gateway = await start()
    reader, writer = await connect(gateway)
    writer.write(H2_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    reply = await read_to_eof(reader)
    writer.close()
    # server preface: an empty SETTINGS frame (length 0, type 4, stream 0)
    assert reply[:9] == b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    goaway = reply[9:]
    length = int.from_bytes(goaway[:3], "big")
    assert goaway[3:5] == b"\x07\x00" and goaway[5:9] == bytes(4)  # GOAWAY on stream 0
    assert len(goaway) == 9 + length
    last_stream, error = struct.unpack(">II", goaway[9:17])
    assert (last_stream, error) == (0, 0x7)  # REFUSED_STREAM
    assert b"gRPC" in goaway[17:]
    wanted = [r.wanted for r in caplog.records
              if r.getMessage() == "front end not available, closing"]
    assert wanted == ["grpc"]
    assert rejected(gateway, "front_end_unavailable") == 1


# -- remoting on every port -------------------------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", "key.pem", "-out", "cert.pem"],
        cwd=d, check=True, capture_output=True,
    )
    return d


async def test_remoting_frames_on_every_port(start, self_signed):
    gateway = await start(
        remoting_port=AUTO, remoting_tls_port=AUTO, unified_tls_port=AUTO,
        mqtts_port=0, amqps_port=0,
        tls_cert=str(self_signed / "cert.pem"), tls_key=str(self_signed / "key.pem"),
    )
    health = {bl.name: bl.protocols for bl in gateway.listeners}
    assert health["remoting"] == ("remoting",) and health["remoting_tls"] == ("remoting",)
    assert "remoting" in health["unified"] and "grpc" in health["unified_tls"]
    front_end = gateway.front_ends["remoting"]
    assert isinstance(front_end, RecordingFrontEnd)
    client_tls = ssl.create_default_context(cafile=str(self_signed / "cert.pem"))
    for n, (listener, tls) in enumerate(
        (("unified", None), ("remoting", None), ("unified_tls", client_tls),
         ("remoting_tls", client_tls))
    ):
        frame = remoting_frame(opaque=n)
        reader, writer = await connect(gateway, listener, tls)
        for piece in (frame[:3], frame[3:9], frame[9:]):  # sniffing waits for enough
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        assert await asyncio.wait_for(reader.readexactly(len(frame)), BOUND) == frame
        conn, record = front_end.received[-1]
        assert bytes(record) == frame
        assert conn.listener == listener and conn.protocol == "remoting"
        assert conn.local_address == ("127.0.0.1", port(gateway, listener))
        writer.close()
    assert len(front_end.received) == 4


# -- lmq serve: the flags, end to end ----------------------------------------------------


def test_serve_flags_remoting_port_and_proxy_protocol(tmp_path):
    gw = GatewayProcess(
        tmp_path / "data", "--remoting-port", "auto", "--proxy-protocol", "any",
        "--proxy-protocol-networks", "127.0.0.1,::1", "--advertised-address", "gw.test:9876",
    ).start()
    try:
        assert {"mqtt", "unified", "remoting"} <= set(gw.ports)
        with socket.create_connection(("127.0.0.1", gw.ports["unified"]), timeout=BOUND) as s:
            s.sendall(proxy_v2("198.51.100.20", 61000) + CONNECT)
            assert s.recv(4) == CONNACK_OK
        # the forwarded address is in the process's connection log
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and not any(
            "connection closed" in line and "198.51.100.20:61000" in line for line in gw.output
        ):
            time.sleep(0.05)
        assert any("PROXY header" in line and "198.51.100.20:61000" in line for line in gw.output)
        assert any("connection closed" in line and "198.51.100.20:61000" in line
                   for line in gw.output)
    finally:
        assert gw.stop() == 0
