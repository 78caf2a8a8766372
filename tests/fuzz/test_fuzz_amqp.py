"""Fuzzing the AMQP 0-9-1 framing, the method decoder, the fast path and the server
connection machine.

Contracts checked (protocol/amqp/framing.py, fastpath.py, connection.py):

* :class:`FrameReader`: any bytes give frames, ``None`` ("need more") or
  :class:`ConnectionLevelError` 501; every strict prefix of a valid frame stream gives
  the complete frames and then ``None``, never an error; a valid stream in any chunking
  gives back exactly its frames.
* ``decode_method``: any payload gives a pamqp method or a ``ConnectionLevelError``
  (501/502/540); no pamqp exception (struct.error, RecursionError...) leaks.
* Fast path: ``decode_publish``/``decode_ack``/``decode_nack``/``ContentHeader`` agree
  with pamqp on pamqp's encodings; on damaged payloads they raise only
  ``ConnectionLevelError(502)`` and, when they do decode, pamqp decodes the same values.
  The encoders' frames decode with pamqp to what was encoded.
* :class:`AMQPConnection`: a client stream (handshake, channels, publishes with content,
  acks, declares, heartbeats, closes), valid or damaged, chunked anyhow, driven the way the
  gateway drives it, yields events or :class:`AMQPError` (with a reply code) only, always
  makes progress, and a valid stream yields exactly its messages with no error; every
  strict prefix of a valid stream just asks for more data.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp import header as pamqp_header

from protocol.amqp import (
    NEED_DATA,
    AMQPConnection,
    AMQPError,
    ConnectionLevelError,
    fastpath,
    relax_pamqp_name_validation,
    sasl,
)
from protocol.amqp.errors import REPLY_NAMES, SYNTAX_ERROR
from protocol.amqp.events import (
    AuthenticationRequested,
    ChannelCloseRequested,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseRequested,
    ContentReceived,
    MethodReceived,
    OpenRequested,
    ProtocolHeaderReceived,
)
from protocol.amqp.framing import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameReader,
    decode_method,
    encode_method,
    pack_frame,
)

from ._support import chunked, corpus, examples, mutate, splice


@pytest.fixture(autouse=True, scope="module")
def _relaxed_pamqp() -> None:
    """The server's pamqp configuration (the gateway makes the same call at start):
    the machine is fuzzed with every name RabbitMQ accepts."""
    relax_pamqp_name_validation()


C, Ch, B, Q, E = (commands.Connection, commands.Channel, commands.Basic, commands.Queue,
                  commands.Exchange)
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
FAST = settings(max_examples=examples(80), deadline=None, suppress_health_check=HEALTH)
MANY = settings(max_examples=examples(600), deadline=None, suppress_health_check=HEALTH)
#: For the fuzzers of whole client sessions (the most expensive to generate).
STREAMS = settings(max_examples=examples(35), deadline=None, suppress_health_check=HEALTH)

# -- field tables and methods ---------------------------------------------------------------

short_text = st.text(max_size=12)
names = st.text(max_size=20)
scalars = st.one_of(
    st.booleans(), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=32), short_text,
    st.none(), st.decimals(min_value=-1000, max_value=1000, places=2),
    st.datetimes(min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(2100, 1, 1))
    .map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
)
field_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=8,
)
tables = st.dictionaries(short_text, field_values, max_size=4)


def _methods() -> st.SearchStrategy[Any]:
    """pamqp method objects of the kinds clients send, arguments included."""
    return st.one_of(
        st.builds(Q.Declare, queue=names, passive=st.booleans(), durable=st.booleans(),
                  exclusive=st.booleans(), auto_delete=st.booleans(), arguments=tables),
        st.builds(Q.Bind, queue=names, exchange=names, routing_key=names, arguments=tables),
        st.builds(E.Declare, exchange=names, exchange_type=st.sampled_from(
            ["direct", "topic", "fanout", "headers"]), arguments=tables),
        st.builds(B.Consume, queue=names, consumer_tag=names, no_ack=st.booleans(),
                  arguments=tables),
        st.builds(B.Qos, prefetch_count=st.integers(0, 65535)),
        st.builds(B.Ack, delivery_tag=st.integers(0, 2**63 - 1), multiple=st.booleans()),
        st.builds(B.Nack, delivery_tag=st.integers(0, 2**63 - 1), multiple=st.booleans(),
                  requeue=st.booleans()),
        st.builds(B.Reject, delivery_tag=st.integers(0, 2**63 - 1), requeue=st.booleans()),
        st.builds(B.Cancel, consumer_tag=names),
        st.builds(B.Get, queue=names, no_ack=st.booleans()),
        st.builds(Q.Purge, queue=names), st.builds(Q.Delete, queue=names),
        st.just(commands.Confirm.Select()), st.builds(Ch.Flow, active=st.booleans()),
        st.builds(C.StartOk, client_properties=tables,
                  mechanism=st.sampled_from(["PLAIN", "AMQPLAIN"]), response=names),
        st.builds(C.TuneOk, channel_max=st.integers(0, 65535),
                  frame_max=st.integers(0, 2**32 - 1), heartbeat=st.integers(0, 65535)),
        st.builds(C.Open, virtual_host=names),
        st.builds(C.Close, reply_code=st.integers(0, 999), reply_text=names,
                  class_id=st.just(0), method_id=st.just(0)),
        st.builds(Ch.Close, reply_code=st.integers(0, 999), reply_text=names,
                  class_id=st.just(0), method_id=st.just(0)),
    )


def method_payload(method: Any) -> bytes:
    return struct.pack(">I", method.index) + method.marshal()


@st.composite
def basic_properties(draw: st.DrawFn) -> Any:
    kw: dict[str, Any] = {}
    opts = {
        "content_type": short_text, "content_encoding": short_text, "headers": tables,
        "delivery_mode": st.integers(1, 2), "priority": st.integers(0, 9),
        "correlation_id": short_text, "reply_to": short_text,
        "expiration": st.integers(0, 10**9).map(str), "message_id": short_text,
        "timestamp": st.datetimes(min_value=datetime.datetime(1970, 1, 2),
                                  max_value=datetime.datetime(2100, 1, 1))
        .map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
        "message_type": short_text, "user_id": short_text, "app_id": short_text,
    }
    for name in draw(st.lists(st.sampled_from(sorted(opts)), unique=True, max_size=6)):
        kw[name] = draw(opts[name])
    return B.Properties(**kw)


def header_payload(props: Any, body_size: int) -> bytes:
    return frame.marshal(pamqp_header.ContentHeader(0, body_size, props), 1)[7:-1]


# -- framing --------------------------------------------------------------------------------

frame_specs = st.one_of(
    st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 65535), st.binary(max_size=40)),
    st.just((8, 0, b"")),
)


def read_all(reader: FrameReader) -> list[tuple[int, int, bytes]]:
    out = []
    while True:
        got = reader.read_frame()
        if got is None:
            return out
        out.append(got)


@MANY
@given(st.binary(max_size=80), st.integers(0, 300))
def test_frame_reader_on_random_bytes(data: bytes, frame_max: int) -> None:
    reader = FrameReader(frame_max)
    reader.feed(PROTOCOL_HEADER + data)
    assert reader.read_protocol_header()
    try:
        frames = read_all(reader)
    except ConnectionLevelError as exc:
        assert exc.reply_code == 501
        return
    assert sum(len(p) + 8 for _, _, p in frames) + reader.buffered == len(data)


@FAST
@given(st.lists(frame_specs, max_size=6), st.data())
def test_valid_frame_streams_in_any_chunking(specs: list[Any], data: Any) -> None:
    wire = PROTOCOL_HEADER + b"".join(pack_frame(*s) for s in specs)
    reader = FrameReader()
    header_done = False
    got: list[Any] = []
    for chunk in data.draw(chunked(wire, max_chunks=20)):
        reader.feed(chunk)
        if not header_done:
            header_done = reader.read_protocol_header()
            if not header_done:
                continue
        got += read_all(reader)
    assert got == [tuple(s) for s in specs]
    assert reader.buffered == 0


@FAST
@given(st.lists(frame_specs, min_size=1, max_size=4))
def test_every_strict_prefix_asks_for_more(specs: list[Any]) -> None:
    wire = PROTOCOL_HEADER + b"".join(pack_frame(*s) for s in specs)
    for cut in range(len(wire)):
        reader = FrameReader()
        reader.feed(wire[:cut])
        if not reader.read_protocol_header():
            assert cut < 8
            continue
        frames = read_all(reader)  # must not raise
        assert len(frames) < len(specs)


@FAST
@given(st.lists(frame_specs, min_size=1, max_size=4), st.data())
def test_damaged_frame_streams(specs: list[Any], data: Any) -> None:
    wire = b"".join(pack_frame(*s) for s in specs)
    damaged = data.draw(mutate(wire))
    reader = FrameReader(data.draw(st.sampled_from([0, 4096, 131072, 30])))
    reader.feed(PROTOCOL_HEADER)
    assert reader.read_protocol_header()
    for chunk in data.draw(chunked(damaged)):
        reader.feed(chunk)
        try:
            read_all(reader)
        except ConnectionLevelError as exc:
            assert exc.reply_code == 501
            return


@MANY
@given(st.binary(max_size=9))
def test_protocol_header(data: bytes) -> None:
    from protocol.amqp import ProtocolHeaderError

    reader = FrameReader()
    reader.feed(data)
    try:
        done = reader.read_protocol_header()
    except ProtocolHeaderError:
        assert not PROTOCOL_HEADER.startswith(data[:8])
        return
    assert done == (data[:8] == PROTOCOL_HEADER)
    assert done or PROTOCOL_HEADER.startswith(data)


# -- decode_method --------------------------------------------------------------------------


def check_decode_method(payload: bytes) -> Any:
    try:
        return decode_method(payload)
    except ConnectionLevelError as exc:
        assert exc.reply_code in (501, 502, 540), exc
        return None


@MANY
@given(st.binary(max_size=60))
def test_decode_method_random(payload: bytes) -> None:
    check_decode_method(payload)


@FAST
@given(st.sampled_from(sorted(commands.INDEX_MAPPING)), st.binary(max_size=60))
def test_decode_method_known_index_random_arguments(index: int, args: bytes) -> None:
    check_decode_method(struct.pack(">I", index) + args)


@FAST
@given(_methods(), st.data())
def test_decode_method_valid_and_mutated(method: Any, data: Any) -> None:
    payload = method_payload(method)
    decoded = check_decode_method(payload)
    assert decoded is not None and decoded.index == method.index
    check_decode_method(data.draw(mutate(payload)))


def nested(depth: int, kind: bytes = b"A") -> bytes:
    """A field value nested ``depth`` deep: arrays ('A') or tables ('F')."""
    value = b"V"
    for _ in range(depth):
        if kind == b"A":
            value = b"A" + struct.pack(">I", len(value)) + value
        else:
            entry = b"\x01k" + value
            value = b"F" + struct.pack(">I", len(entry)) + entry
    return value


@pytest.mark.parametrize("kind", [b"A", b"F"])
@pytest.mark.parametrize("depth", [50, 3000])
def test_deeply_nested_tables(kind: bytes, depth: int) -> None:
    """pamqp decodes tables recursively; a 15 KB StartOk nests them 3000 deep."""
    table = b"\x01a" + nested(depth, kind)
    args = (struct.pack(">I", len(table)) + table + b"\x05PLAIN"
            + struct.pack(">I", 4) + b"\x00u\x00p" + b"\x05en_US")
    check_decode_method(struct.pack(">I", C.StartOk.index) + args)
    # the same in a content header's headers table, read lazily by the broker
    props = struct.pack(">H", fastpath.FLAG_HEADERS) + struct.pack(">I", len(table)) + table
    hdr = fastpath.ContentHeader(struct.pack(">HHQ", 60, 0, 0) + props)
    try:
        hdr.headers  # noqa: B018
    except ConnectionLevelError as exc:
        assert exc.reply_code == SYNTAX_ERROR
    # and in an AMQPLAIN response
    try:
        sasl.parse_response("AMQPLAIN", table)
    except ConnectionLevelError as exc:
        assert exc.reply_code == 403


# -- fast path ------------------------------------------------------------------------------


def check_fast_decoder(payload: bytes) -> None:
    """The fast decoder for the method index of ``payload`` vs pamqp's."""
    index = struct.unpack_from(">I", payload)[0] if len(payload) >= 4 else None
    fast = {fastpath.PUBLISH_INDEX: fastpath.decode_publish, fastpath.ACK_INDEX:
            fastpath.decode_ack, fastpath.NACK_INDEX: fastpath.decode_nack}.get(index)
    if fast is None:
        return
    try:
        got = fast(payload)
    except ConnectionLevelError as exc:
        assert exc.reply_code == SYNTAX_ERROR
        return
    ref = decode_method(payload)  # the fast path accepted it: pamqp must agree
    for field in ("exchange", "routing_key", "mandatory", "immediate", "delivery_tag",
                  "multiple", "requeue"):
        if hasattr(got, field):
            expected = getattr(ref, field)
            if field == "delivery_tag":
                expected &= 2**64 - 1  # pamqp decodes the unsigned longlong as signed
            assert getattr(got, field) == expected, field


