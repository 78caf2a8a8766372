"""LMQ Gateway's own remoting requests for the connector (issue 19): origins, high-water
marks, the cluster id and group-offset translation.

A *copy* is a message sent (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE) with the
properties ``__LMQ_ORIGIN_CLUSTER``, ``__LMQ_ORIGIN_QUEUE`` and ``__LMQ_ORIGIN_OFFSET``
(see ``gateway/connector/endpoints.py``). A gateway keeps, per (origin cluster, origin
queue, target topic), the highest origin offset stored: its *high-water mark* (HWM). A
copy at or below the HWM is a duplicate: answered SUCCESS, not stored.

Requests (codes in :class:`~protocol.remoting.codes.RequestCode`, all answered
``SUCCESS`` or an error code with a remark; docs/rocketmq.md "Connector requests"):

``LMQ_GET_CLUSTER_ID`` (29001)
    No fields, no body. Reply body ``{"clusterId": "<id>"}``. Needs no permission beyond
    an authenticated connection.

``LMQ_QUERY_ORIGINS`` (29002)
    Fields :class:`QueryOriginsRequestHeader` (``topic``: the target topic the copies go
    to; ``originCluster``). Body: a JSON list of origin queues (``["T:0", "T:1"]``).
    Reply body :class:`OriginsReply`: ``{"clusterId": "<this gateway's id>",
    "highWater": {"T:0": 41}}``: a queue with no copy and no advance is absent. Needs
    PUB on ``topic``.

``LMQ_ADVANCE_ORIGIN`` (29003)
    Fields :class:`AdvanceOriginRequestHeader` (``topic``, ``originCluster``,
    ``originQueue``, ``originOffset``). Raises the HWM to ``originOffset`` (never lowers
    it) with a control record, durable when answered: for source ranges the connector
    filtered out, so a restart does not rescan them. Reply field ``highWater``: the HWM
    after the request. Needs PUB on ``topic``.

``LMQ_TRANSLATE_OFFSETS`` (29004)
    Fields :class:`TranslateOffsetsRequestHeader` (``topic``: the target topic;
    ``originCluster``). Body: JSON object origin queue -> a source consumer group's
    committed *next* offset (``{"T:0": 42}``). Reply body :class:`TranslateReply`:
    ``{"clusterId": ..., "offsets": [{"topic": "U", "queueId": 0, "offset": 17}]}``: per
    target queue of ``topic`` that holds copies of those origin queues, the next offset
    a consumer of the copies commits to resume without reprocessing (the target offset of
    the first copy whose origin offset is at or above the committed one; past the last
    copy when there is none; the minimum over the origin queues copied there). Needs SUB
    on ``topic`` (the caller reads it as the group would).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import BodyError
from .headers import Header, _f
from .json_body import dump, get_int, get_str, load_object, loads_lenient

#: The wire property names (``gateway/connector/endpoints.py`` holds the same strings; the
#: protocol package cannot import the gateway).
ORIGIN_CLUSTER = "__LMQ_ORIGIN_CLUSTER"
ORIGIN_QUEUE = "__LMQ_ORIGIN_QUEUE"
ORIGIN_OFFSET = "__LMQ_ORIGIN_OFFSET"
PATH = "__LMQ_PATH"


@dataclass(frozen=True, slots=True)
class QueryOriginsRequestHeader(Header):
    topic: str = _f("topic", required=True)
    origin_cluster: str = _f("originCluster", required=True)


@dataclass(frozen=True, slots=True)
class AdvanceOriginRequestHeader(Header):
    topic: str = _f("topic", required=True)
    origin_cluster: str = _f("originCluster", required=True)
    origin_queue: str = _f("originQueue", required=True)
    origin_offset: int = _f("originOffset", "long", required=True)


@dataclass(frozen=True, slots=True)
class AdvanceOriginResponseHeader(Header):
    high_water: int = _f("highWater", "long", required=True)


@dataclass(frozen=True, slots=True)
class TranslateOffsetsRequestHeader(Header):
    topic: str = _f("topic", required=True)
    origin_cluster: str = _f("originCluster", required=True)


def encode_cluster_id(cluster_id: str) -> bytes:
    return dump({"clusterId": cluster_id})


def decode_cluster_id(body: bytes) -> str:
    value = get_str(load_object(body, "cluster id"), "clusterId")
    if not value:
        raise BodyError("cluster id body: no clusterId")
    return str(value)


def encode_queue_list(queues: Sequence[str]) -> bytes:
    return dump(list(queues))


def decode_queue_list(body: bytes) -> list[str]:
    value = loads_lenient(body) if body else []
    if not isinstance(value, list) or not all(isinstance(q, str) for q in value):
        raise BodyError("origin queues body: not a JSON list of strings")
    return value


@dataclass(frozen=True, slots=True)
class OriginsReply:
    cluster_id: str
    high_water: dict[str, int]

    def encode(self) -> bytes:
        return dump({"clusterId": self.cluster_id, "highWater": self.high_water})

    @classmethod
    def decode(cls, body: bytes) -> OriginsReply:
        obj = load_object(body, "origins")
        marks = obj.get("highWater") or {}
        if not isinstance(marks, dict):
            raise BodyError("body field highWater: not an object")
        return cls(
            cluster_id=str(get_str(obj, "clusterId", "")),
            high_water={str(q): get_int(marks, q) for q in marks},
        )


def encode_committed(offsets: Mapping[str, int]) -> bytes:
    return dump(dict(offsets))


def decode_committed(body: bytes) -> dict[str, int]:
    obj = load_object(body, "committed offsets")
    return {str(q): get_int(obj, q) for q in obj}


@dataclass(frozen=True, slots=True)
class TranslatedOffset:
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class TranslateReply:
    cluster_id: str
    offsets: list[TranslatedOffset]

    def encode(self) -> bytes:
        return dump(
            {
                "clusterId": self.cluster_id,
                "offsets": [
                    {"topic": t.topic, "queueId": t.queue_id, "offset": t.offset}
                    for t in self.offsets
                ],
            }
        )

    @classmethod
    def decode(cls, body: bytes) -> TranslateReply:
        obj = load_object(body, "translated offsets")
        items = obj.get("offsets") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BodyError("body field offsets: not a list of objects")
        return cls(
            cluster_id=str(get_str(obj, "clusterId", "")),
            offsets=[
                TranslatedOffset(
                    str(get_str(i, "topic", "")), get_int(i, "queueId"), get_int(i, "offset")
                )
                for i in items
            ],
        )
