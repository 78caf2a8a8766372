"""Byte-level tests of protocol.amqp.framing: header, frames, need-more vs bad bytes."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from pamqp import body, commands, frame, header, heartbeat

from protocol.amqp import errors, relax_pamqp_name_validation
from protocol.amqp.framing import (
    PROTOCOL_HEADER,
    FrameReader,
    decode_method,
    encode_method,
)

FIXTURES = [
    frame.marshal(commands.Queue.Declare(queue="q1", durable=True), 1),
    frame.marshal(commands.Basic.Publish(exchange="amq.topic", routing_key="a.b"), 7),
    frame.marshal(header.ContentHeader(0, 5, commands.Basic.Properties(delivery_mode=2)), 7),
    frame.marshal(body.ContentBody(b"hello"), 7),
    frame.marshal(heartbeat.Heartbeat(), 0),
    frame.marshal(commands.Connection.StartOk(
        client_properties={"product": "t"}, response="\x00u\x00p"), 0),
]
STREAM = b"".join(FIXTURES)


def read_all(reader: FrameReader) -> list[tuple[int, int, bytes]]:
    out = []
    while (f := reader.read_frame()) is not None:
        out.append(f)
    return out


def expected() -> list[tuple[int, int, bytes]]:
    return [(f[0], struct.unpack(">H", f[1:3])[0], f[7:-1]) for f in FIXTURES]


def test_protocol_header_whole_and_byte_by_byte() -> None:
    r = FrameReader()
    r.feed(PROTOCOL_HEADER + b"\x01")
    assert r.read_protocol_header() is True
    assert r.buffered == 1  # trailing byte left alone

    r = FrameReader()
    for i, b in enumerate(PROTOCOL_HEADER):
        assert r.read_protocol_header() is False, i
        r.feed(bytes([b]))
    assert r.read_protocol_header() is True


@pytest.mark.parametrize("bad", [b"GET / HTTP/1.1\r\n", b"AMQP\x00\x00\x09\x00",
                                 b"AMQP\x01\x01\x00\x09", b"\x16\x03\x01"])
def test_wrong_protocol_header_fails_as_soon_as_it_diverges(bad: bytes) -> None:
    r = FrameReader()
    r.feed(bad)
    with pytest.raises(errors.ProtocolHeaderError) as info:
        r.read_protocol_header()
    assert info.value.connection_level
    # byte by byte: the error comes with the first byte that cannot be the header
    r = FrameReader()
    for i, b in enumerate(bad):
        r.feed(bytes([b]))
        if PROTOCOL_HEADER[i] != b:
            with pytest.raises(errors.ProtocolHeaderError) as info:
                r.read_protocol_header()
            assert info.value.received == bad[: i + 1]
            break
        assert r.read_protocol_header() is False


def test_frames_whole() -> None:
    r = FrameReader()
    r.feed(STREAM)
    assert read_all(r) == expected()
    assert r.buffered == 0


def test_frames_byte_by_byte() -> None:
    r = FrameReader()
    got = []
    for b in STREAM:
        r.feed(bytes([b]))
        got += read_all(r)
    assert got == expected()


def test_trailing_bytes_are_left_alone() -> None:
    r = FrameReader()
    r.feed(STREAM + b"\x01\x00")
    assert read_all(r) == expected()
    assert r.buffered == 2


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_strict_prefix_needs_more_data(fixture: bytes) -> None:
    for n in range(len(fixture)):
        r = FrameReader()
        r.feed(fixture[:n])
        assert r.read_frame() is None, n
    r = FrameReader()
    r.feed(fixture)
    assert r.read_frame() is not None


def test_bad_end_octet_is_frame_error() -> None:
    r = FrameReader()
    r.feed(FIXTURES[0][:-1] + b"\x00")
    with pytest.raises(errors.ConnectionLevelError) as info:
        r.read_frame()
    assert info.value.reply_code == errors.FRAME_ERROR


def test_oversized_frame_refused_from_header_alone() -> None:
    r = FrameReader(frame_max=4096)
    r.feed(struct.pack(">BHI", 3, 1, 4096 - 7))  # 4097 octets with header and end
    with pytest.raises(errors.ConnectionLevelError) as info:
        r.read_frame()
    assert info.value.reply_code == errors.FRAME_ERROR
    assert "frame_max" in info.value.reply_text
    ok = FrameReader(frame_max=4096)
    ok.feed(frame.marshal(body.ContentBody(b"x" * (4096 - 8)), 1))
    assert ok.read_frame() is not None


def test_unknown_frame_type() -> None:
    r = FrameReader()
    r.feed(b"\x04\x00\x01\x00\x00\x00\x00\xce")
    with pytest.raises(errors.ConnectionLevelError) as info:
        r.read_frame()
    assert info.value.reply_code == errors.FRAME_ERROR


def test_heartbeat_off_channel_zero() -> None:
    r = FrameReader()
    r.feed(b"\x08\x00\x01\x00\x00\x00\x00\xce")
    with pytest.raises(errors.ConnectionLevelError):
        r.read_frame()


def test_decode_method_unknown_and_truncated() -> None:
    with pytest.raises(errors.ConnectionLevelError) as info:
        decode_method(struct.pack(">HH", 99, 1))
    assert info.value.reply_code == errors.NOT_IMPLEMENTED
    payload = FIXTURES[0][7:-1]
    with pytest.raises(errors.ConnectionLevelError) as info:
        decode_method(payload[:6])
    assert info.value.reply_code == errors.SYNTAX_ERROR
    assert (info.value.class_id, info.value.method_id) == (50, 10)
    with pytest.raises(errors.ConnectionLevelError):
        decode_method(b"\x00\x0a")


def test_decode_method_matches_pamqp() -> None:
    m = decode_method(FIXTURES[0][7:-1])
    assert isinstance(m, commands.Queue.Declare)
    assert (m.queue, m.durable) == ("q1", True)


def test_recover_async_decodes_without_deprecation_warning() -> None:
    payload = struct.pack(">HHB", 60, 100, 1)
    assert decode_method(payload).requeue is True


def test_importing_protocol_amqp_leaves_pamqp_alone() -> None:
    """Only the explicit call relaxes pamqp (in a fresh interpreter: the relaxation is
    process-wide and other tests make the call)."""
    code = (
        "import re\n"
        "from pamqp import constants\n"
        "before = dict(constants.DOMAIN_REGEX)\n"
        "import protocol.amqp, protocol.amqp.connection, protocol.amqp.framing\n"
        "assert constants.DOMAIN_REGEX == before, 'changed at import'\n"
        "protocol.amqp.relax_pamqp_name_validation()\n"
        "assert constants.DOMAIN_REGEX['queue-name'].fullmatch('weird$name/\\u00fc')\n"
    )
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=60)


def test_names_rabbitmq_accepts_are_accepted() -> None:
    relax_pamqp_name_validation()
    name = "weird$name/ü"
    data = encode_method(1, commands.Queue.DeclareOk(name, 0, 0))
    _, _, m = frame.unmarshal(data)
    assert m.queue == name
    encode_method(1, commands.Exchange.Declare(exchange="ex*with!chars"))
    with pytest.raises(TypeError):  # the 255-octet bound is still there
        encode_method(1, commands.Queue.DeclareOk("é" * 128, 0, 0))
