"""The remoting command and its two header encodings.

Theory of operation. Every RocketMQ remoting message, request or response, is one frame
(all integers big-endian)::

    +-----------+------------------------------+----------------+------------+
    | length    | header mark                  | header         | body       |
    | int32     | int32: type << 24 | hlen     | hlen bytes     | the rest   |
    +-----------+------------------------------+----------------+------------+
    length = 4 + hlen + len(body)   (it does not count itself)

The header mark's top byte is the :class:`SerializeType` of the header, its low 24 bits
the header length. A **JSON** header is the command object as fastjson writes it: the
getters in alphabetical order, nulls left out, ``language`` by name, ``extFields`` a map
of strings::

    {"code":10,"extFields":{"a":"g1"},"flag":0,"language":"JAVA","opaque":7,
     "serializeTypeCurrentRPC":"JSON","version":479}

A **ROCKETMQ** (binary) header is::

    i16 code | i8 language | i16 version | i32 opaque | i32 flag
    | i32 remarkLen, remark | i32 extLen, { i16 kLen, k | i32 vLen, v }*

where a string length of 0 means null. ``code`` and ``version`` are 16 bits there, so the
pop family (200050 and up) can only travel with a JSON header; encoding one in binary is
a :class:`CommandError`, not a silent truncation as Java's ``writeShort`` would do.

``flag`` bit 0 marks a response, bit 1 a oneway request; ``opaque`` is the request id a
response echoes. Decoding is tolerant where real clients differ (ali-ons writes numbers
and booleans unquoted in ``extFields``; they become the strings Java would see) and strict
where the bytes are simply wrong (lengths that do not add up, bad UTF-8, trailing bytes).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from .codes import I16_MAX, I16_MIN, LanguageCode, SerializeType
from .errors import CommandError, FrameError

#: Netty's ``LengthFieldBasedFrameDecoder(16777216, ...)``: the largest frame, counting
#: its own 4-byte length field, that RocketMQ accepts.
MAX_FRAME_LENGTH = 16 * 1024 * 1024
#: The header length is the low 24 bits of the header mark.
MAX_HEADER_LENGTH = (1 << 24) - 1
#: ``MQVersion.Version.V5_3_3.ordinal()``: the version our responses announce.
SERVER_VERSION = 479

RESPONSE_FLAG = 0x1
ONEWAY_FLAG = 0x2

I32_MIN = -(1 << 31)
I32_MAX = (1 << 31) - 1

_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_MARK = struct.Struct(">iI")  # length, header mark
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are always strings.

    Treated as immutable (build a new one, or ``dataclasses.replace``); not frozen
    because a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, several times slower, and one is built per frame.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        language: LanguageCode = LanguageCode.JAVA,
        version: int = SERVER_VERSION,
        remark: str | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            language=language,
            version=version,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=serialize_type,
        )

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        version: int = SERVER_VERSION,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A response to ``request``: its opaque, the response flag.

        The header defaults to JSON whatever the request used, as a RocketMQ server
        answers in its own configured type and ali-ons can only read JSON.
        """
        return cls(
            code=int(code),
            opaque=request.opaque,
            flag=RESPONSE_FLAG,
            language=LanguageCode.JAVA,
            version=version,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=serialize_type,
        )

    def encode(self, serialize_type: SerializeType | None = None) -> bytes:
        """The whole frame, length field included."""
        kind = self.serialize_type if serialize_type is None else SerializeType(serialize_type)
        header = encode_header(self, kind)
        length = 4 + len(header) + len(self.body)
        if length + 4 > MAX_FRAME_LENGTH:
            raise CommandError(
                f"frame of {length + 4} bytes exceeds the maximum of {MAX_FRAME_LENGTH}"
            )
        return b"".join((_MARK.pack(length, (kind << 24) | len(header)), header, self.body))


def encode_header(cmd: RemotingCommand, kind: SerializeType) -> bytes:
    """The header bytes alone, in ``kind``'s encoding."""
    for name in ("opaque", "flag", "code", "version"):
        value = getattr(cmd, name)
        if not I32_MIN <= value <= I32_MAX:
            raise CommandError(f"{name} {value} does not fit a 32-bit signed integer")
    if kind == SerializeType.JSON:
        header = _encode_json(cmd)
    else:
        header = _encode_binary(cmd)
    if len(header) > MAX_HEADER_LENGTH:
        raise CommandError(f"header of {len(header)} bytes exceeds {MAX_HEADER_LENGTH}")
    return header


def _encode_json(cmd: RemotingCommand) -> bytes:
    # fastjson's order (alphabetical getters), nulls and an empty map left out.
    obj: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = _language_name(cmd.language)
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return LanguageCode.OTHER.name


