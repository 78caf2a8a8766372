"""The push consumer: a consumer group's share of its topics' queues, consumed in order
of arrival, with offsets committed to the server.

Like RocketMQ's ``DefaultMQPushConsumer`` in clustering mode:

* every ``heartbeat_interval`` (30 s) and at start, HEART_BEAT tells the server the
  group, its subscriptions (tags and their hash codes) and this client's id;
* every ``rebalance_interval`` and whenever the server sends NOTIFY_CONSUMER_IDS_CHANGED,
  GET_CONSUMER_LIST_BY_GROUP and the average strategy decide which queues are this
  client's (:func:`protocol.remoting.client.allocate_averagely`); a queue given up has
  its offset committed first, a new one starts at the group's committed offset (or, when
  the group has none, at the first or the last offset, ``consume_from``);
* one task per owned queue long-polls PULL_MESSAGE (suspended up to ``suspend_ms``) and
  hands each message to the handler, in queue order;
* a message the handler fails (returns ``False`` or raises) goes back to the server with
  CONSUMER_SEND_MSG_BACK, which redelivers it through ``%RETRY%<group>`` later; the
  consumer subscribes to that retry topic itself and gives such messages to the handler
  of their original topic (property RETRY_TOPIC);
* consumed offsets are committed every ``commit_interval`` (oneway
  UPDATE_CONSUMER_OFFSET), with each pull (its commitOffset), and at close, which also
  sends UNREGISTER_CLIENT.

With ``orderly=True`` it is RocketMQ's orderly consumer: a queue is pulled only while
this client holds its lock (LOCK_BATCH_MQ, renewed every ``lock_interval``), a failed
message is retried in place after a second (so order holds) and sent to the dead-letter
queue after ``max_reconsume_times``; given-up queues are unlocked (UNLOCK_BATCH_MQ).

Offsets are at-least-once: a message is consumed before its offset is committed, so a
crash between the two delivers it again, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocol.remoting import RemotingCommand, RequestCode, ResponseCode
from protocol.remoting.bodies import (
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
)
from protocol.remoting.client import allocate_averagely, parse_tag_expression, subscription_data

from .remoting import (
    DEFAULT_TIMEOUT,
    MessageQueue,
    PullConsumer,
    ReceivedMessage,
    RemotingClient,
    RemotingError,
)

log = logging.getLogger("lmq.client.push")

#: The handler's verdict: ``True``/``None`` consumed, ``False`` (or an exception) retry.
Handler = Callable[[ReceivedMessage], Awaitable[bool | None]]

RETRY_PREFIX = "%RETRY%"


@dataclass(slots=True)
class _Subscription:
    topic: str
    expression: str
    tags: list[str]
    handler: Handler
    version: int


class _QueueState:
    __slots__ = ("committed", "locked_until", "offset", "task")

    def __init__(self, offset: int) -> None:
        self.offset = offset  # the next message to pull and consume
        self.committed = -1  # what the server last acknowledged for this client
        self.task: asyncio.Task[None] | None = None
        self.locked_until = 0.0


class PushConsumer:
    """Consumes ``subscribe``\\d topics for group ``group``; ``await start()``, ``await
    close()``."""

    def __init__(
        self,
        client: RemotingClient,
        group: str,
        *,
        consume_from: str = "last",
        orderly: bool = False,
        pull_batch: int = 32,
        suspend_ms: int = 15_000,
        heartbeat_interval: float = 30.0,
        rebalance_interval: float = 20.0,
        commit_interval: float = 5.0,
        lock_interval: float = 20.0,
        max_reconsume_times: int = 16,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if consume_from not in ("first", "last"):
            raise ValueError("consume_from is 'first' or 'last'")
        self.client = client
        self.group = group
        self.consume_from = consume_from
        self.orderly = orderly
        self.pull_batch = pull_batch
        self.suspend_ms = suspend_ms
        self.heartbeat_interval = heartbeat_interval
        self.rebalance_interval = rebalance_interval
        self.commit_interval = commit_interval
        self.lock_interval = lock_interval
        self.max_reconsume_times = max_reconsume_times
        self.timeout = timeout
        self._puller = PullConsumer(client, group, timeout=timeout)
        self._subs: dict[str, _Subscription] = {}
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._rebalance_now = asyncio.Event()
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    def subscribe(self, topic: str, expression: str, handler: Handler) -> None:
        """Consume ``topic``'s messages whose tag ``expression`` (``"a || b"`` or
        ``"*"``) accepts, with ``handler``. Call before :meth:`start`."""
        self._subs[topic] = _Subscription(
            topic, expression, parse_tag_expression(expression), handler, int(time.time() * 1000)
        )

    @property
    def assigned(self) -> list[MessageQueue]:
        """The queues this client consumes now."""
        return sorted(self._queues)

    def offsets(self) -> dict[MessageQueue, tuple[int, int]]:
        """Per owned queue: (next offset to consume, last offset committed or -1)."""
        return {mq: (st.offset, st.committed) for mq, st in sorted(self._queues.items())}

    async def start(self) -> None:
        if not self.orderly:
            retry = RETRY_PREFIX + self.group
            self._subs.setdefault(
                retry, _Subscription(retry, "*", [], self._retry_handler, int(time.time() * 1000))
            )
        self.client.request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._notified
        for topic in self._subs:
            await self.client.route(topic)
        await self.heartbeat()
        await self.rebalance()
        loops = [self._heartbeat_loop(), self._rebalance_loop(), self._commit_loop()]
        if self.orderly:
            loops.append(self._lock_loop())
        self._tasks = [asyncio.ensure_future(c) for c in loops]

    async def close(self) -> None:
        """Stop pulling, commit every owned queue's offset, unlock, unregister."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        states = list(self._queues.items())
        for _, st in states:
            if st.task is not None:
                st.task.cancel()
        for _, st in states:
            if st.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await st.task
        for mq, _ in states:
            await self._release(mq, unlock=self.orderly)
        with contextlib.suppress(RemotingError, OSError):
            for conn in await self.client.brokers():
                await conn.call(
                    RequestCode.UNREGISTER_CLIENT,
                    {"clientID": self.client.client_id, "consumerGroup": self.group},
                    timeout=self.timeout,
                )
        self.client.request_handlers.pop(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, None)

    # -- heartbeat and rebalance ----------------------------------------------------------

    def heartbeat_body(self) -> bytes:
        consumer = ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_PASSIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET"
            if self.consume_from == "first"
            else "CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=tuple(
                subscription_data(s.topic, s.expression, s.version) for s in self._subs.values()
            ),
        )
        return HeartbeatData(self.client.client_id, consumers=(consumer,)).serialize()

    async def heartbeat(self) -> None:
        body = self.heartbeat_body()
        for conn in await self.client.brokers():
            await conn.call(RequestCode.HEART_BEAT, None, body, timeout=self.timeout)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
            except RemotingError as exc:
                log.warning("heartbeat failed: %s", exc)

    def _notified(self, request: RemotingCommand) -> None:
        self._rebalance_now.set()
        return None

    async def _rebalance_loop(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.rebalance_interval):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            try:
                await self.rebalance()
            except RemotingError as exc:
                log.warning("rebalance failed: %s", exc)

    async def consumer_ids(self, topic: str) -> list[str]:
        route = await self.client.route(topic)
        if not route.brokers:
            return []
        conn = await self.client.connection(sorted(route.brokers.values())[0])
        response = await conn.call(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group},
            timeout=self.timeout,
        )
        return list(ConsumerListBody.parse(response.body).consumer_id_list)

    async def rebalance(self) -> None:
        """Take this client's share of every subscribed topic's queues."""
        wanted: set[MessageQueue] = set()
        for topic in list(self._subs):
            queues = (await self.client.route(topic, refresh=True)).read_queues
            ids = await self.consumer_ids(topic)
            wanted.update(allocate_averagely(list(queues), ids, self.client.client_id))
        for mq in [q for q in self._queues if q not in wanted]:
            st = self._queues[mq]
            if st.task is not None:
                st.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await st.task
            await self._release(mq, unlock=self.orderly)
        for mq in sorted(wanted - set(self._queues)):
            offset = await self._start_offset(mq)
            if self._closing:
                return
            st = _QueueState(offset)
            self._queues[mq] = st
            if self.orderly:
                await self._lock([mq])
            st.task = asyncio.ensure_future(self._pull_loop(mq, st))

    async def _start_offset(self, mq: MessageQueue) -> int:
        committed = await self._puller.query_offset(mq)
        if committed is not None and committed >= 0:
            return committed
        if self.consume_from == "first" or mq.topic.startswith(RETRY_PREFIX):
            return await self._puller.min_offset(mq)
        return await self._puller.max_offset(mq)

    async def _release(self, mq: MessageQueue, *, unlock: bool) -> None:
        st = self._queues.pop(mq, None)
        if st is None:
            return
        with contextlib.suppress(RemotingError):
            if st.offset != st.committed:
                await self._puller.update_offset(mq, st.offset)
            if unlock:
                conn = await self.client.broker(mq.broker_name, mq.topic)
                await conn.call(
                    RequestCode.UNLOCK_BATCH_MQ, None, self._lock_body([mq]), timeout=self.timeout
                )

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval)
            await self.commit()

    async def commit(self) -> None:
        """Commit every owned queue's consumed offset that changed since the last commit."""
        for mq, st in list(self._queues.items()):
            if st.offset != st.committed:
                offset = st.offset
                try:
                    await self._puller.update_offset(mq, offset, oneway=True)
                    st.committed = offset
                except RemotingError as exc:
                    log.warning("offset commit of %s failed: %s", mq, exc)

    # -- orderly locks ----------------------------------------------------------------------

    def _lock_body(self, mqs: list[MessageQueue]) -> bytes:
        return LockBatchRequestBody(self.group, self.client.client_id, tuple(mqs)).serialize()

    async def _lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ; returns the queues this client now holds."""
        if not mqs:
            return set()
        conn = await self.client.broker(mqs[0].broker_name, mqs[0].topic)
        response = await conn.call(
            RequestCode.LOCK_BATCH_MQ, None, self._lock_body(mqs), timeout=self.timeout
        )
        got = set(LockBatchResponseBody.parse(response.body).lock_ok_mq_set)
        until = time.monotonic() + 30.0  # the Java client's own expiry of a held lock
        for mq in got:
            if mq in self._queues:
                self._queues[mq].locked_until = until
        return got

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lock_interval)
            try:
                await self._lock(list(self._queues))
            except RemotingError as exc:
                log.warning("lock renewal failed: %s", exc)

    # -- pulling and consuming --------------------------------------------------------------

    async def _pull_loop(self, mq: MessageQueue, st: _QueueState) -> None:
        sub = self._subs[mq.topic]
        while not self._closing:
            if self.orderly and st.locked_until < time.monotonic():
                await asyncio.sleep(1.0)
                with contextlib.suppress(RemotingError):
                    await self._lock([mq])
                continue
            try:
                result = await self._puller.pull(
                    mq,
                    st.offset,
                    expression=sub.expression,
                    max_nums=self.pull_batch,
                    suspend_ms=self.suspend_ms,
                    commit_offset=st.offset if st.committed != st.offset else None,
                )
            except RemotingError as exc:
                if self._closing:
                    return
                log.warning("pull from %s failed: %s", mq, exc)
                await asyncio.sleep(3.0)
                continue
            if result.status == ResponseCode.PULL_OFFSET_MOVED:
                st.offset = result.next_begin_offset
                continue
            for message in result.messages:
                if not sub.tags or message.tags in sub.tags:
                    await self._consume(mq, sub, message)
                if self._closing:
                    return
                st.offset = message.queue_offset + 1
            st.offset = result.next_begin_offset

    async def _consume(
        self, mq: MessageQueue, sub: _Subscription, message: ReceivedMessage
    ) -> None:
        attempts = 0
        while not self._closing:
            try:
                ok = await sub.handler(message) is not False
            except Exception:
                log.exception("handler failed on %s", message.msg_id)
                ok = False
            if ok:
                return
            if not self.orderly:
                try:
                    await self.send_back(message)
                    return
                except RemotingError as exc:
                    log.warning("send-back of %s failed, retrying here: %s", message.msg_id, exc)
                    await asyncio.sleep(5.0)
                    continue
            attempts += 1
            if attempts > self.max_reconsume_times:
                with contextlib.suppress(RemotingError):
                    await self.send_back(message, delay_level=-1)
                return
            await asyncio.sleep(1.0)

    async def send_back(self, message: ReceivedMessage, delay_level: int = 0) -> None:
        """CONSUMER_SEND_MSG_BACK: the server redelivers the message (found by its log
        position) through the group's retry topic; ``delay_level`` 0 lets it choose the
        delay, -1 sends it straight to the dead-letter queue."""
        props = message.properties
        origin_topic = props.get("RETRY_TOPIC", message.topic)
        conn = await self.client.broker(self._broker_of(message), message.topic)
        await conn.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": message.commit_log_offset,
                "group": self.group,
                "delayLevel": delay_level,
                "originMsgId": props.get("ORIGIN_MESSAGE_ID", message.msg_id),
                "originTopic": origin_topic,
                "unitMode": False,
                "maxReconsumeTimes": self.max_reconsume_times,
            },
            timeout=self.timeout,
        )

    def _broker_of(self, message: ReceivedMessage) -> str:
        for mq in self._queues:
            if mq.topic == message.topic:
                return mq.broker_name
        return next(iter(self._queues)).broker_name

    async def _retry_handler(self, message: ReceivedMessage) -> bool | None:
        origin = message.properties.get("RETRY_TOPIC")
        sub = self._subs.get(origin or "")
        if sub is None or origin is None or origin.startswith(RETRY_PREFIX):
            log.warning("retry message %s for no subscribed topic (%s)", message.msg_id, origin)
            return None
        return await sub.handler(message)

