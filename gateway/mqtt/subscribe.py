"""The SUBSCRIBE rules, as a pure function: which subscriptions a SUBSCRIBE packet
makes and the SUBACK reason code of each.

Per requested filter, in order: an invalid filter gets 0x8F (0x80 in 3.x); No Local on a
shared subscription is a protocol error for the whole packet (MQTT-3.8.3-4); a filter
the user may not subscribe to gets 0x87 (0x80); a new subscription over
``max_subscriptions_per_session`` gets 0x97 (0x80), counting those granted earlier in
the same packet; anything else is granted at the QoS asked for, and carries the ACL's
delivery filter (``SubscriptionState.deny``) when its filter overlaps a deny rule.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from gateway.auth.acl import SubscribeDecision
from gateway.mqtt.session_state import SubscriptionState
from lmq.names import InvalidTopic, parse_shared_subscription, validate_topic_filter
from protocol.mqtt import ReasonCode, Subscribe


@dataclass(slots=True)
class SubscribeResult:
    #: SUBACK reason codes, one per requested filter.
    codes: list[int] = field(default_factory=list)
    #: The subscriptions granted, in order (each code < 0x80 has one).
    granted: list[SubscriptionState] = field(default_factory=list)
    #: Not None: a protocol error; refuse the packet with this text, no SUBACK.
    refuse: str | None = None


def subscribe_codes(
    packet: Subscribe,
    v5: bool,
    existing: Collection[str],
    limit: int,
    may_subscribe: Callable[[str], SubscribeDecision],
) -> SubscribeResult:
    """``existing``: the keys of the session's subscriptions; ``limit``: at most this
    many (0 = no limit); ``may_subscribe(filter)``: the ACL's decision."""
    out = SubscribeResult()
    sub_id = packet.properties.subscription_identifiers
    keys = set(existing)
    for request in packet.subscriptions:
        raw = request.topic_filter
        try:
            shared = parse_shared_subscription(raw)
            topic_filter = shared.filter if shared else validate_topic_filter(raw)
        except InvalidTopic:
            out.codes.append(ReasonCode.TOPIC_FILTER_INVALID if v5 else 0x80)
            continue
        if shared is not None and request.no_local:
            out.refuse = "no-local on a shared subscription"
            return out
        decision = may_subscribe(topic_filter)
        if not decision.granted:
            out.codes.append(ReasonCode.NOT_AUTHORIZED if v5 else 0x80)
            continue
        sub = SubscriptionState(
            topic_filter=topic_filter,
            qos=request.qos,
            no_local=request.no_local,
            retain_as_published=request.retain_as_published,
            retain_handling=request.retain_handling,
            subscription_id=sub_id[0] if sub_id else None,
            share_group=shared.group if shared else None,
            deny=decision.deny,
        )
        if limit and sub.key not in keys and len(keys) >= limit:
            out.codes.append(ReasonCode.QUOTA_EXCEEDED if v5 else 0x80)
            continue
        keys.add(sub.key)
        out.codes.append(request.qos)
        out.granted.append(sub)
    return out


__all__ = ["SubscribeResult", "subscribe_codes"]
