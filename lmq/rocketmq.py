"""RocketMQ's naming model on LMQs: topics of N queues, consumer groups, retry and
dead-letter topics, and the mapping between MQTT topics and RocketMQ topics.

This module is the one definition the RocketMQ front ends (remoting, later gRPC and
HTTP), the topic space and the ``lmq`` CLI share. It imports only the standard library.

LMQs
----
Queue ``q`` of RocketMQ topic ``T`` is the LMQ ``rmq:T:q`` (:func:`queue_lmq`). RocketMQ
topic names contain no ``:`` (see :data:`NAME_PATTERN`), so the name splits back
unambiguously (:func:`parse_queue_lmq`), and the ``rmq:`` prefix keeps RocketMQ queues
apart from MQTT filters (``mqtt:``) and AMQP queues (``amqp:``).

Persisted configuration
-----------------------
A topic's configuration is front-end metadata in the store under
``rmq/topic/<name>`` (:data:`TOPIC_META_PREFIX`), a consumer group's under
``rmq/group/<name>`` (:data:`GROUP_META_PREFIX`); both are UTF-8 JSON objects written
by :meth:`TopicConfig.encode` / :meth:`GroupConfig.encode`. Unknown JSON keys are
ignored on decode (a newer gateway may add fields), missing ones take the defaults.

MQTT <-> RocketMQ
-----------------
As in Aliyun MQ for MQTT and RocketMQ's own MQTT gateways, the first level of an MQTT
topic is the RocketMQ topic and the rest, with its leading ``/``, travels in the message
property ``mqttSecondTopic``: ``orders/eu/42`` <-> topic ``orders`` + ``/eu/42``; a bare
``orders`` has no second topic. :func:`split_mqtt_topic` and :func:`join_mqtt_topic`
are inverse on every MQTT topic name whose first level is a valid RocketMQ topic name.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = [
    "BROKER_NAME",
    "DEFAULT_QUEUE_NUMS",
    "DELAY_PROPERTIES",
    "DLQ_PREFIX",
    "GROUP_META_PREFIX",
    "HIDDEN_PROPERTIES",
    "LMQ_PREFIX",
    "MAX_GROUP_LENGTH",
    "MAX_TOPIC_LENGTH",
    "MESSAGE_TYPES",
    "MQTT_SECOND_TOPIC",
    "NAME_PATTERN",
    "RESERVED_PROPERTIES",
    "RETRY_PREFIX",
    "SYSTEM_PROPERTIES",
    "TOPIC_META_PREFIX",
    "GroupConfig",
    "InvalidName",
    "MessageType",
    "Perm",
    "TopicConfig",
    "dlq_topic",
    "group_meta_key",
    "is_system_topic",
    "join_mqtt_topic",
    "message_type_of",
    "parse_queue_lmq",
    "queue_lmq",
    "retry_topic",
    "split_mqtt_topic",
    "topic_meta_key",
    "validate_group",
    "validate_topic",
]

#: Prefix of every RocketMQ queue's LMQ name.
#: The one broker's name (routes, pop receipts) in every RocketMQ protocol.
BROKER_NAME = "lmq-gateway"
LMQ_PREFIX = "rmq:"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: The message property that carries an MQTT topic's levels after the first.
MQTT_SECOND_TOPIC = "mqttSecondTopic"
#: Read and write queues of an auto-created topic (RocketMQ's defaultTopicQueueNums
#: is 4 on the client and 8 on the broker; the broker's wins).
DEFAULT_QUEUE_NUMS = 8
#: RocketMQ's TopicValidator: at most 127 characters of ``[%|a-zA-Z0-9_-]``.
MAX_TOPIC_LENGTH = 127
#: RocketMQ's group names: the same characters, at most 255.
MAX_GROUP_LENGTH = 255
NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

TOPIC_META_PREFIX = "rmq/topic/"
GROUP_META_PREFIX = "rmq/group/"

#: Topics RocketMQ reserves for itself (clients may not send to them).
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)
_SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")


#: RocketMQ's own property names (``MessageConst.STRING_HASH_SET`` and the ones the
#: clients set), and ``mqttSecondTopic``: they are not user properties and do not
#: travel to MQTT or AMQP as such. The one definition every door and the connector use.
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
    "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
    "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
    "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
    "BORN_HOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
    "CRC32", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "SHARDING_KEY", "__SHARDINGKEY", "TRACE_CONTEXT", "__STARTDELIVERTIME", "__transactionId__",
    MQTT_SECOND_TOPIC,
})  # fmt: skip
#: The property names a producer may not set as user properties (gRPC's reserved
#: keys, the HTTP APIs' ``properties``): the system properties and Aliyun's check
#: count, but not ``mqttSecondTopic``, by which every RocketMQ producer addresses an
#: MQTT subtopic (and consumers read what MQTT clients sent).
RESERVED_PROPERTIES = (SYSTEM_PROPERTIES - {MQTT_SECOND_TOPIC}) | {"__TransCheckT"}
#: What consumers are not shown as user properties (the HTTP APIs' documents): the
#: system properties and Aliyun's check count.
HIDDEN_PROPERTIES = SYSTEM_PROPERTIES | {"__TransCheckT"}

#: The properties that make a message DELAY (RocketMQ's ``DELAY`` level, the timer
#: properties, Aliyun's ``__STARTDELIVERTIME``).
DELAY_PROPERTIES = (
    "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")
_TYPE_PROPERTIES = frozenset(("TRAN_MSG", "__SHARDINGKEY", *DELAY_PROPERTIES))


class InvalidName(ValueError):
    """A topic or group name RocketMQ would refuse."""


class MessageType(enum.Enum):
    """A topic's message type, as RocketMQ 5 checks it on send (``TopicMessageType``).

    A message has one of the first four; a topic has one of all five. ``MIXED``
    (RocketMQ's broker option ``enableMixedMessageType``) accepts every message type:
    the type of auto-created topics unless the gateway runs in the strict mode
    (``rocketmq_strict_message_type``, RocketMQ 5's default: auto-created topics are
    NORMAL)."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


#: The types a message can have (every one but MIXED), in RocketMQ's order.
MESSAGE_TYPES = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY,
                 MessageType.TRANSACTION)


