"""Typed request and response headers: a command's ``extFields`` with names and types.

RocketMQ flattens a header object's fields into ``extFields`` by field name, every value
a string: numbers in decimal, booleans ``true``/``false``. A field marked ``@CFNotNull``
in Java is required: the receiver refuses a command without it. Here each header is a
frozen dataclass whose fields declare their wire name, type and whether they are
required; :meth:`Header.from_fields` parses (raising :class:`HeaderError` with
``missing field X`` or ``field X: not an int``) and :meth:`Header.to_fields` writes.

Parsing follows Java's: integers are ``Integer.parseInt``/``Long.parseLong`` (an optional
sign and ASCII digits, nothing else, within 32 or 64 bits); a boolean is ``true`` in any
case and anything else is false, so a boolean never fails. Fields a header does not
declare (``AccessKey``, ``Signature``, the RPC fields ``ns``/``bname``/``lo``...) are
ignored.

``SEND_MESSAGE`` uses field names (``producerGroup``...), ``SEND_MESSAGE_V2`` and
``SEND_BATCH_MESSAGE`` the single letters ``a``..``n``; :class:`SendMessageRequestHeader`
reads and writes both (:meth:`~SendMessageRequestHeader.for_request`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Self

from .codes import PullSysFlag, RequestCode
from .errors import HeaderError

_INT_RE = re.compile(r"[+-]?[0-9]+")
_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}


def _f(
    wire: str,
    kind: str = "str",
    *,
    required: bool = False,
    default: Any = None,
    v2: str | None = None,
) -> Any:
    """A header field: its ``extFields`` name, ``str``/``int``/``long``/``bool``, and
    whether Java marks it ``@CFNotNull``. ``v2`` is the SEND_MESSAGE_V2 letter."""
    return field(default=default, metadata={"wire": wire, "kind": kind, "req": required, "v2": v2})


def parse_value(name: str, kind: str, text: str) -> Any:
    """One ``extFields`` value as Java would read it into a field of ``kind``."""
    if kind == "str":
        return text
    if kind == "bool":
        return text.lower() == "true"
    # Java's parseInt/parseLong: an optional sign and ASCII digits, nothing else (Python's
    # int() would also take spaces, underscores and non-ASCII digits).
    if not (text.isdigit() and text.isascii()) and not _INT_RE.fullmatch(text):
        raise HeaderError(f"field {name}: not an int")
    value = int(text)
    low, high = _RANGES[kind]
    if not low <= value <= high:
        raise HeaderError(f"field {name}: {value} is out of range for a {kind}")
    return value


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Header:
    """Base of every header: parsing and writing driven by field metadata."""

    @classmethod
    def from_fields(cls, ext_fields: dict[str, str], *, names: str = "wire") -> Self:
        values: dict[str, Any] = {}
        for attr, wire, kind, required in _spec(cls, names):
            text = ext_fields.get(wire)
            if text is None:
                if required:
                    raise HeaderError(f"missing field {wire}")
                continue
            values[attr] = parse_value(wire, kind, text)
        return cls(**values)

    def to_fields(self, *, names: str = "wire") -> dict[str, str]:
        out: dict[str, str] = {}
        for attr, wire, _kind, _required in _spec(type(self), names):
            value = getattr(self, attr)
            if value is not None:
                out[wire] = format_value(value)
        return out


_SPECS: dict[tuple[type, str], tuple[tuple[str, str, str, bool], ...]] = {}


def _spec(cls: type, names: str) -> tuple[tuple[str, str, str, bool], ...]:
    # (attribute, wire name, kind, required) per field, computed once per class: headers
    # are parsed on every send and pull.
    spec = _SPECS.get((cls, names))
    if spec is None:
        spec = tuple(
            (f.name, f.metadata[names] or f.metadata["wire"], f.metadata["kind"], f.metadata["req"])
            for f in fields(cls)
        )
        _SPECS[(cls, names)] = spec
    return spec


# --- send -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str = _f("producerGroup", required=True, v2="a")
    topic: str = _f("topic", required=True, v2="b")
    default_topic: str = _f("defaultTopic", required=True, v2="c")
    default_topic_queue_nums: int = _f("defaultTopicQueueNums", "int", required=True, v2="d")
    queue_id: int = _f("queueId", "int", required=True, v2="e")
    sys_flag: int = _f("sysFlag", "int", required=True, v2="f")
    born_timestamp: int = _f("bornTimestamp", "long", required=True, v2="g")
    flag: int = _f("flag", "int", required=True, v2="h")
    properties: str | None = _f("properties", v2="i")
    reconsume_times: int | None = _f("reconsumeTimes", "int", v2="j")
    unit_mode: bool | None = _f("unitMode", "bool", v2="k")
    max_reconsume_times: int | None = _f("maxReconsumeTimes", "int", v2="l")
    batch: bool | None = _f("batch", "bool", v2="m")
    broker_name: str | None = _f("bname", v2="n")

    @classmethod
    def from_v2_fields(cls, ext_fields: dict[str, str]) -> SendMessageRequestHeader:
        return cls.from_fields(ext_fields, names="v2")

    def to_v2_fields(self) -> dict[str, str]:
        return self.to_fields(names="v2")

    @classmethod
    def for_request(cls, code: int, ext_fields: dict[str, str]) -> SendMessageRequestHeader:
        """The header of a send request: V1 names for SEND_MESSAGE, V2 letters otherwise."""
        if code == RequestCode.SEND_MESSAGE:
            return cls.from_fields(ext_fields)
        return cls.from_v2_fields(ext_fields)


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(Header):
    """``msg_id`` is the offsetMsgId (store address and log position); the Java client
    takes the UNIQ_KEY from its own message (joined by "," for a batch) as the msgId
    it reports."""

    msg_id: str = _f("msgId", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    queue_offset: int = _f("queueOffset", "long", required=True)
    transaction_id: str | None = _f("transactionId")
    batch_uniq_id: str | None = _f("batchUniqId")


# --- pull and offsets -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE and LITE_PULL_MESSAGE (``sys_flag`` has LITE_PULL_MESSAGE for the
    latter)."""

    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    queue_offset: int = _f("queueOffset", "long", required=True)
    max_msg_nums: int = _f("maxMsgNums", "int", required=True)
    sys_flag: int = _f("sysFlag", "int", required=True)
    commit_offset: int = _f("commitOffset", "long", required=True)
    suspend_timeout_millis: int = _f("suspendTimeoutMillis", "long", required=True)
    subscription: str | None = _f("subscription")
    sub_version: int = _f("subVersion", "long", required=True)
    expression_type: str | None = _f("expressionType")
    max_msg_bytes: int | None = _f("maxMsgBytes", "int")

    @property
    def flags(self) -> PullSysFlag:
        return PullSysFlag(self.sys_flag & 0x1F)

    @property
    def has_commit_offset(self) -> bool:
        return bool(self.sys_flag & PullSysFlag.COMMIT_OFFSET)

    @property
    def suspend(self) -> bool:
        return bool(self.sys_flag & PullSysFlag.SUSPEND)

    @property
    def has_subscription(self) -> bool:
        return bool(self.sys_flag & PullSysFlag.SUBSCRIPTION)

    @property
    def lite_pull(self) -> bool:
        return bool(self.sys_flag & PullSysFlag.LITE_PULL_MESSAGE)


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int = _f("suggestWhichBrokerId", "long", required=True)
    next_begin_offset: int = _f("nextBeginOffset", "long", required=True)
    min_offset: int = _f("minOffset", "long", required=True)
    max_offset: int = _f("maxOffset", "long", required=True)
    offset_delta: int | None = _f("offsetDelta", "long")
    topic_sys_flag: int | None = _f("topicSysFlag", "int")
    group_sys_flag: int | None = _f("groupSysFlag", "int")


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    set_zero_if_not_found: bool | None = _f("setZeroIfNotFound", "bool")


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    commit_offset: int = _f("commitOffset", "long", required=True)


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(Header):
    """The answer of QUERY_CONSUMER_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET and
    GET_MIN_OFFSET."""

    offset: int = _f("offset", "long", required=True)


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    timestamp: int = _f("timestamp", "long", required=True)
    boundary_type: str | None = _f("boundaryType")  # LOWER (default) or UPPER