def _encode_binary(cmd: RemotingCommand) -> bytes:
    for name in ("code", "version"):
        value = getattr(cmd, name)
        if not I16_MIN <= value <= I16_MAX:
            raise CommandError(
                f"{name} {value} does not fit the ROCKETMQ binary header's 16-bit "
                f"{name} field ({I16_MIN}..{I16_MAX}); send this command with a JSON header"
            )
    if not 0 <= cmd.language <= 0xFF:
        raise CommandError(f"language {cmd.language} does not fit a byte")
    parts = [_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts += [_I32.pack(len(remark)), remark]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k, v = key.encode(), value.encode()
        if len(k) > I16_MAX:
            raise CommandError(f"extFields key of {len(k)} bytes exceeds {I16_MAX}")
        ext += _I16.pack(len(k))
        ext += k
        ext += _I32.pack(len(v))
        ext += v
    parts += [_I32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def decode_command(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode a frame without its length field: header mark, header, body.

    Raises a non-fatal :class:`FrameError` (with ``opaque`` when it could be read).
    """
    if type(frame) is not bytes:
        frame = bytes(frame)
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no 4-byte header mark")
    mark = int.from_bytes(frame[:4], "big")
    kind, header_len = mark >> 24, mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(
            f"header length {header_len} is longer than the {len(frame) - 4} bytes "
            "the frame has after its header mark"
        )
    header, body = frame[4 : 4 + header_len], frame[4 + header_len :]
    if kind == _JSON:
        fast = _decode_json_fast(header, body)
        if fast is not None:
            return fast
        fields = _decode_json(header)
    elif kind == _ROCKETMQ:
        fields = _decode_binary(memoryview(header))
    else:
        raise FrameError(f"unknown serialize type {kind} (JSON is 0, ROCKETMQ is 1)")
    return RemotingCommand(body=body, serialize_type=SerializeType(kind), **fields)


_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_LANGUAGE_NAMES: dict[str, LanguageCode] = dict(LanguageCode.__members__)


def _decode_json_fast(raw: bytes, body: bytes) -> RemotingCommand | None:
    """The command of a JSON header as Java clients write it (int fields, a known
    language by name, no remark, string extFields), or None for anything else: the
    general :func:`_decode_json` then decodes it or says what is wrong. Both give the
    same command for a header this one accepts (a Hypothesis test checks it).

    A send's header is decoded once per message: this path is orjson plus a few type
    checks, about a third of the general one's cost."""
    try:
        # orjson refuses some headers json takes (a lone surrogate escape, NaN) and
        # reads an integer past 64 bits as a float: all of them fail here or in the
        # type checks below and go the general way, which decides what is wrong.
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    get = obj.get
    code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), get("version", 0)
    language = get("language")
    ext = get("extFields")
    if (
        type(code) is not int or type(opaque) is not int or type(flag) is not int
        or type(version) is not int or type(language) is not str
        or get("remark") is not None
    ):
        return None
    if not (I32_MIN <= min(code, opaque, flag, version)
            and max(code, opaque, flag, version) <= I32_MAX):
        return None
    lang = _LANGUAGE_NAMES.get(language)
    if lang is None:
        return None
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        return None
    else:
        try:
            "".join(ext.values())  # every value a string (C-level; else TypeError)
        except TypeError:
            return None
    return RemotingCommand(code, opaque, flag, lang, version, None, ext, body, _JSON)


def _decode_json(header: bytes) -> dict[str, Any]:
    raw = header
    try:
        obj = json.loads(raw.decode())
    except UnicodeDecodeError as exc:
        raise FrameError(f"JSON header is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"bad JSON header: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"JSON header is a {type(obj).__name__}, not an object")
    raw_opaque = obj.get("opaque")
    opaque = raw_opaque if _is_i32(raw_opaque) else None
    try:
        if "code" not in obj:
            raise FrameError("JSON header has no code")
        fields = {
            "code": _json_int(obj, "code", 0),
            "opaque": _json_int(obj, "opaque", 0),
            "flag": _json_int(obj, "flag", 0),
            "version": _json_int(obj, "version", 0),
            "language": _json_language(obj.get("language")),
            "remark": _json_remark(obj.get("remark")),
            "ext_fields": _json_ext_fields(obj.get("extFields")),
        }
        # Strict UTF-8 decoding admits no surrogate; only a \uD8xx-style escape can
        # make one, so the strings are checked only when the header holds such an escape.
        if b"\\ud" in raw or b"\\uD" in raw:
            _check_text(fields)
        return fields
    except FrameError as exc:
        raise FrameError(str(exc), opaque=opaque) from None


def _is_i32(value: object) -> bool:
    return type(value) is int and I32_MIN <= value <= I32_MAX


def _json_int(obj: dict[str, Any], name: str, default: int) -> int:
    value = obj.get(name, default)
    if value is None:
        return default
    if isinstance(value, str):
        # fastjson reads a quoted number into an int field as well.
        if not _INT_TEXT.fullmatch(value):
            raise FrameError(f"JSON header field {name}: not an int")
        value = int(value)
    if not _is_i32(value):
        raise FrameError(f"JSON header field {name}: not a 32-bit int")
    return int(value)


def _json_language(value: object) -> LanguageCode:
    # fastjson reads an enum by name or by ordinal; an unknown language is not worth
    # refusing a client over.
    if isinstance(value, str) and value in LanguageCode.__members__:
        return LanguageCode[value]
    if type(value) is int and value in LanguageCode._value2member_map_:
        return LanguageCode(value)
    if value is None:
        return LanguageCode.JAVA
    return LanguageCode.OTHER


def _json_remark(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return json.dumps(value)
    raise FrameError("JSON header field remark: not a string")


def _check_text(fields: dict[str, Any]) -> None:
    # A lone surrogate could not be encoded again (a response, a signature check).
    texts = [fields["remark"] or "", *fields["ext_fields"], *fields["ext_fields"].values()]
    for text in texts:
        try:
            text.encode()
        except UnicodeEncodeError:
            raise FrameError("JSON header holds a lone surrogate (\\ud800-\\udfff)") from None


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrameError("JSON header field extFields: not an object")
    fields: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            continue  # Java's map would hold null, which every reader treats as absent
        if isinstance(item, str):
            fields[key] = item
        elif isinstance(item, bool):
            fields[key] = "true" if item else "false"
        elif isinstance(item, (int, float)):
            # ali-ons puts numbers in extFields unquoted; Java would see their text.
            fields[key] = json.dumps(item)
        else:
            raise FrameError(f"JSON header extFields[{key!r}]: not a string or number")
    return fields


def _decode_binary(header: memoryview) -> dict[str, Any]:
    if len(header) < _FIXED.size + 8:
        raise FrameError(
            f"binary header of {len(header)} bytes is shorter than its "
            f"{_FIXED.size + 8} fixed bytes"
        )
    data = bytes(header)
    code, language, version, opaque, flag = _FIXED.unpack_from(data, 0)
    try:
        remark_bytes, pos = _read_block(data, _FIXED.size, len(data), _I32, "remark")
        remark = _utf8(remark_bytes, "remark") if remark_bytes else None
        if pos + 4 > len(data):
            raise FrameError("binary header ends inside the length of extFields")
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        if not 0 <= ext_len <= len(data) - pos:
            raise FrameError(
                f"binary header extFields length {ext_len} does not fit the "
                f"{len(data) - pos} bytes left"
            )
        if pos + ext_len != len(data):
            raise FrameError(
                f"binary header has {len(data) - pos - ext_len} bytes after its extFields"
            )
        ext = _decode_ext(data, pos, len(data))
    except FrameError as exc:
        raise FrameError(str(exc), opaque=opaque, code=code, flag=flag) from None
    return {
        "code": code,
        "opaque": opaque,
        "flag": flag,
        "version": version,
        "language": _LANGUAGES.get(language, LanguageCode.OTHER),
        "remark": remark,
        "ext_fields": ext,
    }


_LANGUAGES = {int(language): language for language in LanguageCode}


def _decode_ext(data: bytes, pos: int, end: int) -> dict[str, str]:
    # The hot part of a binary header: one pass over {i16 kLen, k, i32 vLen, v}*.
    ext: dict[str, str] = {}
    unpack_key, unpack_value = _I16.unpack_from, _I32.unpack_from
    while pos < end:
        if pos + 2 > end:
            raise FrameError("binary header ends inside the length of extFields key")
        (klen,) = unpack_key(data, pos)
        pos += 2
        if klen < 0 or klen > end - pos:
            raise FrameError(
                f"binary header extFields key length {klen} does not fit the {end - pos} bytes left"
            )
        key = data[pos : pos + klen]
        pos += klen
        if pos + 4 > end:
            raise FrameError("binary header ends inside the length of extFields value")
        (vlen,) = unpack_value(data, pos)
        pos += 4
        if vlen < 0 or vlen > end - pos:
            raise FrameError(
                f"binary header extFields value length {vlen} does not fit the "
                f"{end - pos} bytes left"
            )
        value = data[pos : pos + vlen]
        pos += vlen
        # A zero length is Java's null: a null key or value is as good as absent.
        if klen and vlen:
            ext[_utf8(key, "extFields key")] = _utf8(value, "extFields value")
    return ext


def _read_block(
    data: bytes, pos: int, end: int, size: struct.Struct, what: str
) -> tuple[bytes, int]:
    if pos + size.size > end:
        raise FrameError(f"binary header ends inside the length of {what}")
    (n,) = size.unpack_from(data, pos)
    pos += size.size
    if n < 0 or n > end - pos:
        raise FrameError(f"binary header {what} length {n} does not fit the {end - pos} bytes left")
    return data[pos : pos + n], pos + n


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header {what} is not UTF-8: {exc.reason}") from None
