"""The pop family's headers (codes 200050 and up) and its receipt strings.

A popped message carries a receipt, ``extraInfo`` (``ExtraInfoUtil``): space-separated

    ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId [queueOffset]

where ``retry`` is not a topic but a marker of the topic the message was popped from:
``0`` the topic itself, ``1`` the V1 pop retry topic ``%RETRY%<group>_<topic>``, ``2``
the V2 one ``%RETRY%<group>+<topic>``. ``reviveQid`` 999 marks an orderly pop.

The pop response tells the client, per queue, where the popped run starts and which
offsets it holds (``startOffsetInfo``, ``msgOffsetInfo``, ``orderCountInfo``): entries
``retry queueId value`` joined by ``;``, the msgOffsetInfo value a comma list. The Java
client rebuilds each message's ``extraInfo`` from them, so they must agree with the
messages in the body.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import HeaderError
from .headers import Header, _f, parse_value

RETRY_PREFIX = "%RETRY%"
NORMAL_TOPIC, RETRY_TOPIC_V1, RETRY_TOPIC_V2 = "0", "1", "2"
POP_ORDER_REVIVE_QUEUE = 999


@dataclass(frozen=True, slots=True)
class PopMessageRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)  # -1: any queue
    max_msg_nums: int = _f("maxMsgNums", "int", required=True)
    invisible_time: int = _f("invisibleTime", "long", required=True)
    poll_time: int = _f("pollTime", "long", required=True)
    born_time: int = _f("bornTime", "long", required=True)
    init_mode: int = _f("initMode", "int", required=True)
    exp_type: str | None = _f("expType")
    exp: str | None = _f("exp")
    order: bool = _f("order", "bool", default=False)
    attempt_id: str | None = _f("attemptId")


@dataclass(frozen=True, slots=True)
class PopMessageResponseHeader(Header):
    pop_time: int = _f("popTime", "long", required=True)
    invisible_time: int = _f("invisibleTime", "long", required=True)
    revive_qid: int = _f("reviveQid", "int", required=True)
    rest_num: int = _f("restNum", "long", required=True)
    start_offset_info: str | None = _f("startOffsetInfo")
    msg_offset_info: str | None = _f("msgOffsetInfo")
    order_count_info: str | None = _f("orderCountInfo")


@dataclass(frozen=True, slots=True)
class AckMessageRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    extra_info: str = _f("extraInfo", required=True)
    offset: int = _f("offset", "long", required=True)


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    extra_info: str = _f("extraInfo", required=True)
    offset: int = _f("offset", "long", required=True)
    invisible_time: int = _f("invisibleTime", "long", required=True)


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: int = _f("popTime", "long", required=True)
    invisible_time: int = _f("invisibleTime", "long", required=True)
    revive_qid: int = _f("reviveQid", "int", required=True)


@dataclass(frozen=True, slots=True)
class PeekMessageRequestHeader(Header):
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    max_msg_nums: int = _f("maxMsgNums", "int", required=True)
    consumer_group: str = _f("consumerGroup", required=True)


@dataclass(frozen=True, slots=True)
class NotificationRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)
    poll_time: int = _f("pollTime", "long", required=True)
    born_time: int = _f("bornTime", "long", required=True)
    order: bool = _f("order", "bool", default=False)
    attempt_id: str | None = _f("attemptId")


@dataclass(frozen=True, slots=True)
class NotificationResponseHeader(Header):
    has_msg: bool = _f("hasMsg", "bool", required=True)
    polling_full: bool = _f("pollingFull", "bool", default=False)


@dataclass(frozen=True, slots=True)
class PollingInfoRequestHeader(Header):
    consumer_group: str = _f("consumerGroup", required=True)
    topic: str = _f("topic", required=True)
    queue_id: int = _f("queueId", "int", required=True)


@dataclass(frozen=True, slots=True)
class PollingInfoResponseHeader(Header):
    polling_num: int = _f("pollingNum", "int", required=True)


def retry_marker(topic: str) -> str:
    """``ExtraInfoUtil.getRetry``: which kind of topic a message was popped from."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC_V1
    return NORMAL_TOPIC


