"""Receipt handles of the gRPC front end, their auto-renewal, and receive attempt ids.

Handles
-------
A v2 ``receipt_handle`` is the pop receipt remoting uses (``ExtraInfo``, the
``POP_CK`` string: :mod:`gateway.rocketmq.pop_receipts`): it names the queue, the
offset, the pop time and invisible time, and whether the message came from the pop retry
topic, so an ack rebuilds the store's in-flight key from the handle and the request's
group and topic, with no table. A receipt from a remoting pop acks over gRPC and the
other way round.

Auto-renewal
------------
A push consumer receives with ``auto_renew`` and no invisible duration: the gateway
gives the messages :data:`DEFAULT_INVISIBLE_MS` and keeps renewing them until the
consumer acks (or nacks with ChangeInvisibleDuration, or forwards them to the DLQ), as
the proxy's ``ReceiptHandleProcessor`` does: every :data:`RENEW_PERIOD_S` seconds each
tracked message whose invisible time ends within :data:`RENEW_AHEAD_MS` gets a new one.
Renewing changes the receipt, but the consumer keeps the handle it was given:
:meth:`Renewer.take` maps it to the current one when the consumer settles the message.
A message is renewed for at most :data:`RENEW_MAX_MS` (then it is let go and comes back
to the group); the table is in memory, so after a restart renewed messages come back
when their last invisible time runs out (at-least-once, never lost).

Attempt ids
-----------
A receive carrying an ``attempt_id`` the same group used for a receive whose messages
are still invisible gets those messages again, with the same handles, instead of hiding
new ones (a client retrying a receive whose response it lost). :class:`Attempts` keeps
the last :data:`MAX_ATTEMPTS` such results until their invisible time runs out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker_core import UnknownReceipt
from gateway.rocketmq.pop_receipts import ExtraInfo, visible_at
from gateway.rocketmq.pop_service import PopItem, PopService
from protocol.grpc import Code, StatusError
from protocol.remoting import HeaderError
from protocol.remoting.pop import real_topic

__all__ = [
    "DEFAULT_INVISIBLE_MS",
    "Attempts",
    "ConsumeState",
    "Handle",
    "Renewer",
    "parse_handle",
]

log = logging.getLogger(__name__)

#: The proxy's ``defaultInvisibleTimeMills``: what an auto-renewed receive gets.
DEFAULT_INVISIBLE_MS = 60_000
#: The proxy's ``renewSchedulePeriodMillis``, ``renewAheadTimeMillis`` and
#: ``renewMaxTimeMillis``.
RENEW_PERIOD_S = 5.0
RENEW_AHEAD_MS = 10_000
RENEW_MAX_MS = 3 * 3600 * 1000
#: Messages tracked for renewal, receives remembered by attempt id.
MAX_RENEWALS = 100_000
MAX_ATTEMPTS = 4096


@dataclass(frozen=True, slots=True)
class Handle:
    """A parsed receipt handle, for ``group`` and the request's ``topic``."""

    info: ExtraInfo
    #: The queue's real topic (the pop retry topic for a message popped from it).
    topic: str
    text: str

    @property
    def queue_id(self) -> int:
        return self.info.queue_id

    @property
    def offset(self) -> int:
        return self.info.queue_offset if self.info.queue_offset is not None else -1

    @property
    def visible_at(self) -> int:
        return visible_at(self.info)


def parse_handle(text: str, group: str, topic: str) -> Handle:
    """INVALID_RECEIPT_HANDLE for anything that is not one of the gateway's handles."""
    try:
        info = ExtraInfo.parse(text)
        if info.queue_offset is None:
            raise HeaderError("the receipt names no offset")
        real = real_topic(topic, group, info.retry)
    except HeaderError as exc:
        raise StatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is invalid: {exc}") \
            from None
    return Handle(info, real, text)


