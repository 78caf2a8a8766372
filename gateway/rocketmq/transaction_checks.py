"""Transaction check-backs: ONE loop for the gateway, every RocketMQ front end a way out.

The store decides which half messages are due a check (``MessageStore.
transaction_checks_due``: first after ``txn_first_check_ms`` or the message's
``CHECK_IMMUNITY_TIME_IN_SECONDS``, then every ``txn_check_interval_ms``, each check
counted by a control record in the log before it is handed out, so a restart never
resets the count; after ``txn_max_checks`` the message goes to the dead-letter LMQ).
:class:`TransactionChecks` asks it every :data:`CHECK_POLL_S` and hands each due half
to the front ends' *senders*, in the order they registered, until one reaches a
producer:

- remoting (:mod:`gateway.remoting.transactions`): CHECK_TRANSACTION_STATE, oneway, to
  a connected producer of the half's producer group (its ``PGROUP``), as the broker's
  ``Broker2Client.checkProducerTransactionState`` does;
- gRPC (:mod:`gateway.grpc.transactions`): a ``RecoverOrphanedTransactionCommand`` on
  the Telemetry stream of a producer publishing to the half's topic (the proxy uses the
  topic as the producer group of gRPC transactions).

A sender gets the pending transaction and its half record (read once per check) and
answers whether it handed the check to a producer. With none reached the check is still
counted, as the broker counts it, and :attr:`TransactionChecks.unasked` grows.

Event-loop thread only (the store calls are short: one index scan and one small append
per poll, like the timer firing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker_core import MessageStore, PendingTransaction, Record

__all__ = ["CHECK_BATCH", "CHECK_POLL_S", "CheckSender", "TransactionChecks"]

log = logging.getLogger(__name__)

#: How often the store is asked for due check-backs.
CHECK_POLL_S = 1.0
#: Check-backs asked for per poll at most (the rest come at the next poll).
CHECK_BATCH = 1000

#: ``sender(txn, half_record) -> True`` if the check reached a producer.
CheckSender = Callable[[PendingTransaction, Record], bool]


class TransactionChecks:
    """The gateway's check-back loop (see the module doc)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._senders: dict[str, CheckSender] = {}
        self._task: asyncio.Task[None] | None = None
        #: Check-backs handed to a producer, and those no front end could hand out.
        self.sent = 0
        self.unasked = 0

    def register(self, name: str, sender: CheckSender) -> None:
        """Let front end ``name`` reach producers (a second call replaces the first)."""
        self._senders[name] = sender

    def unregister(self, name: str) -> None:
        self._senders.pop(name, None)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None:
            self._task = loop.create_task(self.run(), name="transaction-checks")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_POLL_S)
            try:
                self.check_once()
            except Exception:
                log.exception("transaction check-backs failed")

    def check_once(self, now: int | None = None) -> int:
        """Ask the store for the due checks and hand them out; how many reached a
        producer."""
        store = self.store
        if store.closed:
            return 0
        due = store.transaction_checks_due(now, CHECK_BATCH)
        sent = 0
        for txn in due:
            if self._send(txn):
                sent += 1
            else:
                self.unasked += 1
                log.info("transaction check-back: no producer of its group connected",
                         extra={"position": txn.position, "topic": txn.topic,
                                "producer_group": txn.group, "checks": txn.checks})
        self.sent += sent
        return sent

    def _send(self, txn: PendingTransaction) -> bool:
        if not self._senders:
            return False
        record = self.store.record_at(txn.position)
        if record is None:
            return False
        for name, sender in list(self._senders.items()):
            try:
                if sender(txn, record):
                    return True
            except Exception:
                log.exception("transaction check-back through %s failed", name)
        return False