@st.composite
def fast_payloads(draw: st.DrawFn) -> bytes:
    method = draw(st.one_of(
        st.builds(B.Publish, exchange=names, routing_key=names, mandatory=st.booleans(),
                  immediate=st.booleans()),
        st.builds(B.Ack, delivery_tag=st.integers(0, 2**63 - 1), multiple=st.booleans()),
        st.builds(B.Nack, delivery_tag=st.integers(0, 2**63 - 1), multiple=st.booleans(),
                  requeue=st.booleans()),
    ))
    return method_payload(method)


@FAST
@given(fast_payloads(), st.data())
def test_fast_decoders_agree_with_pamqp(payload: bytes, data: Any) -> None:
    check_fast_decoder(payload)
    damaged = data.draw(mutate(payload))
    check_fast_decoder(payload[:4] + damaged[4:])  # keep the index: reach the decoder


def check_content_header(payload: bytes) -> fastpath.ContentHeader | None:
    try:
        hdr = fastpath.ContentHeader(payload)
    except ConnectionLevelError as exc:
        assert exc.reply_code == SYNTAX_ERROR
        return None
    assert hdr.properties_raw == payload[12:]
    try:
        hdr.headers  # noqa: B018
    except ConnectionLevelError as exc:
        assert exc.reply_code == SYNTAX_ERROR
    return hdr


