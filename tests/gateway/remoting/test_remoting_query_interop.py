"""QUERY_MESSAGE by key, VIEW_MESSAGE_BY_ID by offsetMsgId, and the one topic space
between remoting sends/pulls and MQTT (paho, MQTT 5 user properties) over real sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.user_properties import decode_user_properties
from protocol.remoting import RequestCode, ResponseCode
from protocol.remoting.messages import parse_offset_msg_id

from ..mqtt_clients import Paho
from .remoting_support import Client, port_of, running_gateway
from .rocketmq_messages import decode_pulled, properties
from .test_remoting_send_pull import pull_fields, send_fields


async def test_query_by_key_and_view_by_id(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        c = await Client.connect(port_of(gw))
        ids = []
        for i, keys in enumerate(("order-1 shared", "order-2 shared", "order-3")):
            sent = await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields(
                "shop", i % 2, properties(KEYS=keys, UNIQ_KEY=f"UNIQ{i}", TAGS="T")),
                body=b"m%d" % i)
            ids.append(sent.ext_fields["msgId"])
        found = await c.ok(RequestCode.QUERY_MESSAGE, {
            "topic": "shop", "key": "shared", "maxNum": 10, "beginTimestamp": 0,
            "endTimestamp": 2**62})
        messages = decode_pulled(found.body)
        assert sorted(m.body for m in messages) == [b"m0", b"m1"]
        assert {m.topic for m in messages} == {"shop"}
        assert {(m.queue_id, m.queue_offset) for m in messages} == {(0, 0), (1, 0)}
        unique = await c.ok(RequestCode.QUERY_MESSAGE, {
            "topic": "shop", "key": "UNIQ2", "maxNum": 10, "beginTimestamp": 0,
            "endTimestamp": 2**62, "_UNIQUE_KEY_QUERY": True})
        assert [m.body for m in decode_pulled(unique.body)] == [b"m2"]
        none = await c.call(RequestCode.QUERY_MESSAGE, {
            "topic": "shop", "key": "nope", "maxNum": 10, "beginTimestamp": 0,
            "endTimestamp": 2**62})
        assert none.code == ResponseCode.QUERY_NOT_FOUND

        _store, position = parse_offset_msg_id(ids[1])
        viewed = await c.ok(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": position})
        (message,) = decode_pulled(viewed.body)
        assert message.body == b"m1" and message.physical_offset == position
        assert message.properties["UNIQ_KEY"] == "UNIQ1"
        missing = await c.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": position + 1})
        assert missing.code == ResponseCode.SYSTEM_ERROR
        await c.close()


async def test_one_topic_space_with_mqtt(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        port = port_of(gw)
        c = await Client.connect(port)
        await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        sub = await asyncio.to_thread(Paho, port, "mqtt-sub", v5=True)
        await asyncio.to_thread(sub.subscribe, "orders/eu/+", 1)
        # RocketMQ send with mqttSecondTopic -> MQTT subscriber of orders/eu/+
        await c.ok(RequestCode.SEND_MESSAGE_V2, send_fields(
            "orders", 2, properties(mqttSecondTopic="/eu/42", TAGS="new", color="red")),
            body=b"from rocketmq")
        got = await asyncio.to_thread(sub.get)
        assert got.topic == "orders/eu/42" and got.payload == b"from rocketmq"
        assert ("color", "red") in list(got.properties.UserProperty)
        # MQTT publish on orders/us/7 -> a queue of RocketMQ topic orders, with the second
        # topic and the user properties as message properties
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("size", "XL")]
        await asyncio.to_thread(sub.publish, "orders/us/7", b"from mqtt", 1, False, props)
        bodies: dict[bytes, object] = {}
        for q in range(8):
            pulled = await c.call(RequestCode.PULL_MESSAGE, pull_fields("orders", q, 0))
            if pulled.code == ResponseCode.SUCCESS:
                for m in decode_pulled(pulled.body):
                    bodies[m.body] = m
        assert set(bodies) == {b"from rocketmq", b"from mqtt"}
        from_mqtt = bodies[b"from mqtt"]
        assert from_mqtt.topic == "orders"  # type: ignore[attr-defined]
        assert from_mqtt.properties["mqttSecondTopic"] == "/us/7"  # type: ignore[attr-defined]
        assert from_mqtt.properties["size"] == "XL"  # type: ignore[attr-defined]
        # the RocketMQ record itself carries the full MQTT name and the user property
        rec = gw.ctx.store.record_at(bodies[b"from rocketmq"].physical_offset)  # type: ignore[attr-defined]
        assert rec.topic == "orders/eu/42" and rec.tag == "new"
        assert decode_user_properties(rec.properties["user_properties"]) == (("color", "red"),)
        await asyncio.to_thread(sub.close)
        await c.close()


async def test_amqp_topic_exchange_to_rocketmq_has_the_second_topic(tmp_path: Path) -> None:
    import aiormq

    async with running_gateway(tmp_path / "data", amqp_port="auto") as gw:
        c = await Client.connect(port_of(gw))
        await c.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        amqp = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port_of(gw, 'amqp')}/")
        channel = await amqp.channel()
        await channel.confirm_delivery()
        await channel.basic_publish(b"from amqp", exchange="amq.topic",
                                    routing_key="orders.eu.42")
        await amqp.close()
        bodies = []
        for q in range(8):
            pulled = await c.call(RequestCode.PULL_MESSAGE, pull_fields("orders", q, 0))
            if pulled.code == ResponseCode.SUCCESS:
                bodies += decode_pulled(pulled.body)
        assert [m.body for m in bodies] == [b"from amqp"]
        assert bodies[0].topic == "orders"
        assert bodies[0].properties["mqttSecondTopic"] == "/eu/42"
        await c.close()
