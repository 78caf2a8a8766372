"""The sans-IO gRPC server connection (protocol/grpc/server.py) and the message framing
(protocol/grpc/framing.py), driven in memory by an HTTP/2 client (ngh2 in the client
role) and by raw bytes: calls, statuses, flow control, and bad input of every kind
(torn frames and messages, bad HPACK, oversized and compressed messages, not-gRPC
requests, random bytes), each answered the protocol's way and never an exception."""

from __future__ import annotations

import base64
import struct

import ngh2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.grpc import server as g
from protocol.grpc.framing import (
    CompressedMessage,
    MessageReader,
    MessageTooLarge,
    prefix,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def request_headers(path: str = "/svc.S/M", **extra: str) -> list[tuple[bytes, bytes]]:
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    headers += [(k.replace("_", "-").encode(), v.encode()) for k, v in extra.items()]
    return headers


class Pair:
    """A client and the server connection under test, bytes pumped between them."""

    def __init__(self, limit: int = 1 << 20) -> None:
        self.server = g.ServerConnection(limit)
        self.client = ngh2.Connection(ngh2.Role.CLIENT)
        self.client.initiate_connection()
        self.events: list[g.Event] = []
        self.client_events: list[ngh2.Event] = []
        self.pump()

    def pump(self) -> None:
        for _ in range(50):
            moved = False
            out = self.client.data_to_send()
            if out:
                self.server.receive_data(out)
                moved = True
            self.events += self.server.events()
            back = self.server.data_to_send()
            self.events += self.server.events()
            if back:
                self.client.receive_data(back)
                moved = True
            self.client_events += self.client.events()
            if not moved:
                return
        raise AssertionError("no quiescence")

    def call(
        self, payloads: list[bytes], path: str = "/svc.S/M", end: bool = True, **extra: str
    ) -> int:
        sid = self.client.send_request(request_headers(path, **extra))
        for p in payloads:
            self.client.send_data(sid, prefix(len(p)) + p)
        if end:
            self.client.end_stream(sid)
        self.pump()
        return sid

    def of(self, kind: type, sid: int | None = None) -> list:  # type: ignore[type-arg]
        return [
            e
            for e in self.events
            if isinstance(e, kind) and (sid is None or getattr(e, "stream_id", None) == sid)
        ]

    def answer(self, sid: int) -> tuple[list[bytes], dict[bytes, bytes]]:
        """The messages and the trailers (or trailers-only headers) the client got."""
        body = b""
        trailers: dict[bytes, bytes] = {}
        for e in self.client_events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, ngh2.DataReceived):
                body += e.data
            elif isinstance(e, ngh2.TrailersReceived | ngh2.ResponseReceived):
                trailers.update((bytes(k), bytes(v)) for k, v in e.headers)
        reader = MessageReader(1 << 30)
        return reader.feed(body), trailers


