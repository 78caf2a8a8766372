"""The connector's requests (issue 19) and the copy side of sends.

Requests (wire: :mod:`protocol.remoting.origins`; docs/rocketmq.md "Connector
requests"): LMQ_GET_CLUSTER_ID, LMQ_QUERY_ORIGINS, LMQ_ADVANCE_ORIGIN and
LMQ_TRANSLATE_OFFSETS, answered from the store's origins (:mod:`broker_core.origins`).

Copies: a send whose properties hold ``__LMQ_ORIGIN_CLUSTER``/``_QUEUE``/``_OFFSET``
(all three, the offset decimal and not negative; a partial or malformed origin is
MESSAGE_ILLEGAL) or ``__LMQ_PATH`` is a copy: :func:`copy_of` reads it;
:mod:`gateway.remoting.send` stores copies with ``store.append_copies`` (a duplicate is
dropped there) and drops a copy whose path names this gateway (a loop) before the store.
The properties stay in the message's RocketMQ properties: a consumer of the copies sees
them as ordinary properties.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from broker_core.origins import ORIGIN_PROPERTY, encode_origin
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.replies import response
from lmq.rocketmq import queue_lmq
from protocol.remoting.codes import RequestCode, ResponseCode
from protocol.remoting.errors import BodyError, HeaderError
from protocol.remoting.origins import (
    ORIGIN_CLUSTER,
    ORIGIN_OFFSET,
    ORIGIN_QUEUE,
    PATH,
    AdvanceOriginRequestHeader,
    OriginsReply,
    QueryOriginsRequestHeader,
    TranslatedOffset,
    TranslateOffsetsRequestHeader,
    TranslateReply,
    decode_committed,
    decode_queue_list,
    encode_cluster_id,
)

if TYPE_CHECKING:
    from protocol.remoting import RemotingCommand

#: The properties that make a send a copy.
COPY_PROPERTIES = frozenset({ORIGIN_CLUSTER, ORIGIN_QUEUE, ORIGIN_OFFSET, PATH})


def register(table: DispatchTable) -> None:
    table.register(RequestCode.LMQ_GET_CLUSTER_ID, get_cluster_id)
    table.register(RequestCode.LMQ_QUERY_ORIGINS, query_origins)
    table.register(RequestCode.LMQ_ADVANCE_ORIGIN, advance_origin)
    table.register(RequestCode.LMQ_TRANSLATE_OFFSETS, translate_offsets)


@dataclass(frozen=True, slots=True)
class Copy:
    """What a send's copy properties say: the store's origin value (None: a path but no
    origin) and whether the path names this gateway."""

    origin: bytes | None
    loop: bool


def copy_of(props: dict[str, str], cluster_id: str) -> Copy | None:
    """None for a plain message; else its :class:`Copy`. ``RequestError`` MESSAGE_ILLEGAL
    for a partial or malformed origin."""
    if props.keys().isdisjoint(COPY_PROPERTIES):
        return None
    path = props.get(PATH, "")
    loop = cluster_id in path.split(",") if path else False
    parts = (props.get(ORIGIN_CLUSTER), props.get(ORIGIN_QUEUE), props.get(ORIGIN_OFFSET))
    if parts == (None, None, None):
        return Copy(None, loop)
    cluster, queue, offset = parts
    if cluster is None or queue is None or offset is None:
        missing = [n for n, v in zip((ORIGIN_CLUSTER, ORIGIN_QUEUE, ORIGIN_OFFSET), parts,
                                     strict=True) if v is None]
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL, f"a copy's origin lacks {', '.join(missing)}")
    if not (offset.isascii() and offset.isdigit()) or not cluster or not queue:
        raise RequestError(
            ResponseCode.MESSAGE_ILLEGAL, f"a copy's origin is malformed: {offset!r}")
    try:
        value = encode_origin(cluster, queue, int(offset))
    except ValueError as exc:
        raise RequestError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
    return Copy(value, loop)


def with_origin(properties: Mapping[str, bytes] | None, copy: Copy) -> dict[str, bytes]:
    """A store message's properties with the origin the store keys on."""
    props = dict(properties or {})
    if copy.origin is not None:
        props[ORIGIN_PROPERTY] = copy.origin
    return props


_H = TypeVar("_H", QueryOriginsRequestHeader, AdvanceOriginRequestHeader,
              TranslateOffsetsRequestHeader)


def _header(kind: type[_H], cmd: RemotingCommand) -> _H:
    try:
        return kind.from_fields(cmd.ext_fields or {})
    except HeaderError as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None


def get_cluster_id(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return response(body=encode_cluster_id(ctx.services.cluster_id))


def query_origins(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    header = _header(QueryOriginsRequestHeader, cmd)
    ctx.services.check_publish(ctx, header.topic)
    try:
        queues = decode_queue_list(cmd.body)
    except BodyError as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    marks = ctx.services.store.origins.high_water(header.origin_cluster, header.topic, queues)
    return response(body=OriginsReply(ctx.services.cluster_id, marks).encode())


async def advance_origin(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    header = _header(AdvanceOriginRequestHeader, cmd)
    services = ctx.services
    services.check_publish(ctx, header.topic)
    if header.origin_offset < 0:
        raise RequestError(ResponseCode.INVALID_PARAMETER, "originOffset must not be negative")
    store = ctx.services.store
    try:
        mark, end = store.advance_origin(
            header.origin_cluster, header.origin_queue, header.topic, header.origin_offset,
            wait=False)
    except ValueError as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    if end is not None and store.waits_for_ack:
        await asyncio.wrap_future(store.acknowledged(end))
    return response(fields={"highWater": mark})


def translate_offsets(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    header = _header(TranslateOffsetsRequestHeader, cmd)
    services = ctx.services
    services.check_subscribe(ctx, header.topic, "(offset translation)")
    try:
        committed = decode_committed(cmd.body)
    except BodyError as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    config = ctx.services.topics.get(header.topic)
    if config is None:
        raise RequestError(ResponseCode.TOPIC_NOT_EXIST, f"no topic {header.topic}")
    store = ctx.services.store
    out: list[TranslatedOffset] = []
    for queue_id in range(max(config.read_queues, config.write_queues)):
        lmq = queue_lmq(header.topic, queue_id)
        found = [
            store.translate_origin(header.origin_cluster, queue, lmq, offset)
            for queue, offset in committed.items()
        ]
        offsets = [f for f in found if f is not None]
        if offsets:
            out.append(TranslatedOffset(header.topic, queue_id, min(offsets)))
    return response(body=TranslateReply(services.cluster_id, out).encode())
