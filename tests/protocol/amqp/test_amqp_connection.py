"""AMQPConnection driven with frames built by pamqp: handshake, content, errors."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from pamqp import body, commands, encode, frame, header, heartbeat

from protocol.amqp import errors, events
from protocol.amqp.connection import AMQPConnection, ConnectionState
from protocol.amqp.events import NEED_DATA
from protocol.amqp.framing import PROTOCOL_HEADER

C, Ch, B = commands.Connection, commands.Channel, commands.Basic


def m(obj: Any, ch: int = 0) -> bytes:
    return frame.marshal(obj, ch)


def parse(data: bytes) -> list[tuple[int, Any]]:
    """Server output as (channel, pamqp object) with pamqp's own decoder."""
    out = []
    while data:
        n, ch, obj = frame.unmarshal(data)
        out.append((ch, obj))
        data = data[n:]
    return out


def answer(conn: AMQPConnection, ev: Any) -> bytes:
    """A tiny broker: the answers a gateway would give."""
    if isinstance(ev, events.ProtocolHeaderReceived):
        return conn.send_start()
    if isinstance(ev, events.AuthenticationRequested):
        return conn.accept_auth() if ev.password == "pass" else conn.deny_auth()
    if isinstance(ev, events.OpenRequested):
        return conn.accept_open() if ev.virtual_host == "/" else conn.deny_open()
    if isinstance(ev, events.ChannelOpenRequested):
        return conn.send_channel_open_ok(ev.channel)
    if isinstance(ev, events.ChannelCloseRequested):
        return conn.send_channel_close_ok(ev.channel)
    if isinstance(ev, events.ConnectionCloseRequested):
        return conn.send_close_ok()
    if isinstance(ev, events.MethodReceived) and ev.method.name == "Confirm.Select":
        return conn.send_method(ev.channel, commands.Confirm.SelectOk())
    if isinstance(ev, events.MethodReceived) and ev.method.name == "Queue.Declare":
        if ev.method.passive:
            raise errors.ChannelError(errors.NOT_FOUND, f"no queue '{ev.method.queue}'",
                                      channel=ev.channel, method=ev.method)
        return conn.send_method(ev.channel, commands.Queue.DeclareOk(ev.method.queue, 0, 0))
    return b""


def pump(conn: AMQPConnection, data: bytes) -> tuple[list[Any], bytes]:
    """Feed data; run the caller's loop; return (events and errors, bytes written)."""
    conn.receive_data(data)
    seen: list[Any] = []
    out = b""
    while True:
        try:
            ev = conn.next_event()
        except errors.AMQPError as exc:
            seen.append(exc)
            out += conn.send_error(exc)
            continue
        if ev is NEED_DATA:
            return seen, out
        seen.append(ev)
        try:
            out += answer(conn, ev)
        except errors.AMQPError as exc:
            seen.append(exc)
            out += conn.send_error(exc)


def plain() -> bytes:
    return m(C.StartOk(client_properties={"product": "test", "capabilities": {
        "connection.blocked": True}}, mechanism="PLAIN", response="\x00guest\x00pass"))


def handshake_bytes(start_ok: bytes | None = None, frame_max: int = 131072,
                    channel_max: int = 0, heartbeat_s: int = 30) -> bytes:
    return (PROTOCOL_HEADER + (start_ok or plain())
            + m(C.TuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat_s))
            + m(C.Open(virtual_host="/")))


def opened(**kw: Any) -> AMQPConnection:
    conn = AMQPConnection(**kw)
    pump(conn, handshake_bytes() + m(Ch.Open(), 1))
    assert conn.state is ConnectionState.OPEN and conn.channel_is_open(1)
    return conn


def closes(out: bytes) -> list[Any]:
    return [o for _, o in parse(out) if o.name in ("Connection.Close", "Channel.Close")]


# ---------------------------------------------------------------- handshake