# -- framing ---------------------------------------------------------------------------


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_messages_split_anywhere_read_back_whole(
    messages: list[bytes], data: st.DataObject
) -> None:
    wire = b"".join(prefix(len(m)) + m for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    reader = MessageReader(300)
    got: list[bytes] = []
    start = 0
    for cut in [*cuts, len(wire)]:
        got += reader.feed(wire[start:cut])
        start = cut
    assert got == messages and reader.buffered == 0


def test_oversized_and_compressed_are_refused_from_the_prefix() -> None:
    with pytest.raises(MessageTooLarge) as too_big:
        MessageReader(10).feed(prefix(11)[:5])  # no byte of the message needed
    assert too_big.value.size == 11 and "larger than max (11 vs. 10)" in str(too_big.value)
    with pytest.raises(CompressedMessage):
        MessageReader(10).feed(b"\x01" + (3).to_bytes(4, "big") + b"abc")


# -- calls -----------------------------------------------------------------------------


def test_unary_call_metadata_timeout_and_status() -> None:
    p = Pair()
    sid = p.call(
        [b"hello"],
        grpc_timeout="250m",
        x_mq_client_id="c1",
        trace_bin=base64.b64encode(b"\x00\x01").decode().rstrip("="),
    )
    started = p.of(g.CallStarted, sid)[0]
    assert started.path == "/svc.S/M" and started.timeout == pytest.approx(0.25)
    md = dict(started.metadata)
    assert md["x-mq-client-id"] == "c1" and md["trace-bin"] == b"\x00\x01"
    assert "te" not in md and "content-type" not in md and "grpc-timeout" not in md
    [message] = p.of(g.MessageReceived, sid)
    assert message.payload == b"hello" and message.size == 10
    assert p.of(g.InputEnded, sid)
    p.server.consumed(sid, message.size)
    p.server.send_message(sid, b"world")
    p.server.end_call(sid, g.OK)
    p.pump()
    messages, trailers = p.answer(sid)
    assert messages == [b"world"] and trailers[b"grpc-status"] == b"0"
    assert trailers[b":status"] == b"200"
    assert trailers[b"content-type"] == b"application/grpc"


def test_trailers_only_status_with_message_and_details() -> None:
    p = Pair()
    sid = p.call([b"x"])
    p.server.end_call(sid, g.RESOURCE_EXHAUSTED, "too big: 100% é", b"\x08\x08")
    p.pump()
    messages, trailers = p.answer(sid)
    assert messages == []
    assert trailers[b"grpc-status"] == b"8"
    assert trailers[b"grpc-message"] == b"too big: 100%25 %C3%A9"
    assert base64.b64decode(trailers[b"grpc-status-details-bin"] + b"==") == b"\x08\x08"


def test_server_streaming_and_bidi_interleave() -> None:
    p = Pair()
    a = p.call([b"a1", b"a2"], end=False)
    b = p.call([b"b1"])
    assert [m.payload for m in p.of(g.MessageReceived, a)] == [b"a1", b"a2"]
    assert not p.of(g.InputEnded, a) and p.of(g.InputEnded, b)
    for i in range(3):
        p.server.send_message(a, b"r%d" % i)
        p.server.send_message(b, b"s%d" % i)
    p.server.end_call(b, g.OK)
    p.client.end_stream(a)
    p.pump()
    assert p.of(g.InputEnded, a)
    p.server.end_call(a, g.OK)
    p.pump()
    assert p.answer(a)[0] == [b"r0", b"r1", b"r2"]
    assert p.answer(b)[0] == [b"s0", b"s1", b"s2"]


def test_client_reset_closes_the_call() -> None:
    p = Pair()
    sid = p.call([b"x"], end=False)
    p.client.reset_stream(sid, g.CANCEL)
    p.pump()
    [closed] = p.of(g.CallClosed, sid)
    assert "cancelled by the client" in closed.reason
    p.server.send_message(sid, b"late")  # ignored, not an error
    p.server.end_call(sid, g.OK)
    p.pump()


def test_oversized_message_is_resource_exhausted_and_the_connection_goes_on() -> None:
    p = Pair(limit=1000)
    sid = p.call([b"y" * 5000])
    [closed] = p.of(g.CallClosed, sid)
    assert "larger than max (5000 vs. 1000)" in closed.reason
    assert not p.of(g.MessageReceived, sid) and not p.of(g.InputEnded, sid)
    assert p.answer(sid)[1][b"grpc-status"] == b"8"
    ok = p.call([b"z" * 1000])
    assert p.of(g.MessageReceived, ok)[0].payload == b"z" * 1000


def test_torn_message_compressed_message_and_bad_timeout() -> None:
    p = Pair()
    torn = p.client.send_request(request_headers())
    p.client.send_data(torn, prefix(10) + b"abc", end_stream=True)
    zipped = p.client.send_request(request_headers())
    p.client.send_data(zipped, b"\x01" + (1).to_bytes(4, "big") + b"z", end_stream=True)
    p.pump()
    bad = p.call([b"x"], grpc_timeout="soon")
    assert p.answer(torn)[1][b"grpc-status"] == b"13"
    assert p.of(g.CallClosed, torn)[0].reason == "the request ended inside a message"
    assert p.answer(zipped)[1][b"grpc-status"] == b"12"
    assert p.answer(bad)[1][b"grpc-status"] == b"13" and not p.of(g.CallStarted, bad)


def test_not_grpc_requests_are_refused_without_an_event() -> None:
    p = Pair()
    get = p.client.send_request(
        [
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
        ],
        end_stream=True,
    )
    json = p.client.send_request(
        [*request_headers()[:4], (b"content-type", b"text/json")], end_stream=True
    )
    p.pump()
    assert p.answer(get)[1][b":status"] == b"405"
    assert p.answer(json)[1][b":status"] == b"415"
    assert not p.of(g.CallStarted)


def test_unconsumed_messages_hold_the_stream_window() -> None:
    p = Pair()
    sid = p.client.send_request(request_headers())
    chunk = b"q" * 16_000
    for _ in range(400):  # 6.4 MB: far more than the stream window
        p.client.send_data(sid, prefix(len(chunk)) + chunk)
    p.pump()
    received = p.of(g.MessageReceived, sid)
    assert 0 < len(received) < 400
    assert p.client.stream_remote_window_size(sid) < len(chunk)
    for m in received:
        p.server.consumed(sid, m.size)
    p.pump()
    assert len(p.of(g.MessageReceived, sid)) > len(received)


def test_ping_is_acknowledged_and_goaway_stages() -> None:
    p = Pair()
    p.client.ping(b"12345678")
    p.pump()
    assert any(isinstance(e, ngh2.PingAcknowledged) for e in p.client_events)
    sid = p.call([b"x"], end=False)
    p.server.shutdown_notice()
    p.pump()
    p.server.goaway()
    p.pump()
    goaways = [e for e in p.client_events if isinstance(e, ngh2.GoAwayReceived)]
    assert goaways[0].last_stream_id == 2**31 - 1 and goaways[-1].last_stream_id == sid
    p.server.end_call(sid, g.OK)  # the call accepted still completes
    p.pump()
    assert p.answer(sid)[1][b"grpc-status"] == b"0"


# -- bad input -------------------------------------------------------------------------


def drive(data: bytes, split: int = 0) -> tuple[list[g.Event], bytes]:
    server = g.ServerConnection(1 << 16)
    out = server.data_to_send()
    events: list[g.Event] = []
    pieces = [data] if not split else [data[i : i + split] for i in range(0, len(data), split)]
    for piece in pieces:
        server.receive_data(piece)
        events += server.events()
        out += server.data_to_send()
        events += server.events()
    return events, out


def goaway_code(out: bytes) -> int | None:
    pos = 0
    while pos + 9 <= len(out):
        length = int.from_bytes(out[pos : pos + 3], "big")
        if out[pos + 3] == 0x7:
            return int(struct.unpack(">I", out[pos + 13 : pos + 17])[0])
        pos += 9 + length
    return None


def test_not_http2_is_goaway_protocol_error() -> None:
    events, out = drive(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(events[-1], g.ConnectionTerminated)
    assert goaway_code(out) == g.PROTOCOL_ERROR


def test_bad_hpack_is_goaway_compression_error() -> None:
    settings_frame = frame(0x4, 0, 0, b"")
    bad_block = b"\xff\xff\xff\xff\xff\xff"  # an index no table has
    events, out = drive(PREFACE + settings_frame + frame(0x1, 0x5, 1, bad_block))
    assert any(isinstance(e, g.ConnectionTerminated) for e in events)
    assert goaway_code(out) == 0x9


def test_torn_frame_waits_then_completes() -> None:
    p = Pair()
    sid = p.client.send_request(request_headers())
    p.client.send_data(sid, prefix(3) + b"abc", end_stream=True)
    wire = p.client.data_to_send()
    for i in range(len(wire)):  # one byte at a time
        p.server.receive_data(wire[i : i + 1])
        p.events += p.server.events()
    assert [m.payload for m in p.of(g.MessageReceived, sid)] == [b"abc"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 40))
def test_random_bytes_after_the_preface_never_raise(junk: bytes, split: int) -> None:
    events, out = drive(PREFACE + frame(0x4, 0, 0, b"") + junk, split)
    assert all(isinstance(e, g.Event.__args__) for e in events)  # type: ignore[attr-defined]
    kinds = {type(e) for e in events}
    assert kinds <= {
        g.CallStarted,
        g.MessageReceived,
        g.InputEnded,
        g.CallClosed,
        g.ConnectionTerminated,
    }


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9]),
            st.integers(0, 255),
            st.integers(0, 7),
            st.binary(max_size=40),
        ),
        max_size=8,
    )
)
def test_random_frames_never_raise(frames: list[tuple[int, int, int, bytes]]) -> None:
    wire = (
        PREFACE
        + frame(0x4, 0, 0, b"")
        + b"".join(frame(kind, flags, sid, payload) for kind, flags, sid, payload in frames)
    )
    events, _ = drive(wire)
    for e in events:
        if isinstance(e, g.MessageReceived):
            assert len(e.payload) <= 1 << 16


def test_header_list_above_the_advertised_limit_is_goaway_enhance_your_calm() -> None:
    p = Pair()
    assert p.client.remote_settings[ngh2.Setting.MAX_HEADER_LIST_SIZE] == g.MAX_HEADER_LIST
    p.client.send_request([*request_headers(), (b"x-big", b"v" * 20_000)], end_stream=True)
    p.pump()
    [terminated] = p.events
    assert isinstance(terminated, g.ConnectionTerminated)
    assert terminated.error_code == g.ENHANCE_YOUR_CALM
    goaway = [e for e in p.client_events if isinstance(e, ngh2.GoAwayReceived)]
    assert goaway and goaway[0].error_code == g.ENHANCE_YOUR_CALM
