"""The contract between the connector's runner and its endpoints.

A rule copies messages from one :class:`Source` to one :class:`Target`. A source is read
queue by queue (a RocketMQ topic has one source queue per message queue,
``"<topic>:<queueId>"``; an MQTT subscription or an AMQP queue is one source queue); each
record it gives has an *offset* in its queue, increasing by at least one per record.

Exactly once between gateways, without transactions or an offset store: every copy carries
its :class:`Origin` (source cluster, source queue, source offset), and a gateway target
stores it in the same atomic append as the copy and keeps, per (origin cluster, source
queue), the highest origin offset stored (its *high-water mark*, replayed from the log on
recovery). After any restart the runner asks the target for its high-water marks and
reads each source queue right after them. A target that cannot keep origins (an MQTT or
AMQP broker, a real RocketMQ cluster) answers ``None``: the rule is at-least-once, and
where the source can acknowledge (MQTT persistent session, AMQP queue) it acknowledges
only what the target confirmed.

Loops: every copy also carries the ids of the clusters it has passed through
(:attr:`CopyMessage.path`, the *cluster ids* the endpoints report, not the names a rules
file gives them); a runner never writes a message to a target whose id is on its path.

Wire form between gateways (remoting SEND_MESSAGE(_V2) / SEND_BATCH_MESSAGE properties;
the names are :data:`ORIGIN_CLUSTER` and friends below; consumers on the target see them
as ordinary properties):

- ``__LMQ_ORIGIN_CLUSTER``: the source cluster's id;
- ``__LMQ_ORIGIN_QUEUE``: the source queue (``<topic>:<queueId>`` for a gateway);
- ``__LMQ_ORIGIN_OFFSET``: the source offset, decimal;
- ``__LMQ_PATH``: the cluster ids the message has passed through, comma-separated, oldest
  first, the source's own id last;
- ``__LMQ_DEDUP_ID``: on a copy from an MQTT or AMQP source (whose redeliveries come
  with new offsets), its ``msg_id``: the gateway drops a copy whose id it stored on the same
  topic within its window (``remoting_dedup_window``).

Errors an endpoint raises: :class:`EndpointUnavailable` (cannot reach it or it is not
answering: the runner backs off and retries, keeping its position) and
:class:`MessageRefused` (the target refuses one message for good, e.g. too large or not
permitted: the rule's ``on_refused`` decides: stop, skip and record, or dead-letter).
:class:`TlsFailure` (a certificate that does not verify, a TLS file that cannot be
loaded) stops the rule with its message in ``status``: retrying would fail alike.
Anything else is a bug and stops the rule with its error shown in ``status``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

ORIGIN_CLUSTER = "__LMQ_ORIGIN_CLUSTER"
ORIGIN_QUEUE = "__LMQ_ORIGIN_QUEUE"
ORIGIN_OFFSET = "__LMQ_ORIGIN_OFFSET"
PATH = "__LMQ_PATH"
#: A copy from a source that cannot deduplicate (an MQTT or AMQP broker) goes into a
#: gateway with its ``msg_id`` here: the gateway stores one copy per id and topic within
#: its ``remoting_dedup_window`` (gateway/remoting/dedup.py, docs/connector.md).
DEDUP_ID = "__LMQ_DEDUP_ID"
#: Properties that belong to the connector's wire form, not to the message.
CONNECTOR_PROPERTIES = frozenset({ORIGIN_CLUSTER, ORIGIN_QUEUE, ORIGIN_OFFSET, PATH, DEDUP_ID})


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a copy came from: enough to resume right after it and to translate offsets."""

    cluster: str
    queue: str
    offset: int


@dataclass(frozen=True, slots=True)
class CopyMessage:
    """One message on its way from a source to a target, protocol-neutral.

    ``topic`` is the name at the source (a RocketMQ topic, an MQTT topic name, an AMQP
    routing key); the rule's template turns it into the target's. ``properties`` are the
    user properties (RocketMQ properties minus the system ones the fields below carry;
    MQTT 5 user properties; AMQP headers), with the mappings of docs/rocketmq.md and
    docs/http.md. ``msg_id`` is the id a deduplicating target uses (RocketMQ UNIQ_KEY,
    AMQP message-id; for MQTT a digest the source endpoint documents).
    """

    body: bytes
    topic: str
    tag: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    born_ms: int = 0
    msg_id: str = ""
    origin: Origin | None = None
    path: tuple[str, ...] = ()
    #: ``born_ms`` is the publisher's own timestamp (MQTT 5 ``msg-timestamp``, AMQP
    #: ``timestamp``), not the time the source received it: the runner measures the
    #: rule's delay from it (docs/connector.md "Metrics")
    stamped: bool = False


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A record as a source gives it: its offset in its source queue and the message."""

    queue: str
    offset: int
    message: CopyMessage


class EndpointUnavailable(Exception):
    """The endpoint cannot be reached or does not answer; retry later, keep the position."""


class MessageRefused(Exception):
    """The target refuses this message for good (too large, not permitted, ...)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"message {index} refused: {reason}")
        #: the index in the batch given to :meth:`Target.write`
        self.index = index
        self.reason = reason


class TlsFailure(Exception):
    """The endpoint's TLS cannot work: its certificate does not verify (against the
    cluster's CA, or for the address dialled), or a CA, certificate or key file cannot
    be loaded. A configuration error, not an outage: the rule stops with it."""


class Source(Protocol):
    """Where a rule reads."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def cluster_id(self) -> str:
        """The source cluster's id (a gateway's persistent id; for a peer, the name the
        rules file gives it)."""
        ...

    async def queues(self) -> list[str]:
        """The source queues, in a stable order (may grow, e.g. a topic's queue count)."""
        ...

    async def read(
        self, queue: str, after: int | None, start: str, max_messages: int, wait_ms: int
    ) -> list[SourceRecord]:
        """Records of ``queue`` after offset ``after`` (``None``: from the rule's start
        position ``start``: ``"latest"``, ``"earliest"`` or an ISO-8601 time), oldest first,
        at most ``max_messages``, waiting up to ``wait_ms`` when there are none."""
        ...

    async def acknowledge(self, queue: str, up_to: int) -> None:
        """The target has stored every record of ``queue`` up to offset ``up_to``: a
        source that keeps no log of its own (MQTT session, AMQP queue) may drop them now.
        A log source (a gateway) does nothing."""
        ...

    async def end_offset(self, queue: str) -> int | None:
        """The offset the next record of ``queue`` will get, for the lag metric (None:
        unknown, as for MQTT and AMQP peers)."""
        ...


class Target(Protocol):
    """Where a rule writes."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def cluster_id(self) -> str:
        """The target cluster's id (see :meth:`Source.cluster_id`)."""
        ...

    async def high_water(self, origin_cluster: str, queues: Sequence[str]) -> dict[str, int] | None:
        """Per source queue, the highest origin offset this target has stored from
        ``origin_cluster`` (a queue never copied is absent); ``None`` if this target kind
        keeps no origins (the rule is then at-least-once)."""
        ...

    async def write(self, topic: str, source_queue: str, messages: Sequence[CopyMessage]) -> None:
        """Store ``messages`` (all from ``source_queue``, in source order) under ``topic``,
        returning once they are stored (a gateway: the reply to the send; MQTT: PUBACK;
        AMQP: publisher confirm). A gateway target stores them in one append and drops a
        copy whose origin offset is at or below its high-water mark, so a repeated write
        is harmless. Raises :class:`EndpointUnavailable` or :class:`MessageRefused`."""
        ...