def test_handshake_plain() -> None:
    conn = AMQPConnection(frame_max=65536, channel_max=100, heartbeat=60)
    seen, out = pump(conn, handshake_bytes(frame_max=131072, channel_max=0, heartbeat_s=7))
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["ProtocolHeaderReceived", "AuthenticationRequested", "TuneNegotiated",
                     "OpenRequested"]
    auth = seen[1]
    assert (auth.mechanism, auth.username, auth.password) == ("PLAIN", "guest", "pass")
    assert conn.client_capabilities == {"connection.blocked": True}
    assert seen[2] == events.TuneNegotiated(channel_max=100, frame_max=65536, heartbeat=7)
    assert (conn.frame_max, conn.channel_max, conn.heartbeat) == (65536, 100, 7)
    sent = parse(out)
    start, tune, open_ok = (o for _, o in sent)
    assert isinstance(start, C.Start) and start.mechanisms == "PLAIN AMQPLAIN"
    caps = start.server_properties["capabilities"]
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "consumer_priorities",
                "authentication_failure_close", "per_consumer_qos"):
        assert caps[cap] is True
    assert "direct_reply_to" not in caps  # not implemented, so not advertised
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (100, 65536, 60)
    assert isinstance(open_ok, C.OpenOk)
    assert conn.state is ConnectionState.OPEN and conn.virtual_host == "/"


def test_handshake_byte_by_byte_matches_whole() -> None:
    data = handshake_bytes() + m(Ch.Open(), 1)
    whole_conn = AMQPConnection()
    whole = pump(whole_conn, data)
    conn = AMQPConnection()
    seen, out = [], b""
    for b in data:
        s, o = pump(conn, bytes([b]))
        seen += s
        out += o
    assert (seen, out) == whole


def test_handshake_amqplain() -> None:
    table = encode.field_table({"LOGIN": "bob", "PASSWORD": "pass"})[4:].decode()  # no prefix
    conn = AMQPConnection()
    seen, out = pump(conn, handshake_bytes(m(C.StartOk(mechanism="AMQPLAIN", response=table))))
    assert seen[1].username == "bob" and seen[1].password == "pass"
    assert conn.state is ConnectionState.OPEN


def test_tune_ok_lower_client_frame_max_and_too_small() -> None:
    conn = AMQPConnection(frame_max=131072)
    seen, _ = pump(conn, handshake_bytes(frame_max=8192, channel_max=10))
    assert seen[2].frame_max == 8192 and seen[2].channel_max == 10
    conn = AMQPConnection()
    seen, out = pump(conn, handshake_bytes(frame_max=1024))
    assert [c.reply_code for c in closes(out)] == [errors.NOT_ALLOWED]


def test_auth_denied_is_403_then_close_ok_closes() -> None:
    conn = AMQPConnection()
    bad = m(C.StartOk(mechanism="PLAIN", response="\x00guest\x00wrong"))
    seen, out = pump(conn, PROTOCOL_HEADER + bad)
    (close,) = closes(out)
    assert close.reply_code == errors.ACCESS_REFUSED
    assert close.reply_text.startswith("ACCESS_REFUSED - ")
    assert (close.class_id, close.method_id) == (10, 11)
    assert conn.state is ConnectionState.CLOSING
    # anything but CloseOk is ignored while closing
    seen, out = pump(conn, m(C.TuneOk(0, 131072, 0)) + m(Ch.Open(), 1) + m(C.CloseOk()))
    assert seen == [events.ConnectionClosed(clean=True)] and out == b""
    assert pump(conn, b"") == ([], b"")


@pytest.mark.parametrize("start_ok", [
    C.StartOk(mechanism="EXTERNAL", response=""),
    C.StartOk(mechanism="PLAIN", response="no-nuls"),
    C.StartOk(mechanism="AMQPLAIN", response="\x05LOGIN"),
])
def test_bad_mechanism_or_response_is_403(start_ok: C.StartOk) -> None:
    conn = AMQPConnection()
    _, out = pump(conn, PROTOCOL_HEADER + m(start_ok))
    assert [c.reply_code for c in closes(out)] == [errors.ACCESS_REFUSED]


