"""Overlapping subscriptions: a session's ordinary readers merged by log position.

When several ordinary subscriptions of one session match a message, the client gets one
PUBLISH (MQTT 5 3.3.4; docs/mqtt.md, "Overlapping subscriptions"): at the highest QoS
granted among the matching subscriptions (capped by the message's), with the
Subscription Identifier of each, RETAIN kept if any of them has Retain As Published, No
Local and the ACL's delivery filter applied per subscription before the merge.
"Matching" is what the topic space decided at the append: the record is in the LMQ of
every matching filter, at one log position.

:class:`MergedReader` pulls from each of the session's ordinary readers and takes the
records in log-position order. Invariants:

- every reader whose next record is at position ``P`` holds the same record: all of
  them advance past it together, and it is one delivery whose in-flight entry names
  each ``(reader, offset)`` (its PUBACK / PUBREC advances them all; the window counts
  it once);
- positions leave the merge strictly increasing. A reader whose pull stopped before its
  LMQ's end bounds the round: records past its last position wait for the next round
  (the store does not change during a round: appends run on this thread);
- a record whose QoS 2 flow got past PUBREC in any of its entries is skipped in all;
  one sent before a reconnect goes again with its packet id (any entry holds it).

Only readers whose filters can overlap are merged (:func:`groups`): a topic matches
filters of one group only, so each group is read on its own, and a reader that
overlaps no other stays a plain :class:`~gateway.mqtt.delivery.Reader` with its
plain-record fast paths (MQTT orders messages per topic, not across unrelated filters).
Shared subscriptions are never merged.

Event-loop thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core import Protocol, Record
from gateway.auth.acl import intersects
from gateway.mqtt.delivery import PULL_BATCH, Outbox, Reader, deliver, pull_size
from gateway.mqtt.messages import mqtt_topic, now_ms
from gateway.mqtt.session_state import SubscriptionState
from protocol.mqtt import MQTTVersion

if TYPE_CHECKING:
    from gateway.mqtt.sessions import Session

_MQTT = Protocol.MQTT
_AMQP = Protocol.AMQP
_V5 = MQTTVersion.V5


#: Above this many ordinary subscriptions a session's overlap groups are not computed
#: (pairwise, at each SUBSCRIBE / UNSUBSCRIBE): they are all merged, which is correct
#: for any filters, only slower to read.
MAX_GROUPED = 64


def filters_overlap(a: str, b: str) -> bool:
    """Whether some topic name matches both filters (MQTT 4.7; a filter starting with a
    wildcard matches no topic starting with ``$``, MQTT-4.7.2-1): the ACL's
    :func:`~gateway.auth.acl.intersects`, one definition for both."""
    return intersects(a, b)


def groups(readers: list[Reader]) -> list[list[Reader]]:
    """The readers grouped by overlap (the connected parts of "their filters can
    overlap"), in the order of their first reader."""
    if len(readers) > MAX_GROUPED:
        return [readers]
    parts: list[list[Reader]] = []
    for reader in readers:
        f = reader.sub.topic_filter
        joined = [p for p in parts if any(filters_overlap(f, o.sub.topic_filter) for o in p)]
        merged = [reader]
        for part in joined:
            merged = part + merged
            parts.remove(part)
        parts.append(merged)
    return parts


class MergedReader:
    """Two or more ordinary readers of one session, read as one."""

    shared = False

    def __init__(self, readers: list[Reader]) -> None:
        self.readers = readers

    def fill(self, session: Session, out: Outbox, window: int) -> int:
        """Send what is readable, up to ``window`` QoS 1/2 deliveries. Returns how many
        records were consumed (delivered or skipped; one per position)."""
        store = session.front.store
        assert store is not None  # set at start, before any connection
        readers = self.readers
        for reader in readers:
            reader.drop_over_limit(session)
        top_qos = max(r.sub.qos for r in readers)
        v5 = out.proto.version == _V5
        client_id = session.state.client_id
        now = now_ms()
        consumed = 0
        while consumed < PULL_BATCH:
            want = pull_size(top_qos, window, PULL_BATCH - consumed)
            # position -> (record, [(reader, offset)]); the bound of this round
            by_position: dict[int, tuple[Record, list[tuple[Reader, int]]]] = {}
            horizon: int | None = None
            for reader in readers:
                result = store.pull(reader.lmq, reader.next_offset, max_count=want)
                if not result.messages:
                    reader.next_offset = max(reader.next_offset, result.next_offset)
                    continue
                for msg in result.messages:
                    record = msg.record
                    entry = by_position.get(record.position)
                    if entry is None:
                        by_position[record.position] = (record, [(reader, msg.offset)])
                    else:
                        entry[1].append((reader, msg.offset))
                if result.next_offset < result.max_offset:  # more past this pull
                    last = result.messages[-1].record.position
                    horizon = last if horizon is None else min(horizon, last)
            if not by_position:
                break
            blocked = False
            for position in sorted(by_position):
                if horizon is not None and position > horizon:
                    break
                record, entries = by_position[position]
                if any(r.skip and off in r.skip for r, off in entries):
                    for r, off in entries:
                        r.skip.discard(off)
                        r.next_offset = off + 1
                    consumed += 1
                    continue
                own = record.protocol == _MQTT and record.origin == client_id
                subs = [r.sub for r, _ in entries if not (own and r.sub.no_local)]
                if any(s.deny is not None for s in subs):  # the ACL's delivery filters
                    topic = record.topic if record.protocol != _AMQP else mqtt_topic(record)
                    subs = [s for s in subs if s.deny is None or not s.deny(topic)]
                qos = 0
                if subs:
                    granted = max(s.qos for s in subs)
                    qos = record.qos if record.qos < granted else granted
                    if qos and window <= 0:
                        blocked = True
                        break
                    again = None
                    dup = False
                    for r, off in entries:
                        pid = r.resend.pop(off, None) if r.resend else None
                        if pid is not None:
                            again = pid
                        if off < r.sent_upto:
                            dup = True
                    merged = SubscriptionState(
                        "",
                        qos=qos,
                        retain_as_published=any(s.retain_as_published for s in subs),
                    )
                    ids = tuple(s.subscription_id for s in subs if s.subscription_id) if v5 else ()
                    (first, first_off), more = entries[0], entries[1:]
                    sent = deliver(
                        session,
                        out,
                        record,
                        merged,
                        qos,
                        now,
                        dup=dup or again is not None,
                        reader=first,
                        offset=first_off,
                        packet_id=again,
                        durable=qos == 2 and again is None,
                        more=more,
                        subscription_ids=ids,
                    )
                    if sent is not None and qos:
                        for r, off in entries:
                            r.unacked[off] = sent
                        window -= 1
                for r, off in entries:
                    r.next_offset = off + 1
                consumed += 1
            for reader in readers:
                if reader.next_offset > reader.sent_upto:
                    reader.sent_upto = reader.next_offset
            session.offsets_dirty = True
            if blocked:
                break
        return consumed


__all__ = ["MAX_GROUPED", "MergedReader", "filters_overlap", "groups"]
