"""The seam through which a front end consumes AMQP queues without importing
``gateway.amqp``: the JSON API's ``/v1/amqp/{vhost}/queues/{queue}/receive``.

A queue's delivery order, ``x-delivery-limit``, TTLs, dead-lettering, priorities,
single-active-consumer and message groups are decided by the AMQP front end
(``gateway/amqp/queues.py``) per delivery, with the in-flight state in its memory. So
a queue is not popped from outside: the AMQP front end registers a
:class:`QueueConsumers` (``TopicSpace.set_queue_consumers``, as it registers its
exchange routing), whose :meth:`~QueueConsumers.receive` attaches a consumer the queue
treats like any other (its prefetch the request's ``max_messages``) for the long poll,
and holds what it was given under receipt handles for the visibility timeout; the
handles ack, requeue, reject or extend through the queue, and a delivery not settled
in time is requeued, as a channel's close requeues its unacked deliveries.

A receipt handle names the queue (so the caller checks the user's read permission
before settling) and the gateway run that holds the delivery: held deliveries are that
run's memory, so a handle from another node, or from before a restart, is
:class:`ForeignHandle` (the message comes back to the queue on its own: by that node's
timer, or by the restart's requeue of every delivery in flight).

Handle text: ``a.`` + base64url of the JSON array ``[vhost, queue, run, seq, token]``
(any queue name fits), ``run`` the 16 hex digits drawn at the front end's start, ``seq``
a counter, ``token`` 16 hex digits drawn per delivery (a handle cannot be guessed from
another).

Event-loop thread only.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

#: Receipt handles of AMQP queue deliveries start with this.
HANDLE_PREFIX = "a."


class QueueConsumeError(Exception):
    """A refusal with the HTTP status that says it."""

    status = 400


class NoSuchQueue(QueueConsumeError):
    status = 404


class QueueLocked(QueueConsumeError):
    """Exclusive to its declaring connection, or an exclusive consumer has it."""

    status = 409


class QueueGone(QueueConsumeError):
    """Deleted while the request waited."""

    status = 404


class HandleGone(QueueConsumeError):
    """Settled already, or not settled within its visibility timeout (requeued)."""

    status = 410


class ForeignHandle(QueueConsumeError):
    """Issued by another gateway node or an earlier run of this one."""

    status = 409


@dataclass(frozen=True, slots=True)
class Handle:
    vhost: str
    queue: str
    run: str
    seq: int
    token: str

    def encode(self) -> str:
        raw = json.dumps([self.vhost, self.queue, self.run, self.seq, self.token],
                         separators=(",", ":")).encode()
        return HANDLE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: object) -> Handle:
        if not isinstance(text, str) or not text.startswith(HANDLE_PREFIX):
            raise ValueError("not a receipt handle of an AMQP queue delivery")
        body = text[len(HANDLE_PREFIX):]
        try:
            fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            vhost, queue, run, seq, token = fields
            if not (isinstance(vhost, str) and isinstance(queue, str) and isinstance(run, str)
                    and type(seq) is int and isinstance(token, str)):
                raise ValueError("field types")
            return cls(vhost, queue, run, seq, token)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            raise ValueError(f"not a receipt handle of this gateway: {text[:64]!r}") from None


@dataclass(frozen=True, slots=True)
class QueueDelivery:
    """One message given to a remote consumer, held under ``handle``."""

    handle: str
    body: bytes
    exchange: str
    routing_key: str
    redelivered: bool
    #: How many times the queue delivered it (1 the first time).
    delivery_count: int
    #: The AMQP basic properties that are set, as JSON values (``headers`` a JSON
    #: object, ``timestamp`` epoch seconds).
    properties: dict[str, Any]
    #: When it goes back to the queue unless settled or extended (epoch ms).
    next_visible_ms: int


class QueueConsumers(Protocol):
    """What the AMQP front end offers (registered on the topic space)."""

    def receive(self, vhost: str, queue: str, max_messages: int, invisible_ms: int,
                wait_seconds: float) -> Awaitable[list[QueueDelivery]]:
        """Wait up to ``wait_seconds`` for the queue to deliver; at most
        ``max_messages``. :class:`NoSuchQueue`, :class:`QueueLocked`,
        :class:`QueueGone`."""
        ...

    def settle(self, handle: Handle, action: str) -> None:
        """``ack``, ``requeue`` or ``reject`` (dead-lettered when the queue has a DLX).
        :class:`HandleGone`, :class:`ForeignHandle`."""
        ...

    def extend(self, handle: Handle, invisible_ms: int) -> int:
        """Held ``invisible_ms`` from now; returns the new ``next_visible_ms``."""
        ...

    @property
    def max_invisible_ms(self) -> int:
        """The longest visibility timeout a delivery may be held for."""
        ...
