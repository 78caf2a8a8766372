"""A pamqp-built client and AMQPConnection back to back, no sockets, random chunking."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from pamqp import body, commands, frame, header

from protocol.amqp import errors, events
from protocol.amqp.connection import AMQPConnection, ConnectionState
from protocol.amqp.events import NEED_DATA
from protocol.amqp.framing import PROTOCOL_HEADER

C, Ch, B = commands.Connection, commands.Channel, commands.Basic
BODIES = [b"small", b"", bytes(range(256)) * 40]  # the last one spans 3 frames of 4096


class PamqpClient:
    """Publishes BODIES with confirms, consumes them back, acks, closes."""

    def __init__(self) -> None:
        self.buf = b""
        self.confirmed: list[tuple[str, int, bool]] = []
        self.delivered: list[tuple[int, bytes, Any]] = []
        self.closed = False
        self._content: list[Any] = []
        self.frame_max = 0

    def start(self) -> bytes:
        return PROTOCOL_HEADER

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = b""
        while len(self.buf) >= 7:
            size = struct.unpack_from(">I", self.buf, 3)[0]
            if len(self.buf) < size + 8:
                break
            n, ch, obj = frame.unmarshal(self.buf[: size + 8])
            self.buf = self.buf[n:]
            out += self.on_frame(ch, obj)
        return out

    def on_frame(self, ch: int, obj: Any) -> bytes:
        def m(o: Any, c: int = 1) -> bytes:
            return frame.marshal(o, c)

        name = obj.name
        if name == "Connection.Start":
            assert obj.server_properties["capabilities"]["publisher_confirms"]
            return m(C.StartOk(client_properties={"product": "pamqp-client"},
                               mechanism="PLAIN", response="\x00guest\x00guest"), 0)
        if name == "Connection.Tune":
            self.frame_max = 4096
            return (m(C.TuneOk(channel_max=obj.channel_max, frame_max=4096, heartbeat=5), 0)
                    + m(C.Open(virtual_host="/"), 0))
        if name == "Connection.OpenOk":
            return m(Ch.Open())
        if name == "Channel.OpenOk":
            return m(commands.Confirm.Select())
        if name == "Confirm.SelectOk":
            out = b""
            for i, data in enumerate(BODIES):
                props = B.Properties(delivery_mode=2, headers={"i": i}, message_id=f"m{i}")
                out += m(B.Publish(exchange="", routing_key="q", mandatory=True))
                out += m(header.ContentHeader(0, len(data), props))
                for j in range(0, len(data), self.frame_max - 8):
                    out += m(body.ContentBody(data[j : j + self.frame_max - 8]))
            return out + m(B.Consume(queue="q", consumer_tag="ctag"))
        if name in ("Basic.Ack", "Basic.Nack"):
            self.confirmed.append((name, obj.delivery_tag, obj.multiple))
            return b""
        if name == "Basic.ConsumeOk":
            return b""
        if name == "Basic.Deliver":
            self._content = [obj, None, []]
            return b""
        if name == "ContentHeader":
            self._content[1] = obj
            return self._maybe_done()
        if name == "ContentBody":
            assert len(obj.value) <= self.frame_max - 8
            self._content[2].append(obj.value)
            return self._maybe_done()
        if name == "Channel.CloseOk":
            return m(C.Close(200, "bye", 0, 0), 0)
        if name == "Connection.CloseOk":
            self.closed = True
            return b""
        raise AssertionError(f"unexpected {name}")

    def _maybe_done(self) -> bytes:
        deliver, hdr, parts = self._content
        data = b"".join(parts)
        if len(data) < hdr.body_size:
            return b""
        self.delivered.append((deliver.delivery_tag, data, hdr.properties))
        if len(self.delivered) < len(BODIES):
            return b""
        return (frame.marshal(B.Ack(delivery_tag=len(BODIES), multiple=True), 1)
                + frame.marshal(Ch.Close(200, "done", 0, 0), 1))


class Broker:
    """A queue 'q' in a list; just enough to answer the client."""

    def __init__(self) -> None:
        self.conn = AMQPConnection()
        self.stored: list[Any] = []
        self.acked: list[Any] = []
        self.confirm_seq = 0

    def feed(self, data: bytes) -> bytes:
        conn = self.conn
        conn.receive_data(data)
        out = b""
        while (ev := conn.next_event()) is not NEED_DATA:
            if isinstance(ev, events.ProtocolHeaderReceived):
                out += conn.send_start()
            elif isinstance(ev, events.AuthenticationRequested):
                out += conn.accept_auth()
            elif isinstance(ev, events.OpenRequested):
                out += conn.accept_open()
            elif isinstance(ev, events.ChannelOpenRequested):
                out += conn.send_channel_open_ok(ev.channel)
            elif isinstance(ev, events.ContentReceived):
                self.stored.append(ev)
                self.confirm_seq += 1
                out += conn.send_ack(ev.channel, self.confirm_seq)
            elif isinstance(ev, events.MethodReceived):
                name = ev.method.name
                if name == "Confirm.Select":
                    out += conn.send_method(ev.channel, commands.Confirm.SelectOk())
                elif name == "Basic.Consume":
                    out += conn.send_method(ev.channel, B.ConsumeOk(ev.method.consumer_tag))
                    for tag, msg in enumerate(self.stored, 1):
                        out += conn.send_deliver(
                            ev.channel, ev.method.consumer_tag, tag, False, "", "q",
                            msg.header.properties_raw, msg.body)
                elif name == "Basic.Ack":
                    self.acked.append(ev.method)
            elif isinstance(ev, events.ChannelCloseRequested):
                out += conn.send_channel_close_ok(ev.channel)
            elif isinstance(ev, events.ConnectionCloseRequested):
                out += conn.send_close_ok()
            elif isinstance(ev, events.ConnectionClosed):
                break
        return out


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.choice([1, 2, 7, 13, 100, 5000])
        out.append(data[i : i + n])
        i += n
    return out


@pytest.mark.parametrize("seed", range(5))
def test_publish_confirm_consume_ack_close(seed: int) -> None:
    rng = random.Random(seed)
    client, broker = PamqpClient(), Broker()
    to_server = client.start()
    for _ in range(100):
        if not to_server:
            break
        to_client = b"".join(broker.feed(c) for c in chunks(to_server, rng))
        to_server = b"".join(client.feed(c) for c in chunks(to_client, rng))
    assert client.closed
    assert broker.conn.state is ConnectionState.CLOSED
    assert [e.body for e in broker.stored] == BODIES
    assert [e.header.headers for e in broker.stored] == [{"i": i} for i in range(len(BODIES))]
    assert client.confirmed == [("Basic.Ack", i, False) for i in range(1, len(BODIES) + 1)]
    assert [(t, d) for t, d, _ in client.delivered] == list(enumerate(BODIES, 1))
    # the raw properties went through untouched
    assert [p.message_id for _, _, p in client.delivered] == ["m0", "m1", "m2"]
    assert [(a.delivery_tag, a.multiple) for a in broker.acked] == [(3, True)]
    assert broker.conn.heartbeat == 5 and broker.conn.frame_max == 4096


def test_client_publishing_oversized_frame_after_tune_gets_501() -> None:
    broker = Broker()
    client = PamqpClient()
    out = broker.feed(client.start())
    out = client.feed(out)  # StartOk
    out = client.feed(broker.feed(out))  # Tune -> TuneOk(frame_max=4096) + Open
    broker.feed(out)
    assert broker.conn.frame_max == 4096
    broker.feed(frame.marshal(Ch.Open(), 1))
    big = frame.marshal(body.ContentBody(b"x" * 5000), 1)
    broker.conn.receive_data(big)
    with pytest.raises(errors.ConnectionLevelError) as info:
        broker.conn.next_event()
    assert info.value.reply_code == errors.FRAME_ERROR
