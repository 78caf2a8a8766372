"""Outbound delivery: from a subscription's LMQ to the client, with QoS and windows.

Each subscription of a session reads its filter's LMQ:

- a :class:`Reader` (ordinary subscription) pulls from the session's own offset. Offsets
  of QoS 1/2 messages not yet acknowledged are kept in ``unacked``; the offset committed
  for the session is the lowest unacknowledged one (or the read position), so after a
  crash or reconnect delivery resumes there: at-least-once for QoS 1. Messages whose
  PUBREC arrived are recorded in the session's durable ``pubrel_pending`` and skipped
  when read again, so QoS 2 is delivered exactly once across reconnects and restarts.
- a :class:`SharedReader` (``$share/<group>/<filter>``) pops the filter's LMQ as the
  consumer group ``mqtt-share:<group>``: each message goes to one member; a PUBACK (or
  PUBREC) acks the pop receipt; receipts still held when a member disconnects are made
  visible again at once and go to another member.

A reader pulls with ``pull_plain``: plain stored messages (no properties) come as
their stored topic and body bytes, the others decoded in full; :func:`deliver` sends
either (the same PUBLISH, the same bookkeeping). A run of plain QoS 0 records from the
hot tail is encoded in one go by the protocol's plain encoder.

Delivery writes to an :class:`Outbox` (the connection handler): the protocol machine
and a queue of bytes written once per loop turn; the QoS flows go to the session's
:class:`~gateway.mqtt.flows.Flows`.

The window is the client's Receive Maximum: QoS 1/2 messages in flight never exceed it
(QoS 0 ones do not count). Delivery stops while the socket's write buffer is above its
high-water mark; the backlog stays in the LMQ on disk.

Event-loop thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol as Interface

from broker_core import Protocol, Record
from broker_core.record import PlainMessage
from gateway.mqtt.messages import mqtt_topic, now_ms, publish_properties, remaining_expiry
from gateway.mqtt.session_state import SubscriptionState
from gateway.topic_space import MQTT_SHARE_PREFIX
from protocol.mqtt import EMPTY_PROPERTIES, Connection, MQTTVersion, OutgoingPacketTooLarge

if TYPE_CHECKING:
    from gateway.mqtt.sessions import Session

PULL_BATCH = 256  # messages a reader takes per round (one store pull, one socket write)
#: Records a reader pulls while its QoS 1/2 window is shut (only QoS 0 ones can go).
_PEEK = 16
_AMQP = Protocol.AMQP
_MQTT = Protocol.MQTT
_V5 = MQTTVersion.V5
SHARE_INVISIBLE_MS = 60_000


def share_group(group: str) -> str:
    return MQTT_SHARE_PREFIX + group


def pull_size(top_qos: int, window: int, room: int) -> int:
    """How many records a round pulls: up to ``room`` when only QoS 0 can go out; no more
    than the open window otherwise (records pulled and not sent would be read again);
    a peek of ``_PEEK`` while the window is shut (QoS 0 and skipped records still go)."""
    if not top_qos:
        return room
    return min(window if window > 0 else _PEEK, room)


class DeliveryStats(Interface):
    """Counters a delivery adds to (plain ints, copied into metrics at scrape time)."""

    sent: int
    dropped_too_large: int


class MessageCounts(Interface):
    """A connection's message counts (:class:`gateway.connection.Connection`)."""

    messages_out: int


class Outbox(Interface):
    """Where delivery writes: the client's protocol machine (version, encoders, limits)
    and the queue of bytes written at the end of this loop turn."""

    @property
    def proto(self) -> Connection: ...

    @property
    def stats(self) -> DeliveryStats: ...

    @property
    def conn(self) -> MessageCounts:
        """Its connection: counts the messages sent."""

    def queue(self, data: bytes) -> None: ...


