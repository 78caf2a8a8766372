"""The pop consumer (RocketMQ 5): the server picks the messages, the client acks them.

POP_MESSAGE takes up to ``max_nums`` messages of a topic (one queue, or every queue with
``queue_id=-1``) and hides them for ``invisible_ms``; each carries its receipt in the
POP_CK property (``ExtraInfoUtil``'s ``ckOffset popTime invisibleTime reviveQid topic
brokerName queueId msgOffset``). ACK_MESSAGE (or BATCH_ACK_MESSAGE) with that receipt
consumes it for good; CHANGE_MESSAGE_INVISIBLETIME hides it for longer (and answers with
a new pop time, so the receipt changes); a message neither acked nor renewed becomes
visible again when its time is up. No rebalance, no offsets: any number of pop consumers
of one group share every queue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from protocol.remoting import RequestCode, ResponseCode
from protocol.remoting.bodies import ConsumerData, HeartbeatData, SubscriptionData

from .remoting import (
    DEFAULT_TIMEOUT,
    ReceivedMessage,
    RemotingClient,
    RemotingConnection,
    RemotingError,
    decode_messages,
)

_POP_OK = (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT, ResponseCode.NO_MESSAGE)


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """A popped message and the receipt that acks it."""

    message: ReceivedMessage
    receipt: str

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def queue_id(self) -> int:
        return self.message.queue_id

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset


class PopConsumer:
    """Pops and acks for group ``group``."""

    def __init__(self, client: RemotingClient, group: str, *, timeout: float = DEFAULT_TIMEOUT):
        self.client = client
        self.group = group
        self.timeout = timeout

    async def pop(
        self,
        topic: str,
        *,
        queue_id: int = -1,
        max_nums: int = 32,
        invisible_ms: int = 60_000,
        poll_ms: int = 0,
        expression: str = "*",
        from_first: bool = True,
        order: bool = False,
        attempt_id: str | None = None,
    ) -> list[PoppedMessage]:
        """Pop up to ``max_nums`` messages; with ``poll_ms`` the server waits that long
        for one to arrive. An empty list when there is none."""
        route = await self.client.route(topic)
        broker = sorted(route.brokers)[0]
        conn = await self.client.broker(broker, topic)
        fields: dict[str, object] = {
            "consumerGroup": self.group,
            "topic": topic,
            "queueId": queue_id,
            "maxMsgNums": max_nums,
            "invisibleTime": invisible_ms,
            "pollTime": poll_ms,
            "bornTime": int(time.time() * 1000),
            "initMode": 0 if from_first else 1,
            "expType": "TAG",
            "exp": expression,
            "order": order,
            "bname": broker,
        }
        if attempt_id:
            fields["attemptId"] = attempt_id
        response = await conn.call(
            RequestCode.POP_MESSAGE, fields, timeout=self.timeout + poll_ms / 1000, ok=_POP_OK
        )
        if response.code != ResponseCode.SUCCESS or not response.body:
            return []
        out = []
        for message in decode_messages(response.body):
            receipt = message.properties.get("POP_CK")
            if not receipt:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR, f"popped message {message.msg_id} has no POP_CK"
                )
            out.append(PoppedMessage(message, receipt))
        return out

    async def ack(self, popped: PoppedMessage) -> None:
        """ACK_MESSAGE: the message is consumed; an expired receipt raises."""
        conn = await self._conn(popped)
        await conn.call(
            RequestCode.ACK_MESSAGE,
            {
                "consumerGroup": self.group,
                "topic": popped.topic,
                "queueId": popped.queue_id,
                "extraInfo": popped.receipt,
                "offset": popped.queue_offset,
            },
            timeout=self.timeout,
        )

    async def ack_many(self, popped: list[PoppedMessage]) -> None:
        """Ack each message; BATCH_ACK_MESSAGE's bit-set body is left to the server
        side, the client sends one ACK_MESSAGE per receipt."""
        for p in popped:
            await self.ack(p)

    async def change_invisible_time(
        self, popped: PoppedMessage, invisible_ms: int
    ) -> PoppedMessage:
        """Hide the message ``invisible_ms`` from now; returns it with its new receipt."""
        conn = await self._conn(popped)
        response = await conn.call(
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
            {
                "consumerGroup": self.group,
                "topic": popped.topic,
                "queueId": popped.queue_id,
                "extraInfo": popped.receipt,
                "offset": popped.queue_offset,
                "invisibleTime": invisible_ms,
            },
            timeout=self.timeout,
        )
        f = response.ext_fields
        parts = popped.receipt.split(" ")
        if len(parts) >= 4:
            parts[1] = f.get("popTime", parts[1])
            parts[2] = f.get("invisibleTime", str(invisible_ms))
            parts[3] = f.get("reviveQid", parts[3])
        return PoppedMessage(popped.message, " ".join(parts))

    async def _conn(self, popped: PoppedMessage) -> RemotingConnection:
        # ExtraInfo's sixth field is the broker name.
        parts = popped.receipt.split(" ")
        if len(parts) > 5:
            broker = parts[5]
        else:
            broker = sorted((await self.client.route(popped.topic)).brokers)[0]
        return await self.client.broker(broker, popped.topic)


def heartbeat_body(client_id: str, group: str, topics: list[str]) -> bytes:
    """A HEART_BEAT body announcing a pop consumer (consumeType CONSUME_POP)."""
    consumer = ConsumerData(
        group_name=group,
        consume_type="CONSUME_POP",
        subscription_data_set=tuple(SubscriptionData(t) for t in topics),
    )
    return HeartbeatData(client_id, consumers=(consumer,)).serialize()
