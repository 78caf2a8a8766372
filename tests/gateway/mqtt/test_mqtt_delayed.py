"""MQTT delayed publish (``$delayed/{seconds}/{topic}``, ``$delayed/@{unix}/{topic}``)
over real sockets: paho 3.1.1 and 5.0, mosquitto_pub/sub and our raw client against a
gateway process; never delivered before due, delivered after due under the real topic,
acknowledged once durable (so a pending one survives kill -9), bad forms refused with
the protocol's error."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from protocol.mqtt import Disconnect, MQTTVersion, Puback, Publish, Pubrec, Pubrel, ReasonCode

from ..mqtt_clients import Paho
from .test_mqtt_protocol import V5, V311, connect, subscribe


def _ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_delayed_relative_and_absolute(gateway, v5):
    port = gateway.mqtt_port
    sub = Paho(port, "dsub", v5=v5)
    sub.subscribe("d/#", qos=2)
    pub = Paho(port, "dpub", v5=v5)
    start = _ms()
    pub.publish("$delayed/2/d/rel", b"relative", qos=1)
    at = start + 1500
    pub.publish(f"$delayed/@{at // 1000}.{at % 1000:03d}/d/abs", b"absolute", qos=2)
    pub.publish("$delayed/0/d/now", b"zero", qos=0)
    pub.publish("d/plain", b"undelayed", qos=1)
    got = {}
    for _ in range(4):
        m = sub.get(timeout=10)
        got[m.topic] = (m.payload, _ms(), m.qos)
    assert got["d/plain"][0] == b"undelayed"
    assert got["d/now"][0] == b"zero"
    assert got["d/abs"][0] == b"absolute" and got["d/abs"][1] >= at
    assert got["d/abs"][2] == 2
    assert got["d/rel"][0] == b"relative" and got["d/rel"][1] >= start + 2000
    assert got["d/rel"][2] == 1
    assert sub.nothing_more()  # each exactly once; nothing under a $delayed name


def test_pending_delayed_survives_kill_9(gateway):
    port = gateway.mqtt_port
    sub = Paho(port, "keeper", clean=False)
    sub.subscribe("k/#", qos=1)
    sub.disconnect()
    pub = Paho(port, "kpub")
    start = _ms()
    for i in range(20):
        pub.publish(f"$delayed/3/k/{i}", b"m%d" % i, qos=1)  # PUBACK: durable
    pub.close()
    gateway.kill()  # kill -9 before the timers are due
    gateway.ports = {}
    gateway.start()
    sub = Paho(gateway.mqtt_port, "keeper", clean=False)
    got = []
    for _ in range(20):
        m = sub.get(timeout=15)
        got.append((m.topic, m.payload))
        assert _ms() >= start + 3000  # never early, not even after the restart
    assert sorted(got) == sorted((f"k/{i}", b"m%d" % i) for i in range(20))
    assert sub.nothing_more(1.0)  # none fired twice


def test_delayed_restart_before_due_then_fired_once(gateway):
    """A graceful restart in the middle of the delay: the timer is still pending and
    fires once, after due, at the restarted gateway."""
    port = gateway.mqtt_port
    sub = Paho(port, "r-sub", v5=True, clean=False, session_expiry=3600)
    sub.subscribe("r/#", qos=1)
    sub.disconnect()
    pub = Paho(port, "r-pub", v5=True)
    start = _ms()
    pub.publish("$delayed/2/r/x", b"later", qos=1)
    pub.disconnect()
    gateway.restart()
    sub = Paho(gateway.mqtt_port, "r-sub", v5=True, clean=False, session_expiry=3600)
    m = sub.get(timeout=15)
    assert (m.topic, m.payload) == ("r/x", b"later") and _ms() >= start + 2000
    assert sub.nothing_more(1.0)


@pytest.mark.parametrize("topic", [
    "$delayed/abc/t", "$delayed/-1/t", "$delayed/1.5/t", "$delayed/10", "$delayed/10/",
    "$delayed//t", "$delayed/@x/t", "$delayed/5/$delayed/5/t", "$delayed/99999999/t",
])
def test_bad_delayed_forms_v5_puback_0x90(gateway, topic):
    c = connect(gateway.mqtt_port, "bad5", V5)
    c.send(Publish(topic=topic, payload=b"x", qos=1, packet_id=1))
    ack = c.recv()
    assert isinstance(ack, Puback) and ack.reason_code == ReasonCode.TOPIC_NAME_INVALID, ack
    c.send(Publish(topic=topic, payload=b"x", qos=2, packet_id=2))
    rec = c.recv()
    assert isinstance(rec, Pubrec) and rec.reason_code == ReasonCode.TOPIC_NAME_INVALID
    c.send(Publish(topic=topic, payload=b"x", qos=0))  # QoS 0: no ack to carry it
    out = c.recv()
    assert isinstance(out, Disconnect) and out.reason_code == ReasonCode.TOPIC_NAME_INVALID
    assert c.closed_by_server()


def test_bad_delayed_form_closes_3_1_1(gateway):
    c = connect(gateway.mqtt_port, "bad3", V311)
    c.send(Publish(topic="$delayed/soon/t", payload=b"x", qos=1, packet_id=1))
    assert c.closed_by_server()


def test_retained_delayed_is_refused(gateway):
    c = connect(gateway.mqtt_port, "ret5", V5)
    c.send(Publish(topic="$delayed/1/t", payload=b"x", qos=1, packet_id=1, retain=True))
    out = c.recv()
    assert isinstance(out, Disconnect) and out.reason_code == ReasonCode.RETAIN_NOT_SUPPORTED
    assert c.closed_by_server()


def test_delayed_acl_is_the_real_topics(gateway):
    """``$SYS`` is not publishable; nor is it through ``$delayed``."""
    c = connect(gateway.mqtt_port, "acl5", V5)
    subscribe(c, "ok/#", 1)
    c.send(Publish(topic="$delayed/1/$SYS/x", payload=b"x", qos=1, packet_id=5))
    ack = c.recv()
    assert isinstance(ack, Puback) and ack.reason_code == ReasonCode.NOT_AUTHORIZED
    c.send(Publish(topic="$delayed/1/ok/y", payload=b"y", qos=1, packet_id=6))
    ack = c.recv()
    assert isinstance(ack, Puback) and ack.reason_code == ReasonCode.SUCCESS
    got = c.recv(timeout=10)
    assert isinstance(got, Publish) and got.topic == "ok/y" and got.payload == b"y"


def test_delayed_expiry_counts_from_due(gateway):
    """A Message Expiry Interval shorter than the delay: it runs from the due time, so
    the message is delivered (with the interval left, not a negative one)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    sub = Paho(gateway.mqtt_port, "exp-sub", v5=True)
    sub.subscribe("e/#", qos=1)
    pub = Paho(gateway.mqtt_port, "exp-pub", v5=True)
    props = Properties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 1
    pub.publish("$delayed/2/e/x", b"fresh", qos=1, properties=props)
    m = sub.get(timeout=10)
    assert m.payload == b"fresh" and m.properties.MessageExpiryInterval <= 1


