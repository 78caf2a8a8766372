"""MQTT and AMQP share one topic space (amq.topic of vhost "/"), with one append per
publish in both directions: paho-mqtt and pika against one in-process gateway."""

from __future__ import annotations

import pika
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from broker_core.commit_log import ScanStop

from ..amqp_support import ThreadGateway, drain, pika_connect
from ..mqtt_clients import Paho


def log_records(gateway: ThreadGateway, since: int) -> list:
    store = gateway.store
    out = []
    for item in store.log.scan(since):
        if isinstance(item, ScanStop):
            break
        if not item.topic.startswith("$SYS"):  # the MQTT front end's own $SYS topics
            out.append(item)
    return out


def test_mqtt_publish_reaches_amqp_queue_in_one_append(gw: ThreadGateway) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.queue_declare("sensors")
    ch.queue_bind("sensors", "amq.topic", "sensors.*.temp")
    sub = Paho(gw.mqtt_port, "mqtt-sub", v5=True)
    sub.subscribe("sensors/#", qos=1)
    pub = Paho(gw.mqtt_port, "mqtt-pub", v5=True)
    start = gw.store.log.end
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("unit", "C")]
    props.ContentType = "text/plain"
    pub.publish("sensors/kitchen/temp", b"21.5", qos=1, properties=props)
    assert sub.get().payload == b"21.5"
    got = drain(ch, "sensors")
    assert len(got) == 1
    method, amqp_props, body = got[0]
    assert body == b"21.5"
    assert method.exchange == "amq.topic" and method.routing_key == "sensors.kitchen.temp"
    assert amqp_props.delivery_mode == 2
    assert amqp_props.content_type == "text/plain"
    assert amqp_props.headers == {"unit": "C", "x-mqtt-publish-qos": 1}
    records = log_records(gw, start)
    assert len(records) == 1  # one append, dispatched to both
    assert {name for name, _ in records[0].dispatch} == {"amqp:/:sensors", "mqtt:sensors/#"}
    conn.close()


def test_amqp_publish_reaches_mqtt_subscriber_in_one_append(gw: ThreadGateway) -> None:
    sub = Paho(gw.mqtt_port, "mqtt-sub2", v5=True)
    sub.subscribe("home/+/light", qos=1)
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("lights")
    ch.queue_bind("lights", "amq.topic", "home.#")
    start = gw.store.log.end
    ch.basic_publish("amq.topic", "home.hall.light", b"on", pika.BasicProperties(
        delivery_mode=2, content_type="text/plain", headers={"who": "me"}))
    message = sub.get()
    assert message.topic == "home/hall/light" and message.payload == b"on"
    assert message.qos == 1
    assert message.properties.ContentType == "text/plain"
    assert ("who", "me") in message.properties.UserProperty
    assert len(drain(ch, "lights")) == 1
    records = log_records(gw, start)
    assert len(records) == 1
    assert {n for n, _ in records[0].dispatch} == {"amqp:/:lights", "mqtt:home/+/light"}
    conn.close()
