"""The connector's requests to a gateway (issue 19): cluster id, high-water marks,
advances and group-offset translation. Wire form: :mod:`protocol.remoting.origins`.

    async with RemotingClient("127.0.0.1:8080") as client:
        origins = OriginClient(client)
        me = await origins.cluster_id()
        marks = await origins.high_water("orders-copy", "gw-a", ["orders:0", "orders:1"])

Requests go to the name-server address (a gateway is its own single broker). Errors are
:class:`~gateway.clients.remoting.RemotingError` with the gateway's code and remark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocol.remoting.codes import RequestCode
from protocol.remoting.command import RemotingCommand
from protocol.remoting.origins import (
    OriginsReply,
    TranslateReply,
    decode_cluster_id,
    encode_committed,
    encode_queue_list,
)

from .remoting import RemotingClient


class OriginClient:
    def __init__(self, client: RemotingClient, *, timeout: float | None = None) -> None:
        self.client = client
        self.timeout = client.timeout if timeout is None else timeout

    async def _call(
        self, code: int, fields: Mapping[str, object], body: bytes = b""
    ) -> RemotingCommand:
        conn = await self.client.connection(self.client.namesrv)
        return await conn.call(code, fields, body, timeout=self.timeout)

    async def cluster_id(self) -> str:
        """The gateway's persistent cluster id."""
        response = await self._call(RequestCode.LMQ_GET_CLUSTER_ID, {})
        return decode_cluster_id(response.body)

    async def query_origins(
        self, topic: str, origin_cluster: str, queues: Sequence[str]
    ) -> OriginsReply:
        """The gateway's id and, per origin queue copied into ``topic`` from
        ``origin_cluster``, its high-water mark (queues never copied are absent)."""
        response = await self._call(
            RequestCode.LMQ_QUERY_ORIGINS,
            {"topic": topic, "originCluster": origin_cluster},
            encode_queue_list(queues),
        )
        return OriginsReply.decode(response.body)

    async def high_water(
        self, topic: str, origin_cluster: str, queues: Sequence[str]
    ) -> dict[str, int]:
        return (await self.query_origins(topic, origin_cluster, queues)).high_water

    async def advance(
        self, topic: str, origin_cluster: str, origin_queue: str, origin_offset: int
    ) -> int:
        """Raise the high-water mark of ``origin_queue`` to ``origin_offset`` (never lowers
        it; durable when this returns). Returns the mark after the request."""
        response = await self._call(
            RequestCode.LMQ_ADVANCE_ORIGIN,
            {
                "topic": topic,
                "originCluster": origin_cluster,
                "originQueue": origin_queue,
                "originOffset": origin_offset,
            },
        )
        return int(response.ext_fields["highWater"])

    async def translate_offsets(
        self, topic: str, origin_cluster: str, committed: Mapping[str, int]
    ) -> TranslateReply:
        """Per target queue of ``topic``, where a consumer of the copies resumes, given a
        source group's committed next offsets per origin queue."""
        response = await self._call(
            RequestCode.LMQ_TRANSLATE_OFFSETS,
            {"topic": topic, "originCluster": origin_cluster},
            encode_committed(committed),
        )
        return TranslateReply.decode(response.body)
