"""The gateway over real sockets on 127.0.0.1 with ephemeral ports, in a temporary data
directory; every gateway is stopped at the end of its test, with a time bound.

A small line-based test front end ("ECHO ...") stands in for a protocol: it shows how a
front end plugs in and lets the tests drive goodbye, tasks and backpressure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from broker_core import MessageStore, StoreClosed, StoreError
from gateway.config import AUTO, GatewayConfig
from gateway.connection import Connection
from gateway.context import GatewayContext
from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.frontends import FrontEndSpec
from gateway.server import Gateway
from gateway.sniff import sniff_amqp, sniff_http, sniff_mqtt

BOUND = 10.0


class EchoFrontEnd(FrontEnd):
    """Lines starting with ECHO are echoed; ``FLOOD`` writes 16 MiB at once; ``SLEEP``
    starts a connection-owned task that never ends. Goodbye writes BYE unless mute."""

    name = "echo"

    def __init__(self, ctx: GatewayContext, mute: bool = False) -> None:
        super().__init__(ctx)
        self.mute = mute
        self.handlers: list[EchoHandler] = []
        self.stopped = False
        self.lines = ctx.metrics.counter("lmq_echo_lines_total", "Lines echoed")

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        handler = EchoHandler(conn, self)
        self.handlers.append(handler)
        return handler

    def goodbye(self, conn: Connection) -> None:
        if not self.mute:
            conn.write(b"BYE\n")
            conn.close("shutdown")

    async def stop(self) -> None:
        self.ctx.store.stats()  # the store is still open here
        self.stopped = True


class EchoHandler(ConnectionHandler):
    def __init__(self, conn: Connection, front_end: EchoFrontEnd) -> None:
        super().__init__(conn)
        self.front_end = front_end
        self.buffer = b""
        self.task: asyncio.Task[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.conn.established()
            if line == b"FLOOD":
                self.conn.write(b"x" * (16 * 1024 * 1024))
            elif line == b"SLEEP":
                self.task = self.conn.spawn(asyncio.Event().wait())
                self.conn.write(b"SLEEPING\n")
            else:
                self.front_end.lines.inc()
                self.conn.write(line + b"\n")


def sniff_echo(prefix: bytes) -> bool | None:
    if len(prefix) < 4:
        return None if b"ECHO".startswith(prefix) else False
    return prefix.startswith(b"ECHO")


def specs(echo: Callable[[GatewayContext], EchoFrontEnd] | None = None) -> tuple[FrontEndSpec, ...]:
    """MQTT and AMQP deliberately absent (whether or not gateway.mqtt exists yet)."""
    out = (
        FrontEndSpec("mqtt", "tests_gateway_no_such_module.mqtt", sniff_mqtt),
        FrontEndSpec("amqp", "tests_gateway_no_such_module.amqp", sniff_amqp),
        FrontEndSpec("http", "gateway.http", sniff_http),
    )
    if echo is not None:
        out += (FrontEndSpec("echo", "-", sniff_echo, factory=echo),)
    return out


Starter = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Starter]:
    gateways: list[Gateway] = []

    async def start_gateway(echo=EchoFrontEnd, **options: object) -> Gateway:
        options = {
            "data_dir": tmp_path / "data",
            "mqtt_port": AUTO,
            "amqp_port": AUTO,
            "unified_port": AUTO,
            "shutdown_timeout": 2.0,
            **options,
        }
        gateway = Gateway(GatewayConfig(**options), front_ends=specs(echo))  # type: ignore[arg-type]
        gateways.append(gateway)
        await asyncio.wait_for(gateway.start(), BOUND)
        return gateway

    yield start_gateway
    for gateway in gateways:
        await asyncio.wait_for(gateway.stop(), BOUND)


def port(gateway: Gateway, name: str = "unified") -> int:
    listener = gateway.listener(name)
    assert listener is not None
    return listener.port


async def connect(gateway: Gateway, name: str = "unified"):
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port(gateway, name)), BOUND)


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), BOUND)
    except ConnectionResetError:
        return b"<reset>"


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, text: bytes) -> None:
    writer.write(text + b"\n")
    assert await asyncio.wait_for(reader.readline(), BOUND) == text + b"\n"


async def http_get(gateway: Gateway, path: str, method: str = "GET") -> tuple[int, dict, bytes]:
    url = f"http://127.0.0.1:{port(gateway)}{path}"

    def fetch() -> tuple[int, dict, bytes]:
        request = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(request, timeout=BOUND) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, dict(exc.headers), exc.read()

    return await asyncio.to_thread(fetch)


async def test_health_and_metrics(start):
    gateway = await start()
    status, headers, body = await http_get(gateway, "/health")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert headers["Connection"] == "close" and int(headers["Content-Length"]) == len(body)
    health = json.loads(body)
    assert health["status"] == "ok" and health["uptime_seconds"] >= 0
    ports = {listener["name"]: listener["port"] for listener in health["listeners"]}
    assert ports == {name: port(gateway, name) for name in ("mqtt", "amqp", "unified")}
    assert health["front_ends"] == {
        "mqtt": "unavailable", "amqp": "unavailable", "http": "available", "echo": "available"
    }
    assert health["store"]["segments"] == 1 and health["store"]["lmqs"] == 0
    assert health["recovery"].startswith("replayed 0 records")

    reader, writer = await connect(gateway)
    await echo(reader, writer, b"ECHO one")
    status, headers, body = await http_get(gateway, "/metrics")
    writer.close()
    text = body.decode()
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'lmq_connections{protocol="echo"} 1\n' in text
    assert 'lmq_connections{protocol="http"} 1\n' in text  # this very request
    assert 'lmq_connections_accepted_total{listener="unified"} 3\n' in text
    assert 'lmq_connections_closed_total{protocol="http"} 1\n' in text
    assert "lmq_echo_lines_total 1\n" in text  # a front end's own metric
    assert "# TYPE lmq_store_log_bytes gauge\nlmq_store_log_bytes 0\n" in text
    assert "lmq_store_segments 1\n" in text and "lmq_store_lmqs 0\n" in text
    assert "lmq_store_timers_pending 0\n" in text
    assert "lmq_store_transactions_pending 0\n" in text
    assert "lmq_store_transactions_dead_lettered 0\n" in text
    assert 'lmq_http_requests_total{path="/health",status="200"} 1\n' in text


async def test_http_errors(start):
    gateway = await start()
    status, _, _ = await http_get(gateway, "/nope")
    assert status == 404
    status, headers, _ = await http_get(gateway, "/health", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, headers, body = await http_get(gateway, "/health", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    bad_requests = (
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
    )
    for garbage in bad_requests:
        reader, writer = await connect(gateway)
        writer.write(garbage)
        assert (await read_to_eof(reader)).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        writer.close()


async def test_garbage_first_bytes_closed(start):
    gateway = await start()
    for first in (b"\x00\x01\x02\x03", b"\x16\x03\x01\x00\x05hello", b"GETX / HTTP/1.1\r\n"):
        reader, writer = await connect(gateway)
        writer.write(first)
        assert await read_to_eof(reader) == b""
        writer.close()
    assert gateway.metrics.get("lmq_connections_rejected_total").value(
        reason="unknown_protocol"
    ) == 3


async def test_unavailable_front_ends_close_cleanly(start, caplog):
    caplog.set_level(logging.INFO)
    gateway = await start()
    reader, writer = await connect(gateway)
    writer.write(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
    assert await read_to_eof(reader) == b""
    writer.close()
    reader, writer = await connect(gateway)
    writer.write(b"AMQP\x00\x00\x09\x01")
    assert await read_to_eof(reader) == b""
    writer.close()
    for name in ("mqtt", "amqp"):  # the plain ports close at once
        reader, writer = await connect(gateway, name)
        assert await read_to_eof(reader) == b""
        writer.close()
    wanted = [r.wanted for r in caplog.records if r.getMessage().startswith("front end not avail")
              and hasattr(r, "wanted")]
    assert sorted(wanted) == ["amqp", "amqp", "mqtt", "mqtt"]
    # the gateway keeps serving
    status, _, _ = await http_get(gateway, "/health")
    assert status == 200


async def test_connection_limits(start):
    gateway = await start(max_connections=2)
    first = await connect(gateway)
    await echo(*first, b"ECHO 1")
    (first_conn,) = gateway.connections.values()
    second = await connect(gateway)
    await echo(*second, b"ECHO 2")
    reader, writer = await connect(gateway)
    assert await read_to_eof(reader) == b""  # closed at accept, nothing sent
    writer.close()
    first[1].close()
    await asyncio.wait_for(first_conn.wait_closed(), BOUND)
    third = await connect(gateway)  # room again
    await echo(*third, b"ECHO 3")
    rejected = gateway.metrics.get("lmq_connections_rejected_total")
    assert rejected.value(reason="max_connections") == 1
    for _, w in (second, third):
        w.close()


async def test_per_address_limit(start):
    gateway = await start(max_connections_per_address=1)
    first = await connect(gateway)
    await echo(*first, b"ECHO 1")
    reader, writer = await connect(gateway, "mqtt")
    assert await read_to_eof(reader) == b""
    writer.close()
    first[1].close()
    rejected = gateway.metrics.get("lmq_connections_rejected_total")
    assert rejected.value(reason="max_connections_per_address") == 1


async def test_connect_timeout_closes_silent_connections(start):
    gateway = await start(connect_timeout=0.3)
    loop = asyncio.get_running_loop()
    silent = await connect(gateway)
    talker = await connect(gateway)
    await echo(*talker, b"ECHO established")
    half = await connect(gateway)
    half[1].write(b"EC")  # never finishes sniffing
    began = loop.time()
    assert await read_to_eof(silent[0]) == b""
    assert await read_to_eof(half[0]) == b""
    assert loop.time() - began < 3
    await echo(*talker, b"ECHO still here")  # established before the deadline: kept
    rejected = gateway.metrics.get("lmq_connections_rejected_total")
    assert rejected.value(reason="connect_timeout") == 2
    for _, w in (silent, talker, half):
        w.close()


async def test_graceful_shutdown(start, tmp_path):
    holder: list[EchoFrontEnd] = []

    def make(gateway: Gateway) -> EchoFrontEnd:
        holder.append(EchoFrontEnd(gateway))
        return holder[0]

    gateway = await start(echo=make)
    clients = [await connect(gateway) for _ in range(3)]
    for i, client in enumerate(clients):
        await echo(*client, b"ECHO %d" % i)
    clients[0][1].write(b"SLEEP\n")
    assert await clients[0][0].readline() == b"SLEEPING\n"
    task = holder[0].handlers[0].task
    pending = await connect(gateway)  # still sniffing
    unified = port(gateway)
    store = gateway.store
    await asyncio.wait_for(gateway.stop(), BOUND)
    for reader, writer in clients:
        assert await read_to_eof(reader) == b"BYE\n"
        writer.close()
    assert await read_to_eof(pending[0]) == b""
    pending[1].close()
    assert task is not None and task.cancelled()
    assert holder[0].stopped and not gateway.connections
    with pytest.raises(StoreClosed):
        store.create_lmq("after-close")
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", unified)
    with MessageStore.open(tmp_path / "data") as reopened:  # the lock was released
        assert reopened.stats()["segments"] == 1
    await asyncio.wait_for(gateway.stop(), BOUND)  # idempotent


async def test_shutdown_aborts_after_bound(start):
    gateway = await start(echo=lambda gw: EchoFrontEnd(gw, mute=True), shutdown_timeout=0.3)
    reader, writer = await connect(gateway)
    await echo(reader, writer, b"ECHO deaf")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(gateway.stop(), BOUND)
    assert loop.time() - began < 3
    assert await read_to_eof(reader) in (b"", b"<reset>")
    writer.close()


async def test_slow_consumer_aborted(start):
    gateway = await start(
        max_packet_size=1024, write_buffer_high=1024, write_buffer_max=64 * 1024
    )
    reader, writer = await connect(gateway)
    await echo(reader, writer, b"ECHO hi")
    (conn,) = gateway.connections.values()
    writer.write(b"FLOOD\n")  # and never read it
    await asyncio.wait_for(conn.wait_closed(), BOUND)
    assert conn.close_reason == "write buffer overflow"
    writer.close()


async def test_start_failures_release_everything(start, tmp_path):
    with MessageStore.open(tmp_path / "data"):
        with pytest.raises(StoreError, match="in use"):
            await start()
    blocker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    taken = blocker.sockets[0].getsockname()[1]
    try:
        with pytest.raises(OSError):
            await start(unified_port=taken)
    finally:
        blocker.close()
        await blocker.wait_closed()
    with MessageStore.open(tmp_path / "data"):  # the failed start closed the store
        pass


async def test_disabled_listeners(start):
    gateway = await start(mqtt_port=0, amqp_port=0)
    assert [listener.name for listener in gateway.listeners] == ["unified"]