@dataclass(slots=True)
class _Renewal:
    group: str
    #: The handle the consumer holds, and the one the store knows now.
    original: str
    current: Handle
    client_id: str
    started_ms: int


class Renewer:
    """Renews the messages auto-renewing receives handed out (see the module doc)."""

    def __init__(self, pop: PopService, spawn: Callable[..., object]) -> None:
        self.pop = pop
        self._spawn = spawn
        self._table: dict[tuple[str, str], _Renewal] = {}
        self._task: object | None = None
        self.renewed = 0

    def __len__(self) -> int:
        return len(self._table)

    def track(self, group: str, handle: Handle, client_id: str) -> None:
        if len(self._table) >= MAX_RENEWALS:
            return  # not renewed: comes back after its invisible time, never lost
        self._table[(group, handle.text)] = _Renewal(
            group, handle.text, handle, client_id, self.pop.clock())
        if self._task is None:
            self._task = self._spawn(self._loop(), "grpc-renew")

    def take(self, group: str, handle: str) -> str:
        """The handle to settle now for the handle a consumer holds (its current one
        when the gateway renewed it); stops renewing it."""
        found = self._table.pop((group, handle), None)
        return handle if found is None else found.current.text

    def forget_client(self, client_id: str) -> int:
        """Stop renewing what ``client_id`` holds (it is gone): its messages come back
        when their invisible time runs out. Returns how many."""
        gone = [k for k, r in self._table.items() if r.client_id == client_id]
        for key in gone:
            del self._table[key]
        return len(gone)

    async def _loop(self) -> None:
        try:
            while self._table:
                await asyncio.sleep(RENEW_PERIOD_S)
                self.renew_due()
        finally:
            self._task = None

    def renew_due(self) -> int:
        """Renew every tracked message whose invisible time ends soon; returns how many."""
        now = self.pop.clock()
        count = 0
        for key, entry in list(self._table.items()):
            handle = entry.current
            if handle.visible_at - now > RENEW_AHEAD_MS:
                continue
            if now - entry.started_ms > RENEW_MAX_MS:
                del self._table[key]
                continue
            try:
                pop_time, invisible = self.pop.change_invisible_time(
                    entry.group, handle.topic, handle.queue_id, handle.offset, handle.text,
                    DEFAULT_INVISIBLE_MS)
            except (UnknownReceipt, LookupError, ValueError, HeaderError):
                del self._table[key]  # acked elsewhere, expired, or its queue is gone
                continue
            except Exception:
                log.exception("gRPC receipt renewal failed")
                del self._table[key]
                continue
            info = handle.info
            new = ExtraInfo(info.ck_queue_offset, pop_time, invisible, info.revive_qid,
                            info.retry, info.broker_name, info.queue_id, info.queue_offset)
            entry.current = Handle(new, handle.topic, str(new))
            count += 1
        self.renewed += count
        return count


@dataclass(slots=True)
class _Attempt:
    items: list[PopItem]
    pop_time: int
    invisible_ms: int


class Attempts:
    """Receive results by ``(group, topic, attempt_id)`` while they are invisible."""

    def __init__(self) -> None:
        self._table: OrderedDict[tuple[str, str, str], _Attempt] = OrderedDict()

    def get(self, key: tuple[str, str, str], now: int) -> _Attempt | None:
        found = self._table.get(key)
        if found is None:
            return None
        if found.pop_time + found.invisible_ms <= now:
            del self._table[key]
            return None
        return found

    def put(self, key: tuple[str, str, str], items: list[PopItem], pop_time: int,
            invisible_ms: int) -> None:
        self._table[key] = _Attempt(items, pop_time, invisible_ms)
        self._table.move_to_end(key)
        while len(self._table) > MAX_ATTEMPTS:
            self._table.popitem(last=False)


@dataclass(slots=True)
class ConsumeState:
    """The gRPC front end's renewals and remembered attempts (``call.services.consume``)."""

    renewer: Renewer
    attempts: Attempts
