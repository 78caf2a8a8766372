"""MQTT over real sockets with real clients (paho-mqtt 3.1.1 and 5.0, amqtt, mosquitto_*)
against a real gateway process."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions

from ..mqtt_clients import Paho


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_qos_levels_wildcards_and_overlaps(gateway, v5):
    port = gateway.mqtt_port
    sub = Paho(port, "sub", v5=v5)
    sub.subscribe([("a/+/c", 1), ("a/#", 2), ("x/y", 0)])
    pub = Paho(port, "pub", v5=v5)
    for qos in (0, 1, 2):
        pub.publish("a/b/c", b"q%d" % qos, qos=qos)
    pub.publish("x/y", b"exact", qos=2)
    pub.publish("other", b"nobody", qos=1)
    got = sorted((m.topic, m.payload, m.qos) for m in sub.get_n(4))
    # overlapping filters: one copy (issue 14, MQTT 5 3.3.4), at min(publish QoS, the
    # highest QoS granted among the matching subscriptions)
    assert got == [
        ("a/b/c", b"q0", 0),
        ("a/b/c", b"q1", 1),
        ("a/b/c", b"q2", 2),
        ("x/y", b"exact", 0),
    ]
    assert sub.nothing_more()
    sub.disconnect()
    pub.disconnect()


def test_order_is_kept_per_publisher(gateway):
    sub = Paho(gateway.mqtt_port, "sub")
    sub.subscribe("seq/#", qos=1)
    pub = Paho(gateway.mqtt_port, "pub")
    for i in range(200):
        pub.client.publish("seq/1", str(i).encode(), qos=1)
    got = [int(m.payload) for m in sub.get_n(200, timeout=15)]
    assert got == list(range(200))


def test_dollar_topics_are_not_matched_by_leading_wildcards(gateway):
    sub = Paho(gateway.mqtt_port, "sub")
    sub.subscribe([("#", 0), ("+/info", 0)])
    sys_sub = Paho(gateway.mqtt_port, "sys")
    sys_sub.subscribe("$SYS/broker/version", 0)
    assert b"lmq-gateway" in sys_sub.get(timeout=15).payload  # retained $SYS value
    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("$app/info", b"hidden", qos=1)
    pub.publish("app/info", b"seen", qos=1)
    got = [m.payload for m in sub.get_n(1)]  # one copy for the two matching filters
    assert got == [b"seen"] and sub.nothing_more()


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_retained_messages(gateway, v5):
    pub = Paho(gateway.mqtt_port, "pub", v5=v5)
    pub.publish("home/kitchen/temp", b"21", qos=1, retain=True)
    pub.publish("home/hall/temp", b"19", qos=0, retain=True)
    pub.publish("home/hall/temp", b"20", qos=1, retain=True)  # replaces
    pub.publish("home/attic/temp", b"5", qos=1, retain=True)
    pub.publish("home/attic/temp", b"", qos=1, retain=True)  # clears
    sub = Paho(gateway.mqtt_port, "sub", v5=v5)
    sub.subscribe("home/+/temp", qos=1)
    got = sorted((m.topic, m.payload, m.retain) for m in sub.get_n(2))
    assert got == [("home/hall/temp", b"20", True), ("home/kitchen/temp", b"21", True)]
    assert sub.nothing_more()
    # a live message on a retained topic is delivered with retain = 0
    pub.publish("home/hall/temp", b"22", qos=1, retain=True)
    live = sub.get()
    assert (live.payload, live.retain) == (b"22", False)


def test_retained_survive_restart(gateway):
    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("status/dev1", b"online", qos=1, retain=True)
    pub.disconnect()
    gateway.restart()
    sub = Paho(gateway.mqtt_port, "sub")
    sub.subscribe("status/#", qos=1)
    assert sub.get().payload == b"online"


def test_mqtt5_retain_handling_and_retain_as_published(gateway):
    pub = Paho(gateway.mqtt_port, "pub", v5=True)
    pub.publish("r/t", b"kept", qos=1, retain=True)
    sub = Paho(gateway.mqtt_port, "sub", v5=True)
    sub.subscribe("r/t", options=SubscribeOptions(qos=1, retainHandling=2))
    assert sub.nothing_more()
    sub.subscribe("r/#", options=SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=1))
    first = sub.get()
    assert first.payload == b"kept" and first.retain
    sub.subscribe("r/#", options=SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=1))
    assert sub.nothing_more()  # handling 1: only for a new subscription
    pub.publish("r/t", b"live", qos=1, retain=True)
    got = [(m.topic, m.payload, m.retain) for m in sub.get_n(1)]
    # one copy for r/t (rap off) and r/# (rap on): it keeps the flag, as published to r/#
    assert got == [("r/t", b"live", True)]
    assert sub.nothing_more()


def test_will_on_abnormal_disconnect_only(gateway):
    watcher = Paho(gateway.mqtt_port, "watcher")
    watcher.subscribe("wills/#", qos=1)
    dying = Paho(gateway.mqtt_port, "dying", will=("wills/dying", b"gone", 1, False))
    dying.drop()
    msg = watcher.get()
    assert (msg.topic, msg.payload) == ("wills/dying", b"gone")
    polite = Paho(gateway.mqtt_port, "polite", will=("wills/polite", b"gone", 1, False))
    polite.disconnect()
    assert watcher.nothing_more(1.0)


def test_mqtt5_will_delay(gateway):
    watcher = Paho(gateway.mqtt_port, "watcher")
    watcher.subscribe("wills/#", qos=1)
    opts = dict(v5=True, clean=False, session_expiry=60, will_delay=2)
    # dropped, then back within the delay: the will is cancelled
    c = Paho(gateway.mqtt_port, "delayed", will=("wills/delayed", b"first", 1, False), **opts)
    c.drop()
    back = Paho(gateway.mqtt_port, "delayed", v5=True, clean=False, session_expiry=60)
    assert back.session_present
    assert watcher.nothing_more(3.0)
    back.disconnect()
    # dropped and not back: the will goes out after the delay, not before
    c = Paho(gateway.mqtt_port, "delayed", will=("wills/delayed", b"second", 1, False), **opts)
    c.drop()
    assert watcher.nothing_more(1.0)
    assert watcher.get(timeout=5).payload == b"second"


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_persistent_session_survives_gateway_restart(gateway, v5):
    kwargs = {"session_expiry": 3600} if v5 else {}
    sub = Paho(gateway.mqtt_port, "durable", v5=v5, clean=False, **kwargs)
    assert not sub.session_present
    sub.subscribe("orders/#", qos=1)
    sub.disconnect()
    pub = Paho(gateway.mqtt_port, "pub", v5=v5)
    for i in range(20):
        pub.publish(f"orders/{i % 3}", str(i).encode(), qos=1)
    pub.disconnect()
    gateway.restart()
    sub = Paho(gateway.mqtt_port, "durable", v5=v5, clean=False, **kwargs)
    assert sub.session_present
    got = [int(m.payload) for m in sub.get_n(20)]
    assert got == list(range(20))  # offline messages, in order
    assert sub.nothing_more()


def test_clean_session_discards_state(gateway):
    sub = Paho(gateway.mqtt_port, "c1", clean=False)
    sub.subscribe("t", qos=1)
    sub.disconnect()
    again = Paho(gateway.mqtt_port, "c1", clean=True)
    assert not again.session_present
    again.disconnect()
    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("t", b"x", qos=1)
    back = Paho(gateway.mqtt_port, "c1", clean=False)
    assert not back.session_present and back.nothing_more()


def test_mqtt5_session_expiry(gateway):
    c = Paho(gateway.mqtt_port, "short", v5=True, clean=False, session_expiry=1)
    c.subscribe("t", qos=1)
    c.disconnect()
    import time

    time.sleep(2.0)
    back = Paho(gateway.mqtt_port, "short", v5=True, clean=False, session_expiry=60)
    assert not back.session_present


def test_session_takeover(gateway):
    first = Paho(gateway.mqtt_port, "same", v5=True)
    second = Paho(gateway.mqtt_port, "same", v5=True)
    second.subscribe("t", qos=1)
    pub = Paho(gateway.mqtt_port, "pub")
    pub.publish("t", b"to-second", qos=1)
    assert second.get().payload == b"to-second"
    assert first.nothing_more()


def test_shared_subscription_splits_messages(gateway):
    a = Paho(gateway.mqtt_port, "a")
    b = Paho(gateway.mqtt_port, "b")
    for c in (a, b):
        c.subscribe("$share/workers/jobs/#", qos=1)
    pub = Paho(gateway.mqtt_port, "pub")
    for i in range(40):
        pub.publish(f"jobs/{i}", str(i).encode(), qos=1)
    import time

    deadline = time.monotonic() + 10
    got: list[int] = []
    while len(got) < 40 and time.monotonic() < deadline:
        for c in (a, b):
            while not c.messages.empty():
                got.append(int(c.messages.get().payload))
        time.sleep(0.05)
    assert sorted(got) == list(range(40))  # each message to exactly one member
    assert a.nothing_more(0.3) and b.nothing_more(0.3)


def test_amqtt_client(gateway):
    """amqtt speaks MQTT 3.1.1."""
    from amqtt.client import MQTTClient

    async def run() -> list[tuple[str, bytes]]:
        sub = MQTTClient(client_id="amqtt-sub")
        await sub.connect(f"mqtt://127.0.0.1:{gateway.mqtt_port}/")
        await sub.subscribe([("am/#", 1)])
        pub = MQTTClient(client_id="amqtt-pub")
        await pub.connect(f"mqtt://127.0.0.1:{gateway.mqtt_port}/")
        for i in range(3):
            await pub.publish("am/x", b"m%d" % i, qos=1)
        got = []
        for _ in range(3):
            msg = await asyncio.wait_for(sub.deliver_message(), 5)
            got.append((msg.topic, bytes(msg.data)))
        await pub.disconnect()
        await sub.disconnect()
        return got

    assert asyncio.run(run()) == [("am/x", b"m0"), ("am/x", b"m1"), ("am/x", b"m2")]


def test_mosquitto_clients(gateway):
    assert shutil.which("mosquitto_sub"), "mosquitto-clients missing: run make system-deps"
    port = str(gateway.mqtt_port)
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-t",
            "mq/#",
            "-q",
            "1",
            "-C",
            "3",
            "-v",
            "-V",
            "mqttv5",
            "-W",
            "10",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    import time

    time.sleep(0.5)
    for i in range(3):
        subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                "127.0.0.1",
                "-p",
                port,
                "-t",
                f"mq/{i}",
                "-m",
                f"hello{i}",
                "-q",
                "2",
            ],
            check=True,
            timeout=10,
        )
    out, _ = sub.communicate(timeout=15)
    assert out.splitlines() == ["mq/0 hello0", "mq/1 hello1", "mq/2 hello2"]
