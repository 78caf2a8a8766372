"""Frames at the byte level, checked against the layout in the reference, not the encoder.

Each fixture is built field by field here from RocketMQ's documented layout
(``RemotingCommand.encode``, ``RocketMQSerializable.rocketMQProtocolEncode``).
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.remoting import (
    CommandError,
    FrameDecoder,
    FrameError,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_command,
)


def frame(header: bytes, body: bytes, kind: int) -> bytes:
    # int32 length = 4 + headerLen + bodyLen; int32 mark = type << 24 | headerLen
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + (
        header + body
    )


JSON_HEADER = (
    b'{"code":10,"extFields":{"a":"g1","b":"t"},"flag":0,"language":"JAVA",'
    b'"opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}'
)
JSON_FRAME = frame(JSON_HEADER, b"hello", 0)


def binary_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: bytes, ext: list
) -> bytes:
    out = struct.pack(">hBhii", code, language, version, opaque, flag)
    out += struct.pack(">i", len(remark)) + remark
    ext_bytes = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext
    )
    return out + struct.pack(">i", len(ext_bytes)) + ext_bytes


BINARY_HEADER = binary_header(310, 13, 401, 9, 2, b"", [(b"a", b"g1"), (b"b", b"t")])
BINARY_FRAME = frame(BINARY_HEADER, b"xy", 1)


def test_json_request_encodes_to_the_documented_bytes():
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE, {"a": "g1", "b": "t"}, b"hello", opaque=7
    )
    assert cmd.encode() == JSON_FRAME


def test_json_frame_decodes():
    cmd = decode_command(JSON_FRAME[4:])
    assert cmd == RemotingCommand(
        code=10,
        opaque=7,
        flag=0,
        language=LanguageCode.JAVA,
        version=479,
        ext_fields={"a": "g1", "b": "t"},
        body=b"hello",
    )
    assert not cmd.is_response and not cmd.is_oneway


def test_binary_request_encodes_to_the_documented_bytes():
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "g1", "b": "t"},
        b"xy",
        opaque=9,
        oneway=True,
        language=LanguageCode.NODE_JS,
        version=401,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert cmd.encode() == BINARY_FRAME


def test_binary_frame_decodes():
    cmd = decode_command(BINARY_FRAME[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (310, LanguageCode.NODE_JS, 401, 9)
    assert cmd.is_oneway and not cmd.is_response
    assert cmd.remark is None
    assert cmd.ext_fields == {"a": "g1", "b": "t"}
    assert cmd.body == b"xy"
    assert cmd.serialize_type == SerializeType.ROCKETMQ


def test_response_echoes_opaque_sets_the_flag_and_writes_remark():
    request = decode_command(BINARY_FRAME[4:])
    response = RemotingCommand.response_to(
        request, ResponseCode.TOPIC_NOT_EXIST, remark="no topic", ext_fields={"x": "1"}
    )
    assert response.is_response and response.opaque == 9
    header = (
        b'{"code":17,"extFields":{"x":"1"},"flag":1,"language":"JAVA","opaque":9,'
        b'"remark":"no topic","serializeTypeCurrentRPC":"JSON","version":479}'
    )
    # The server answers JSON whatever the request used (ali-ons reads only JSON).
    assert response.encode() == frame(header, b"", 0)


def test_binary_remark_and_empty_map():
    cmd = RemotingCommand(code=1, opaque=-5, flag=1, remark="ошибка", version=0)
    header = binary_header(1, 0, 0, -5, 1, "ошибка".encode(), [])
    assert cmd.encode(SerializeType.ROCKETMQ) == frame(header, b"", 1)
    assert decode_command(frame(header, b"", 1)[4:]) == RemotingCommand(
        code=1, opaque=-5, flag=1, remark="ошибка", serialize_type=SerializeType.ROCKETMQ
    )


@pytest.mark.parametrize("code", [200050, 200151, 32768, -32769])
def test_codes_over_i16_only_travel_in_json(code):
    cmd = RemotingCommand.request(code, {"k": "v"}, opaque=1)
    with pytest.raises(CommandError, match="16-bit code field.*JSON header"):
        cmd.encode(SerializeType.ROCKETMQ)
    assert decode_command(cmd.encode(SerializeType.JSON)[4:]).code == code


def test_ali_ons_style_header_numbers_and_booleans_become_strings():
    # ali-ons copies its header object's values into extFields as they are.
    header = json.dumps(
        {
            "code": 11,
            "language": "JAVA",
            "opaque": 3,
            "flag": 0,
            "version": 121,
            "extFields": {"queueId": 2, "queueOffset": 123456789012, "ok": True, "n": None},
        }
    ).encode()
    cmd = decode_command(frame(header, b"", 0)[4:])
    assert cmd.ext_fields == {"queueId": "2", "queueOffset": "123456789012", "ok": "true"}
    assert cmd.remark is None and cmd.version == 121


def test_unknown_language_is_other_missing_is_java():
    cmd = decode_command(frame(b'{"code":1,"language":"COBOL"}', b"", 0)[4:])
    assert cmd.language == LanguageCode.OTHER
    cmd = decode_command(frame(b'{"code":1}', b"", 0)[4:])
    assert cmd.language == LanguageCode.JAVA and cmd.opaque == 0


def test_decoder_whole_byte_by_byte_and_trailing_bytes_left_alone():
    stream = JSON_FRAME + BINARY_FRAME
    expected = [decode_command(JSON_FRAME[4:]), decode_command(BINARY_FRAME[4:])]
    assert FrameDecoder().receive(stream) == expected
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += decoder.receive(stream[i : i + 1])
    assert got == expected
    decoder = FrameDecoder()
    assert decoder.receive(JSON_FRAME + BINARY_FRAME[:7]) == expected[:1]
    assert decoder.buffered == 7  # never reads past a frame


def test_every_strict_prefix_asks_for_more():
    for n in range(len(BINARY_FRAME)):
        decoder = FrameDecoder()
        decoder.feed(BINARY_FRAME[:n])
        assert decoder.next_command() is None
        assert decoder.buffered == n


def test_frame_limit_counts_the_length_field():
    decoder = FrameDecoder(max_frame_length=len(JSON_FRAME))
    assert decoder.receive(JSON_FRAME) == [decode_command(JSON_FRAME[4:])]
    decoder = FrameDecoder(max_frame_length=len(JSON_FRAME) - 1)
    [err] = decoder.receive(JSON_FRAME)
    assert isinstance(err, FrameError) and err.fatal
    assert str(err) == f"frame of {len(JSON_FRAME)} bytes exceeds the maximum of " + (
        f"{len(JSON_FRAME) - 1} bytes"
    )


def test_default_limit_is_16_mib_decided_from_the_length_alone():
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", 16 * 1024 * 1024 - 4))  # exactly 16 MiB in all
    assert decoder.next_command() is None
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", 16 * 1024 * 1024 - 3))
    with pytest.raises(FrameError, match="exceeds the maximum of 16777216 bytes") as info:
        decoder.next_command()
    assert info.value.fatal
    with pytest.raises(FrameError):  # stays failed
        decoder.next_command()


def test_bad_header_is_per_frame_and_the_next_frame_still_decodes():
    bad = frame(b'{"code":10,"opaque":42,"extFields":[1]}', b"", 0)
    decoder = FrameDecoder()
    out = decoder.receive(bad + JSON_FRAME)
    assert isinstance(out[0], FrameError) and not out[0].fatal
    assert out[0].opaque == 42
    assert str(out[0]) == "JSON header field extFields: not an object"
    assert out[1] == decode_command(JSON_FRAME[4:])


# -- the fast path of JSON headers --------------------------------------------------

# text with lone surrogates too: escaped (\\udXXX) or, unescaped, as invalid UTF-8
_any_text = st.text(st.characters(exclude_categories=()), max_size=6)
_json_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)
_valid_fields = {
    "code": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "opaque": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "flag": st.integers(min_value=0, max_value=3),
    "version": st.integers(min_value=0, max_value=500),
    "language": st.sampled_from(["JAVA", "CPP", "PYTHON", "RUST"]),
    "extFields": st.dictionaries(st.text(max_size=4), _any_text, max_size=4),
    "serializeTypeCurrentRPC": st.just("JSON"),
}
_odd_fields = {
    **dict.fromkeys(("code", "opaque", "flag", "version"), st.one_of(
        st.integers(min_value=-(2**65), max_value=2**65), _json_values)),
    "language": st.one_of(st.just("COBOL"), _json_values),
    "remark": st.one_of(st.none(), st.text(max_size=5), st.integers()),
    "extFields": st.one_of(
        st.dictionaries(st.text(max_size=4), st.one_of(_any_text, _json_values), max_size=4),
        _json_values,
    ),
}


@st.composite
def _header_objects(draw):
    # mostly what a Java client writes, then a few fields made odd, dropped or added
    obj = draw(st.fixed_dictionaries(_valid_fields))
    for name in draw(st.lists(st.sampled_from(sorted(_odd_fields)), max_size=3)):
        if draw(st.booleans()):
            obj[name] = draw(_odd_fields[name])
        else:
            obj.pop(name, None)
    return obj


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_header_objects(), st.booleans())
def test_json_fast_path_decodes_exactly_as_the_general_path(obj, ensure_ascii):
    # decode_command takes a fast path for the headers Java clients write; whatever it
    # accepts must decode to the same command (or fail the same way) as the general,
    # field-by-field checked path.
    from protocol.remoting import command as command_module

    header = json.dumps(obj, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    data = frame(header, b"body", 0)[4:]
    try:
        expected = RemotingCommand(
            body=b"body", serialize_type=SerializeType.JSON,
            **command_module._decode_json(header))
    except FrameError as exc:
        with pytest.raises(FrameError) as got:
            decode_command(data)
        assert (str(got.value), got.value.opaque) == (str(exc), exc.opaque)
        return
    assert decode_command(data) == expected


def test_json_fast_path_is_taken_for_a_java_send_header():
    from protocol.remoting import command as command_module

    header = (
        b'{"code":310,"extFields":{"a":"pg","b":"T","e":"3","i":"UNIQ_KEY\\u0001X\\u0002"},'
        b'"flag":0,"language":"JAVA","opaque":12,"serializeTypeCurrentRPC":"JSON",'
        b'"version":479}'
    )
    fast = command_module._decode_json_fast(header, b"b")
    assert fast == RemotingCommand(
        310, 12, 0, LanguageCode.JAVA, 479, None,
        {"a": "pg", "b": "T", "e": "3", "i": "UNIQ_KEY\x01X\x02"}, b"b")
    # ali-ons's unquoted numbers, a remark, a surrogate escape: the general path decides
    assert command_module._decode_json_fast(b'{"code":1,"extFields":{"e":3}}', b"") is None
    assert command_module._decode_json_fast(
        b'{"code":1,"language":"JAVA","remark":"r"}', b"") is None
    assert command_module._decode_json_fast(
        b'{"code":1,"language":"JAVA","extFields":{"a":"\\ud800"}}', b"") is None


def test_decoder_keeps_frames_apart_across_many_feeds():
    # frames are cut by position inside the buffer; feeding in odd-sized pieces while
    # taking frames in between must give every frame once, in order
    frames = [
        RemotingCommand.request(RequestCode.SEND_MESSAGE, {"n": str(i)}, bytes(i % 7),
                                opaque=i).encode()
        for i in range(50)
    ]
    data = b"".join(frames)
    decoder = FrameDecoder()
    got = []
    for start in range(0, len(data), 37):
        decoder.feed(data[start : start + 37])
        while (cmd := decoder.next_command()) is not None:
            got.append(cmd)
    assert [c.opaque for c in got] == list(range(50))
    assert [c.ext_fields["n"] for c in got] == [str(i) for i in range(50)]
    assert decoder.buffered == 0