@FAST
@given(basic_properties(), st.integers(0, 2**63 - 1), st.data())
def test_content_header_agrees_with_pamqp(props: Any, size: int, data: Any) -> None:
    payload = header_payload(props, size)
    hdr = check_content_header(payload)
    assert hdr is not None
    # The reference is pamqp's reading of the same bytes (its encoder is lossy: float32,
    # empty strings dropped), not the object we started from.
    ref = pamqp_header.ContentHeader()
    ref.unmarshal(payload)
    expected = ref.properties
    assert (hdr.class_id, hdr.body_size) == (60, size) == (ref.class_id, ref.body_size)
    assert hdr.delivery_mode == expected.delivery_mode
    assert hdr.priority == expected.priority
    assert hdr.expiration == expected.expiration
    assert hdr.headers == expected.headers
    # re-framed for a delivery, pamqp reads the same properties back
    again = pamqp_header.ContentHeader()
    again.unmarshal(fastpath.encode_content_header(1, hdr.properties_raw, 5)[7:-1])
    assert again.body_size == 5
    assert dict(again.properties) == dict(expected)
    check_content_header(data.draw(mutate(payload)))


@MANY
@given(st.binary(max_size=40))
def test_content_header_random(payload: bytes) -> None:
    check_content_header(struct.pack(">HHQ", 60, 0, 1) + payload)
    check_content_header(payload)