def test_mosquitto_delayed(gateway):
    assert shutil.which("mosquitto_sub"), "mosquitto-clients missing: run make system-deps"
    port = str(gateway.mqtt_port)
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", port, "-t", "mq/#", "-q", "1",
         "-C", "2", "-v", "-W", "15"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(0.5)
        start = _ms()
        for args in (["-t", "$delayed/2/mq/late", "-m", "late", "-q", "1"],
                     ["-t", "mq/now", "-m", "now", "-q", "1", "-V", "mqttv5"]):
            subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", port, *args],
                           check=True, timeout=10)
        first = sub.stdout.readline().strip() if sub.stdout else ""
        second = sub.stdout.readline().strip() if sub.stdout else ""
        done = _ms()
        out, _ = sub.communicate(timeout=15)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert [first, second] == ["mq/now now", "mq/late late"]
    assert done >= start + 2000


def test_routes_are_the_filters_matching_at_publish(gateway):
    """Routed at publish (documented; EMQX routes at fire time): the message goes to the
    filters that matched when it was published, and reaches whoever holds one of them
    when it fires; a filter nobody held at publish does not get it."""
    port = gateway.mqtt_port
    early = Paho(port, "early")
    early.subscribe("n/#", qos=1)
    pub = Paho(port, "npub")
    pub.publish("$delayed/2/n/x", b"routed", qos=1)
    same_filter = Paho(port, "same")
    same_filter.subscribe("n/#", qos=1)  # a filter that matched at publish
    new_filter = Paho(port, "new")
    new_filter.subscribe("n/+", qos=1)   # no one held it at publish
    assert early.get(timeout=10).payload == b"routed"
    assert same_filter.get(timeout=10).payload == b"routed"
    assert new_filter.nothing_more(1.0)
    pub.publish("n/y", b"undelayed", qos=1)  # the new filter gets what follows
    assert new_filter.get().payload == b"undelayed"