class Perm(enum.IntFlag):
    """Topic permission bits (RocketMQ ``PermName``)."""

    INHERIT = 1
    WRITE = 2
    READ = 4


def message_type_of(props: Mapping[str, str], prepared: bool = False) -> MessageType:
    """A message's type from its properties, as RocketMQ 5 types a send
    (``TopicMessageType.parseFromMessageProperty``): ``TRAN_MSG`` (or ``prepared``, the
    remoting sysFlag) = TRANSACTION, a delay property other than ``0`` = DELAY,
    ``__SHARDINGKEY`` = FIFO, else NORMAL."""
    if not prepared and props.keys().isdisjoint(_TYPE_PROPERTIES):
        return MessageType.NORMAL  # the common case, one set operation
    if prepared or props.get("TRAN_MSG", "").lower() == "true":
        return MessageType.TRANSACTION
    for name in DELAY_PROPERTIES:
        value = props.get(name)
        if value and value != "0":
            return MessageType.DELAY
    if props.get("__SHARDINGKEY"):
        return MessageType.FIFO
    return MessageType.NORMAL


def validate_topic(name: str) -> str:
    """``name`` if RocketMQ accepts it as a topic name, else :class:`InvalidName`."""
    return _validate(name, "topic", MAX_TOPIC_LENGTH)


def validate_group(name: str) -> str:
    """``name`` if RocketMQ accepts it as a consumer or producer group name."""
    return _validate(name, "group", MAX_GROUP_LENGTH)


def _validate(name: str, what: str, limit: int) -> str:
    if not name:
        raise InvalidName(f"the {what} name is empty")
    if len(name) > limit:
        raise InvalidName(f"the {what} name is longer than {limit} characters")
    if NAME_PATTERN.match(name) is None:
        raise InvalidName(
            f"the {what} name {name!r} contains characters other than [%|a-zA-Z0-9_-]"
        )
    return name