def real_topic(topic: str, group: str, retry: str) -> str:
    """The topic a receipt refers to, given the request's topic and group."""
    if retry == NORMAL_TOPIC:
        return topic
    if retry == RETRY_TOPIC_V1:
        return f"{RETRY_PREFIX}{group}_{topic}"
    if retry == RETRY_TOPIC_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise HeaderError(f"field extraInfo: retry marker {retry!r} is not 0, 1 or 2")


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    """A pop receipt (``extraInfo``, also the ``POP_CK`` property of a popped message)."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int | None = None

    @classmethod
    def build(
        cls,
        ck_queue_offset: int,
        pop_time: int,
        invisible_time: int,
        revive_qid: int,
        topic: str,
        broker_name: str,
        queue_id: int,
        queue_offset: int | None = None,
    ) -> ExtraInfo:
        return cls(
            ck_queue_offset,
            pop_time,
            invisible_time,
            revive_qid,
            retry_marker(topic),
            broker_name,
            queue_id,
            queue_offset,
        )

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    def __str__(self) -> str:
        parts = [
            self.ck_queue_offset,
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.retry,
            self.broker_name,
            self.queue_id,
        ]
        if self.queue_offset is not None:
            parts.append(self.queue_offset)
        return " ".join(map(str, parts))

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        """Raises :class:`HeaderError` naming the part that is wrong."""
        parts = java_split(text, " ")
        if not 7 <= len(parts) <= 8:
            raise HeaderError(f"field extraInfo: {len(parts)} parts, expected 7 or 8")
        if parts[4] not in (NORMAL_TOPIC, RETRY_TOPIC_V1, RETRY_TOPIC_V2):
            raise HeaderError(f"field extraInfo: retry marker {parts[4]!r} is not 0, 1 or 2")
        return cls(
            ck_queue_offset=_number("extraInfo ckQueueOffset", parts[0]),
            pop_time=_number("extraInfo popTime", parts[1]),
            invisible_time=_number("extraInfo invisibleTime", parts[2]),
            revive_qid=_number("extraInfo reviveQid", parts[3]),
            retry=parts[4],
            broker_name=parts[5],
            queue_id=_number("extraInfo queueId", parts[6]),
            queue_offset=_number("extraInfo queueOffset", parts[7]) if len(parts) == 8 else None,
        )


def java_split(text: str, sep: str) -> list[str]:
    """``String.split`` with a literal one-character separator: trailing empty strings
    are dropped (``"a b "`` gives two parts, ``""`` gives ``[""]``)."""
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if len(parts) == 1 and parts[0] == "" and text:
        return []
    return parts


def _number(name: str, text: str) -> int:
    value: int = parse_value(name, "long", text)
    return value


def build_offset_info(entries: list[tuple[str, int, int | list[int]]]) -> str:
    """``startOffsetInfo``/``orderCountInfo``/``msgOffsetInfo`` from (topic, queueId,
    value) entries; a list value becomes the comma list of msgOffsetInfo."""
    return ";".join(
        f"{retry_marker(topic)} {queue_id} "
        + (",".join(map(str, value)) if isinstance(value, list) else str(value))
        for topic, queue_id, value in entries
    )


def parse_offset_info(text: str | None) -> dict[str, str]:
    """``{"<retry>@<queueId>": value}`` as ExtraInfoUtil's parsers key them."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for one in java_split(text, ";"):
        parts = java_split(one, " ")
        if len(parts) != 3:
            raise HeaderError(f"offset info entry {one!r}: expected 3 parts")
        key = f"{parts[0]}@{parts[1]}"
        if key in out:
            raise HeaderError(f"offset info entry {one!r}: duplicate queue")
        out[key] = parts[2]
    return out