def test_delayed_will(gateway):
    """A will on a ``$delayed`` topic is delayed too (as in EMQX): published when the
    connection drops, delivered that many seconds later on the real topic."""
    port = gateway.mqtt_port
    sub = Paho(port, "w-sub")
    sub.subscribe("w/#", qos=1)
    dying = Paho(port, "dying", will=("$delayed/2/w/gone", b"bye", 1, False))
    dropped = _ms()
    dying.drop()
    m = sub.get(timeout=10)
    assert (m.topic, m.payload) == ("w/gone", b"bye") and _ms() >= dropped + 2000
    assert sub.nothing_more()


def test_delayed_qos2_exactly_once_across_kill_9(gateway):
    """QoS 2 on a ``$delayed`` topic: PUBREC once the delayed record is durable; a kill -9
    before PUBREL and the client's DUP resend after the restart is recognised (the
    record's QoS 2 marker is in the log like any publish's): one delivery, after due."""
    port = gateway.mqtt_port
    sub = Paho(port, "q2-watch", clean=False)
    sub.subscribe("q2d/#", qos=2)
    sub.disconnect()
    c = connect(port, "q2-pub", clean=False)
    start = _ms()
    c.send(Publish(topic="$delayed/2/q2d/a", payload=b"once", qos=2, packet_id=7))
    assert c.recv() == Pubrec(packet_id=7)
    c.close()
    gateway.kill()
    gateway.ports = {}
    gateway.start()
    c = connect(gateway.mqtt_port, "q2-pub", clean=False)
    c.send(Publish(topic="$delayed/2/q2d/a", payload=b"once", qos=2, packet_id=7, dup=True))
    assert c.recv() == Pubrec(packet_id=7)  # recognised: not stored again
    c.send(Pubrel(packet_id=7))
    sub = Paho(gateway.mqtt_port, "q2-watch", clean=False)
    m = sub.get(timeout=10)
    assert (m.topic, m.payload, m.qos) == ("q2d/a", b"once", 2) and _ms() >= start + 2000
    assert sub.nothing_more(1.5)


def test_mqtt_3_1_client(gateway):
    """MQTT 3.1 (MQIsdp) clients get ``$delayed`` too."""
    V31 = MQTTVersion.V3_1
    sub = connect(gateway.mqtt_port, "old-sub", V31)
    subscribe(sub, "old/#", 1)
    pub = connect(gateway.mqtt_port, "old-pub", V31)
    start = _ms()
    pub.send(Publish(topic="$delayed/1/old/t", payload=b"v3.1", qos=1, packet_id=3))
    assert isinstance(pub.recv(), Puback)
    got = sub.recv(timeout=10)
    assert isinstance(got, Publish) and (got.topic, got.payload) == ("old/t", b"v3.1")
    assert _ms() >= start + 1000


def test_sys_counts_pending_delayed(gateway):
    port = gateway.mqtt_port
    holder = Paho(port, "p-holder", clean=False)
    holder.subscribe("p/#", qos=1)
    pub = Paho(port, "p-pub")
    for i in range(3):
        pub.publish(f"$delayed/3600/p/{i}", b"x", qos=1)
    watch = Paho(port, "p-watch")
    watch.subscribe("$SYS/broker/delayed messages/count", qos=0)
    deadline = time.monotonic() + 25  # the $SYS values are published every 10 s
    values = []
    while time.monotonic() < deadline and b"3" not in values:
        try:
            values.append(watch.get(timeout=max(0.1, deadline - time.monotonic())).payload)
        except Exception:
            break
    assert b"3" in values, values
