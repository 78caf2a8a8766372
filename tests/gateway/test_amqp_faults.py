"""Malformed input over raw sockets: each fault gets RabbitMQ's close (connection or
channel level) and other connections keep working."""

from __future__ import annotations

import socket
import struct

import pytest
from pamqp import commands, frame

from protocol.amqp.framing import PROTOCOL_HEADER

from .test_amqp_support import ThreadGateway, gw, pika_connect

__all__ = ["gw"]


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


def method_bytes(channel: int, m: object) -> bytes:
    return frame.marshal(m, channel)


FAULTS = [
    ("bad end octet", lambda: method_bytes(1, commands.Basic.Qos())[:-1] + b"\x00", 501),
    ("oversized frame", lambda: struct.pack(">BHI", 1, 1, 10_000_000), 501),
    ("method on a closed channel", lambda: method_bytes(7, commands.Basic.Qos()), 504),
    ("content without a method", lambda: struct.pack(">BHI", 3, 1, 1) + b"x\xce", 505),
    ("unknown method", lambda: struct.pack(">BHIHH", 1, 1, 4, 60, 999) + b"\xce", 540),
]


@pytest.mark.parametrize(("what", "make", "code"), FAULTS, ids=[f[0] for f in FAULTS])
def test_malformed_frame_closes_the_connection(gw: ThreadGateway, what, make, code) -> None:
    bystander = pika_connect(gw)
    bch = bystander.channel()
    bch.queue_declare("alive")
    raw = Raw(gw.port)
    raw.handshake()
    raw.send(make())
    close = raw.expect("Connection.Close")
    assert close.reply_code == code, close
    raw.method(0, commands.Connection.CloseOk())
    assert raw.read() is None  # the gateway closes the socket
    raw.close()
    bch.confirm_delivery()
    bch.basic_publish("", "alive", b"still here")
    assert bch.basic_get("alive", auto_ack=True)[2] == b"still here"
    bystander.close()


def test_bad_protocol_header_gets_ours(gw: ThreadGateway) -> None:
    raw = Raw(gw.port)
    raw.send(b"AMQP\x01\x01\x00\x0a")
    data = raw.sock.recv(100)
    assert data == PROTOCOL_HEADER
    raw.close()


def test_reused_consumer_tag_closes_connection(gw: ThreadGateway) -> None:
    raw = Raw(gw.port)
    raw.handshake()
    raw.method(1, commands.Queue.Declare(queue="q"))
    raw.expect("Queue.DeclareOk")
    for _ in range(2):
        raw.method(1, commands.Basic.Consume(queue="q", consumer_tag="same"))
    raw.expect("Basic.ConsumeOk")
    close = raw.expect("Connection.Close")
    assert close.reply_code == 530 and "reuse consumer tag" in close.reply_text
    raw.close()


def test_channel_error_leaves_other_channels_open(gw: ThreadGateway) -> None:
    raw = Raw(gw.port)
    raw.handshake()
    raw.method(2, commands.Channel.Open())
    raw.expect("Channel.OpenOk")
    raw.method(1, commands.Queue.Declare(queue="missing", passive=True))
    close = raw.expect("Channel.Close")
    assert close.reply_code == 404
    raw.method(1, commands.Channel.CloseOk())
    raw.method(2, commands.Queue.Declare(queue="fine"))
    assert raw.expect("Queue.DeclareOk").queue == "fine"
    raw.close()
