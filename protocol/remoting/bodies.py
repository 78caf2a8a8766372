"""JSON bodies: heartbeat, lock batch, consumer id list, route data, batch ack.

Each is a frozen dataclass with ``parse(body: bytes)`` (raising :class:`BodyError`) and
``serialize() -> bytes``. Parsing is tolerant the way fastjson is: missing optional
fields take Java's defaults, unknown fields are ignored, numbers may arrive as strings.

Route data is the one body RocketMQ writes in fastjson's non-standard dialect: the
``brokerAddrs`` map has ``Long`` keys, which fastjson writes unquoted (``{0:"ip:port"}``).
:meth:`TopicRouteData.serialize` writes either dialect and :func:`loads_lenient` reads
both, quoting bare numeric object keys before handing the text to ``json``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import BodyError


def loads_lenient(data: bytes | str) -> Any:
    """``json.loads`` that also accepts fastjson's unquoted numeric object keys."""
    try:
        text = data.decode() if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise BodyError(f"JSON body is not UTF-8: {exc.reason}") from None
    try:
        return json.loads(_quote_numeric_keys(text))
    except (ValueError, RecursionError) as exc:
        raise BodyError(f"bad JSON body: {exc}") from None


_DIGITS = frozenset("0123456789")


def _quote_numeric_keys(text: str) -> str:
    # One pass, tracking strings and the container stack: a number right after '{' or
    # ',' inside an object is a key and gets quotes; numbers in arrays are left alone.
    if "{" not in text:
        return text
    out: list[str] = []
    stack: list[str] = []
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif expect_key and (c in _DIGITS or c == "-"):
            j = i + 1
            while j < n and text[j] in _DIGITS:
                j += 1
            if text[i:j] != "-":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
            expect_key = False
        elif not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def _load_object(data: bytes | str, what: str) -> dict[str, Any]:
    obj = loads_lenient(data)
    if not isinstance(obj, dict):
        raise BodyError(f"{what} body is not a JSON object")
    return obj


def _str(obj: dict[str, Any], key: str, default: str | None = None) -> Any:
    value = obj.get(key, default)
    if value is not None and not isinstance(value, str):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise BodyError(f"body field {key}: not a string")
    return value


def _int(obj: dict[str, Any], key: str, default: int = 0) -> int:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        raise BodyError(f"body field {key}: not an int")
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise BodyError(f"body field {key}: not an int") from None
    if not isinstance(value, int):
        raise BodyError(f"body field {key}: not an int")
    return value


def _bool(obj: dict[str, Any], key: str, default: bool = False) -> bool:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, str):
        return value.lower() == "true"
    if not isinstance(value, (bool, int)):
        raise BodyError(f"body field {key}: not a boolean")
    return bool(value)


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"body field {key}: not a list")
    return value


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = _list(obj, key)
    for item in items:
        if not isinstance(item, dict):
            raise BodyError(f"body field {key}: an element is not an object")
    return items


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


