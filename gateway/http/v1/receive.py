"""The JSON API's consumption: receive by group from a RocketMQ topic or an MQTT topic
filter (long polling, receipt handles), ack, nack, change of visibility, and seek."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from broker_core import (
    StoreError,
    UnknownLmq,
)
from broker_core.errors import UnknownReceipt
from gateway.http.messages import Request, Response
from gateway.http.v1.base import ApiBase
from gateway.http.v1.documents import (
    DEFAULT_INVISIBLE_SECONDS,
    MAX_BATCH,
    MAX_RECEIVE,
    MAX_WAIT_SECONDS,
    MQTT_HANDLE,
    MQTT_SUB_META,
    ApiError,
    Receipt,
    decode_mqtt_handle,
    encode_mqtt_handle,
    int_field,
    json_body,
    json_object,
    json_response,
    message_doc,
    mqtt_message_doc,
    number_option,
    per_entry,
    tag_filter,
)
from gateway.rocketmq.offsets import reset_targets
from gateway.rocketmq.pop_service import OffsetOutOfRange, PollingFull
from gateway.topic_space import MQTT_SHARE_PREFIX, mqtt_lmq
from lmq.names import validate_topic_filter

log = logging.getLogger("gateway.http.v1")


class Receiving(ApiBase):
    """Receive, settle (ack, nack, visibility) and seek."""

    async def receive(self, request: Request) -> Response:
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        if self.ctx.rocketmq_topics.get(topic) is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        doc = json_object(request)
        q = request.query
        option = functools.partial(number_option, doc, q)

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        invisible = option("invisible_seconds", DEFAULT_INVISIBLE_SECONDS, 1, 12 * 3600)
        tag = doc.get("tag", q.get("tag", [None])[0])
        ordered = bool(doc.get("ordered", (q.get("ordered", [""])[0] in ("1", "true"))))
        accept = tag_filter(tag) if tag else None
        try:
            result = await self.ctx.rocketmq.pop.pop(
                group, topic, -1, count, int(invisible * 1000), int(wait * 1000),
                accept=accept, fifo=ordered)
        except PollingFull as exc:
            raise ApiError(429, str(exc), headers=[("Retry-After", "1")]) from None
        except (UnknownLmq, ValueError) as exc:
            raise ApiError(404, str(exc)) from None
        visible = result.pop_time + result.invisible_time
        self.counts.given(request, len(result.items))
        return json_response(200, {"messages": [
            message_doc(item, visible) for item in result.items]})

    # -- MQTT topic filters -------------------------------------------------------

    def _mqtt_subscription(self, group: str, topic_filter: str) -> str:
        """The filter's LMQ, dispatched to by the topic space like an MQTT
        subscription's: registered durably on first use (store meta, re-registered at
        start), the group starting at the end of the LMQ."""
        lmq = mqtt_lmq(topic_filter)
        if topic_filter not in self._mqtt_filters:
            self.ctx.topic_space.add_filter(topic_filter)
            self._mqtt_filters.add(topic_filter)
        store = self.ctx.store
        key = f"{MQTT_SUB_META}{group}\n{topic_filter}"
        if store.get_meta(key) is None:
            info = store.lmq(lmq) or store.create_lmq(lmq)
            store_group = MQTT_SHARE_PREFIX + group
            if store.get_offset(store_group, lmq) is None:
                store.commit_offset(store_group, lmq, info.max_offset)
            store.put_meta(key, b"1")
        return lmq

    async def delete_mqtt_subscription(self, request: Request) -> Response:
        """Drop the group's subscription to the filter: publishes no longer go to the
        filter's LMQ for it (they still do while another HTTP group or an MQTT session
        subscribes to the same filter). The group's offset stays (an MQTT
        ``$share/<group>/<filter>`` subscription shares it)."""
        group, topic_filter = request.params["group"], request.params["filter"]
        self.check_consume(request, topic_filter)
        store = self.ctx.store
        key = f"{MQTT_SUB_META}{group}\n{topic_filter}"
        existed = store.get_meta(key) is not None
        if existed:
            store.delete_meta(key)
        others = any(k.partition("\n")[2] == topic_filter
                     for k, _ in store.iter_meta(MQTT_SUB_META))
        if not others and topic_filter in self._mqtt_filters:
            self._mqtt_filters.discard(topic_filter)
            self.ctx.topic_space.remove_filter(topic_filter)
        if not existed:
            raise ApiError(404, f"group {group!r} has no subscription to {topic_filter!r}")
        return json_response(200, {"group": group, "filter": topic_filter})

    def restore_mqtt_subscriptions(self) -> None:
        for key, _ in self.ctx.store.iter_meta(MQTT_SUB_META):
            topic_filter = key[len(MQTT_SUB_META):].partition("\n")[2]
            if topic_filter and topic_filter not in self._mqtt_filters:
                self.ctx.topic_space.add_filter(topic_filter)
                self._mqtt_filters.add(topic_filter)

    async def receive_mqtt(self, request: Request) -> Response:
        """Pop an MQTT topic filter's messages as ``group`` (the group an MQTT
        ``$share/<group>/<filter>`` subscription pops as: the two share the work)."""
        group, topic_filter = request.params["group"], request.params["filter"]
        try:
            validate_topic_filter(topic_filter)
        except ValueError as exc:
            raise ApiError(400, f"invalid MQTT topic filter: {exc}") from None
        if not group or "/" in group or "+" in group or "#" in group:
            raise ApiError(400, "invalid group name")
        self.check_consume(request, topic_filter)
        doc = json_object(request)
        q = request.query
        option = functools.partial(number_option, doc, q)

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        invisible = int(option("invisible_seconds", DEFAULT_INVISIBLE_SECONDS, 1,
                               12 * 3600) * 1000)
        lmq = self._mqtt_subscription(group, topic_filter)
        store, store_group = self.ctx.store, MQTT_SHARE_PREFIX + group
        deadline = time.monotonic() + wait
        while True:
            popped = store.pop.pop(store_group, lmq, count, invisible)
            left = deadline - time.monotonic()
            if popped or left <= 0:
                break
            woken = asyncio.get_running_loop().create_future()

            def wake(*_: object, f: asyncio.Future[None] = woken) -> None:
                if not f.done():
                    f.set_result(None)

            remove = store.add_listener(lmq, self.ctx.loop_callback(wake))
            try:  # (woken by an append; a message coming back is seen within 1 s)
                async with asyncio.timeout(min(left, 1.0)):
                    await woken
            except TimeoutError:
                pass
            finally:
                remove()
        self.counts.given(request, len(popped))
        return json_response(200, {"messages": [
            mqtt_message_doc(topic_filter, p) for p in popped]})

    def _mqtt_settle(self, request: Request, group: str, handle: str,
                     invisible_ms: int | None) -> dict[str, Any]:
        """Ack (``invisible_ms`` None) or change the visibility of a message received
        from an MQTT topic filter."""
        try:
            topic_filter, receipt = decode_mqtt_handle(handle)
            self.check_consume(request, topic_filter)
            if invisible_ms is None:
                self.ctx.store.pop.ack(receipt)
                return {"status": 200, "receipt_handle": handle}
            renewed = self.ctx.store.pop.change_invisible_time(receipt, max(invisible_ms, 1))
            return {"status": 200, "receipt_handle": handle,
                    "new_receipt_handle": encode_mqtt_handle(topic_filter, renewed),
                    "next_visible_ms": self.ctx.store.pop.receipt_visible_at(renewed)}
        except ApiError as exc:
            return {"status": exc.status, "receipt_handle": handle, "detail": exc.detail}
        except UnknownReceipt:
            return {"status": 410, "receipt_handle": handle, "detail": "no longer in flight"}
        except (ValueError, StoreError) as exc:
            return {"status": 400, "receipt_handle": handle, "detail": str(exc)}

    def _settle(self, request: Request) -> tuple[str, list[object]]:
        group = request.params["group"]
        doc = json_body(request)
        handles = doc.get("receipt_handles") if isinstance(doc, dict) else None
        if not isinstance(handles, list) or not handles:
            raise ApiError(400, "'receipt_handles' must be a non-empty array")
        if len(handles) > MAX_BATCH:
            raise ApiError(413, f"at most {MAX_BATCH} receipt handles a request")
        self._group(group)
        return group, handles

    async def ack(self, request: Request) -> Response:
        group, handles = self._settle(request)
        results = []
        pop = self.ctx.rocketmq.pop
        for handle in handles:
            if isinstance(handle, str) and handle.startswith(MQTT_HANDLE):
                results.append(self._mqtt_settle(request, group, handle, None))
                continue
            try:
                receipt = Receipt.decode(handle)
                self.check_consume(request, receipt.topic)
                in_flight = pop.ack(group, receipt.topic, receipt.queue_id, receipt.offset,
                                    receipt.extra_info)
                results.append({"status": 200 if in_flight else 410, "receipt_handle": handle,
                                **({} if in_flight else {
                                    "detail": "no longer in flight (acked already, or its"
                                              " invisible time ran out)"})})
            except ApiError as exc:
                results.append({"status": exc.status, "receipt_handle": handle,
                                "detail": exc.detail})
            except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError) as exc:
                results.append({"status": 400, "receipt_handle": handle, "detail": str(exc)})
        return per_entry(results)

    async def change_visibility(self, request: Request) -> Response:
        group, handles = self._settle(request)
        doc = json_body(request)
        seconds = doc.get("invisible_seconds", 0)
        if not isinstance(seconds, int | float) or not 0 <= seconds <= 12 * 3600:
            raise ApiError(400, "invisible_seconds must be a number from 0 to 43200")
        return self._visibility(request, group, handles, int(seconds * 1000))

    async def nack(self, request: Request) -> Response:
        group, handles = self._settle(request)
        return self._visibility(request, group, handles, 0)

    def _visibility(self, request: Request, group: str, handles: list[object],
                    invisible_ms: int) -> Response:
        results = []
        pop = self.ctx.rocketmq.pop
        for handle in handles:
            if isinstance(handle, str) and handle.startswith(MQTT_HANDLE):
                results.append(self._mqtt_settle(request, group, handle, invisible_ms))
                continue
            try:
                receipt = Receipt.decode(handle)
                self.check_consume(request, receipt.topic)
                pop_time, invisible = pop.change_invisible_time(
                    group, receipt.topic, receipt.queue_id, receipt.offset,
                    receipt.extra_info, max(invisible_ms, 1))
                extra = receipt.extra_info.split(" ")
                extra[1], extra[2] = str(pop_time), str(invisible)
                renewed = Receipt(receipt.topic, receipt.queue_id, receipt.offset,
                                  " ".join(extra))
                results.append({"status": 200, "receipt_handle": handle,
                                "new_receipt_handle": renewed.encode(),
                                "next_visible_ms": pop_time + invisible})
            except ApiError as exc:
                results.append({"status": exc.status, "receipt_handle": handle,
                                "detail": exc.detail})
            except UnknownReceipt:
                results.append({"status": 410, "receipt_handle": handle,
                                "detail": "no longer in flight"})
            except (ValueError, UnknownLmq, OffsetOutOfRange, StoreError, IndexError) as exc:
                results.append({"status": 400, "receipt_handle": handle, "detail": str(exc)})
        return per_entry(results)

    async def seek(self, request: Request) -> Response:
        """Set the group's next offset on every queue of the topic: ``earliest``,
        ``latest``, or the first message stored at or after ``timestamp_ms``."""
        group, topic = request.params["group"], request.params["topic"]
        self.check_consume(request, topic)
        self._group(group)
        config = self.ctx.rocketmq_topics.get(topic)
        if config is None:
            raise ApiError(404, f"topic {topic!r} does not exist")
        doc = json_object(request)
        position = doc.get("position")
        stamp = doc.get("timestamp_ms")
        if (position is None) == (stamp is None) or position not in (
                None, "earliest", "latest"):
            raise ApiError(400, "give either 'position' (earliest or latest) or"
                                " 'timestamp_ms'")
        when = None
        if stamp is not None:
            try:
                when = int_field(stamp, "timestamp_ms")
            except ValueError as exc:
                raise ApiError(400, str(exc)) from None
        store = self.ctx.store
        offsets = reset_targets(store, config, position, when, queues=config.read_queues)
        if offsets:
            store.commit_offsets(group, offsets)
        return json_response(200, {"group": group, "topic": topic, "offsets": {
            lmq.rsplit(":", 1)[1]: off for lmq, off in offsets.items()}})