def is_system_topic(name: str) -> bool:
    return name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_TOPIC_PREFIXES)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def queue_lmq(topic: str, queue_id: int) -> str:
    """The LMQ that holds queue ``queue_id`` of ``topic``."""
    return f"{LMQ_PREFIX}{topic}:{queue_id}"


def parse_queue_lmq(lmq: str) -> tuple[str, int] | None:
    """``(topic, queue_id)`` of a RocketMQ queue's LMQ; ``None`` for any other LMQ."""
    if not lmq.startswith(LMQ_PREFIX):
        return None
    topic, sep, queue = lmq[len(LMQ_PREFIX) :].rpartition(":")
    if not sep or not topic or not queue.isdigit():
        return None
    return topic, int(queue)


def split_mqtt_topic(mqtt_topic: str) -> tuple[str, str]:
    """``(first level, rest with its leading "/")``; the rest is ``""`` for a one-level
    topic. The first level is not validated (see :func:`validate_topic`)."""
    first, sep, _ = mqtt_topic.partition("/")
    return first, mqtt_topic[len(first) :] if sep else ""


def join_mqtt_topic(topic: str, second: str) -> str:
    """The MQTT topic of a RocketMQ message of ``topic`` whose ``mqttSecondTopic`` is
    ``second`` (``""`` or absent: the topic alone). A second topic without its leading
    ``/`` (some producers write ``eu/42``) is joined with one."""
    if not second:
        return topic
    return topic + second if second.startswith("/") else f"{topic}/{second}"


def topic_meta_key(topic: str) -> str:
    return TOPIC_META_PREFIX + topic


def group_meta_key(group: str) -> str:
    return GROUP_META_PREFIX + group


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queues: int = DEFAULT_QUEUE_NUMS
    write_queues: int = DEFAULT_QUEUE_NUMS
    perm: int = Perm.READ | Perm.WRITE
    message_type: MessageType = MessageType.NORMAL

    def __post_init__(self) -> None:
        validate_topic(self.name)
        for label, value in (("read", self.read_queues), ("write", self.write_queues)):
            if not 1 <= value <= 1024:
                raise ValueError(f"{label} queue count must be 1-1024, not {value}")
        if self.perm & ~0x7:
            raise ValueError(f"perm must be a combination of 1, 2 and 4, not {self.perm}")

    def accepts(self, kind: MessageType) -> bool:
        """Whether a message of type ``kind`` may be sent to this topic: its own type,
        or any type on a MIXED topic (RocketMQ's ``TopicMessageType`` check)."""
        return kind is self.message_type or self.message_type is MessageType.MIXED

    @property
    def accepted_types(self) -> tuple[MessageType, ...]:
        """The message types this topic accepts (what a route reply lists)."""
        if self.message_type is MessageType.MIXED:
            return MESSAGE_TYPES
        return (self.message_type,)

    @property
    def queue_count(self) -> int:
        """Queues that exist (hold LMQs): the larger of the read and write counts."""
        return max(self.read_queues, self.write_queues)

    def lmqs(self) -> list[str]:
        return [queue_lmq(self.name, q) for q in range(self.queue_count)]

    def encode(self) -> bytes:
        data = asdict(self)
        data["message_type"] = self.message_type.value
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TopicConfig:
        data = _known(cls, json.loads(raw))
        if "message_type" in data:
            data["message_type"] = MessageType(data["message_type"])
        return cls(**data)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    name: str
    #: Redeliveries through ``%RETRY%<group>`` before a message goes to ``%DLQ%<group>``.
    retry_max_times: int = 16
    consume_enable: bool = True
    #: Consume from the oldest message when the group has no offset yet (RocketMQ's
    #: CONSUME_FROM_FIRST_OFFSET is the client's choice; this is the broker default).
    consume_from_min_enable: bool = True
    #: The group consumes in order (RocketMQ's consumeMessageOrderly): gRPC clients are
    #: told ``subscription.fifo`` and get one assignment per queue.
    consume_message_orderly: bool = False

    def __post_init__(self) -> None:
        validate_group(self.name)
        if self.retry_max_times < 0:
            raise ValueError("retry_max_times must be >= 0")

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GroupConfig:
        return cls(**_known(cls, json.loads(raw)))


def _known(cls: type, data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object")
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
