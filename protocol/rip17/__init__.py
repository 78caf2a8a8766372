"""RIP-17's HTTP producer protocol, as its reference proxy (qqeasonchen's
``rocketmq-proxy``, whose codes live on in Apache EventMesh's HTTP protocol) takes it,
sans-IO.

A request is a ``POST`` (or a ``GET`` with the fields in the query) carrying its code
in the ``Code`` header (``code`` in the query of a GET) and the producer's identity in
headers: ``GroupName`` (the producer group) and ``Pid`` (numeric) are required;
``Version``, ``Language``, ``Env``, ``Region``, ``Idc``, ``Dcn``, ``Sys``, ``Ip``,
``Username``, ``Passwd`` are optional. The body is a form
(``application/x-www-form-urlencoded``):

- ``MSG_SEND`` (101): ``topic``, ``content``, ``bizSeqNo``, ``uniqueId`` (required),
  ``tag``, ``ttl`` (ms, required with ``messageType`` 2 = SYNC), ``messageType``
  (1 ASYNC, the default; 2 SYNC), ``extfields`` (a JSON object of strings);
- ``MSG_BATCH_SEND`` (102): ``batchId``, ``size``, ``contents``: a JSON array of
  ``{bizSeqNo, topic, msg, tag, ttl}``.

The answer is always HTTP 200 with ``{"retCode": n, "retMsg": "..."}``
(:class:`RetCode`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "MAX_BATCH",
    "BatchItem",
    "ProtocolError",
    "RequestCode",
    "RetCode",
    "SendRequest",
    "parse_batch",
    "parse_headers",
    "parse_send",
    "reply",
]

#: Messages in one MSG_BATCH_SEND at most.
MAX_BATCH = 1024


class RequestCode(enum.IntEnum):
    MSG_SEND = 101
    MSG_BATCH_SEND = 102
    #: Declared by the proxy, not implemented there either.
    REGISTER = 201
    UNREGISTER = 202
    HEARTBEAT = 203
    SUBSCRIBE = 206
    UNSUBSCRIBE = 207
    REPLY_MESSAGE = 301


class RetCode(enum.IntEnum):
    SUCCESS = 0
    OVERLOAD = 1
    REQUEST_CODE_INVALID = 2
    HEADER_ERROR = 6
    BODY_ERROR = 7
    STOPPING = 8
    GROUP_PRODUCER_STOPPED = 13
    SEND_ERROR = 14
    RUNTIME_ERROR = 16


class ProtocolError(ValueError):
    """A request refused with ``code``."""

    def __init__(self, code: RetCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Headers:
    code: int
    group: str
    pid: str
    username: str = ""
    password: str = ""


@dataclass(frozen=True, slots=True)
class SendRequest:
    topic: str
    content: str
    biz_seq_no: str
    unique_id: str
    tag: str = ""
    ttl: int | None = None
    extfields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BatchItem:
    topic: str
    content: str
    biz_seq_no: str
    tag: str = ""
    ttl: int | None = None


def reply(code: RetCode, message: str = "") -> bytes:
    return json.dumps({"retCode": int(code), "retMsg": message or code.name.lower()}).encode()


def parse_headers(get: Mapping[str, str], query_code: str | None = None) -> Headers:
    """``get``: the request's headers by lower-case name (first value)."""
    raw = get.get("code") or query_code or ""
    try:
        code = int(raw)
    except ValueError:
        raise ProtocolError(RetCode.REQUEST_CODE_INVALID,
                            f"Code {raw!r} is not a request code") from None
    group = get.get("groupname", "").strip()
    pid = get.get("pid", "").strip()
    if not group:
        raise ProtocolError(RetCode.HEADER_ERROR, "the GroupName header is missing")
    if not pid.isdigit():
        raise ProtocolError(RetCode.HEADER_ERROR, f"the Pid header {pid!r} is not numeric")
    return Headers(code, group, pid, get.get("username", ""), get.get("passwd", ""))


def _ttl(raw: object) -> int | None:
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw))
    except ValueError:
        raise ProtocolError(RetCode.BODY_ERROR, f"ttl {raw!r} is not a number") from None
    if value < 0:
        raise ProtocolError(RetCode.BODY_ERROR, f"ttl {value} is negative")
    return value


def parse_send(form: Mapping[str, str]) -> SendRequest:
    missing = [k for k in ("topic", "content", "bizSeqNo", "uniqueId") if not form.get(k)]
    if missing:
        raise ProtocolError(RetCode.BODY_ERROR, f"missing {', '.join(missing)}")
    ttl = _ttl(form.get("ttl"))
    kind = form.get("messageType", "1") or "1"
    if kind not in ("1", "2"):
        raise ProtocolError(RetCode.BODY_ERROR, f"messageType {kind!r}: 1 (async) or 2 (sync)")
    if kind == "2" and ttl is None:
        raise ProtocolError(RetCode.BODY_ERROR, "a sync message (messageType 2) needs a ttl")
    ext: dict[str, str] = {}
    raw_ext = form.get("extfields", "")
    if raw_ext:
        try:
            parsed = json.loads(raw_ext)
        except json.JSONDecodeError as exc:
            raise ProtocolError(RetCode.BODY_ERROR, f"extfields is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ProtocolError(RetCode.BODY_ERROR, "extfields is not a JSON object")
        ext = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}
    return SendRequest(form["topic"], form["content"], form["bizSeqNo"], form["uniqueId"],
                       form.get("tag", ""), ttl, ext)


def parse_batch(form: Mapping[str, str]) -> list[BatchItem]:
    raw = form.get("contents", "")
    if not raw:
        raise ProtocolError(RetCode.BODY_ERROR, "missing contents")
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError(RetCode.BODY_ERROR, f"contents is not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise ProtocolError(RetCode.BODY_ERROR, "contents is not a non-empty JSON array")
    if len(items) > MAX_BATCH:
        raise ProtocolError(RetCode.BODY_ERROR, f"{len(items)} messages; at most {MAX_BATCH}")
    size = form.get("size", "")
    if size and size != str(len(items)):
        raise ProtocolError(RetCode.BODY_ERROR,
                            f"size {size} does not match the {len(items)} contents")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProtocolError(RetCode.BODY_ERROR, f"contents[{i}] is not an object")
        topic, msg = item.get("topic"), item.get("msg")
        if not isinstance(topic, str) or not topic or not isinstance(msg, str):
            raise ProtocolError(RetCode.BODY_ERROR, f"contents[{i}] needs topic and msg")
        tag = item.get("tag") or ""
        out.append(BatchItem(topic, msg, str(item.get("bizSeqNo") or ""), str(tag),
                             _ttl(item.get("ttl"))))
    return out
