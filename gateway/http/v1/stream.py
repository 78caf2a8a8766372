"""The JSON API's server-sent-event stream (``GET .../stream``)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from broker_core import (
    StoreError,
    UnknownLmq,
)
from gateway.http.messages import Request, Response
from gateway.http.v1.base import ApiBase
from gateway.http.v1.documents import (
    MAX_RECEIVE,
    ApiError,
    Receipt,
    decode_cursor,
    encode_cursor,
    message_doc,
)
from gateway.rocketmq.pop_service import OffsetOutOfRange, PopItem, Source
from lmq.rocketmq import queue_lmq

log = logging.getLogger("gateway.http.v1")


class Streaming(ApiBase):
    """The server-sent-event stream of a group's messages."""

    async def stream(self, request: Request) -> Response:
        """Server-sent events: each message is popped, sent as an event whose id is its
        receipt handle and the stream's cursor (``handle.cursor``: the last offset
        written on each queue of the topic), and acked once written. A client that
        reconnects with ``Last-Event-ID`` gets that message acked if it was not yet, the
        messages the group took after that cursor read again from the store (marked
        ``replayed``), then the rest. ``ack=manual`` leaves acking to the client (the
        events then come back after their invisible time unless acked; no replay)."""
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        if self.ctx.rocketmq_topics.get(topic) is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        manual = request.arg("ack") == "manual"
        raw_limit = request.arg("max_events") or "0"
        if not raw_limit.isdigit():
            raise ApiError(400, "max_events must be a non-negative integer")
        limit = int(raw_limit)
        pop = self.ctx.rocketmq.pop
        store = self.ctx.store
        last = request.header("last-event-id")
        cursor: dict[int, int] = {}
        if last:
            receipt_part, _, cursor_part = last.partition(".")
            try:
                cursor = decode_cursor(cursor_part) if cursor_part else {}
            except ValueError:
                cursor = {}
            if not manual:
                try:
                    receipt = Receipt.decode(receipt_part)
                    if receipt.extra_info:
                        pop.ack(group, receipt.topic, receipt.queue_id, receipt.offset,
                                receipt.extra_info)
                except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError):
                    pass
        # the rewind (auto mode): what this stream wrote and acked after the event the
        # client saw last is read again from the store, from the cursor in its id up to
        # the group's committed offset on each queue (the rest is popped as usual)
        replay: list[tuple[int, int, int]] = []
        if cursor and not manual:
            for queue_id, seen in sorted(cursor.items()):
                committed = store.get_offset(group, queue_lmq(topic, queue_id))
                if committed is not None and committed > seen + 1:
                    replay.append((queue_id, seen + 1, committed))

        # the cursor starts where the group is on every queue of the topic (so a queue
        # first written to after an event the client saw is rewound too)
        config = self.ctx.rocketmq_topics.get(topic)
        for queue_id in range(config.read_queues if config is not None else 0):
            committed = store.get_offset(group, queue_lmq(topic, queue_id))
            if committed is not None and queue_id not in cursor:
                cursor[queue_id] = committed - 1

        def event(doc: dict[str, Any]) -> bytes:
            cursor[doc["queue_id"]] = max(cursor.get(doc["queue_id"], -1), doc["offset"])
            doc["receipt_handle"] = doc["receipt_handle"] + "." + encode_cursor(cursor)
            data = json.dumps(doc, separators=(",", ":"))
            return f"id: {doc['receipt_handle']}\nevent: message\ndata: {data}\n\n".encode()

        async def events() -> AsyncIterator[bytes]:
            sent = 0
            yield b": lmq-gateway stream\nretry: 1000\n\n"
            for queue_id, start, end in replay:
                lmq = queue_lmq(topic, queue_id)
                for offset in range(start, end):
                    if limit and sent >= limit:
                        return
                    stored = store.read_at(lmq, offset)
                    if stored is None:
                        continue  # (removed by retention)
                    item = PopItem(stored, Source(lmq, topic, queue_id, "0"), 0)
                    doc = message_doc(item, 0)
                    doc["replayed"] = True
                    yield event(doc)
                    sent += 1
                    self.counts.given(request)
            while not limit or sent < limit:
                want = min(MAX_RECEIVE, limit - sent) if limit else MAX_RECEIVE
                result = await pop.pop(group, topic, -1, want, 30_000, 15_000)
                if not result.items:
                    yield b": keep-alive\n\n"
                    continue
                visible = result.pop_time + result.invisible_time
                for item in result.items:
                    doc = message_doc(item, visible)
                    if item.source.topic != topic:  # (a retry: no cursor position)
                        data = json.dumps(doc, separators=(",", ":"))
                        yield (f"id: {doc['receipt_handle']}\nevent: message\n"
                               f"data: {data}\n\n").encode()
                    else:
                        yield event(doc)
                    if not manual:
                        pop.ack(group, item.source.topic, item.source.queue_id,
                                item.message.offset, item.extra_info)
                    sent += 1
                    self.counts.given(request)

        return Response(200, [("content-type", "text/event-stream"),
                              ("cache-control", "no-store")], events())