class Reader:
    """An ordinary subscription's position in its filter's LMQ."""

    shared = False

    def __init__(self, sub: SubscriptionState, lmq: str, offset: int) -> None:
        self.sub = sub
        self.lmq = lmq
        self.next_offset = offset
        self.committed = offset
        #: offset -> packet id of QoS 1/2 messages sent and not yet acknowledged, in
        #: offset order (dict insertion order).
        self.unacked: dict[int, int] = {}
        #: Offsets below this were sent at least once: a resend carries DUP.
        self.sent_upto = offset
        #: Offsets whose QoS 2 flow reached PUBREC or PUBCOMP: never send them again.
        self.skip: set[int] = set()
        #: offset -> packet id of messages sent before a reconnect and not acknowledged:
        #: they go out again with the same packet id and DUP (MQTT-4.4.0-1).
        self.resend: dict[int, int] = {}
        self.remove_listener: object = None

    def commit_point(self) -> int:
        return next(iter(self.unacked)) if self.unacked else self.next_offset

    def rewind(self) -> None:
        """After a disconnect: read again from the first unacknowledged message; the
        unacknowledged ones keep their packet ids."""
        self.next_offset = self.commit_point()
        self.resend.update(self.unacked)
        self.unacked.clear()

    def acked(self, offset: int) -> None:
        self.unacked.pop(offset, None)

    def drop_over_limit(self, session: Session) -> None:
        """``max_queued_messages``: a reader too far behind skips the oldest (counted,
        like mosquitto's drops)."""
        limit = session.front.ctx.config.max_queued_messages
        if limit:
            info = session.front.store.lmq(self.lmq)
            if info is not None and info.max_offset - self.next_offset > limit:
                skipped = info.max_offset - limit - self.next_offset
                session.front.dropped_queue_full += skipped
                self.next_offset = info.max_offset - limit

    def fill(self, session: Session, out: Outbox, window: int) -> int:
        """Send what is readable, up to ``window`` QoS 1/2 messages. Returns how many
        messages were consumed (sent or skipped)."""
        store = session.front.store
        self.drop_over_limit(session)
        # Pull no more than the window lets go out: a round that read PULL_BATCH records
        # and sent a few (the window opened by a few PUBACKs) decoded the rest for
        # nothing, and read them again next round. While the window is shut only QoS 0
        # (and skipped) messages can go, so peek a few at a time for them.
        sub = self.sub
        sub_qos = sub.qos
        consumed = 0
        now = now_ms()
        # Plain records (no properties: no expiry, nothing for an MQTT 5 PUBLISH to
        # carry) go out from their stored bytes, without a full decode (pull_plain);
        # with a subscription identifier to add, every one is decoded.
        sub_id = out.proto.version == _V5 and sub.subscription_id is not None
        pull = store.pull if sub_id else store.pull_plain
        # Records at the tail (from memory) that are QoS 0 without properties (most of a
        # fleet's telemetry) are encoded in a run by the protocol's plain encoder, one
        # join per round; anything else goes out after the run so far (wire order is
        # offset order).
        plain = None if sub_id or sub.deny is not None else out.proto.plain_publish_encoder()
        no_local_id = session.state.client_id if sub.no_local else None
        no_local_origin = no_local_id.encode() if no_local_id is not None else None
        # Plain messages go through deliver()'s twin unless the subscription has an ACL
        # filter (checked per topic) or it is a QoS 2 first send (durable bookkeeping).
        twin = sub.deny is None
        retain_as_published = sub.retain_as_published
        parts: list[bytes] = []
        n_plain = 0
        while consumed < PULL_BATCH:
            want = pull_size(sub_qos, window, PULL_BATCH - consumed)
            result = pull(self.lmq, self.next_offset, max_count=want)
            if not result.messages:
                self.next_offset = max(self.next_offset, result.next_offset)
                break
            blocked = False
            skip = self.skip
            resend = self.resend
            for msg in result.messages:
                offset = msg.offset
                if skip and offset in skip:
                    skip.discard(offset)
                else:
                    if type(msg) is PlainMessage:
                        record = None
                        qos = msg.qos if msg.qos < sub_qos else sub_qos
                    else:
                        record = msg.record  # type: ignore[union-attr]
                        qos = record.qos if record.qos < sub_qos else sub_qos
                        if (
                            not qos
                            and plain is not None
                            and not record.properties
                            and record.protocol is _MQTT
                            and record.origin != no_local_id
                            and not resend
                            and plain.add(parts, record.topic, record.body,
                                          record.retain and retain_as_published)
                        ):
                            n_plain += 1
                            self.next_offset = offset + 1
                            consumed += 1
                            continue
                    if parts:
                        out.queue(b"".join(parts))
                        parts.clear()
                    if qos and window <= 0:
                        blocked = True
                        break
                    again = resend.pop(offset, None)
                    if record is None and twin and (qos != 2 or again is not None):
                        sent = deliver_plain(
                            session,
                            out,
                            msg,  # type: ignore[arg-type]
                            qos,
                            msg.retain and retain_as_published,
                            again is not None or offset < self.sent_upto,
                            self,
                            again,
                            no_local_origin,
                        )
                    else:
                        sent = deliver(
                            session,
                            out,
                            msg if record is None else record,  # type: ignore[arg-type]
                            sub,
                            qos,
                            now,
                            dup=again is not None or offset < self.sent_upto,
                            reader=self,
                            offset=offset,
                            packet_id=again,
                            durable=qos == 2 and again is None,
                        )
                    if sent is not None and qos:
                        self.unacked[offset] = sent
                        window -= 1
                self.next_offset = offset + 1
                consumed += 1
            if parts:
                out.queue(b"".join(parts))
                parts.clear()
            if self.next_offset > self.sent_upto:
                self.sent_upto = self.next_offset
            session.offsets_dirty = True
            if blocked or self.next_offset >= result.max_offset:
                break
        if n_plain:
            out.stats.sent += n_plain
            out.conn.messages_out += n_plain
        return consumed