@FAST
@given(st.integers(1, 65535), names, st.integers(0, 2**63 - 1), st.booleans(), names, names,
       st.integers(0, 2**32 - 1), st.integers(0, 999))
def test_fast_encoders_decode_with_pamqp(ch: int, ctag: str, tag: int, redel: bool, ex: str,
                                         rk: str, count: int, code: int) -> None:
    for wire, cls, values in (
        (fastpath.encode_deliver(ch, ctag, tag, redel, ex, rk), B.Deliver,
         dict(consumer_tag=ctag, delivery_tag=tag, redelivered=redel, exchange=ex,
              routing_key=rk)),
        (fastpath.encode_get_ok(ch, tag, redel, ex, rk, count), B.GetOk,
         dict(delivery_tag=tag, redelivered=redel, exchange=ex, routing_key=rk,
              message_count=count)),
        (fastpath.encode_return(ch, code, ctag, ex, rk), B.Return,
         dict(reply_code=code, reply_text=ctag, exchange=ex, routing_key=rk)),
        (fastpath.encode_ack(ch, tag, redel), B.Ack, dict(delivery_tag=tag, multiple=redel)),
        (fastpath.encode_nack(ch, tag, redel, True), B.Nack,
         dict(delivery_tag=tag, multiple=redel, requeue=True)),
    ):
        consumed, channel, method = frame.unmarshal(wire)
        assert (consumed, channel, type(method)) == (len(wire), ch, cls)
        for key, value in values.items():
            assert getattr(method, key) == value, key


