"""The fast path must produce exactly pamqp's bytes and decode pamqp's frames identically."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from protocol.amqp import errors, fastpath
from protocol.amqp.framing import FrameReader

B = commands.Basic
# Names up to 127 characters: pamqp refuses longer exchange names in these methods.
names = st.text(max_size=40)
# pamqp encodes longlong as signed, so it cannot produce tags >= 2**63 to compare with
tags = st.integers(min_value=0, max_value=2**63 - 1)
channels = st.integers(min_value=0, max_value=65535)


def payload(data: bytes) -> bytes:
    return data[7:-1]


@settings(max_examples=60, deadline=None)
@given(channels, names, tags, st.booleans(), names, names)
def test_deliver_byte_equal(ch: int, ctag: str, tag: int, redel: bool, ex: str, rk: str) -> None:
    assert fastpath.encode_deliver(ch, ctag, tag, redel, ex, rk) == frame.marshal(
        B.Deliver(ctag, tag, redel, ex, rk), ch)
    # bytes arguments give the same frame
    assert fastpath.encode_deliver(ch, ctag.encode(), tag, redel, ex.encode(), rk.encode()) == (
        fastpath.encode_deliver(ch, ctag, tag, redel, ex, rk))


@settings(max_examples=60, deadline=None)
@given(channels, tags, st.booleans(), names, names, st.integers(0, 2**32 - 1))
def test_get_ok_byte_equal(ch: int, tag: int, redel: bool, ex: str, rk: str, count: int) -> None:
    assert fastpath.encode_get_ok(ch, tag, redel, ex, rk, count) == frame.marshal(
        B.GetOk(tag, redel, ex, rk, count), ch)


@settings(max_examples=40, deadline=None)
@given(channels, st.integers(0, 65535), names, names, names)
def test_return_byte_equal(ch: int, code: int, text: str, ex: str, rk: str) -> None:
    assert fastpath.encode_return(ch, code, text, ex, rk) == frame.marshal(
        B.Return(code, text, ex, rk), ch)


@settings(max_examples=60, deadline=None)
@given(channels, tags, st.booleans(), st.booleans())
def test_ack_nack_byte_equal_and_decode(ch: int, tag: int, multiple: bool, requeue: bool) -> None:
    ack = frame.marshal(B.Ack(tag, multiple), ch)
    nack = frame.marshal(B.Nack(tag, multiple, requeue), ch)
    assert fastpath.encode_ack(ch, tag, multiple) == ack
    assert fastpath.encode_nack(ch, tag, multiple, requeue) == nack
    assert fastpath.decode_ack(payload(ack)) == fastpath.Ack(tag, multiple)
    assert fastpath.decode_nack(payload(nack)) == fastpath.Nack(tag, multiple, requeue)


@settings(max_examples=60, deadline=None)
@given(names, names, st.booleans(), st.booleans())
def test_publish_decodes_like_pamqp(ex: str, rk: str, mandatory: bool, immediate: bool) -> None:
    data = frame.marshal(B.Publish(exchange=ex, routing_key=rk, mandatory=mandatory,
                                   immediate=immediate), 3)
    _, _, ref = frame.unmarshal(data)
    got = fastpath.decode_publish(payload(data))
    assert (got.exchange, got.routing_key, got.mandatory, got.immediate) == (
        ref.exchange, ref.routing_key, ref.mandatory, ref.immediate)
    assert got.name == ref.name and got.index == ref.index


def test_publish_with_long_utf8_names() -> None:
    ex, rk = "é" * 127, "ü/$" * 80  # 254 and 320 octets... rk too long for a shortstr
    rk = rk.encode()[:255].decode("utf-8", "ignore")
    raw = struct.pack(">HHH", 60, 40, 0) + bytes([len(ex.encode())]) + ex.encode() + bytes(
        [len(rk.encode())]) + rk.encode() + b"\x01"
    p = fastpath.decode_publish(raw)
    assert (p.exchange, p.routing_key, p.mandatory) == (ex, rk, True)


@pytest.mark.parametrize("cut", range(4, 12))
def test_truncated_publish_is_syntax_error(cut: int) -> None:
    data = payload(frame.marshal(B.Publish(exchange="ex", routing_key="rk"), 1))
    with pytest.raises(errors.ConnectionLevelError) as info:
        fastpath.decode_publish(data[:cut])
    assert info.value.reply_code == errors.SYNTAX_ERROR


def test_truncated_ack_and_bad_utf8() -> None:
    with pytest.raises(errors.ConnectionLevelError):
        fastpath.decode_ack(b"\x00\x3c\x00\x50\x00")
    with pytest.raises(errors.ConnectionLevelError):
        fastpath.decode_nack(b"\x00\x3c\x00\x78")
    with pytest.raises(errors.ConnectionLevelError):
        fastpath.decode_publish(b"\x00\x3c\x00\x28\x00\x00\x01\xff\x00\x00")


PROPERTIES = [
    B.Properties(),
    B.Properties(delivery_mode=2),
    B.Properties(content_type="text/plain", content_encoding="gzip",
                 headers={"x-match": "all", "n": 5, "nested": {"a": [1, "b"]}},
                 delivery_mode=1, priority=9, correlation_id="c", reply_to="amq.rabbitmq.reply-to",
                 expiration="60000", message_id="m", message_type="t", user_id="guest",
                 app_id="app", timestamp=datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)),
    B.Properties(expiration="0", priority=0),
    B.Properties(headers={"k": "v"}),
    B.Properties(reply_to="r", expiration="5"),
]


@pytest.mark.parametrize("props", PROPERTIES)
def test_content_header_parse_and_reframe(props: B.Properties) -> None:
    data = frame.marshal(header.ContentHeader(0, 1234, props), 9)
    _, _, ref = frame.unmarshal(data)
    h = fastpath.ContentHeader(payload(data))
    assert h.class_id == 60 and h.body_size == 1234
    assert h.delivery_mode == ref.properties.delivery_mode
    assert h.priority == ref.properties.priority
    assert h.expiration == ref.properties.expiration
    assert h.headers == ref.properties.headers
    assert h.raw == payload(data)
    # re-framing the stored properties is byte-identical to pamqp's frame
    assert fastpath.encode_content_header(9, h.properties_raw, 1234) == data


def test_raw_properties_survive_where_pamqp_reencoding_is_lossy() -> None:
    # headers {"l": long-long 5 ('l'), "d": double 0.1 ('d')}; pamqp re-encodes as 'b' and 'f'
    table = b"\x01l" + b"l" + struct.pack(">q", 5) + b"\x01d" + b"d" + struct.pack(">d", 0.1)
    props = struct.pack(">H", fastpath.FLAG_HEADERS) + struct.pack(">I", len(table)) + table
    raw = struct.pack(">HHQ", 60, 0, 3) + props
    h = fastpath.ContentHeader(raw)
    assert h.headers == {"l": 5, "d": 0.1}
    assert h.properties_raw == props
    assert fastpath.encode_content_header(1, h.properties_raw, 3)[7:-1] == raw


def test_content_header_flag_continuation_and_malformed() -> None:
    raw = struct.pack(">HHQHH", 60, 0, 0, fastpath.FLAG_DELIVERY_MODE | 1, 0) + b"\x02"
    assert fastpath.ContentHeader(raw).delivery_mode == 2
    good = payload(frame.marshal(header.ContentHeader(0, 1, PROPERTIES[2]), 1))
    # Properties after `expiration` are never parsed (they are forwarded raw), so
    # truncation is detected up to the end of `expiration`.
    end_of_expiration = good.index(b"\x0560000") + 6
    for cut in range(end_of_expiration):
        with pytest.raises(errors.ConnectionLevelError):
            fastpath.ContentHeader(good[:cut])
    broken = bytearray(good)
    broken[14:18] = struct.pack(">I", 10_000)  # headers table claims too much
    with pytest.raises(errors.ConnectionLevelError):
        fastpath.ContentHeader(bytes(broken))


def test_headers_parsed_only_when_asked() -> None:
    raw = payload(frame.marshal(header.ContentHeader(0, 1, B.Properties(headers={"a": 1})), 1))
    h = fastpath.ContentHeader(raw)
    assert h._headers is None
    assert h.headers == {"a": 1}
    assert fastpath.ContentHeader(payload(frame.marshal(header.ContentHeader(0, 1), 1))).headers \
        is None


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 4096, 10_000, 3 * 4088])
def test_body_split_at_frame_max_minus_8(size: int) -> None:
    body_bytes = bytes(i % 251 for i in range(size))
    data = fastpath.encode_body(5, body_bytes, 4096)
    r = FrameReader(frame_max=4096)
    r.feed(data)
    frames = []
    while (f := r.read_frame()) is not None:
        frames.append(f)
    assert r.buffered == 0
    assert all(t == 3 and ch == 5 and len(p) <= 4088 for t, ch, p in frames)
    assert b"".join(p for _, _, p in frames) == body_bytes
    assert len(frames) == -(-size // 4088)
    if 0 < size <= 4088:
        assert data == frame.marshal(body.ContentBody(body_bytes), 5)


def test_encode_message_is_deliver_header_body_in_one_chunk() -> None:
    props = B.Properties(content_type="a/b", headers={"x": 1}, delivery_mode=2)
    hdr = frame.marshal(header.ContentHeader(0, 5, props), 2)
    raw_props = fastpath.ContentHeader(payload(hdr)).properties_raw
    out = fastpath.encode_message(
        fastpath.encode_deliver(2, "ct", 1, True, "ex", "rk"), 2, raw_props, b"hello", 131072)
    assert out == (frame.marshal(B.Deliver("ct", 1, True, "ex", "rk"), 2) + hdr
                   + frame.marshal(body.ContentBody(b"hello"), 2))


def test_short_string_too_long_is_refused() -> None:
    with pytest.raises(ValueError):
        fastpath.encode_deliver(1, "x" * 256, 1, False, "", "")


deliveries = st.tuples(
    st.sampled_from([1, 2, 65535]), st.sampled_from(["ct", b"ct", "other", "ü" * 5]),
    tags, st.booleans(), st.sampled_from(["", b"", "amq.topic", b"amq.topic", "x" * 255]),
    st.sampled_from(["", "a.b", b"a.b", "r" * 255]),
    st.sampled_from([b"\x00\x00", b"\x10\x00\x02", b"\x90\x00\x03a/b\x02"]),
    st.sampled_from([b"", b"x", b"y" * 100, b"z" * 5000]),
    st.sampled_from([0, 4096, 131072]))


@settings(max_examples=60, deadline=None)
@given(st.lists(deliveries, min_size=1, max_size=12))
def test_delivery_encoder_equals_deliver_plus_message(runs: list[tuple]) -> None:
    """The encoder keeps the last delivery's fixed pieces: every delivery of a sequence
    (repeats, a new tag or body only, any field changing) is the general path's bytes."""
    enc = fastpath.DeliveryEncoder()
    for ch, ct, tag, redel, ex, rk, props, data, frame_max in runs + runs:
        general = fastpath.encode_message(
            fastpath.encode_deliver(ch, ct, tag, redel, ex, rk), ch, props, data, frame_max)
        assert enc.encode(ch, ct, tag, redel, ex, rk, props, data, frame_max) == general
        assert fastpath.encode_delivery(ch, ct, tag, redel, ex, rk, props, data,
                                        frame_max) == general
        again = enc.encode(ch, ct, tag ^ 1, not redel, ex, rk, props, data[::-1], frame_max)
        assert again == fastpath.encode_message(
            fastpath.encode_deliver(ch, ct, tag ^ 1, not redel, ex, rk), ch, props,
            data[::-1], frame_max)


def test_delivery_encoder_refuses_long_short_strings() -> None:
    enc = fastpath.DeliveryEncoder()
    for args in (("x" * 256, "", ""), ("", "x" * 256, ""), ("", "", b"x" * 256)):
        with pytest.raises(ValueError):
            enc.encode(1, args[0], 1, False, args[1], args[2], b"\x00\x00", b"", 0)
        with pytest.raises(ValueError):
            fastpath.encode_delivery(1, args[0], 1, False, args[1], args[2], b"\x00\x00",
                                     b"", 0)