# --- heartbeat --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionData:
        tags = _list(obj, "tagsSet")
        codes = _list(obj, "codeSet")
        if not all(isinstance(t, str) for t in tags):
            raise BodyError("body field tagsSet: not a list of strings")
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            raise BodyError("body field codeSet: not a list of ints")
        topic = _str(obj, "topic")
        if topic is None:
            raise BodyError("subscription without a topic")
        return cls(
            topic=topic,
            sub_string=_str(obj, "subString", "*") or "*",
            tags_set=tuple(tags),
            code_set=tuple(codes),
            sub_version=_int(obj, "subVersion"),
            expression_type=_str(obj, "expressionType", "TAG") or "TAG",
            class_filter_mode=_bool(obj, "classFilterMode"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"  # CONSUME_ACTIVELY (pull), CONSUME_POP
    message_model: str = "CLUSTERING"  # or BROADCASTING
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ConsumerData:
        group = _str(obj, "groupName")
        if group is None:
            raise BodyError("consumer data without a groupName")
        return cls(
            group_name=group,
            consume_type=_str(obj, "consumeType", "CONSUME_PASSIVELY") or "CONSUME_PASSIVELY",
            message_model=_str(obj, "messageModel", "CLUSTERING") or "CLUSTERING",
            consume_from_where=_str(obj, "consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")
            or "CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=tuple(
                SubscriptionData.from_json(s) for s in _objects(obj, "subscriptionDataSet")
            ),
            unit_mode=_bool(obj, "unitMode"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """HEART_BEAT's body: the client id, its producer groups and consumer groups."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()
    heartbeat_fingerprint: int = 0
    without_sub: bool = False

    @classmethod
    def parse(cls, body: bytes) -> HeartbeatData:
        obj = _load_object(body, "heartbeat")
        client_id = _str(obj, "clientID")
        if not client_id:
            raise BodyError("heartbeat without a clientID")
        producers = []
        for p in _objects(obj, "producerDataSet"):
            name = _str(p, "groupName")
            if name is None:
                raise BodyError("producer data without a groupName")
            producers.append(name)
        return cls(
            client_id=client_id,
            producer_groups=tuple(producers),
            consumers=tuple(ConsumerData.from_json(c) for c in _objects(obj, "consumerDataSet")),
            heartbeat_fingerprint=_int(obj, "heartbeatFingerprint"),
            without_sub=_bool(obj, "withoutSub"),
        )

    def serialize(self) -> bytes:
        return _dump(
            {
                "clientID": self.client_id,
                "consumerDataSet": [c.to_json() for c in self.consumers],
                "heartbeatFingerprint": self.heartbeat_fingerprint,
                "producerDataSet": [{"groupName": g} for g in self.producer_groups],
                "withoutSub": self.without_sub,
            }
        )


# --- locks and consumer lists -----------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        topic, broker = _str(obj, "topic"), _str(obj, "brokerName")
        if topic is None or broker is None or "queueId" not in obj:
            raise BodyError("message queue needs topic, brokerName and queueId")
        return cls(topic, broker, _int(obj, "queueId"))

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody:
    """LOCK_BATCH_MQ's and UNLOCK_BATCH_MQ's body."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...] = ()
    only_this_broker: bool = False

    @classmethod
    def parse(cls, body: bytes) -> LockBatchRequestBody:
        obj = _load_object(body, "lock batch")
        group, client = _str(obj, "consumerGroup"), _str(obj, "clientId")
        if group is None or client is None:
            raise BodyError("lock batch body needs consumerGroup and clientId")
        return cls(
            consumer_group=group,
            client_id=client,
            mq_set=tuple(MessageQueue.from_json(m) for m in _objects(obj, "mqSet")),
            only_this_broker=_bool(obj, "onlyThisBroker"),
        )

    def serialize(self) -> bytes:
        return _dump(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": [m.to_json() for m in self.mq_set],
                "onlyThisBroker": self.only_this_broker,
            }
        )


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody:
    lock_ok_mq_set: tuple[MessageQueue, ...] = ()

    @classmethod
    def parse(cls, body: bytes) -> LockBatchResponseBody:
        obj = _load_object(body, "lock batch response")
        return cls(tuple(MessageQueue.from_json(m) for m in _objects(obj, "lockOKMQSet")))

    def serialize(self) -> bytes:
        return _dump({"lockOKMQSet": [m.to_json() for m in self.lock_ok_mq_set]})


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    """GET_CONSUMER_LIST_BY_GROUP's response body."""

    consumer_id_list: tuple[str, ...] = ()

    @classmethod
    def parse(cls, body: bytes) -> ConsumerListBody:
        ids = _list(_load_object(body, "consumer list"), "consumerIdList")
        if not all(isinstance(i, str) for i in ids):
            raise BodyError("body field consumerIdList: not a list of strings")
        return cls(tuple(ids))

    def serialize(self) -> bytes:
        return _dump({"consumerIdList": list(self.consumer_id_list)})


# --- batch ack --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchAck:
    """One queue's acks: offsets ``start_offset + i`` for each bit ``i`` set.

    On the wire the bit set is Java's ``BitSet.toByteArray()`` (little-endian: bit ``i``
    is bit ``i % 8`` of byte ``i // 8``) in base64, under fastjson's short names.
    """

    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    bits: int = 0

    @property
    def offsets(self) -> list[int]:
        bits, out, i = self.bits, [], 0
        while bits:
            if bits & 1:
                out.append(self.start_offset + i)
            bits >>= 1
            i += 1
        return out

    _NAMES = (
        ("consumer_group", "c", "consumerGroup"),
        ("topic", "t", "topic"),
        ("retry", "r", "retry"),
        ("start_offset", "so", "startOffset"),
        ("queue_id", "q", "queueId"),
        ("revive_queue_id", "rq", "reviveQueueId"),
        ("pop_time", "pt", "popTime"),
        ("invisible_time", "it", "invisibleTime"),
    )

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BatchAck:
        values: dict[str, Any] = {}
        for attr, short, long in cls._NAMES:
            key = short if short in obj else long
            if key not in obj:
                raise BodyError(f"batch ack without {short}")
            is_text = attr in ("consumer_group", "topic", "retry")
            values[attr] = _str(obj, key) if is_text else _int(obj, key)
        raw = obj.get("b", obj.get("bitSet"))
        if raw is None:
            bits = 0
        elif isinstance(raw, str):
            try:
                bits = int.from_bytes(base64.b64decode(raw, validate=True), "little")
            except (binascii.Error, ValueError):
                raise BodyError("batch ack b: not base64") from None
        elif isinstance(raw, list) and all(isinstance(x, int) and -128 <= x < 256 for x in raw):
            bits = int.from_bytes(bytes(x & 0xFF for x in raw), "little")
        else:
            raise BodyError("batch ack b: not a byte array")
        return cls(bits=bits, **values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, short, _ in self._NAMES:
            out[short] = getattr(self, attr)
        raw = self.bits.to_bytes((self.bits.bit_length() + 7) // 8, "little")
        out["b"] = base64.b64encode(raw).decode()
        return out


@dataclass(frozen=True, slots=True)
class BatchAckMessageRequestBody:
    broker_name: str | None
    acks: tuple[BatchAck, ...] = field(default=())

    @classmethod
    def parse(cls, body: bytes) -> BatchAckMessageRequestBody:
        obj = _load_object(body, "batch ack")
        return cls(
            _str(obj, "brokerName"), tuple(BatchAck.from_json(a) for a in _objects(obj, "acks"))
        )

    def serialize(self) -> bytes:
        return _dump({"acks": [a.to_json() for a in self.acks], "brokerName": self.broker_name})