# -- the connection machine -----------------------------------------------------------------


@st.composite
def client_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes], int]:
    """A well-behaved client: (bytes, bodies of its publishes in order, frame_max)."""
    frame_max = draw(st.sampled_from([4096, 8192, 131072]))
    mech = draw(st.sampled_from(["PLAIN", "AMQPLAIN"]))
    if mech == "PLAIN":
        response: Any = "\x00" + draw(short_text.filter(lambda t: "\x00" not in t)) + "\x00pw"
    else:
        response = "\x05LOGINS\x00\x00\x00\x01u\x08PASSWORDS\x00\x00\x00\x02pw"
    parts = [PROTOCOL_HEADER,
             encode_method(0, C.StartOk(client_properties=draw(tables), mechanism=mech,
                                        response=response)),
             encode_method(0, C.TuneOk(channel_max=0, frame_max=frame_max, heartbeat=0)),
             encode_method(0, C.Open(virtual_host=draw(names)))]
    channels = draw(st.lists(st.integers(1, 20), min_size=1, max_size=3, unique=True))
    for ch in channels:
        parts.append(encode_method(ch, Ch.Open()))
    bodies = []
    for _ in range(draw(st.integers(0, 5))):
        ch = draw(st.sampled_from(channels))
        kind = draw(st.sampled_from(["publish", "method", "heartbeat"]))
        if kind == "publish":
            # around frame_max too, to split bodies; cheap to generate
            size = draw(st.integers(0, 40) | st.integers(frame_max - 16, frame_max + 16))
            body = (draw(st.binary(min_size=1, max_size=8)) * size)[:size]
            bodies.append(body)
            parts.append(frame.marshal(B.Publish(exchange=draw(names),
                                                 routing_key=draw(names)), ch))
            parts.append(fastpath.encode_content_header(
                ch, header_payload(draw(basic_properties()), len(body))[12:], len(body)))
            parts.append(fastpath.encode_body(ch, body, frame_max))
        elif kind == "method":
            parts.append(encode_method(ch, draw(_methods().filter(
                lambda m: m.index >> 16 != 10 and m.index != Ch.Close.index))))
        else:
            parts.append(HEARTBEAT_FRAME)
    if draw(st.booleans()):
        parts.append(encode_method(channels[0], Ch.Close(200, "bye", 0, 0)))
    if draw(st.booleans()):
        parts.append(encode_method(0, C.Close(200, "bye", 0, 0)))
    return b"".join(parts), bodies, frame_max


def drive(chunks: list[bytes], eof: bool, deny: bool = False,
          max_message_size: int = 128 * 1024 * 1024) -> tuple[list[Any], list[AMQPError]]:
    """Run a server AMQPConnection over ``chunks`` as the gateway's handler does."""
    conn = AMQPConnection(max_message_size=max_message_size)
    events: list[Any] = []
    errors: list[AMQPError] = []
    total = sum(len(c) for c in chunks)
    calls = 0
    for chunk in [*chunks, b""] if eof else [c for c in chunks if c]:
        conn.receive_data(chunk)  # b"" is EOF
        while True:
            calls += 1
            assert calls <= total + 16, "next_event does not make progress"
            try:
                event = conn.next_event()
                if event is NEED_DATA:
                    break
                events.append(event)
                answer(conn, event, deny)
            except AMQPError as exc:
                assert exc.reply_code in REPLY_NAMES and exc.reply_code >= 300, exc
                errors.append(exc)
                out = conn.send_error(exc)
                assert isinstance(out, bytes)
    return events, errors