@dataclass(frozen=True, slots=True)
class TopicQueueRequestHeader(Header):
    """GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME: a topic and a queue."""

    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(Header):
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    committed: bool = _f("committed", "bool", default=True)


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: int = _f("timestamp", "long", required=True)


# --- clients and groups -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = _f("clientID", required=True)
    producer_group: str | None = _f("producerGroup")
    consumer_group: str | None = _f("consumerGroup")


@dataclass(frozen=True, slots=True)
class ConsumerGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP and NOTIFY_CONSUMER_IDS_CHANGED."""

    consumer_group: str = _f("consumerGroup", required=True)


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int = _f("offset", "long", required=True)  # the message's commit-log offset
    group: str = _f("group", required=True)
    delay_level: int = _f("delayLevel", "int", required=True)
    origin_msg_id: str | None = _f("originMsgId")
    origin_topic: str | None = _f("originTopic")
    unit_mode: bool = _f("unitMode", "bool", default=False)
    max_reconsume_times: int | None = _f("maxReconsumeTimes", "int")


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str = _f("topic", required=True)
    accept_standard_json_only: bool | None = _f("acceptStandardJsonOnly", "bool")


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader(Header):
    topic: str = _f("topic", required=True)
    key: str = _f("key", required=True)
    max_num: int = _f("maxNum", "int", required=True)
    begin_timestamp: int = _f("beginTimestamp", "long", required=True)
    end_timestamp: int = _f("endTimestamp", "long", required=True)
    # MixAll.UNIQUE_MSG_QUERY_FLAG: the key is a UNIQ_KEY, not a KEYS entry.
    unique_key_query: bool | None = _f("_UNIQUE_KEY_QUERY", "bool")


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int = _f("indexLastUpdateTimestamp", "long", required=True)
    index_last_update_phyoffset: int = _f("indexLastUpdatePhyoffset", "long", required=True)


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(Header):
    offset: int = _f("offset", "long", required=True)  # the commit-log offset
    topic: str | None = _f("topic")


# --- transactions (used by the message-types issue) --------------------------------------


@dataclass(frozen=True, slots=True)
class EndTransactionRequestHeader(Header):
    producer_group: str = _f("producerGroup", required=True)
    tran_state_table_offset: int = _f("tranStateTableOffset", "long", required=True)
    commit_log_offset: int = _f("commitLogOffset", "long", required=True)
    commit_or_rollback: int = _f("commitOrRollback", "int", required=True)  # 8, 12 or 0
    msg_id: str = _f("msgId", required=True)
    topic: str | None = _f("topic")
    from_transaction_check: bool = _f("fromTransactionCheck", "bool", default=False)
    transaction_id: str | None = _f("transactionId")


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset: int = _f("tranStateTableOffset", "long", required=True)
    commit_log_offset: int = _f("commitLogOffset", "long", required=True)
    topic: str | None = _f("topic")
    msg_id: str | None = _f("msgId")
    transaction_id: str | None = _f("transactionId")
    offset_msg_id: str | None = _f("offsetMsgId")
