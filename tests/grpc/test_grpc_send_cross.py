"""One model across protocols, against a real ``lmq serve``: a gRPC producer's message
reaches an MQTT 5 subscriber and a remoting pop consumer with its id, tag, keys and
user properties; MQTT and remoting producers' messages reach a gRPC consumer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.clients.remoting import decode_messages
from protocol.grpc import Code
from protocol.remoting import RequestCode, ResponseCode
from protocol.remoting.messages import encode_properties
from tests.gateway.mqtt_clients import Paho
from tests.gateway.remoting.remoting_support import Client
from tests.grpc.grpc_msg_support import grpc_gateway, message, parts, receive, send
from tests.grpc.test_grpc_send import create_topic


async def test_grpc_send_reaches_mqtt_and_remoting(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "cross", "--queues", "2")
    async with grpc_gateway(data) as (gw, g):
        sub = Paho(gw.mqtt_port, "mqtt-sub", v5=True)
        try:
            sub.subscribe("cross", qos=1)
            res = await send(g, message("cross", b"from grpc", tag="TagA", keys=("k1", "k2"),
                                        message_id="GRPC-ID-1", props={"color": "red"}))
            assert res.status.code == Code.OK
            got = await asyncio.to_thread(sub.get)
            assert got.topic == "cross" and got.payload == b"from grpc"
            assert ("color", "red") in got.properties.UserProperty
        finally:
            sub.close()
        client = await Client.connect(gw.ports["unified"])
        try:
            resp = await client.call(RequestCode.POP_MESSAGE, {
                "consumerGroup": "remoting-group", "topic": "cross", "queueId": -1,
                "maxMsgNums": 32, "invisibleTime": 30_000, "pollTime": 0,
                "bornTime": int(time.time() * 1000), "initMode": 0})
            assert resp.code == ResponseCode.SUCCESS
            (msg,) = decode_messages(resp.body)
            assert msg.body == b"from grpc" and msg.msg_id == "GRPC-ID-1"
            assert msg.tags == "TagA" and msg.keys == "k1 k2"
            assert msg.properties["color"] == "red"
        finally:
            await client.close()


async def test_mqtt_and_remoting_sends_reach_a_grpc_consumer(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "inbound", "--queues", "2")
    async with grpc_gateway(data) as (gw, g):
        pub = Paho(gw.mqtt_port, "mqtt-pub", v5=True)
        try:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = [("origin", "mqtt")]
            pub.publish("inbound", b"from mqtt", qos=1, properties=props)
        finally:
            pub.close()
        client = await Client.connect(gw.ports["unified"])
        try:
            resp = await client.call(RequestCode.SEND_MESSAGE, {
                "producerGroup": "pg", "topic": "inbound", "queueId": 1, "sysFlag": 0,
                "bornTimestamp": int(time.time() * 1000), "flag": 0,
                "properties": encode_properties({
                    "TAGS": "TagR", "KEYS": "rk", "UNIQ_KEY": "REMOTING-ID-1",
                    "origin": "remoting"}),
            }, body=b"from remoting")
            assert resp.code == ResponseCode.SUCCESS
        finally:
            await client.close()
        got, _, status = parts(await receive(g, "grpc-group", "inbound", poll=2))
        assert status.code == Code.OK
        by_body = {m.body: m for m in got}
        assert set(by_body) == {b"from mqtt", b"from remoting"}
        mqtt_msg = by_body[b"from mqtt"].system_properties
        assert len(mqtt_msg.message_id) == 32  # no client id: its offsetMsgId
        assert dict(by_body[b"from mqtt"].user_properties) == {"origin": "mqtt"}
        assert not mqtt_msg.HasField("tag")
        remoting = by_body[b"from remoting"]
        assert remoting.system_properties.message_id == "REMOTING-ID-1"
        assert remoting.system_properties.tag == "TagR"
        assert list(remoting.system_properties.keys) == ["rk"]
        assert dict(remoting.user_properties) == {"origin": "remoting"}
        assert remoting.system_properties.queue_id == 1