def answer(conn: AMQPConnection, event: Any, deny: bool) -> None:
    if isinstance(event, ProtocolHeaderReceived):
        conn.send_start()
    elif isinstance(event, AuthenticationRequested):
        conn.deny_auth() if deny else conn.accept_auth()
    elif isinstance(event, OpenRequested):
        conn.accept_open()
    elif isinstance(event, ChannelOpenRequested):
        conn.send_channel_open_ok(event.channel)
    elif isinstance(event, ChannelCloseRequested):
        conn.send_channel_close_ok(event.channel)
    elif isinstance(event, ConnectionCloseRequested):
        conn.send_close_ok()
    elif isinstance(event, ContentReceived):
        event.header.headers  # noqa: B018 - the broker reads them (may raise 502)
        if conn.channel_is_open(event.channel):
            conn.send_ack(event.channel, 1)
    elif isinstance(event, MethodReceived) and event.channel == 0:
        conn.send_method(0, C.UpdateSecretOk())


def bodies_of(events: list[Any]) -> list[bytes]:
    return [e.body for e in events if isinstance(e, ContentReceived)]


@STREAMS
@given(client_streams(), st.data())
def test_valid_client_streams(stream: Any, data: Any) -> None:
    wire, bodies, _ = stream
    events, errors = drive(data.draw(chunked(wire, max_chunks=30)), eof=data.draw(st.booleans()))
    assert errors == []
    assert bodies_of(events) == bodies


@settings(max_examples=examples(15), deadline=None, suppress_health_check=HEALTH)
@given(client_streams())
def test_every_strict_prefix_of_a_client_stream_asks_for_more(stream: Any) -> None:
    wire, _, _ = stream
    step = max(1, len(wire) // 150)
    for cut in range(0, len(wire), step):
        events, errors = drive([wire[:cut]], eof=False)
        assert errors == [], f"prefix of {cut} bytes refused: {errors[0]!r}"
        assert not any(isinstance(e, ConnectionClosed) for e in events)


@STREAMS
@given(client_streams(), st.data())
def test_damaged_client_streams(stream: Any, data: Any) -> None:
    wire, _, _ = stream
    damaged = data.draw(mutate(wire, max_mutations=6))
    drive(data.draw(chunked(damaged)), eof=data.draw(st.booleans()),
          deny=data.draw(st.booleans()),
          max_message_size=data.draw(st.sampled_from([10, 128 * 1024 * 1024])))


@STREAMS
@given(client_streams(), client_streams(), st.data())
def test_spliced_client_streams(first: Any, second: Any, data: Any) -> None:
    drive(data.draw(chunked(data.draw(splice(first[0], second[0])))), eof=True)


@FAST
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 8, 9]), st.integers(0, 4),
                          st.binary(max_size=30)), max_size=8), st.booleans())
def test_random_frames_after_a_handshake(specs: list[Any], eof: bool) -> None:
    wire = (PROTOCOL_HEADER
            + encode_method(0, C.StartOk(mechanism="PLAIN", response="\x00u\x00p"))
            + encode_method(0, C.TuneOk(0, 131072, 0)) + encode_method(0, C.Open("/"))
            + encode_method(1, Ch.Open())
            + b"".join(pack_frame(t, c, p) for t, c, p in specs))
    drive([wire], eof)


# -- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "data"), corpus("amqp"))
def test_corpus(kind: str, data: bytes) -> None:
    if kind == "connection":
        drive([data], eof=True)
        drive([data[i : i + 7] for i in range(0, len(data), 7)], eof=False)
    elif kind == "method":
        check_decode_method(data)
    elif kind == "header":
        check_content_header(data)
    elif kind == "amqplain":
        try:
            sasl.parse_response("AMQPLAIN", data)
        except ConnectionLevelError as exc:
            assert exc.reply_code == 403
    else:  # pragma: no cover
        raise AssertionError(f"unknown corpus kind {kind!r}")

