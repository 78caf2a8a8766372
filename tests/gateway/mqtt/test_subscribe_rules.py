"""subscribe_codes (the SUBSCRIBE rules) and the publish-rate TokenBucket: pure, no
socket."""

from __future__ import annotations

import pytest

from gateway.auth.acl import GRANTED, REFUSED
from gateway.mqtt.subscribe import subscribe_codes
from gateway.token_bucket import TokenBucket
from protocol.mqtt import Properties, ReasonCode, Subscribe, Subscription


def _subscribe(*subs: Subscription, sub_id: int | None = None) -> Subscribe:
    props = Properties(subscription_identifiers=(sub_id,)) if sub_id else Properties()
    return Subscribe(packet_id=1, subscriptions=subs, properties=props)


@pytest.mark.parametrize("v5", [True, False])
def test_codes_in_order(v5):
    packet = _subscribe(
        Subscription("a/#", qos=2),
        Subscription("a/#/b", qos=1),  # invalid filter
        Subscription("secret/x", qos=1),  # refused by the ACL
        Subscription("$share/g/s/+", qos=1),
        sub_id=9,
    )
    result = subscribe_codes(
        packet, v5, {}, 0, lambda f: REFUSED if f.startswith("secret") else GRANTED
    )
    bad = 0x80
    assert result.codes == [
        2,
        ReasonCode.TOPIC_FILTER_INVALID if v5 else bad,
        ReasonCode.NOT_AUTHORIZED if v5 else bad,
        1,
    ]
    assert result.refuse is None
    assert [(s.key, s.qos, s.subscription_id, s.share_group) for s in result.granted] == [
        ("a/#", 2, 9, None),
        ("$share/g/s/+", 1, 9, "g"),
    ]


def test_limit_counts_existing_and_earlier_grants_but_not_replacements():
    packet = _subscribe(
        Subscription("old", qos=1),  # a replacement: not counted
        Subscription("n1", qos=0),
        Subscription("n2", qos=0),  # over the limit of 2
    )
    result = subscribe_codes(packet, True, {"old": None}, 2, lambda f: GRANTED)
    assert result.codes == [1, 0, ReasonCode.QUOTA_EXCEEDED]
    assert [s.key for s in result.granted] == ["old", "n1"]


def test_no_local_on_a_shared_subscription_refuses_the_packet():
    # The protocol machine refuses it when decoding; this is the gateway's safeguard.
    shared = Subscription("$share/g/a")
    object.__setattr__(shared, "no_local", True)
    packet = _subscribe(Subscription("a", qos=0), shared)
    result = subscribe_codes(packet, True, {}, 0, lambda f: GRANTED)
    assert result.refuse == "no-local on a shared subscription"


def test_token_bucket():
    bucket = TokenBucket(10, now=100.0)
    assert [bucket.take(100.0) for _ in range(10)] == [0.0] * 10  # a full bucket
    assert bucket.take(100.0) == pytest.approx(0.1)  # one in debt: a tenth of a second
    assert bucket.take(100.0) == pytest.approx(0.2)
    assert bucket.take(100.5) == 0.0  # refilled 5, spent 1: 2 left
    assert bucket.take(200.0) == 0.0 and bucket.tokens == pytest.approx(9.0)  # capped at 10
