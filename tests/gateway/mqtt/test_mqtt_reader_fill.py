"""Reader.fill against a real store, with ``deliver`` (and its plain twin) stubbed: it
pulls no more records than the QoS 1/2 window lets go out, still lets QoS 0 messages
through a shut window, stops at the first QoS 1/2 message the window cannot take, and
says "maybe more" (a whole PULL_BATCH consumed) exactly as before. The last tests use a
real protocol machine's plain QoS 0 encoder instead, with a client machine decoding what
is sent."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker_core import MessageStore
from broker_core.record import Message, Protocol
from gateway.mqtt import delivery
from gateway.mqtt.delivery import PULL_BATCH, Reader
from gateway.mqtt.flows import Flows
from gateway.mqtt.session_state import SessionState
from protocol.mqtt import MQTTVersion

LMQ = "t/x"
#: fill only asks the handler's protocol machine which MQTT version the client speaks and
#: for its plain QoS 0 encoder: none here, so every message goes to ``deliver`` or its
#: twin ``deliver_plain`` (both stubbed).
HANDLER = SimpleNamespace(proto=SimpleNamespace(version=MQTTVersion.V3_1_1,
                                                plain_publish_encoder=lambda: None))


class CountingStore:
    """The store, counting the records each pull asks for."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.asked: list[int] = []

    def pull(self, lmq, offset, max_count=32, **kw):
        self.asked.append(max_count)
        return self.store.pull(lmq, offset, max_count=max_count, **kw)

    def pull_plain(self, lmq, offset, max_count=32, **kw):
        self.asked.append(max_count)
        return self.store.pull_plain(lmq, offset, max_count=max_count, **kw)

    def lmq(self, name):
        return self.store.lmq(name)


@pytest.fixture
def store(tmp_path):
    s = MessageStore.open(tmp_path / "data")
    yield s
    s.close()


@pytest.fixture
def sent(monkeypatch):
    out: list[tuple[int, int]] = []  # (offset, qos)
    pid = iter(range(1, 1 << 20))

    def fake_deliver(session, handler, record, sub, qos, now, *, offset=-1, **kw):
        out.append((offset, qos))
        return (kw.get("packet_id") or next(pid)) if qos else 0

    def fake_deliver_plain(session, handler, msg, qos, retain, dup, reader, packet_id, origin):
        out.append((msg.offset, qos))
        return (packet_id or next(pid)) if qos else 0

    monkeypatch.setattr(delivery, "deliver", fake_deliver)
    monkeypatch.setattr(delivery, "deliver_plain", fake_deliver_plain)
    return out


def _append(store: MessageStore, qoses: list[int]) -> None:
    store.append_batch(
        [
            (Message(LMQ, b"m%d" % i, qos=q, protocol=Protocol.MQTT), [LMQ])
            for i, q in enumerate(qoses)
        ]
    )


def _session(store: CountingStore):
    front = SimpleNamespace(
        store=store,
        ctx=SimpleNamespace(config=SimpleNamespace(max_queued_messages=0)),
        dropped_queue_full=0,
    )
    return SimpleNamespace(front=front, offsets_dirty=False,
                           state=SimpleNamespace(client_id="me"))


def _reader(qos: int = 1) -> Reader:
    sub = SimpleNamespace(qos=qos, no_local=False, retain_as_published=False, deny=None)
    return Reader(sub, LMQ, 0)



def test_pulls_no_more_than_the_window(store, sent):
    _append(store, [1] * 1000)
    counting = CountingStore(store)
    reader = _reader()
    assert reader.fill(_session(counting), HANDLER, 10) == 10
    assert [o for o, _ in sent] == list(range(10))
    # the window's worth, then one small peek for QoS 0 messages behind it
    assert counting.asked == [10, delivery._PEEK]
    assert reader.next_offset == 10 and len(reader.unacked) == 10


def test_a_wide_window_takes_a_whole_batch_and_says_maybe_more(store, sent):
    _append(store, [1] * 1000)
    counting = CountingStore(store)
    reader = _reader()
    assert reader.fill(_session(counting), HANDLER, 1024) == PULL_BATCH
    assert counting.asked == [PULL_BATCH]
    assert reader.next_offset == PULL_BATCH


def test_a_shut_window_still_lets_qos0_through(store, sent):
    _append(store, [0, 0, 1, 0])
    reader = _reader()
    assert reader.fill(_session(CountingStore(store)), HANDLER, 0) == 2
    assert sent == [(0, 0), (1, 0)]
    assert reader.next_offset == 2  # the QoS 1 one waits for the window


def test_qos0_behind_a_filled_window_goes_out_in_the_same_round(store, sent):
    _append(store, [1, 1, 1, 0, 0, 1, 0])
    reader = _reader()
    assert reader.fill(_session(CountingStore(store)), HANDLER, 3) == 5
    assert sent == [(0, 1), (1, 1), (2, 1), (3, 0), (4, 0)]
    assert reader.next_offset == 5


