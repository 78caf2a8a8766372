"""The compiled remoting codec (setup.py's COMPILED: ``command.py``, ``frames.py``)
against its own Python source, on the same bytes: the same commands out, the same
errors (class, text, opaque, fatal) and the same encodings.

Skipped where the imported modules are the sources themselves (``LMQ_NO_EXTENSIONS=1``
or no build): there is nothing to compare.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import command as compiled_command
from protocol.remoting import frames as compiled_frames
from protocol.remoting.errors import CommandError, FrameError
from tests.protocol.compiled_sources import is_compiled, source_of

pytestmark = pytest.mark.skipif(
    not is_compiled(compiled_command),
    reason="protocol.remoting.command is its Python source here (not compiled)",
)
if is_compiled(compiled_command):
    source_command = source_of(compiled_command)
    source_frames = source_of(compiled_frames)


def _fields(cmd: object) -> tuple:
    return tuple(
        getattr(cmd, name)
        for name in (
            "code",
            "opaque",
            "flag",
            "language",
            "version",
            "remark",
            "ext_fields",
            "body",
            "serialize_type",
        )
    )


def _outcome(fn, *args) -> tuple:
    try:
        result = fn(*args)
    except (FrameError, CommandError) as exc:
        return (
            "error",
            type(exc).__name__,
            str(exc),
            getattr(exc, "opaque", None),
            getattr(exc, "fatal", None),
        )
    if isinstance(result, bytes):
        return ("bytes", result)
    return ("command", _fields(result))


def _frame(header: bytes, body: bytes, kind: int) -> bytes:
    return struct.pack(">i", (kind << 24) | len(header)) + header + body


_text = st.text(max_size=6)
_json_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), _text, st.floats(allow_nan=False)
)
_header = st.fixed_dictionaries(
    {
        "code": st.integers(0, 400),
        "opaque": st.integers(-(2**31), 2**31 - 1),
        "flag": st.integers(0, 3),
        "language": st.sampled_from(["JAVA", "PYTHON", "COBOL"]),
        "version": st.integers(0, 500),
        "extFields": st.dictionaries(_text, st.one_of(_text, _json_value), max_size=5),
    },
    optional={"remark": st.one_of(_text, st.integers()), "odd": _json_value},
)


@settings(max_examples=300)
@given(_header, st.binary(max_size=8))
def test_json_headers_decode_the_same(obj, body):
    data = _frame(json.dumps(obj).encode(), body, 0)
    assert _outcome(compiled_command.decode_command, data) == _outcome(
        source_command.decode_command, data
    )


@settings(max_examples=300)
@given(st.binary(max_size=64), st.sampled_from([0, 1, 2]))
def test_arbitrary_bytes_decode_or_fail_the_same(junk, kind):
    for data in (junk, _frame(junk, b"", kind), _frame(junk[:8], junk[8:], kind)):
        assert _outcome(compiled_command.decode_command, data) == _outcome(
            source_command.decode_command, data
        )


@settings(max_examples=200)
@given(
    st.integers(-(2**33), 2**33),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 3),
    st.one_of(st.none(), _text),
    st.dictionaries(_text, _text, max_size=4),
    st.binary(max_size=8),
    st.sampled_from([0, 1]),
)
def test_commands_encode_to_the_same_bytes(code, opaque, flag, remark, ext, body, kind):
    args = dict(code=code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext, body=body)
    compiled = compiled_command.RemotingCommand(**args)
    source = source_command.RemotingCommand(**args)
    assert _outcome(compiled.encode, kind) == _outcome(source.encode, kind)


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(8, 64))
def test_frame_decoders_cut_the_same_frames(chunks, max_frame):
    good = compiled_command.RemotingCommand(code=10, opaque=3, ext_fields={"a": "b"}).encode()
    stream = b"".join(c for chunk in chunks for c in (chunk, good))
    results = []
    for module in (compiled_frames, source_frames):
        decoder = module.FrameDecoder(max_frame)
        decoder.feed(stream)
        out = []
        for _ in range(len(chunks) + 8):
            try:
                cmd = decoder.next_command()
            except FrameError as exc:
                out.append(("error", str(exc), exc.opaque, exc.fatal))
                if exc.fatal:
                    break
                continue
            if cmd is None:
                break
            out.append(("command", _fields(cmd)))
        results.append((out, decoder.buffered))
    assert results[0] == results[1]
