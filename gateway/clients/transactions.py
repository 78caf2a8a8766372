"""A transactional RocketMQ producer over remoting, as the Java client's
``TransactionMQProducer`` works:

* :meth:`TransactionProducer.send_half` sends a message with ``TRAN_MSG=true``,
  ``PGROUP`` = the producer group and the prepared sysFlag: the server stores it as a
  half message, delivered only once committed. The result carries the offsetMsgId (the
  half's log position) and the ``transactionId``.
* :meth:`TransactionProducer.end` sends END_TRANSACTION (commit, rollback or unknown)
  for a half it sent: two-way by default, so the caller knows the outcome is durable
  (the Java client sends it oneway; ``oneway=True`` does too).
* :meth:`TransactionProducer.start` announces the producer group with a HEART_BEAT (the
  server sends check-backs to a connected producer of the group) and answers the
  server's CHECK_TRANSACTION_STATE with the ``checker``: it gets the
  :class:`~protocol.remoting.client.TransactionCheck` and the half message, and returns
  True (commit), False (rollback) or None (unknown: checked again later); the answer
  goes back as END_TRANSACTION ``fromTransactionCheck``, oneway, as Java sends it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from protocol.remoting import RemotingCommand, RequestCode, SysFlag
from protocol.remoting import messages as wire
from protocol.remoting.bodies import HeartbeatData
from protocol.remoting.client import TransactionCheck, end_transaction_fields

from .received import ReceivedMessage, decode_messages
from .remoting import _SEND_OK, Message, Producer, RemotingClient, SendResult, _send_result

log = logging.getLogger("lmq.client.remoting")

Checker = Callable[
    [TransactionCheck, ReceivedMessage], "bool | None | Awaitable[bool | None]"]


class TransactionProducer(Producer):
    """A producer of group ``group`` that sends half messages and ends them."""

    def __init__(
        self,
        client: RemotingClient,
        group: str,
        *,
        checker: Checker | None = None,
        timeout: float = 3.0,
    ) -> None:
        super().__init__(client, group, timeout=timeout, compress_over=None)
        self.checker = checker
        #: The check-backs received (header, message), in order.
        self.checks: list[tuple[TransactionCheck, ReceivedMessage]] = []
        self._topics: set[str] = set()

    async def start(self, *topics: str) -> None:
        """Listen for check-backs and announce the group to the server (and to the
        brokers of ``topics``' routes)."""
        self.client.request_handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check
        self._topics.update(topics)
        await self.heartbeat()

    async def heartbeat(self) -> None:
        body = HeartbeatData(self.client.client_id, producer_groups=(self.group,)).serialize()
        for topic in self._topics:
            await self.client.route(topic)
        conns = {id(c): c for c in await self.client.brokers()}
        ns = await self.client.connection(self.client.namesrv)
        conns.setdefault(id(ns), ns)
        for conn in conns.values():
            await conn.call(RequestCode.HEART_BEAT, None, body, timeout=self.timeout)

    async def send_half(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> SendResult:
        """Send a half message; it is delivered once :meth:`end` commits it."""
        props = dict(properties or {})
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = self.group
        message = Message(topic, body, tags, tuple(keys), props)
        mq = await self._pick(message, queue_id, None)
        wire_props = message.wire_properties()
        fields = self._header(mq, int(SysFlag.TRANSACTION_PREPARED), message.flag,
                              wire.encode_properties(wire_props))
        conn = await self.client.broker(mq.broker_name, mq.topic)
        response = await conn.call(
            RequestCode.SEND_MESSAGE_V2, fields, message.body, timeout=self.timeout,
            ok=_SEND_OK)
        return _send_result(response, mq, wire_props["UNIQ_KEY"])

    async def end(
        self, result: SendResult, commit: bool | None, *, oneway: bool = False,
    ) -> RemotingCommand | None:
        """END_TRANSACTION for the half ``result`` names: the server's response (raises
        :class:`~gateway.clients.RemotingError` on an error code), or None oneway."""
        fields = end_transaction_fields(
            producer_group=self.group, topic=result.queue.topic,
            commit_log_offset=wire.parse_offset_msg_id(result.offset_msg_id)[1],
            queue_offset=result.queue_offset,
            msg_id=result.msg_id, transaction_id=result.transaction_id or result.msg_id,
            commit=commit, from_check=False, broker_name=result.queue.broker_name)
        conn = await self.client.broker(result.queue.broker_name, result.queue.topic)
        if oneway:
            await conn.oneway(RequestCode.END_TRANSACTION, fields)
            return None
        return await conn.call(RequestCode.END_TRANSACTION, fields, timeout=self.timeout)

    async def _on_check(self, request: RemotingCommand) -> None:
        check = TransactionCheck.from_fields(request.ext_fields)
        messages = decode_messages(request.body)
        if not messages:
            log.warning("check-back without a message: %s", check)
            return None
        message = messages[0]
        if message.properties.get("PGROUP") not in (None, self.group):
            log.debug("check-back for another producer group: %s", check)
            return None
        self.checks.append((check, message))
        if self.checker is None:
            return None
        answer = self.checker(check, message)
        if inspect.isawaitable(answer):
            answer = await answer
        fields = end_transaction_fields(
            producer_group=self.group, topic=check.topic,
            commit_log_offset=check.commit_log_offset,
            queue_offset=check.tran_state_table_offset, msg_id=check.msg_id,
            transaction_id=check.transaction_id, commit=answer, from_check=True,
            broker_name=check.broker_name or None)
        try:  # back to the broker that asked (Java answers on the asking channel)
            conn = await self.client.broker(check.broker_name, check.topic)
        except Exception:
            conn = await self.client.connection(self.client.namesrv)
        await conn.oneway(RequestCode.END_TRANSACTION, fields)
        return None