def test_qos0_subscription_ignores_the_window(store, sent):
    _append(store, [1] * (PULL_BATCH + 10))
    counting = CountingStore(store)
    reader = _reader(qos=0)
    assert reader.fill(_session(counting), HANDLER, 0) == PULL_BATCH
    assert counting.asked == [PULL_BATCH]
    assert all(q == 0 for _, q in sent)
    assert reader.fill(_session(counting), HANDLER, 0) == 10

    assert reader.next_offset == PULL_BATCH + 10


def test_many_qos0_messages_under_a_small_window_fill_a_whole_round(store, sent):
    _append(store, [0] * (PULL_BATCH * 2))
    reader = _reader()
    assert reader.fill(_session(CountingStore(store)), HANDLER, 5) == PULL_BATCH
    assert [o for o, _ in sent] == list(range(PULL_BATCH))


def test_skipped_and_resent_offsets(store, sent):
    _append(store, [1] * 6)
    reader = _reader()
    reader.skip = {1}
    reader.resend = {2: 77}
    reader.sent_upto = 3
    session = _session(CountingStore(store))
    assert reader.fill(session, HANDLER, 2) == 3  # 0 sent, 1 skipped, 2 resent; 3 waits
    assert [o for o, _ in sent] == [0, 2]
    assert list(reader.unacked) == [0, 2] and reader.unacked[2] == 77
    assert reader.next_offset == 3 and reader.skip == set()


def _connected_server(version):
    from protocol.mqtt import Connack, Connect, Connection, Role

    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.send(Connect("me", version)))
    server.next_event()
    client.receive_data(server.send(Connack()))
    client.next_event()
    return client, server


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("no_local", [False, True])
@pytest.mark.parametrize("sub_id", [None, 7])
@pytest.mark.parametrize("denied", [set(), {"t/1", "t/2", "t/3", "t/4"}], ids=["all", "acl"])
def test_plain_runs_and_other_messages_keep_offset_order(
    store, version, no_local, sub_id, denied
):
    """Plain QoS 0 messages (encoded in runs) between messages with properties, QoS 1,
    retained and own messages (through deliver): the client decodes them all, in offset
    order, each as deliver would have sent it; an MQTT 5 subscription identifier is on
    every one (no plain run then). Messages the subscription's ACL filter denies (plain,
    with properties, retained, QoS 1) are consumed and not sent."""
    from protocol.mqtt import MQTTVersion, Publish

    ver = MQTTVersion(version)
    client, server = _connected_server(ver)
    specs = [  # (qos, retain, properties, origin)
        (0, False, None, "dev"), (0, False, None, "dev"), (0, False, {"content_type": b"t"}, "dev"),
        (0, True, None, "dev"), (1, False, None, "dev"), (0, False, None, "me"),
        (0, False, None, "dev"), (0, False, None, "dev"),
    ]
    store.append_batch([
        (Message(f"t/{i}", b"m%d" % i, props, origin, qos=q, retain=r, protocol=Protocol.MQTT),
         [LMQ])
        for i, (q, r, props, origin) in enumerate(specs)
    ])
    out: list[bytes] = []
    front = SimpleNamespace(
        store=store, ctx=SimpleNamespace(config=SimpleNamespace(max_queued_messages=0)),
        dropped_queue_full=0, dropped_too_large=0, sent=0)
    state = SessionState("me", expiry=0)
    session = SimpleNamespace(front=front, offsets_dirty=False, flows=Flows(state), state=state)
    handler = SimpleNamespace(proto=server, queue=out.append, stats=front,
                              conn=SimpleNamespace(messages_out=0))
    sub = SimpleNamespace(qos=1, no_local=no_local, retain_as_published=True,
                          subscription_id=sub_id, deny=denied.__contains__ if denied else None)
    reader = Reader(sub, LMQ, 0)
    assert reader.fill(session, handler, 10) == len(specs)
    client.receive_data(b"".join(out))
    got = []
    while isinstance(event := client.next_event(), Publish):
        got.append(event)
    expected = [
        i for i, s in enumerate(specs)
        if not (no_local and s[3] == "me") and f"t/{i}" not in denied
    ]
    assert [p.topic for p in got] == [f"t/{i}" for i in expected]
    assert handler.conn.messages_out == front.sent == len(expected)
    assert [p.payload for p in got] == [b"m%d" % i for i in expected]
    assert [(p.qos, p.retain) for p in got] == [specs[i][:2] for i in expected]
    has_ct = [p.properties.content_type == "t" for p in got]
    assert has_ct == [version == 5 and specs[i][2] is not None for i in expected]
    assert [p.properties.subscription_identifiers for p in got] == [
        (sub_id,) if version == 5 and sub_id else () for _ in expected]
    assert front.sent == len(expected)
    assert reader.next_offset == len(specs)
    assert list(reader.unacked) == ([] if denied else [4])
