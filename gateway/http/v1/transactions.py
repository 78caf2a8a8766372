"""Transaction check-backs for JSON API producers: ``POST
/v1/producers/{group}/transactions/receive``.

An HTTP producer has no connection to be asked on, so it polls, as the Aliyun API's
``trans=pop`` does: the gateway's one check-back loop
(:mod:`gateway.rocketmq.transaction_checks`) offers each due half message to the front
ends in turn; :class:`GroupHalfPolls` takes it when a JSON API producer of the half's
producer group (the ``producer_group`` of its publish, ``PGROUP``) polled within the
last minute, and hands it to that poll. The producer then ends it with ``POST
/v1/transactions/{transaction_id}/commit`` or ``rollback``. A half handed out and not
ended is due again after the store's check interval; the store counts every check and
dead-letters a half after ``txn_max_checks``, as for the other front ends. The queue of
offered halves is this node's memory (a restart forgets what was not yet polled; the
next check offers it again), and the halves themselves, their check counts and times,
are the store's: recovered after a restart.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from broker_core import PendingTransaction
from gateway.http.messages import Request, Response
from gateway.http.v1.documents import (
    MAX_RECEIVE,
    MAX_WAIT_SECONDS,
    ApiError,
    json_object,
    json_response,
    number_option,
    with_body,
)
from gateway.rocketmq.half_polls import HalfPolls
from gateway.rocketmq.records import rocketmq_properties
from lmq.rocketmq import HIDDEN_PROPERTIES
from protocol.remoting.messages import decode_properties

if TYPE_CHECKING:
    from gateway.http.v1 import JsonApi

#: The name under which the check-back loop hands half messages to JSON API pollers.
CHECK_SENDER = "http-json"
_SYSTEM = HIDDEN_PROPERTIES


class GroupHalfPolls(HalfPolls):
    """:class:`~gateway.rocketmq.half_polls.HalfPolls` keyed by the half's producer group."""

    def key(self, txn: PendingTransaction) -> str:
        return txn.group


class TransactionPolls:
    def __init__(self, api: JsonApi) -> None:
        self.api = api
        self.ctx = api.ctx
        self.halves = GroupHalfPolls()
        self.ctx.rocketmq.transactions.register(CHECK_SENDER, self.halves.offer)

    async def receive(self, request: Request) -> Response:
        """Wait up to ``wait_seconds`` for half messages of the producer group that are
        due a check; each is answered with its ``transaction_id`` to end it by."""
        group = request.params["group"]
        if not group:
            raise ApiError(400, "a producer group is required")
        self.api.principal(request)
        doc = json_object(request)
        option = functools.partial(number_option, doc, request.query)

        count = int(option("max_messages", 16, 1, MAX_RECEIVE))
        wait = option("wait_seconds", 0, 0, MAX_WAIT_SECONDS)
        halves, store = self.halves, self.ctx.store
        halves.polled(group)
        deadline = time.monotonic() + wait
        out: list[dict[str, Any]] = []
        while True:
            for txn in halves.take(group, count - len(out)):
                if not self._may_end(request, txn):
                    continue  # (offered again at its next check, to whoever may)
                pending = store.txns.pending.get(txn.position)
                record = store.record_at(txn.position) if pending is not None else None
                if pending is not None and record is not None:
                    out.append(_half_doc(pending, record))
            left = deadline - time.monotonic()
            if out or left <= 0:
                break
            await halves.wait(group, left)
            halves.polled(group)
        self.api.counts.given(request, len(out))  # handed back: messages given
        return json_response(200, {"transactions": out})

    def _may_end(self, request: Request, txn: PendingTransaction) -> bool:
        try:
            self.api.check_publish(request, txn.topic)
        except ApiError:
            return False
        return True


def _half_doc(txn: PendingTransaction, record: Any) -> dict[str, Any]:
    props = decode_properties(rocketmq_properties(record))
    doc: dict[str, Any] = {
        "transaction_id": str(txn.position),
        "producer_group": txn.group,
        "topic": txn.topic,
        "message_id": props.get("UNIQ_KEY", str(txn.position)),
        "tag": record.tag,
        "keys": props["KEYS"].split() if props.get("KEYS") else [],
        "properties": {k: v for k, v in props.items() if k not in _SYSTEM},
        "checks": txn.checks,
        "born_ms": txn.born_ms,
        "store_ms": txn.store_ms,
        "next_check_ms": txn.next_check_ms,
    }
    return with_body(doc, record.body)


def routes(api: JsonApi) -> list[tuple[str, str, Any]]:
    polls = TransactionPolls(api)
    return [("POST", "/v1/producers/{group}/transactions/receive", polls.receive)]
