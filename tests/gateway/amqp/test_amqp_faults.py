"""Malformed input over raw sockets: each fault gets RabbitMQ's close (connection or
channel level) and other connections keep working."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, frame

from protocol.amqp.framing import PROTOCOL_HEADER

from ..amqp_support import Raw, ThreadGateway, pika_connect


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
