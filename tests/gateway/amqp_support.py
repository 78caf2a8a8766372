"""Support for the AMQP integration tests (no tests here): a real in-process Gateway
running its own event loop in a background thread, so that blocking clients (pika) can
be used directly from synchronous tests and asyncio clients (aiormq, aio-pika) from the
test's own loop. Ephemeral loopback ports; bounded start and stop; restart on the same
data directory."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pika
from pamqp import commands, frame

from gateway.config import AUTO, GatewayConfig
from gateway.server import Gateway
from protocol.amqp.framing import PROTOCOL_HEADER

BOUND = 15.0


class ThreadGateway:
    def __init__(self, data_dir: Path, **options: Any) -> None:
        self.data_dir = data_dir
        self.options = options
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.gateway: Gateway | None = None

    def start(self) -> ThreadGateway:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = GatewayConfig(**{
            "data_dir": self.data_dir, "mqtt_port": AUTO, "amqp_port": AUTO,
            "unified_port": 0, "grpc_port": 0, "shutdown_timeout": 2.0, **self.options})
        self.gateway = Gateway(config)
        self.call(self.gateway.start())
        return self

    def call(self, coro: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(BOUND)

    def run(self, fn: Any, *args: Any) -> Any:
        """Run a plain function on the gateway's loop (its state is loop-only)."""
        async def wrapper() -> Any:
            return fn(*args)
        return self.call(wrapper())

    @property
    def port(self) -> int:
        assert self.gateway is not None
        listener = self.gateway.listener("amqp")
        assert listener is not None
        return listener.port

    @property
    def mqtt_port(self) -> int:
        assert self.gateway is not None
        listener = self.gateway.listener("mqtt")
        assert listener is not None
        return listener.port

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def store(self) -> Any:
        assert self.gateway is not None
        return self.gateway.store

    @property
    def front(self) -> Any:
        assert self.gateway is not None
        return self.gateway.front_ends["amqp"]

    def stop(self) -> None:
        if self.gateway is None or self.loop is None:
            return
        try:
            self.call(self.gateway.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            assert self.thread is not None
            self.thread.join(BOUND)
            self.loop.close()
            self.gateway = None
            self.loop = None

    def restart(self) -> ThreadGateway:
        self.stop()
        return self.start()


def pika_connect(gateway: ThreadGateway, **params: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", gateway.port, blocked_connection_timeout=BOUND,
        socket_timeout=BOUND, **params))


def drain(channel: Any, queue: str, timeout: float = 0.5,
          ack: bool = True) -> list[tuple[Any, Any, bytes]]:
    """Consume every message of ``queue`` until ``timeout`` seconds of silence."""
    out = []
    for method, props, body in channel.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        out.append((method, props, body))
        if ack:
            channel.basic_ack(method.delivery_tag)
    channel.cancel()
    return out


class Raw:
    """A hand-driven AMQP client: handshake with pamqp, then arbitrary bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, m: object) -> None:
        self.send(frame.marshal(m, channel))

    def read(self) -> tuple[int, object] | None:
        while True:
            if len(self.buf) >= 7:
                _t, _ch, size = struct.unpack(">BHI", self.buf[:7])
                if len(self.buf) >= size + 8:
                    used, channel, f = frame.unmarshal(self.buf)
                    self.buf = self.buf[used:]
                    return channel, f
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:  # our CloseOk raced the gateway's close
                return None
            if not data:
                return None
            self.buf += data

    def expect(self, name: str) -> object:
        while True:
            got = self.read()
            assert got is not None, f"closed while waiting for {name}"
            if getattr(got[1], "name", "") == name:
                return got[1]

    def handshake(self) -> None:
        self.send(PROTOCOL_HEADER)
        self.expect("Connection.Start")
        self.method(0, commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"))
        self.expect("Connection.Tune")
        self.method(0, commands.Connection.TuneOk(channel_max=10, frame_max=131072,
                                                  heartbeat=0))
        self.method(0, commands.Connection.Open(virtual_host="/"))
        self.expect("Connection.OpenOk")
        self.method(1, commands.Channel.Open())
        self.expect("Channel.OpenOk")

    def close(self) -> None:
        self.sock.close()
