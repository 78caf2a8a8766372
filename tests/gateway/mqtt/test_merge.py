"""MergedReader (overlapping subscriptions of one session) over a real store, writing to
a real server protocol machine that a client machine decodes: one copy per record, at
the highest granted QoS, with every identifier, in log order, each entry advanced by
the one acknowledgement. No socket."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker_core import MessageStore
from broker_core.record import Message, Protocol
from gateway.mqtt.delivery import Reader
from gateway.mqtt.flows import Flows
from gateway.mqtt.merge import MergedReader
from gateway.mqtt.session_state import SessionState, SubscriptionState
from protocol.mqtt import NEED_DATA, Connack, Connect, Connection, MQTTVersion, Publish, Role


@pytest.fixture
def store(tmp_path):
    s = MessageStore.open(tmp_path / "data")
    yield s
    s.close()


def _setup(store, version=MQTTVersion.V5, subs=(("a/#", 1, 1), ("a/b", 2, 2))):
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.send(Connect("me", version)))
    server.next_event()
    client.receive_data(server.send(Connack()))
    client.next_event()
    state = SessionState("me", expiry=0)
    front = SimpleNamespace(
        store=store, ctx=SimpleNamespace(config=SimpleNamespace(max_queued_messages=0)),
        dropped_queue_full=0)
    session = SimpleNamespace(front=front, state=state, flows=Flows(state),
                              offsets_dirty=False, save=lambda: None)
    out = SimpleNamespace(proto=server, stats=SimpleNamespace(sent=0, dropped_too_large=0),
                          conn=SimpleNamespace(messages_out=0), data=[])
    out.queue = out.data.append
    readers = []
    for name, qos, sub_id in subs:
        store.create_lmq(name)
        readers.append(Reader(SubscriptionState(name, qos=qos, subscription_id=sub_id), name, 0))
    return client, session, out, readers


def _received(client, out) -> list[Publish]:
    client.receive_data(b"".join(out.data))
    out.data.clear()
    got = []
    while (event := client.next_event()) is not NEED_DATA:
        got.append(event)
    return got


def test_one_copy_per_record_in_log_order(store):
    client, session, out, (ra, rb) = _setup(store)
    store.append_batch([
        (Message("a/b", b"0", qos=2, protocol=Protocol.MQTT), ["a/#", "a/b"]),
        (Message("a/c", b"1", qos=2, protocol=Protocol.MQTT), ["a/#"]),
        (Message("a/b", b"2", qos=0, protocol=Protocol.MQTT), ["a/#", "a/b"]),
        (Message("a/b", b"3", qos=1, protocol=Protocol.MQTT), ["a/b"]),
    ])
    merged = MergedReader([ra, rb])
    assert merged.fill(session, out, 10) == 4
    got = _received(client, out)
    assert [(p.payload, p.qos, set(p.properties.subscription_identifiers)) for p in got] == [
        (b"0", 2, {1, 2}),  # both match: QoS of a/b (2), both identifiers
        (b"1", 1, {1}),  # only a/#: its QoS 1
        (b"2", 0, {1, 2}),
        (b"3", 1, {2}),
    ]
    assert session.flows.in_flight() == 3  # one per delivery, not per entry
    assert ra.next_offset == 3 and rb.next_offset == 3
    # PUBREC of the first: both of its entries advance together
    fx = session.flows.on_pubrec(got[0].packet_id, 0, True)
    assert sorted((r.lmq, off) for r, off in fx.advance) == [("a/#", 0), ("a/b", 0)]
    assert session.state.pubrel_pending[got[0].packet_id] == ["a/#", 0, "a/b", 0]


def test_round_is_bounded_by_a_reader_that_stopped_early(store):
    """Reader B's records come after a long run in A only: with a small window the
    round stops where A's pull stopped, and B's record waits for its turn."""
    client, session, out, (ra, rb) = _setup(store, subs=(("a/#", 1, None), ("a/b", 1, None)))
    store.append_batch(
        [(Message("a/c", b"%d" % i, qos=1, protocol=Protocol.MQTT), ["a/#"]) for i in range(5)]
        + [(Message("a/b", b"5", qos=1, protocol=Protocol.MQTT), ["a/b"])]
    )
    merged = MergedReader([ra, rb])
    assert merged.fill(session, out, 3) == 3
    assert [p.payload for p in _received(client, out)] == [b"0", b"1", b"2"]
    assert rb.next_offset == 0  # its record is later in the log: not sent yet
    for pid in list(session.flows.inflight):
        for r, off in session.flows.on_puback(pid).advance:
            r.acked(off)
    assert merged.fill(session, out, 10) == 3
    assert [p.payload for p in _received(client, out)] == [b"3", b"4", b"5"]


def test_no_local_per_subscription_before_the_merge(store):
    client, session, out, (ra, rb) = _setup(store)
    ra.sub.no_local = True  # a/# does not match our own messages
    store.append_batch([
        (Message("a/b", b"own", origin="me", qos=2, protocol=Protocol.MQTT), ["a/#", "a/b"]),
        (Message("a/c", b"own-c", origin="me", qos=2, protocol=Protocol.MQTT), ["a/#"]),
    ])
    assert MergedReader([ra, rb]).fill(session, out, 10) == 2
    got = _received(client, out)
    assert [(p.payload, p.qos, p.properties.subscription_identifiers) for p in got] == [
        (b"own", 2, (2,))]
    assert ra.next_offset == 2 and rb.next_offset == 1