class SharedReader:
    """A member's view of a shared subscription: pops the filter's LMQ as the group."""

    shared = True

    def __init__(self, sub: SubscriptionState, lmq: str) -> None:
        assert sub.share_group is not None
        self.sub = sub
        self.lmq = lmq
        self.group = share_group(sub.share_group)
        self.remove_listener: object = None

    def commit_point(self) -> int:  # the group's offset moves on pop; nothing to commit
        return -1

    def rewind(self) -> None:
        pass

    def acked(self, offset: int) -> None:
        pass

    def fill(self, session: Session, out: Outbox, window: int) -> int:
        store = session.front.store
        want = PULL_BATCH if self.sub.qos == 0 else min(PULL_BATCH, window)
        if want <= 0:
            return 0
        popped = store.pop.pop(self.group, self.lmq, want, SHARE_INVISIBLE_MS)
        now = now_ms()
        for p in popped:
            qos = min(p.message.record.qos, self.sub.qos)
            pid = deliver(
                session,
                out,
                p.message.record,
                self.sub,
                qos,
                now,
                dup=p.deliveries > 1,
                reader=self,
                offset=p.message.offset,
                receipt=p.receipt,
            )
            if pid is None or qos == 0:
                store.pop.ack(p.receipt)
        return len(popped)


def deliver_plain(
    session: Session,
    out: Outbox,
    msg: PlainMessage,
    qos: int,
    retain: bool,
    dup: bool,
    reader: Reader,
    packet_id: int | None,
    no_local_origin: bytes | None,
) -> int | None:
    """:func:`deliver` for most of a backlog: a plain message (no properties, so no
    expiry and nothing for an MQTT 5 PUBLISH to carry) read by an ordinary subscription
    that has no ACL filter and no subscription identifier, other than a QoS 2 first send.
    The same PUBLISH and bookkeeping as :func:`deliver`; ``retain`` is already the
    subscription's view of the stored flag, ``no_local_origin`` the session's client id
    as bytes when the subscription is No Local.

    A twin, kept because it pays: without it the backlog drain of ``python -m bench``
    costs ~13 % more broker CPU per message (docs/benchmarks.md, issue 14)."""
    if no_local_origin is not None and msg.protocol == _MQTT and msg.origin == no_local_origin:
        return None
    flows = session.flows
    pid = (packet_id or flows.allocate()) if qos else None
    try:
        data = out.proto.send_publish(msg.topic, msg.body, qos, retain, dup and qos > 0, pid)
    except OutgoingPacketTooLarge:
        out.stats.dropped_too_large += 1
        return None
    out.queue(data)  # written with the rest of this loop turn
    out.stats.sent += 1
    out.conn.messages_out += 1
    if pid is None:
        return 0
    flows.sent_plain(pid, qos, reader, msg.offset)
    return pid


