"""Malformed frames: each gives a FrameError with a clear message, never another exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.remoting import (
    FrameDecoder,
    FrameError,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_command,
)


def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + (
        header + body
    )


def fixed(code=10, language=0, version=0, opaque=77, flag=0) -> bytes:
    return struct.pack(">hBhii", code, language, version, opaque, flag)


# (id, frame without its length field... as a whole frame, message fragment, fatal?)
CASES = [
    ("length-shorter-than-mark", struct.pack(">i", 3) + b"abc", "frame length 3 is shorter", True),
    ("length-zero", struct.pack(">i", 0), "frame length 0 is shorter", True),
    ("length-negative-as-unsigned-huge", b"\xff\xff\xff\xff", "exceeds the maximum", True),
    (
        "header-longer-than-frame",
        struct.pack(">ii", 8, 100) + b"{}{}",
        "header length 100 is longer than the 4 bytes",
        False,
    ),
    ("unknown-serialize-type", frame(b"{}", kind=7), "unknown serialize type 7", False),
    ("bad-json", frame(b'{"code":'), "bad JSON header", False),
    ("json-not-utf8", frame(b'{"code":1,"remark":"\xff"}'), "JSON header is not UTF-8", False),
    ("json-array", frame(b"[1,2]"), "JSON header is a list, not an object", False),
    ("json-no-code", frame(b'{"opaque":1}'), "JSON header has no code", False),
    ("json-code-text", frame(b'{"code":"ten"}'), "field code: not an int", False),
    ("json-code-float", frame(b'{"code":1.5}'), "field code: not a 32-bit int", False),
    ("json-opaque-too-big", frame(b'{"code":1,"opaque":2147483648}'), "opaque: not a 32", False),
    ("json-remark-object", frame(b'{"code":1,"remark":{}}'), "remark: not a string", False),
    (
        "json-ext-nested",
        frame(b'{"code":1,"extFields":{"a":[1]}}'),
        "extFields['a']: not a string or number",
        False,
    ),
    (
        "json-lone-surrogate",
        frame(b'{"code":1,"extFields":{"a":"\\ud800"}}'),
        "lone surrogate",
        False,
    ),
    (
        "json-lone-surrogate-remark",
        frame(b'{"code":1,"remark":"x\\uDC00"}'),
        "lone surrogate",
        False,
    ),
    (
        "json-lone-surrogate-key",
        frame(b'{"code":1,"extFields":{"\\udbff":"v"}}'),
        "lone surrogate",
        False,
    ),
    ("json-deep", frame(b"[" * 100000 + b"]" * 100000), "bad JSON header", False),
    ("binary-short", frame(fixed()[:10], kind=1), "shorter than its 21 fixed bytes", False),
    (
        "binary-remark-too-long",
        frame(fixed() + struct.pack(">i", 50) + b"ab" + struct.pack(">i", 0), kind=1),
        "remark length 50 does not fit",
        False,
    ),
    (
        "binary-remark-negative",
        frame(fixed() + struct.pack(">i", -1) + struct.pack(">i", 0), kind=1),
        "remark length -1 does not fit",
        False,
    ),
    (
        # The remark eats the bytes where the extFields length should be.
        "binary-remark-eats-ext-length",
        frame(fixed() + struct.pack(">i", 4) + b"abcd", kind=1),
        "ends inside the length of extFields",
        False,
    ),
    (
        "binary-ext-too-long",
        frame(fixed() + struct.pack(">ii", 0, 9) + b"\x00\x01k", kind=1),
        "extFields length 9 does not fit",
        False,
    ),
    (
        "binary-key-past-map",
        frame(fixed() + struct.pack(">ii", 0, 4) + struct.pack(">h", 9) + b"kk", kind=1),
        "extFields key length 9 does not fit",
        False,
    ),
    (
        "binary-value-length-cut",
        frame(
            fixed() + struct.pack(">ii", 0, 5) + struct.pack(">h", 1) + b"k" + b"\x00\x00", kind=1
        ),
        "ends inside the length of extFields value",
        False,
    ),
    (
        "binary-trailing",
        frame(fixed() + struct.pack(">ii", 0, 0) + b"zz", kind=1),
        "2 bytes after its extFields",
        False,
    ),
    (
        "binary-key-not-utf8",
        frame(
            fixed()
            + struct.pack(">ii", 0, 8)
            + struct.pack(">h", 1)
            + b"\xff"
            + struct.pack(">i", 1)
            + b"v",
            kind=1,
        ),
        "extFields key is not UTF-8",
        False,
    ),
]


@pytest.mark.parametrize(
    ("data", "fragment", "fatal"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed(data, fragment, fatal):
    decoder = FrameDecoder()
    out = decoder.receive(data)
    assert len(out) == 1, out
    [err] = out
    assert isinstance(err, FrameError)
    assert fragment in str(err)
    assert err.fatal is fatal
    if not fatal:
        assert decoder.buffered == 0


def test_binary_errors_carry_the_opaque_for_an_answer():
    data = frame(fixed(opaque=77) + struct.pack(">ii", 0, 0) + b"z", kind=1)
    [err] = FrameDecoder().receive(data)
    assert isinstance(err, FrameError) and err.opaque == 77 and err.code == 10


def test_binary_zero_lengths_are_java_nulls():
    ext = struct.pack(">h", 1) + b"k" + struct.pack(">i", 0)  # k -> null
    ext += struct.pack(">h", 0) + struct.pack(">i", 1) + b"v"  # null -> v
    cmd = decode_command(frame(fixed() + struct.pack(">ii", 0, len(ext)) + ext, kind=1)[4:])
    assert cmd.ext_fields == {} and cmd.remark is None


def test_unknown_binary_language_is_other():
    data = frame(fixed(language=200) + struct.pack(">ii", 0, 0), kind=1)
    assert decode_command(data[4:]).language == LanguageCode.OTHER


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-(2**15), 2**15 - 1),
    remark=st.none() | texts.filter(bool),
    ext_fields=st.dictionaries(texts.filter(bool), texts.filter(bool), max_size=5),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(SerializeType),
)


@settings(deadline=None)
@given(commands)
def test_round_trip(cmd):
    data = cmd.encode()
    assert FrameDecoder().receive(data) == [cmd]


@settings(deadline=None)
@given(
    commands.filter(lambda c: c.serialize_type == SerializeType.JSON), st.integers(2**15, 2**31 - 1)
)
def test_round_trip_json_large_codes(cmd, code):
    cmd = RemotingCommand(**{**_fields(cmd), "code": code})
    assert decode_command(cmd.encode()[4:]) == cmd


def _fields(cmd: RemotingCommand) -> dict:
    return {name: getattr(cmd, name) for name in RemotingCommand.__dataclass_fields__}


@settings(deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_else(data):
    out = FrameDecoder(max_frame_length=1024).receive(data)
    for item in out:
        assert isinstance(item, (RemotingCommand, FrameError))


@settings(deadline=None, max_examples=1000)
@given(commands, st.data())
def test_mutated_frames_never_raise_anything_else(cmd, data):
    raw = bytearray(cmd.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    decoder = FrameDecoder(max_frame_length=4096)
    for item in decoder.receive(bytes(raw[:cut])) + decoder.receive(bytes(raw[cut:])):
        assert isinstance(item, (RemotingCommand, FrameError))