def test_vhost_denied_is_530() -> None:
    conn = AMQPConnection()
    data = PROTOCOL_HEADER + plain() + m(C.TuneOk(0, 131072, 0)) + m(C.Open(virtual_host="nope"))
    _, out = pump(conn, data)
    assert [c.reply_code for c in closes(out)] == [errors.NOT_ALLOWED]


def test_wrong_protocol_header_gets_our_header_and_closed() -> None:
    conn = AMQPConnection()
    seen, out = pump(conn, b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(seen[0], errors.ProtocolHeaderError)
    assert seen[1] == events.ConnectionClosed(clean=False)
    assert out == PROTOCOL_HEADER
    assert conn.state is ConnectionState.CLOSED


def test_out_of_order_handshake_is_503() -> None:
    conn = AMQPConnection()
    _, out = pump(conn, PROTOCOL_HEADER + m(C.Open(virtual_host="/")))
    assert [c.reply_code for c in closes(out)] == [errors.COMMAND_INVALID]


def test_channel_frame_before_open_ok_is_504() -> None:
    conn = AMQPConnection()
    _, out = pump(conn, PROTOCOL_HEADER + plain() + m(Ch.Open(), 1))
    assert [c.reply_code for c in closes(out)] == [errors.CHANNEL_ERROR]


def test_heartbeats_and_eof() -> None:
    conn = opened()
    seen, out = pump(conn, m(heartbeat.Heartbeat()))
    assert seen == [events.HeartbeatReceived()] and out == b""
    assert conn.send_heartbeat() == m(heartbeat.Heartbeat())
    seen, _ = pump(conn, b"")
    assert seen == [events.ConnectionClosed(clean=False)]
    assert conn.state is ConnectionState.CLOSED


def test_peer_connection_close() -> None:
    conn = opened()
    seen, out = pump(conn, m(C.Close(200, "bye", 0, 0)))
    assert seen[0] == events.ConnectionCloseRequested(200, "bye", 0, 0)
    assert seen[1] == events.ConnectionClosed(clean=True)
    assert [type(o) for _, o in parse(out)] == [C.CloseOk]


def test_server_close_and_crossing_close() -> None:
    conn = opened()
    out = conn.close()
    (close,) = closes(out)
    assert close.reply_code == errors.CONNECTION_FORCED
    assert conn.close() == b""  # only one Connection.Close
    seen, out = pump(conn, m(B.Publish(), 1) + m(C.Close(200, "", 0, 0)))
    assert isinstance(seen[0], events.ConnectionCloseRequested)
    assert [type(o) for _, o in parse(out)] == [C.CloseOk]


# ---------------------------------------------------------------- channels and content


def publish_bytes(ch: int, body_bytes: bytes, frame_max: int = 4096, **props: Any) -> bytes:
    out = m(B.Publish(exchange="amq.topic", routing_key="a.b"), ch)
    out += m(header.ContentHeader(0, len(body_bytes), B.Properties(**props)), ch)
    step = frame_max - 8
    for i in range(0, len(body_bytes), step):
        out += m(body.ContentBody(body_bytes[i:i + step]), ch)
    return out


@pytest.mark.parametrize("size", [0, 1, 4088, 10_000])
def test_publish_assembled_whole_and_byte_by_byte(size: int) -> None:
    payload = bytes(i % 256 for i in range(size))
    data = publish_bytes(1, payload, delivery_mode=2, headers={"h": 1}, expiration="100")
    chunkings = [[data], [data[i:i + 1] for i in range(len(data))]]
    for chunks in chunkings:
        conn = opened()
        seen = []
        for c in chunks:
            seen += pump(conn, c)[0]
        (ev,) = seen
        assert isinstance(ev, events.ContentReceived)
        assert (ev.channel, ev.method.exchange, ev.method.routing_key) == (1, "amq.topic", "a.b")
        assert ev.body == payload and ev.header.body_size == size
        assert (ev.header.delivery_mode, ev.header.expiration) == (2, "100")
        assert ev.header.headers == {"h": 1}


def test_publish_with_trailing_partial_frame() -> None:
    conn = opened()
    nxt = m(B.Ack(5), 1)
    seen, _ = pump(conn, publish_bytes(1, b"abc") + nxt[:5])
    assert len(seen) == 1 and isinstance(seen[0], events.ContentReceived)
    seen, _ = pump(conn, nxt[5:])
    assert seen[0].method.delivery_tag == 5 and seen[0].method.name == "Basic.Ack"


def test_confirms_and_deliver_roundtrip_through_pamqp() -> None:
    conn = opened(frame_max=4096)
    seen, out = pump(conn, m(commands.Confirm.Select(), 1) + publish_bytes(1, b"x" * 9000))
    assert isinstance(parse(out)[0][1], commands.Confirm.SelectOk)
    content = seen[-1]
    assert conn.send_ack(1, 1) == m(B.Ack(1), 1)
    assert conn.send_nack(1, 1, multiple=True) == m(B.Nack(1, True, False), 1)
    data = conn.send_deliver(1, "ctag", 7, True, "amq.topic", "a.b",
                             content.header.properties_raw, content.body)
    frames = parse(data)
    assert isinstance(frames[0][1], B.Deliver) and frames[0][1].delivery_tag == 7
    assert isinstance(frames[1][1], header.ContentHeader) and frames[1][1].body_size == 9000
    bodies = [o.value for _, o in frames[2:]]
    assert len(bodies) == 3 and all(len(b) <= 4088 for b in bodies)
    assert b"".join(bodies) == content.body
    got = parse(conn.send_get_ok(1, 8, False, "", "q", 3, content.header.properties_raw, b"z"))
    assert [type(o).__name__ for _, o in got] == ["GetOk", "ContentHeader", "ContentBody"]
    ret = parse(conn.send_return(1, 312, "NO_ROUTE", "ex", "rk", b"\x00\x00", b""))
    assert [type(o).__name__ for _, o in ret] == ["Return", "ContentHeader"]


def test_deliver_encoder_writes_what_send_deliver_writes() -> None:
    """A run of deliveries through deliver_encoder: byte for byte send_deliver's, for
    str and bytes names, a change of routing key, an empty and a multi-frame body; a
    channel that is not open is refused up front."""
    conn, other = opened(frame_max=4096), opened(frame_max=4096)
    encode = conn.deliver_encoder(1, "ctag")
    runs = [(7, False, "", "q", b"\x00\x00", b"abc"), (8, True, b"", "q", b"\x00\x00", b"abd"),
            (9, False, "ex", b"r.k", b"\x10\x00\x01", b""), (10, False, "ex", "r.k2",
            b"\x10\x00\x01", b"x" * 9000), (11, False, "", "q", b"\x00\x00", b"abc")]
    for tag, redelivered, exchange, key, raw, payload in runs:
        assert encode(tag, redelivered, exchange, key, raw, payload, conn.frame_max) == (
            other.send_deliver(1, "ctag", tag, redelivered, exchange, key, raw, payload))
    frames = parse(encode(12, True, "", "q", b"\x00\x00", b"abc", conn.frame_max))
    assert (frames[0][1].delivery_tag, frames[0][1].redelivered) == (12, True)
    assert frames[0][1].routing_key == "q" and frames[2][1].value == b"abc"
    with pytest.raises(errors.LocalProtocolError):
        conn.deliver_encoder(2, "ctag")


def test_peer_channel_close_frees_the_id() -> None:
    conn = opened()
    seen, out = pump(conn, m(Ch.Close(200, "", 0, 0), 1))
    assert seen == [events.ChannelCloseRequested(1, 200, "", 0, 0)]
    assert [type(o) for _, o in parse(out)] == [Ch.CloseOk]
    assert not conn.channel_is_open(1)
    seen, _ = pump(conn, m(Ch.Open(), 1))
    assert seen == [events.ChannelOpenRequested(1)]


def test_broker_channel_error_closes_only_that_channel() -> None:
    conn = opened()
    pump(conn, m(Ch.Open(), 2))
    seen, out = pump(conn, m(commands.Queue.Declare(queue="nope", passive=True), 1))
    (close,) = closes(out)
    assert (close.reply_code, close.class_id, close.method_id) == (404, 50, 10)
    assert close.reply_text == "NOT_FOUND - no queue 'nope'"
    # the closing channel ignores everything but CloseOk; channel 2 carries on
    seen, out = pump(conn, publish_bytes(1, b"lost") + m(commands.Queue.Declare(queue="q"), 2))
    assert [type(e).__name__ for e in seen] == ["MethodReceived"] and seen[0].channel == 2
    seen, _ = pump(conn, m(Ch.CloseOk(), 1))
    assert seen == [events.ChannelClosed(1)]
    assert conn.state is ConnectionState.OPEN


def test_message_too_large_is_channel_406_and_rest_ignored() -> None:
    conn = opened(max_message_size=10)
    seen, out = pump(conn, publish_bytes(1, b"y" * 20) + m(B.Ack(1), 1))
    assert isinstance(seen[0], errors.ChannelError) and seen[0].reply_code == 406
    assert len(seen) == 1
    assert [(c.reply_code, c.class_id, c.method_id) for c in closes(out)] == [(406, 60, 40)]
    with pytest.raises(errors.LocalProtocolError):
        conn.send_deliver(1, "c", 1, False, "", "", b"\x00\x00", b"")


def test_crossing_channel_closes() -> None:
    conn = opened()
    conn.send_error(errors.ChannelError(406, "x", channel=1))
    seen, out = pump(conn, m(Ch.Close(200, "", 0, 0), 1))
    assert isinstance(seen[0], events.ChannelCloseRequested)
    assert conn.channel_is_open(1) is False
    seen, _ = pump(conn, m(Ch.CloseOk(), 1))
    assert seen == [events.ChannelClosed(1)]


def hard_error(conn: AMQPConnection, data: bytes) -> errors.AMQPError:
    seen, out = pump(conn, data)
    errs = [e for e in seen if isinstance(e, errors.AMQPError)]
    assert len(errs) == 1 and errs[0].connection_level
    (close,) = closes(out)
    assert close.reply_code == errs[0].reply_code
    assert parse(out)[0][0] == 0  # Connection.Close is on channel 0
    assert conn.state is ConnectionState.CLOSING
    return errs[0]


@pytest.mark.parametrize("data, code", [
    (m(header.ContentHeader(0, 1), 1), errors.UNEXPECTED_FRAME),  # content without a method
    (m(body.ContentBody(b"x"), 1), errors.UNEXPECTED_FRAME),
    (m(B.Publish(), 1) + m(B.Ack(1), 1), errors.UNEXPECTED_FRAME),  # method mid-content
    (m(B.Publish(), 1) + m(header.ContentHeader(0, 1), 1) + m(header.ContentHeader(0, 1), 1),
     errors.UNEXPECTED_FRAME),
    (m(B.Publish(), 1) + m(header.ContentHeader(0, 2), 1) + m(body.ContentBody(b"xyz"), 1),
     errors.UNEXPECTED_FRAME),  # body exceeds body_size
    (m(B.Publish(), 1) + struct.pack(">BHIHHQH", 2, 1, 14, 50, 0, 0, 0) + b"\xce",
     errors.UNEXPECTED_FRAME),  # header for the wrong class
    (m(B.Qos(0, 1, False), 5), errors.CHANNEL_ERROR),  # method on an unopened channel
    (m(header.ContentHeader(0, 1), 5), errors.CHANNEL_ERROR),
    (m(Ch.Open(), 1), errors.CHANNEL_ERROR),  # second channel.open
    (m(body.ContentBody(b"x")), errors.UNEXPECTED_FRAME),  # content on channel 0
    (m(C.Open(virtual_host="/"), 1), errors.COMMAND_INVALID),  # connection method, channel 1
    (m(B.Qos(0, 1, False)), errors.COMMAND_INVALID),  # channel method on channel 0
    (m(B.Deliver("c", 1, False, "", "rk"), 1), errors.COMMAND_INVALID),
    (struct.pack(">BHIHH", 1, 1, 4, 60, 99) + b"\xce", errors.NOT_IMPLEMENTED),
    (struct.pack(">BHIHHB", 1, 1, 5, 60, 40, 0) + b"\xce", errors.SYNTAX_ERROR),
])
def test_malformed_input_gets_the_right_connection_close(data: bytes, code: int) -> None:
    conn = opened()
    assert hard_error(conn, data).reply_code == code
    # after the close, nothing but CloseOk matters
    seen, out = pump(conn, publish_bytes(1, b"abc") + m(C.CloseOk()))
    assert seen == [events.ConnectionClosed(clean=True)] and out == b""


def test_channel_max_bounds_how_many_channels_are_open_not_their_numbers() -> None:
    """As RabbitMQ reads channel_max: any channel number 1-65535 may be opened (aiormq's
    test_bad_channel opens 65535), and one channel more than channel_max open at once is
    530 NOT_ALLOWED (aiormq's test_no_free_channels); a closed channel frees its place."""
    conn = AMQPConnection(channel_max=3)
    seen, _ = pump(conn, handshake_bytes(channel_max=0) + m(Ch.Open(), 65535) + m(Ch.Open(), 7))
    assert conn.channel_is_open(65535) and conn.channel_is_open(7)
    seen, _ = pump(conn, m(Ch.Close(200, "bye", 0, 0), 7) + m(Ch.Open(), 9) + m(Ch.Open(), 3))
    assert conn.channel_is_open(9) and conn.channel_is_open(3)
    assert not conn.channel_is_open(7)
    err = hard_error(conn, m(Ch.Open(), 4))
    assert err.reply_code == errors.NOT_ALLOWED
    assert "channel_max (3)" in err.reply_text


@pytest.mark.parametrize("data", [
    m(B.Qos(0, 1, False), 1)[:-1] + b"\x00",  # bad end octet
    b"\x05\x00\x01\x00\x00\x00\x00\xce",  # unknown frame type
    struct.pack(">BHI", 3, 1, 200_000),  # oversized frame (frame_max 131072)
])
def test_framing_errors_close_then_drop_the_stream(data: bytes) -> None:
    conn = opened()
    seen, out = pump(conn, data + m(C.CloseOk()))
    assert isinstance(seen[0], errors.ConnectionLevelError)
    assert seen[0].reply_code == errors.FRAME_ERROR
    assert [c.reply_code for c in closes(out)] == [errors.FRAME_ERROR]
    # the stream cannot be re-synchronised: closed right after the Close is written
    assert seen[1:] == [events.ConnectionClosed(clean=False)]
    assert conn.state is ConnectionState.CLOSED


def test_garbage_while_closing_drops_the_peer() -> None:
    conn = opened()
    conn.close()
    seen, out = pump(conn, b"\x09garbage")
    assert seen == [events.ConnectionClosed(clean=False)] and out == b""


def test_channel_flow_is_tracked() -> None:
    conn = opened()
    seen, _ = pump(conn, m(Ch.Flow(active=False), 1))
    assert seen[0].method.name == "Channel.Flow"
    assert conn.channel_flow_active(1) is False
    assert parse(conn.send_method(1, Ch.FlowOk(active=False)))[0][1].active is False


def test_send_method_refuses_stateful_methods_and_closed_channels() -> None:
    conn = opened()
    with pytest.raises(errors.LocalProtocolError):
        conn.send_method(1, Ch.Close(200, "", 0, 0))
    with pytest.raises(errors.LocalProtocolError):
        conn.send_method(7, B.QosOk())
    with pytest.raises(errors.LocalProtocolError):
        conn.send_method(0, B.QosOk())
    assert parse(conn.send_method(0, C.Blocked("low disk")))[0][1].reason == "low disk"
    with pytest.raises(errors.LocalProtocolError):
        conn.send_error(errors.ChannelError(404, "no channel given"))
    with pytest.raises(errors.LocalProtocolError):
        conn.accept_auth()


def test_amqp_error_helper_levels() -> None:
    assert not errors.amqp_error(404, "x", channel=1).connection_level
    assert errors.amqp_error(404, "x").connection_level  # no channel: must be the connection
    assert errors.amqp_error(541, "x", channel=1).connection_level
    e = errors.ChannelError(406, "PRECONDITION_FAILED - already named", channel=1)
    assert e.reply_text == "PRECONDITION_FAILED - already named"


# ---------------------------------------------------------------- the publish fast path


def _normalised(seen: list[Any]) -> list[Any]:
    """Events as comparable values; errors by class, code, text, channel and method."""
    out: list[Any] = []
    for e in seen:
        if isinstance(e, errors.AMQPError):
            out.append((type(e).__name__, e.reply_code, e.reply_text, e.channel,
                        e.class_id, e.method_id))
        elif isinstance(e, events.ContentReceived):
            out.append(("content", e.channel, e.method, e.header.raw, e.body,
                        e.header.headers))
        else:
            out.append(e)
    return out


def _fast_path_pieces() -> list[bytes]:
    """Frames after a first valid publish (which primes the fast path's last method and
    header): repeats, near-misses and faults the general path must answer instead."""
    pub = m(B.Publish(exchange="amq.topic", routing_key="a.b"), 1)
    hdr3 = m(header.ContentHeader(0, 3), 1)
    hdr0 = m(header.ContentHeader(0, 0), 1)
    bad_utf8 = struct.pack(">BHIHHHB", 1, 1, 11, 60, 40, 0, 0) + b"\x02\xff\xfe\x00\xce"
    return [
        pub + hdr3 + m(body.ContentBody(b"xyz"), 1),  # the same message again
        pub + hdr3 + m(body.ContentBody(b"abc"), 1),  # same frames, other body
        pub + hdr0,  # empty body: no body frame
        m(B.Publish(exchange="", routing_key="q", mandatory=True), 1) + hdr3
        + m(body.ContentBody(b"123"), 1),
        pub + m(header.ContentHeader(0, 3, B.Properties(headers={"k": "v"},
                                                         delivery_mode=2)), 1)
        + m(body.ContentBody(b"xyz"), 1),
        pub + hdr3 + m(body.ContentBody(b"x"), 1) + m(body.ContentBody(b"yz"), 1),  # 2 frames
        pub + hdr3 + heartbeat.Heartbeat.marshal() + m(body.ContentBody(b"xyz"), 1),
        pub + m(B.Publish(exchange="", routing_key="q"), 2) + hdr3
        + m(body.ContentBody(b"xyz"), 1),  # another channel's method mid-content
        pub + m(header.ContentHeader(0, 3), 2) + m(body.ContentBody(b"xyz"), 1),
        m(B.Publish(exchange="amq.topic", routing_key="a.b"), 2)
        + m(header.ContentHeader(0, 3), 2) + m(body.ContentBody(b"xyz"), 2),  # channel 2
        m(B.Publish(exchange="amq.topic", routing_key="a.b"), 2) + hdr3
        + m(body.ContentBody(b"xyz"), 2),  # the cached header, but on channel 1
        m(B.Publish(exchange="amq.topic", routing_key="a.b"), 3) + hdr3,  # channel not open
        pub + hdr3 + m(body.ContentBody(b"wxyz"), 1),  # body past body_size
        pub + hdr3 + m(body.ContentBody(b"xyz"), 2),  # body on another channel
        pub + hdr3 + m(body.ContentBody(b"xyz"), 1)[:-1] + b"\x00",  # bad end octet
        pub + hdr3[:-1] + b"\x00" + m(body.ContentBody(b"xyz"), 1),  # bad end octet
        pub[:-1] + b"\x00" + hdr3,
        pub + pub + hdr3 + m(body.ContentBody(b"xyz"), 1),  # a method mid-content
        pub + m(header.ContentHeader(0, 99), 1)
        + m(body.ContentBody(b"z" * 99), 1),  # above max_message_size (50): 406
        pub + struct.pack(">BHIHHQH", 2, 1, 14, 50, 0, 3, 0) + b"\xce",  # wrong class
        struct.pack(">BHIHHB", 1, 1, 5, 60, 40, 0) + b"\xce",  # truncated publish
        bad_utf8 + hdr3,
        m(B.Ack(1), 1),
        m(Ch.Close(200, "", 0, 0), 2),
        # frames above a frame_max of 4096: method (junk after the arguments), header
        # (a large headers table), body
        struct.pack(">BHI", 1, 1, len(pub) - 8 + 5000) + pub[7:-1] + bytes(5000) + b"\xce"
        + hdr3 + m(body.ContentBody(b"xyz"), 1),
        pub + m(header.ContentHeader(0, 3, B.Properties(headers={"k": "v" * 5000})), 1)
        + m(body.ContentBody(b"xyz"), 1),
        pub + m(header.ContentHeader(0, 5000), 1) + m(body.ContentBody(b"z" * 5000), 1),
    ]


@pytest.mark.parametrize("limits", [{"max_message_size": 50}, {"frame_max": 4096}])
def test_publish_fast_path_answers_like_the_general_path(limits: dict[str, int]) -> None:
    """Whole buffers go through AMQPConnection._publish_fast (and its reuse of the last
    method and header), so do frame-by-frame ones at every frame; one byte at a time
    never can. All must see the same events, errors and output for every sequence."""
    import random

    rnd = random.Random(7)
    pieces = _fast_path_pieces()
    prime = publish_bytes(1, b"xyz")
    sequences = [[p] for p in pieces] + [
        rnd.sample(pieces, rnd.randint(2, 4)) for _ in range(40)]
    for seq in sequences:
        data = m(Ch.Open(), 2) + prime + b"".join(seq) + prime
        bounds, i = [], 0
        while i < len(data):  # frame boundaries
            i += 8 + struct.unpack_from(">I", data, i + 3)[0] if len(data) - i >= 7 else 1
            bounds.append(i)
        # whole; in two at each frame boundary (the next read starts the fast path there,
        # whatever state the first left); one byte at a time (never the fast path)
        feeds = [[data]] + [[data[:k], data[k:]] for k in bounds[:-1]]
        results = []
        for chunks in [*feeds, [data[i:i + 1] for i in range(len(data))]]:
            conn = opened(**limits)
            seen: list[Any] = []
            out = b""
            for chunk in chunks:
                s, o = pump(conn, chunk)
                seen += s
                out += o
            results.append((_normalised(seen), out))
        for result in results[:-1]:
            assert result == results[-1], seq


def test_publish_fast_path_reuses_decoded_frames() -> None:
    conn = opened()
    seen, _ = pump(conn, publish_bytes(1, b"abc") * 3 + publish_bytes(1, b"abcd"))
    assert [e.body for e in seen] == [b"abc", b"abc", b"abc", b"abcd"]
    assert seen[0].method is seen[2].method and seen[0].header is seen[2].header
    assert seen[3].method is seen[0].method and seen[3].header is not seen[0].header
    assert seen[3].header.body_size == 4
