"""Overlapping subscriptions (issue 14 section 6; MQTT 5 3.3.4; docs/mqtt.md,
"Overlapping subscriptions"), against a real gateway over real sockets.

The rule tested: when several ordinary subscriptions of one session match a message,
the client gets ONE copy

- at the highest QoS granted among the matching subscriptions, capped by the message's
  QoS (MQTT-3.3.4-2);
- carrying the Subscription Identifier of every matching subscription that has one
  (MQTT-3.3.4-4; order not significant, so compared as sets);
- No Local (MQTT-3.8.3-3) is applied per subscription before the merge: a subscription
  with No Local does not match messages its own client published, so such a message
  goes out only if another, matching subscription has no No Local, and then with that
  subscription's QoS and identifiers only;
- Retain As Published: the copy keeps the RETAIN flag of the message if at least one
  matching subscription asked for it (it is a copy "as published" to that subscription;
  clearing the flag would break it, keeping it breaks none);
- a shared subscription ($share/G/F) is not merged: it is its own delivery, beside the
  one copy of the ordinary subscriptions.

3.1.1 clients get one copy too. Order (publish order, which is commit-log order for one
publisher) and exactly-once hold across unsubscribe, subscribe, reconnect and kill -9.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
from collections import Counter

import pytest

from protocol.mqtt import Puback, Publish, Pubrec, Pubrel, Unsuback, Unsubscribe

from ..mqtt_clients import Paho
from .overlap_support import (
    V5,
    V311,
    Receiver,
    barrier,
    connect,
    publishes,
    silent,
    sub_ids,
    subscribe,
)

VERSIONS = pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])


def test_one_copy_at_the_highest_qos_with_every_subscription_id(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "over5")
    subscribe(c, "a/+", 0, sub_id=1)
    subscribe(c, "a/#", 2, sub_id=2)
    subscribe(c, "a/b", 1, sub_id=3)
    pub = Paho(port, "pub", v5=True)
    r = Receiver()
    # (topic, publish QoS) -> (delivered QoS, identifiers of the matching subscriptions)
    cases = [
        ("a/b", 2, 2, {1, 2, 3}),
        ("a/b", 1, 1, {1, 2, 3}),
        ("a/b", 0, 0, {1, 2, 3}),
        ("a/c", 2, 2, {1, 2}),
        ("a/b/c", 1, 1, {2}),
    ]
    for i, (topic, qos, _, _) in enumerate(cases):
        pub.publish(topic, b"m%d" % i, qos=qos)
    r.drain(c, len(cases))
    assert [(p.topic, p.payload, p.qos, sub_ids(p)) for p in r.wire] == [
        (topic, b"m%d" % i, want_qos, want_ids)
        for i, (topic, _, want_qos, want_ids) in enumerate(cases)
    ]


def test_identifiers_only_of_the_subscriptions_that_have_one(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "someids")
    subscribe(c, "i/+", 1)  # no identifier
    subscribe(c, "i/#", 1, sub_id=7)
    subscribe(c, "+/x", 0, sub_id=9)
    pub = Paho(port, "pub", v5=True)
    pub.publish("i/x", b"both", qos=1)
    pub.publish("i/y", b"one", qos=1)
    r = Receiver()
    r.drain(c, 2)
    assert [(p.payload, p.qos, sub_ids(p)) for p in r.wire] == [
        (b"both", 1, {7, 9}),
        (b"one", 1, {7}),
    ]


def test_mqtt311_client_gets_one_copy_at_the_highest_qos(gateway):
    port = gateway.mqtt_port
    sub = Paho(port, "sub311")
    sub.subscribe([("a/+", 0), ("a/#", 2), ("a/b", 1)])
    pub = Paho(port, "pub")
    for qos in (0, 1, 2):
        pub.publish("a/b", b"q%d" % qos, qos=qos)
    got = [(m.topic, m.payload, m.qos) for m in sub.get_n(3)]
    assert got == [("a/b", b"q0", 0), ("a/b", b"q1", 1), ("a/b", b"q2", 2)]
    assert sub.nothing_more()


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_sub_with_overlapping_filters_prints_each_message_once(gateway, version):
    assert shutil.which("mosquitto_sub"), "mosquitto-clients missing: run make system-deps"
    pub = Paho(gateway.mqtt_port, "pub")
    # a retained marker only ms/# matches: once it is printed, the subscription is live
    pub.publish("ms/ready/now", b"go", qos=1, retain=True)
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(gateway.mqtt_port), "-V", version,
         "-q", "2", "-t", "ms/+", "-t", "ms/#", "-t", "ms/a", "-v", "-W", "15"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert sub.stdout is not None
        for line in sub.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert lines.get(timeout=10) == "ms/ready/now go"
        for i, topic in enumerate(["ms/a", "ms/b", "ms/a/c"]):
            pub.publish(topic, b"v%d" % i, qos=1)
        got = [lines.get(timeout=10) for _ in range(3)]
        time.sleep(0.7)
        while not lines.empty():
            got.append(lines.get())
    finally:
        sub.kill()
        sub.wait(timeout=10)
        reader.join(timeout=10)
        assert sub.stdout is not None
        sub.stdout.close()
    assert got == ["ms/a v0", "ms/b v1", "ms/a/c v2"]


@VERSIONS
def test_order_across_filters_is_publish_order_each_once(gateway, version):
    # A raw client completing flows by method B (a QoS 2 message reaches the application
    # when its PUBLISH arrives): paho hands a QoS 2 message over at PUBREL, after the
    # QoS 1 ones sent behind it, so its order is not the wire's with mixed QoS.
    port = gateway.mqtt_port
    c, _ = connect(port, "ordered", version)
    for topic_filter, qos in [("o/+", 1), ("o/a/#", 2), ("+/b", 1), ("p/#", 0)]:
        subscribe(c, topic_filter, qos)
    topics = ["o/a", "o/b", "o/a/x", "p/b", "p/c", "o/a/x/y"]
    pub = Paho(port, "pub")
    n = 120
    for i in range(n):
        pub.client.publish(topics[i % len(topics)], str(i).encode(), qos=1 + i % 2)
    r = Receiver()
    r.drain(c, n, timeout=20)
    assert [int(p.payload) for p in r.app] == list(range(n))
    assert len(r.wire) == n  # nothing more came


def test_no_local_is_applied_per_subscription_before_the_merge(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "self")
    subscribe(c, "n/#", 2, sub_id=1, no_local=True)
    subscribe(c, "n/x", 1, sub_id=2)
    c.send(Publish(topic="n/y", payload=b"own-y", qos=1, packet_id=1))  # only n/# matches
    assert c.recv() == Puback(packet_id=1)
    c.send(Publish(topic="n/x", payload=b"own-x", qos=1, packet_id=2))
    got = [c.recv(), c.recv()]  # its PUBACK and n/x's copy, in either order
    assert Puback(packet_id=2) in got
    (own,) = [p for p in got if isinstance(p, Publish)]
    assert (own.payload, own.qos, sub_ids(own)) == (b"own-x", 1, {2})  # n/x's only
    c.send(Puback(packet_id=own.packet_id))  # type: ignore[arg-type]
    assert silent(c) == []  # no copy of own-y, no second one of own-x
    other = Paho(port, "other", v5=True)
    other.publish("n/x", b"other-x", qos=2)
    other.publish("n/y", b"other-y", qos=2)
    r = Receiver()
    r.drain(c, 2)
    assert [(p.payload, p.qos, sub_ids(p)) for p in r.wire] == [
        (b"other-x", 2, {1, 2}),
        (b"other-y", 2, {1}),
    ]



def test_retain_as_published_is_kept_if_any_matching_subscription_asks(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "rap")
    subscribe(c, "rp/#", 1, sub_id=1, retain_as_published=True, retain_handling=2)
    subscribe(c, "rp/t", 1, sub_id=2, retain_handling=2)
    subscribe(c, "rp/+", 1, sub_id=3, retain_handling=2)
    pub = Paho(port, "pub", v5=True)
    pub.publish("rp/t", b"flagged", qos=1, retain=True)
    pub.publish("rp/t/u", b"only-rap", qos=1, retain=True)
    pub.publish("rp/t", b"plain", qos=1)
    r = Receiver()
    r.drain(c, 3)
    assert [(p.payload, p.retain, sub_ids(p)) for p in r.wire] == [
        (b"flagged", True, {1, 2, 3}),
        (b"only-rap", True, {1}),
        (b"plain", False, {1, 2, 3}),
    ]
    # the same without Retain As Published anywhere: the flag is cleared
    d, _ = connect(port, "norap")
    subscribe(d, "rp/+", 1, retain_handling=2)
    subscribe(d, "rp/t", 1, retain_handling=2)
    pub.publish("rp/t", b"cleared", qos=1, retain=True)
    r = Receiver()
    r.drain(d, 1)
    assert [(p.payload, p.retain) for p in r.wire] == [(b"cleared", False)]


class _Stream:
    """A publisher thread: QoS 1 messages 0, 1, 2, ... on one topic until stopped."""

    def __init__(self, port: int, topic: str) -> None:
        self.pub = Paho(port, "stream-pub")
        self.topic = topic
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set() and self.sent < 5000:
            self.pub.publish(self.topic, str(self.sent).encode(), qos=1)
            self.sent += 1
            time.sleep(0.002)

    def __enter__(self) -> _Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.mark.parametrize("dropped", ["u/#", "u/+"])
def test_unsubscribing_one_of_two_overlapping_filters_keeps_the_flow(gateway, dropped):
    port = gateway.mqtt_port
    sub = Paho(port, "unsub", v5=True)
    sub.subscribe([("u/#", 1), ("u/+", 1)])
    with _Stream(port, "u/x") as stream:
        time.sleep(0.6)
        sub.client.unsubscribe(dropped)
        time.sleep(0.6)
    got = [int(m.payload) for m in sub.get_n(stream.sent, timeout=20)]
    assert got == list(range(stream.sent))  # no gap, no duplicate
    assert sub.nothing_more()
    assert stream.sent > 50


def test_subscribing_a_second_overlapping_filter_while_messages_flow(gateway):
    port = gateway.mqtt_port
    sub = Paho(port, "addsub", v5=True)
    sub.subscribe("s/#", qos=1)
    with _Stream(port, "s/x") as stream:
        time.sleep(0.5)
        sub.subscribe("s/+", qos=1)
        time.sleep(0.3)
        sub.subscribe("s/x", qos=1)
        time.sleep(0.5)
    got = [int(m.payload) for m in sub.get_n(stream.sent, timeout=20)]
    assert got == list(range(stream.sent))
    assert sub.nothing_more()
    assert stream.sent > 50


@VERSIONS
@pytest.mark.parametrize("restart", [False, True], ids=["online", "restart"])
def test_offline_backlog_on_overlapping_filters_once_each_in_order(gateway, version, restart):
    # A raw client completing flows by method B: see the test above.
    port = gateway.mqtt_port
    c, _ = connect(port, "backlog", version, clean=False, session_expiry=3600)
    for topic_filter, qos in [("b/#", 1), ("b/+", 2), ("+/x", 0)]:
        subscribe(c, topic_filter, qos)
    c.close()
    pub = Paho(port, "pub", v5=version == V5)
    topics = ["b/x", "b/x/y", "b/z", "c/x"]  # matched by 3, 1, 2 filters; c/x by one
    n = 40
    for i in range(n):
        pub.publish(topics[i % 4], str(i).encode(), qos=2)
    pub.disconnect()
    if restart:
        gateway.restart()
    c, ack = connect(gateway.mqtt_port, "backlog", version, clean=False, session_expiry=3600)
    assert ack.session_present
    r = Receiver()
    r.drain(c, n, timeout=15)
    want_qos = {"b/x": 2, "b/x/y": 1, "b/z": 2, "c/x": 0}
    assert [(int(p.payload), p.qos) for p in r.app] == [
        (i, want_qos[topics[i % 4]]) for i in range(n)
    ]
    assert len(r.wire) == n  # nothing more came


@VERSIONS
def test_qos1_unacknowledged_at_a_disconnect_comes_again_once(gateway, version):
    port = gateway.mqtt_port
    c, _ = connect(port, "q1again", version, clean=False, session_expiry=3600)
    subscribe(c, "d/#", 1)
    subscribe(c, "d/+", 1)
    pub = Paho(port, "pub")
    for i in range(4):
        pub.publish("d/x", b"%d" % i, qos=1)
    first = publishes(c, 4)
    assert [p.payload for p in first] == [b"0", b"1", b"2", b"3"]
    assert silent(c) == []  # not once per filter
    c.send(Puback(packet_id=first[0].packet_id))  # type: ignore[arg-type]
    assert barrier(c) == []
    c.close()
    c, ack = connect(port, "q1again", version, clean=False, session_expiry=3600)
    assert ack.session_present
    again = publishes(c, 3)
    assert [(p.payload, p.dup, p.packet_id) for p in again] == [
        (p.payload, True, p.packet_id) for p in first[1:]
    ]
    for p in again:
        c.send(Puback(packet_id=p.packet_id))  # type: ignore[arg-type]
    assert silent(c) == []


@VERSIONS
def test_qos2_unacknowledged_at_a_disconnect_is_delivered_exactly_once(gateway, version):
    port = gateway.mqtt_port
    c, _ = connect(port, "q2again", version, clean=False, session_expiry=3600)
    subscribe(c, "e/#", 2)
    subscribe(c, "e/+", 2)
    subscribe(c, "+/x", 1)
    pub = Paho(port, "pub")
    for i in range(4):
        pub.publish("e/x", b"%d" % i, qos=2)
    r = Receiver()
    for p in publishes(c, 4):
        r.take(p)
    assert silent(c) == []  # not once per filter
    # 0: completed; 1: PUBREC'd (PUBREL pending); 2, 3: no PUBREC yet
    r.complete(c, r.wire[0])
    c.send(Pubrec(packet_id=r.wire[1].packet_id))  # type: ignore[arg-type]
    assert c.recv() == Pubrel(packet_id=r.wire[1].packet_id)  # type: ignore[arg-type]
    c.close()
    c, ack = connect(port, "q2again", version, clean=False, session_expiry=3600)
    assert ack.session_present
    resent = [c.recv() for _ in range(3)]
    # the PUBREL of 1 and the PUBLISHes of 2 and 3 again, same packet ids, DUP
    assert Pubrel(packet_id=r.wire[1].packet_id) in resent  # type: ignore[arg-type]
    again = sorted((p.payload, p.packet_id, p.dup) for p in resent if isinstance(p, Publish))
    assert again == [(w.payload, w.packet_id, True) for w in r.wire[2:]]
    for p in resent:
        r.take(p)
        if isinstance(p, Pubrel):
            r.complete(c, p)
    for p in resent:
        if isinstance(p, Publish):
            r.complete(c, p)
    r.drain(c, 4)
    assert [p.payload for p in r.app] == [b"0", b"1", b"2", b"3"]
    c.close()
    c, _ = connect(port, "q2again", version, clean=False, session_expiry=3600)
    assert silent(c) == []  # all completed: nothing comes again


def _kill_with_a_window_open(gateway, client_id: str, qos: int, n: int, version=V5):  # type: ignore[no-untyped-def]
    """A persistent session on three overlapping filters gets an offline backlog of
    ``n`` messages, reads it with the first ten completed, the next five half-done
    (QoS 2: PUBREC'd) and five not acknowledged, then the gateway is killed with
    SIGKILL and started again. Returns the receiver and the PUBLISHes of the first
    connection."""
    port = gateway.mqtt_port
    v5 = version == V5
    c, _ = connect(port, client_id, version, clean=False, session_expiry=3600)
    subscribe(c, "k/#", qos, sub_id=1 if v5 else None)
    subscribe(c, "k/+", qos, sub_id=2 if v5 else None)
    subscribe(c, "k/x", qos, sub_id=3 if v5 else None)
    c.close()
    pub = Paho(port, "pub")
    for i in range(n):
        pub.publish("k/x", b"%d" % i, qos=qos)
    pub.disconnect()
    c, ack = connect(port, client_id, version, clean=False, session_expiry=3600)
    assert ack.session_present
    r = Receiver()
    first = publishes(c, 20, timeout=10)
    for p in first:
        r.take(p)
    for p in first[:10]:
        r.complete(c, p)
    if qos == 2:
        for p in first[10:15]:
            r.pubrec(c, p)
    else:
        for p in first[10:15]:
            c.send(Puback(packet_id=p.packet_id))  # type: ignore[arg-type]
        for p in barrier(c):
            r.take(p)
    # PUBLISHes read while waiting for a PUBREL are received, not acknowledged: they
    # stay held (QoS 2) and come again after the restart
    r.deferred.clear()
    time.sleep(0.3)  # within the offset-commit interval: what the session saved is older
    gateway.kill()
    c.close()
    gateway.start()
    return r, first


@VERSIONS
def test_kill9_with_an_overlapping_backlog_qos2_exactly_once(gateway, version):
    n = 40
    r, first = _kill_with_a_window_open(gateway, "k2", 2, n, version)
    assert [p.payload for p in first] == [b"%d" % i for i in range(20)]  # one copy each
    c, ack = connect(gateway.mqtt_port, "k2", version, clean=False, session_expiry=3600)
    assert ack.session_present
    r.drain(c, n, timeout=20)
    counts = Counter(p.payload for p in r.app)
    assert counts == Counter({b"%d" % i: 1 for i in range(n)})
    assert [p.payload for p in r.app] == [b"%d" % i for i in range(n)]
    assert all(sub_ids(p) == ({1, 2, 3} if version == V5 else set()) for p in r.wire)
    assert not r.held  # every flow completed


@VERSIONS
def test_kill9_with_an_overlapping_backlog_qos1_at_most_once_per_connection(gateway, version):
    """QoS 1 after a crash is at least once; the bound asserted: no connection gets a
    message twice (one copy per filter would), so each message arrives at most once per
    connection, here at most twice in all, and every one at least once."""
    n = 40
    r, first = _kill_with_a_window_open(gateway, "k1", 1, n, version)
    assert [p.payload for p in first] == [b"%d" % i for i in range(20)]
    c, ack = connect(gateway.mqtt_port, "k1", version, clean=False, session_expiry=3600)
    assert ack.session_present
    before = len(r.wire)
    deadline = time.monotonic() + 20
    second: list[Publish] = []
    while True:
        try:
            p = c.recv(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
        except TimeoutError:
            break
        assert isinstance(p, Publish)
        r.take(p)
        second.append(p)
        c.send(Puback(packet_id=p.packet_id))  # type: ignore[arg-type]
    assert len(r.wire) == before + len(second)
    per_connection = Counter(p.payload for p in second)
    assert max(per_connection.values()) == 1, per_connection
    assert {p.payload for p in r.wire} == {b"%d" % i for i in range(n)}
    # what the second connection got is a suffix of the log in order
    payloads = [int(p.payload) for p in second]
    assert payloads == list(range(payloads[0], n))
    assert payloads[0] <= 15  # it resumes at or before the first unacknowledged one
    assert max(Counter(p.payload for p in r.wire).values()) <= 2


def test_shared_subscription_beside_ordinary_ones_gives_two_copies(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "sharer")
    subscribe(c, "$share/g/h/#", 1, sub_id=1)
    subscribe(c, "h/+", 1, sub_id=2)
    subscribe(c, "h/#", 0, sub_id=3)
    pub = Paho(port, "pub", v5=True)
    pub.publish("h/x", b"one", qos=1)
    r = Receiver()
    r.drain(c, 2)
    got = sorted((p.payload, p.qos, tuple(sorted(sub_ids(p)))) for p in r.wire)
    assert got == [(b"one", 1, (1,)), (b"one", 1, (2, 3))]


def test_amqp_publish_to_amq_topic_reaches_overlapping_mqtt_filters_once(gateway):
    """One AMQP publish is one record dispatched to every matching MQTT filter's LMQ:
    the merge applies to records of either protocol."""
    import pika

    port = gateway.mqtt_port
    c, _ = connect(port, "from-amqp")
    subscribe(c, "am/+", 1, sub_id=1)
    subscribe(c, "am/#", 0, sub_id=2)
    subscribe(c, "+/x", 1, sub_id=3)
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", gateway.ports["amqp"], blocked_connection_timeout=10, socket_timeout=10))
    try:
        ch = conn.channel()
        persistent = pika.BasicProperties(delivery_mode=2)
        ch.basic_publish("amq.topic", "am.x", b"both", persistent)
        ch.basic_publish("amq.topic", "am.y.z", b"deep", persistent)
        ch.basic_publish("amq.topic", "am.y", b"transient")
    finally:
        conn.close()
    r = Receiver()
    r.drain(c, 3)
    assert [(p.topic, p.payload, p.qos, sub_ids(p)) for p in r.wire] == [
        ("am/x", b"both", 1, {1, 2, 3}),
        ("am/y/z", b"deep", 0, {2}),
        ("am/y", b"transient", 0, {1, 2}),
    ]


@VERSIONS
def test_receive_maximum_counts_one_per_delivery_not_per_filter(tmp_path, version):
    """The window (the client's Receive Maximum; max_inflight for 3.1.1) holds
    deliveries: a backlog on three overlapping filters goes out one copy at a time
    within it, never more in flight than it allows, in order."""
    from ..gateway_process import GatewayProcess

    config = tmp_path / "window.toml"
    config.write_text("max_inflight = 3\n")
    gw = GatewayProcess(tmp_path / "d", "--config", str(config)).start()
    try:
        port = gw.mqtt_port
        c, _ = connect(port, "window", version, clean=False, session_expiry=3600)
        subscribe(c, "w/#", 1)
        subscribe(c, "w/+", 1)
        subscribe(c, "+/x", 1)
        c.close()
        pub = Paho(port, "pub")
        n = 30
        for i in range(n):
            pub.publish("w/x", b"%d" % i, qos=1)
        c, ack = connect(port, "window", version, clean=False, session_expiry=3600)
        assert ack.session_present
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < n:
            window = publishes(c, 3, timeout=max(0.1, deadline - time.monotonic()))
            assert silent(c, 0.3) == []  # the window is full: nothing more until a PUBACK
            for p in window:
                got.append(p.payload)
                c.send(Puback(packet_id=p.packet_id))  # type: ignore[arg-type]
        assert got == [b"%d" % i for i in range(n)]
        assert silent(c) == []
    finally:
        gw.stop()


def test_qos0_burst_on_overlapping_filters_once_each_in_order(gateway):
    """QoS 0 without properties at the tail takes the plain-encoder path: it must merge
    like the rest."""
    port = gateway.mqtt_port
    sub = Paho(port, "burst")
    sub.subscribe([("z/#", 0), ("z/+", 0), ("+/q", 0)])
    pub = Paho(port, "pub")
    n = 1000
    topics = ["z/q", "z/r", "y/q", "z/q/r"]
    for i in range(n):
        pub.client.publish(topics[i % 4], str(i).encode(), qos=0)
    pub.publish("z/q", b"end", qos=1)  # the QoS 0 ones before it are on the wire
    got = [m.payload for m in sub.get_n(n + 1, timeout=20)]
    assert got == [str(i).encode() for i in range(n)] + [b"end"]
    assert sub.nothing_more()


def test_resubscribing_an_overlapping_filter_while_messages_flow(gateway):
    """MQTT-3.8.4-3: a SUBSCRIBE to an existing filter replaces it (here with another
    QoS) without interrupting the flow; with an overlapping filter beside it, nothing
    goes twice and nothing is lost."""
    port = gateway.mqtt_port
    sub = Paho(port, "resub", v5=True)
    sub.subscribe([("rs/#", 1), ("rs/+", 0)])
    with _Stream(port, "rs/x") as stream:
        time.sleep(0.4)
        sub.subscribe("rs/+", qos=1)
        time.sleep(0.3)
        sub.subscribe("rs/#", qos=0)
        time.sleep(0.4)
    got = [int(m.payload) for m in sub.get_n(stream.sent, timeout=20)]
    assert got == list(range(stream.sent))
    assert sub.nothing_more()
    assert stream.sent > 50


def test_takeover_with_overlapping_filters_resumes_once(gateway):
    """A second connection with the same client id takes the session over in the middle
    of a backlog: the unacknowledged part comes again once (DUP), the rest once."""
    port = gateway.mqtt_port
    c, _ = connect(port, "taken", clean=False, session_expiry=3600)
    subscribe(c, "t/#", 1, sub_id=1)
    subscribe(c, "t/+", 1, sub_id=2)
    pub = Paho(port, "pub")
    n = 20
    for i in range(n):
        pub.publish("t/x", b"%d" % i, qos=1)
    first = publishes(c, 10)
    for p in first[:5]:
        c.send(Puback(packet_id=p.packet_id))  # type: ignore[arg-type]
    rest = barrier(c)  # the other ten, not acknowledged
    assert [p.payload for p in rest] == [b"%d" % i for i in range(10, 10 + len(rest))]
    d, ack = connect(port, "taken", clean=False, session_expiry=3600)
    assert ack.session_present
    r = Receiver()
    r.drain(d, n - 5)
    payloads = [p.payload for p in r.wire]
    assert payloads == [b"%d" % i for i in range(5, n)]
    assert all(p.dup for p in r.wire[:5])  # sent to the first connection, not acked
    assert all(sub_ids(p) == {1, 2} for p in r.wire)


def test_kill9_twice_while_the_overlapping_backlog_is_redelivered_qos2_exactly_once(gateway):
    """A second kill -9 while the first one's resends (PUBREL, DUP PUBLISHes) and new
    deliveries are half done: still each message exactly once, in order."""
    n = 40
    r, _ = _kill_with_a_window_open(gateway, "kk2", 2, n)
    c, ack = connect(gateway.mqtt_port, "kk2", clean=False, session_expiry=3600)
    assert ack.session_present
    # take what comes for a moment, completing every other flow, then kill again
    deadline = time.monotonic() + 1.0
    k = 0
    while time.monotonic() < deadline:
        try:
            packet = c.recv(timeout=max(0.05, deadline - time.monotonic()))
        except TimeoutError:
            break
        r.take(packet)
        k += 1
        if k % 2:
            r.complete(c, packet)
    r.deferred.clear()
    time.sleep(0.3)
    gateway.kill()
    c.close()
    gateway.start()
    c, ack = connect(gateway.mqtt_port, "kk2", clean=False, session_expiry=3600)
    assert ack.session_present
    r.drain(c, n, timeout=20)
    assert [p.payload for p in r.app] == [b"%d" % i for i in range(n)]
    assert not r.held


@pytest.mark.parametrize("dropped", ["f/#", "f/+"])
def test_unsubscribing_an_overlapping_filter_keeps_the_unfinished_delivery(gateway, dropped):
    """A QoS 2 message delivered through two filters and not yet PUBREC'd stays one
    flow when one of the filters goes: after a reconnect it comes again once, with its
    packet id and DUP (MQTT-3.10.4-3: started deliveries are completed)."""
    port = gateway.mqtt_port
    c, _ = connect(port, "unsub-q2", clean=False, session_expiry=3600)
    subscribe(c, "f/#", 2, sub_id=1)
    subscribe(c, "f/+", 2, sub_id=2)
    pub = Paho(port, "pub")
    pub.publish("f/x", b"pending", qos=2)
    (first,) = publishes(c, 1)
    assert silent(c) == []
    c.send(Unsubscribe(packet_id=77, topic_filters=(dropped,)))
    assert isinstance(c.recv(), Unsuback)
    c.close()
    c, ack = connect(port, "unsub-q2", clean=False, session_expiry=3600)
    assert ack.session_present
    (again,) = publishes(c, 1)
    assert (again.payload, again.packet_id, again.dup) == (b"pending", first.packet_id, True)
    r = Receiver(held={first.packet_id})  # type: ignore[arg-type]
    r.take(again)
    r.complete(c, again)
    assert silent(c) == []
    pub.publish("f/x", b"after", qos=2)
    r.drain(c, 1)
    kept = {"f/#": 1, "f/+": 2}
    del kept[dropped]
    assert [(p.payload, sub_ids(p)) for p in r.app] == [(b"after", set(kept.values()))]


def test_resubscribing_with_a_new_identifier_replaces_it_in_the_merged_copy(gateway):
    port = gateway.mqtt_port
    c, _ = connect(port, "newid")
    subscribe(c, "g/#", 1, sub_id=1)
    subscribe(c, "g/+", 1, sub_id=2)
    subscribe(c, "g/+", 2, sub_id=5)  # replaces g/+ (MQTT-3.8.4-3), new QoS and id
    pub = Paho(port, "pub", v5=True)
    pub.publish("g/x", b"one", qos=2)
    r = Receiver()
    r.drain(c, 1)
    assert [(p.payload, p.qos, sub_ids(p)) for p in r.wire] == [(b"one", 2, {1, 5})]


def test_max_queued_messages_with_overlapping_filters(tmp_path):
    """``max_queued_messages`` bounds each subscription's backlog; with overlapping
    filters the client still gets each remaining message once, in order. The bound
    asserted holds whether the merge keeps what any subscription kept or cuts at the
    newest cut: nothing older than every subscription's newest N, all of the session's
    newest N, no duplicate."""
    from ..gateway_process import GatewayProcess

    config = tmp_path / "queued.toml"
    config.write_text("max_queued_messages = 10\n")
    gw = GatewayProcess(tmp_path / "d", "--config", str(config)).start()
    try:
        port = gw.mqtt_port
        sub = Paho(port, "behind", v5=True, clean=False, session_expiry=3600)
        sub.subscribe([("q/#", 1), ("q/a", 1)])
        sub.disconnect()
        pub = Paho(port, "pub")
        n = 30
        for i in range(n):  # q/a gets the even ones: its newest ten are 10, 12, ..., 28
            pub.publish("q/a" if i % 2 == 0 else "q/b", b"%d" % i, qos=1)
        sub = Paho(port, "behind", v5=True, clean=False, session_expiry=3600)
        assert sub.session_present
        got: list[int] = []
        while True:
            try:
                got.append(int(sub.get(timeout=1.5).payload))
            except queue.Empty:
                break
        assert got == sorted(set(got)), got  # in order, once each
        assert set(range(20, n)) <= set(got)  # q/#'s newest ten
        assert set(got) <= set(range(20, n)) | set(range(10, 20, 2))  # q/a's newest ten
    finally:
        gw.stop()


def test_message_expiry_with_overlapping_filters(gateway):
    """One copy carrying the remaining expiry; an expired backlog message is not sent
    through any of the filters."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties as PahoProperties

    port = gateway.mqtt_port
    c, _ = connect(port, "expiring", clean=False, session_expiry=3600)
    subscribe(c, "x/#", 1, sub_id=1)
    subscribe(c, "x/+", 1, sub_id=2)
    c.close()
    pub = Paho(port, "pub", v5=True)
    props = PahoProperties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 1
    pub.publish("x/y", b"short", qos=1, properties=props)
    props = PahoProperties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 600
    pub.publish("x/y", b"long", qos=1, properties=props)
    time.sleep(2.2)
    c, _ = connect(port, "expiring", clean=False, session_expiry=3600)
    r = Receiver()
    r.drain(c, 1)
    assert [(p.payload, sub_ids(p)) for p in r.wire] == [(b"long", {1, 2})]
    expiry = r.wire[0].properties.message_expiry_interval
    assert expiry is not None and 590 <= expiry <= 598


def test_large_backlog_across_read_batches_then_live_once_each_in_order(gateway):
    """A backlog of several read batches on filters of different density (one holds
    every message, the others a third or two thirds), with live messages arriving while
    the session catches up from the log to the tail: each message once, in order."""
    port = gateway.mqtt_port
    kwargs = dict(v5=True, clean=False, session_expiry=3600)
    sub = Paho(port, "catchup", **kwargs)
    sub.subscribe([("L/#", 1), ("+/a", 1), ("L/a", 0)])
    sub.disconnect()
    pub = Paho(port, "pub")
    topics = ["L/a", "L/b/c", "M/a"]  # matched by 3, 1 and 1 filters
    backlog, live = 1500, 300
    for i in range(backlog):
        info = pub.client.publish(topics[i % 3], str(i).encode(), qos=1)
    info.wait_for_publish(30)
    sub = Paho(port, "catchup", **kwargs)
    assert sub.session_present
    for i in range(backlog, backlog + live):
        info = pub.client.publish(topics[i % 3], str(i).encode(), qos=1)
    info.wait_for_publish(30)
    got = [int(m.payload) for m in sub.get_n(backlog + live, timeout=60)]
    assert got == list(range(backlog + live))
    assert sub.nothing_more()


def test_subscribing_an_overlapping_filter_while_a_backlog_drains(gateway):
    """The new filter's LMQ starts at its end, far ahead of the old filter's backlog:
    the live messages it shares with the old filter wait their turn in the merge."""
    port = gateway.mqtt_port
    kwargs = dict(v5=True, clean=False, session_expiry=3600)
    sub = Paho(port, "late", **kwargs)
    sub.subscribe("j/#", qos=1)
    sub.disconnect()
    pub = Paho(port, "pub")
    backlog = 1000
    for i in range(backlog):
        info = pub.client.publish("j/x", str(i).encode(), qos=1)
    info.wait_for_publish(30)
    sub = Paho(port, "late", **kwargs)
    sub.subscribe("j/+", qos=1)  # while the backlog goes out
    live = 200
    for i in range(backlog, backlog + live):
        info = pub.client.publish("j/x", str(i).encode(), qos=1)
    info.wait_for_publish(30)
    got = [int(m.payload) for m in sub.get_n(backlog + live, timeout=60)]
    assert got == list(range(backlog + live))
    assert sub.nothing_more()


def test_retained_copies_belong_to_the_new_subscription_live_ones_are_merged(gateway):
    """MQTT 3.3.1.3: a SUBSCRIBE sends the retained messages matching its filter (that
    subscription's identifier only), also when another subscription already matched
    them; live messages afterwards go once."""
    port = gateway.mqtt_port
    pub = Paho(port, "pub", v5=True)
    pub.publish("rt/t", b"kept", qos=1, retain=True)
    c, _ = connect(port, "ret")
    subscribe(c, "rt/#", 1, sub_id=1)
    (first,) = publishes(c, 1)
    assert (first.payload, first.retain, sub_ids(first)) == (b"kept", True, {1})
    c.send(Puback(packet_id=first.packet_id))  # type: ignore[arg-type]
    subscribe(c, "rt/+", 1, sub_id=2)
    (second,) = publishes(c, 1)
    assert (second.payload, second.retain, sub_ids(second)) == (b"kept", True, {2})
    c.send(Puback(packet_id=second.packet_id))  # type: ignore[arg-type]
    assert silent(c) == []
    pub.publish("rt/t", b"live", qos=1)
    r = Receiver()
    r.drain(c, 1)
    assert [(p.payload, p.retain, sub_ids(p)) for p in r.wire] == [(b"live", False, {1, 2})]
