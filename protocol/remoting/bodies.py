"""JSON bodies: heartbeat, lock batch, consumer id list, route data, batch ack.

Each is a frozen dataclass with ``parse(body: bytes)`` (raising :class:`BodyError`) and
``serialize() -> bytes``. Parsing is tolerant the way fastjson is: missing optional
fields take Java's defaults, unknown fields are ignored, numbers may arrive as strings.

Route data is the one body RocketMQ writes in fastjson's non-standard dialect: the
``brokerAddrs`` map has ``Long`` keys, which fastjson writes unquoted (``{0:"ip:port"}``).
:meth:`route.TopicRouteData.serialize` writes either dialect and :func:`loads_lenient`
(``json_body.py``) reads both, quoting bare numeric object keys before handing the text to
``json``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from .errors import BodyError
from .json_body import (
    dump,
    get_bool,
    get_int,
    get_list,
    get_objects,
    get_str,
    load_object,
)
from .json_body import loads_lenient as loads_lenient  # the reader of these bodies

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
        tags = get_list(obj, "tagsSet")
        codes = get_list(obj, "codeSet")
        if not all(isinstance(t, str) for t in tags):
            raise BodyError("body field tagsSet: not a list of strings")
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            raise BodyError("body field codeSet: not a list of ints")
        topic = get_str(obj, "topic")
        if topic is None:
            raise BodyError("subscription without a topic")
        return cls(
            topic=topic,
            sub_string=get_str(obj, "subString", "*") or "*",
            tags_set=tuple(tags),
            code_set=tuple(codes),
            sub_version=get_int(obj, "subVersion"),
            expression_type=get_str(obj, "expressionType", "TAG") or "TAG",
            class_filter_mode=get_bool(obj, "classFilterMode"),
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
        group = get_str(obj, "groupName")
        if group is None:
            raise BodyError("consumer data without a groupName")
        return cls(
            group_name=group,
            consume_type=get_str(obj, "consumeType", "CONSUME_PASSIVELY") or "CONSUME_PASSIVELY",
            message_model=get_str(obj, "messageModel", "CLUSTERING") or "CLUSTERING",
            consume_from_where=get_str(obj, "consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")
            or "CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=tuple(
                SubscriptionData.from_json(s) for s in get_objects(obj, "subscriptionDataSet")
            ),
            unit_mode=get_bool(obj, "unitMode"),
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
        obj = load_object(body, "heartbeat")
        client_id = get_str(obj, "clientID")
        if not client_id:
            raise BodyError("heartbeat without a clientID")
        producers = []
        for p in get_objects(obj, "producerDataSet"):
            name = get_str(p, "groupName")
            if name is None:
                raise BodyError("producer data without a groupName")
            producers.append(name)
        return cls(
            client_id=client_id,
            producer_groups=tuple(producers),
            consumers=tuple(ConsumerData.from_json(c) for c in get_objects(obj, "consumerDataSet")),
            heartbeat_fingerprint=get_int(obj, "heartbeatFingerprint"),
            without_sub=get_bool(obj, "withoutSub"),
        )

    def serialize(self) -> bytes:
        return dump(
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
        topic, broker = get_str(obj, "topic"), get_str(obj, "brokerName")
        if topic is None or broker is None or "queueId" not in obj:
            raise BodyError("message queue needs topic, brokerName and queueId")
        return cls(topic, broker, get_int(obj, "queueId"))

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
        obj = load_object(body, "lock batch")
        group, client = get_str(obj, "consumerGroup"), get_str(obj, "clientId")
        if group is None or client is None:
            raise BodyError("lock batch body needs consumerGroup and clientId")
        return cls(
            consumer_group=group,
            client_id=client,
            mq_set=tuple(MessageQueue.from_json(m) for m in get_objects(obj, "mqSet")),
            only_this_broker=get_bool(obj, "onlyThisBroker"),
        )

    def serialize(self) -> bytes:
        return dump(
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
        obj = load_object(body, "lock batch response")
        return cls(tuple(MessageQueue.from_json(m) for m in get_objects(obj, "lockOKMQSet")))

    def serialize(self) -> bytes:
        return dump({"lockOKMQSet": [m.to_json() for m in self.lock_ok_mq_set]})


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    """GET_CONSUMER_LIST_BY_GROUP's response body."""

    consumer_id_list: tuple[str, ...] = ()

    @classmethod
    def parse(cls, body: bytes) -> ConsumerListBody:
        ids = get_list(load_object(body, "consumer list"), "consumerIdList")
        if not all(isinstance(i, str) for i in ids):
            raise BodyError("body field consumerIdList: not a list of strings")
        return cls(tuple(ids))

    def serialize(self) -> bytes:
        return dump({"consumerIdList": list(self.consumer_id_list)})


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
            values[attr] = get_str(obj, key) if is_text else get_int(obj, key)
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
        obj = load_object(body, "batch ack")
        return cls(
            get_str(obj, "brokerName"),
            tuple(BatchAck.from_json(a) for a in get_objects(obj, "acks")),
        )

    def serialize(self) -> bytes:
        return dump({"acks": [a.to_json() for a in self.acks], "brokerName": self.broker_name})