def deliver(
    session: Session,
    out: Outbox,
    msg: PlainMessage | Record,
    sub: SubscriptionState,
    qos: int,
    now: int,
    *,
    dup: bool = False,
    reader: Reader | SharedReader | None = None,
    offset: int = -1,
    receipt: str | None = None,
    retained: bool = False,
    packet_id: int | None = None,
    durable: bool = False,
    more: list[tuple[Reader, int]] | None = None,
    subscription_ids: tuple[int, ...] | None = None,
) -> int | None:
    """Send one stored message to the client, as ``qos``. Returns its packet id (0 for
    QoS 0), or None if it was not sent (no-local, denied by the subscription's ACL
    filter, expired, or too large for the client).

    ``msg`` is a plain message (stored topic and body bytes, no properties: no expiry,
    nothing for an MQTT 5 PUBLISH to carry but a subscription identifier) or a decoded
    record; both give the same PUBLISH and the same bookkeeping. ``durable``: a QoS 2
    message from an ordinary subscription sent for the first time (see Flows.sent).
    ``more``: further ``(reader, offset)`` entries of the same record (overlapping
    subscriptions, see gateway.mqtt.merge), advanced with ``reader``'s;
    ``subscription_ids``: the identifiers to carry instead of ``sub``'s."""
    plain = type(msg) is PlainMessage
    if sub.no_local and not retained and msg.protocol == _MQTT:
        origin = msg.origin
        if (origin.decode() if plain else origin) == session.state.client_id:  # type: ignore[union-attr]
            return None
    topic: str | bytes
    if plain:
        topic = msg.topic
        if sub.deny is not None and sub.deny(topic.decode()):  # type: ignore[union-attr]
            return None
        expiry = None
        props = None
    else:
        topic = msg.topic if msg.protocol != _AMQP else mqtt_topic(msg)  # type: ignore[arg-type]
        if sub.deny is not None and sub.deny(topic):  # type: ignore[arg-type]
            return None
        props = msg.properties  # type: ignore[union-attr]
        expiry = remaining_expiry(msg, now) if props else None  # type: ignore[arg-type]
        if expiry is not None and expiry <= 0:
            return None
    proto = out.proto
    v5 = proto.version == _V5
    flows = session.flows
    pid = (packet_id or flows.allocate()) if qos else None
    retain = True if retained else (msg.retain and sub.retain_as_published)
    dup = dup and qos > 0
    if not v5:
        ids: tuple[int, ...] = ()
    elif subscription_ids is not None:
        ids = subscription_ids
    else:
        ids = (sub.subscription_id,) if sub.subscription_id else ()
    try:
        data = proto.send_publish(
            topic,
            msg.body,
            qos,
            retain,
            dup,
            pid,
            publish_properties(props or {}, _V5, expiry, ids)
            if v5 and (props or ids)
            else EMPTY_PROPERTIES,
        )
    except OutgoingPacketTooLarge:
        out.stats.dropped_too_large += 1
        return None
    out.queue(data)  # written with the rest of this loop turn
    out.stats.sent += 1
    out.conn.messages_out += 1
    if pid is None:
        return 0
    if flows.sent(pid, qos, reader, offset, receipt, durable, more):
        session.save()  # before the bytes leave (they go at the end of this turn)
    return pid
