"""deliver of a plain stored message (sent from its stored bytes) against deliver of the
same message decoded in full (a Record): the same PUBLISH bytes, packet ids, inflight
entries and counters, for every version, QoS, retain-as-published, no-local and
subscription identifier case."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker_core.record import Message, Protocol, decode_plain, decode_record, encode_record
from gateway.mqtt import delivery
from gateway.mqtt.flows import Flows
from gateway.mqtt.session_state import SessionState, SubscriptionState
from protocol.mqtt import (
    Connack,
    Connect,
    Connection,
    MQTTVersion,
    Properties,
    Role,
    decode_packet,
)

CLIENT_ID = "dev-1"


def _handler(version: MQTTVersion, max_packet_size: int | None = None):
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER)
    props = Properties(maximum_packet_size=max_packet_size) if max_packet_size else Properties()
    server.receive_data(client.send(Connect(CLIENT_ID, version, properties=props)))
    server.next_event()
    client.receive_data(server.send(Connack()))
    client.next_event()
    stats = SimpleNamespace(sent=0, dropped_too_large=0)
    handler = SimpleNamespace(proto=server, stats=stats, out=[],
                              conn=SimpleNamespace(messages_out=0))
    handler.queue = handler.out.append
    return handler


class _Session:
    def __init__(self) -> None:
        self.state = SessionState(CLIENT_ID, expiry=0)
        self.flows = Flows(self.state)


def _both(message: Message, sub: SubscriptionState, qos: int, dup: bool, version, **kw):
    raw = encode_record(position=500, store_ms=9, message=message, dispatch=[(b"x", 3)])
    plain = decode_plain(raw, 500, 3)
    assert plain is not None
    record = decode_record(raw, 500)
    runs = []
    for path in ("full", "plain"):
        session, handler = _Session(), _handler(version, **kw)
        reader = object()
        pid = delivery.deliver(
            session, handler, record if path == "full" else plain, sub, qos, 0, dup=dup,
            reader=reader, offset=3
        )
        inflight = {
            k: (v.packet_id, v.qos, v.offset, v.receipt) for k, v in session.flows.inflight.items()
        }
        runs.append((pid, handler.out, inflight, vars(handler.stats)))
    return runs


@pytest.mark.parametrize("version", list(MQTTVersion), ids=lambda v: f"v{int(v)}")
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain, rap", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("dup", [False, True])
def test_same_publish_as_deliver(version, qos, retain, rap, dup):
    msg = Message("a/b", b"payload", None, "other", "", 2, retain, Protocol.MQTT, 0)
    sub = SubscriptionState("a/#", qos=2, retain_as_published=rap)
    full, plain = _both(msg, sub, qos, dup, version)
    assert plain == full
    assert full[1]  # something was sent


@pytest.mark.parametrize("origin, proto, sent", [
    (CLIENT_ID, Protocol.MQTT, False),  # our own message: no-local drops it
    ("other", Protocol.MQTT, True),
    (CLIENT_ID, Protocol.INTERNAL, True),  # not published over MQTT by us
])
def test_no_local(origin, proto, sent):
    msg = Message("a/b", b"x", None, origin, "", 1, False, proto, 0)
    sub = SubscriptionState("a/#", qos=1, no_local=True)
    full, plain = _both(msg, sub, 1, False, MQTTVersion.V5)
    assert plain == full
    assert (plain[0] is not None) is sent


def test_too_large_for_the_client():
    msg = Message("a/b", b"x" * 200, None, "", "", 1, False, Protocol.MQTT, 0)
    sub = SubscriptionState("a/#", qos=1)
    full, plain = _both(msg, sub, 1, False, MQTTVersion.V5, max_packet_size=64)
    assert plain == full
    assert plain[0] is None and plain[3]["dropped_too_large"] == 1


@pytest.mark.parametrize("version", list(MQTTVersion), ids=lambda v: f"v{int(v)}")
def test_subscription_identifier(version):
    """A plain message to an MQTT 5 subscription with an identifier carries it (only
    the properties differ from the plain encoding: the same as the decoded record)."""
    msg = Message("a/b", b"x", None, "other", "", 1, False, Protocol.MQTT, 0)
    sub = SubscriptionState("a/#", qos=1, subscription_id=7)
    full, plain = _both(msg, sub, 1, False, version)
    assert plain == full
    (data,) = plain[1]
    packet, used = decode_packet(memoryview(data), version)
    assert used == len(data)
    expected = (7,) if version == MQTTVersion.V5 else ()
    assert packet.properties.subscription_identifiers == expected
