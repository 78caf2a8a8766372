"""The MQTT endpoints against Debian's mosquitto: a persistent session in (PUBACK only
for what is acknowledged, the rest redelivered with the same msg_id after a crash), QoS 1
out (user properties, msg-id, path)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from bench.peers import Mosquitto
from gateway.connector.endpoints import PATH, CopyMessage, EndpointUnavailable, MessageRefused
from gateway.connector.mqtt import MqttPeer, MqttSource, MqttTarget, message_digest

from ..mqtt_clients import Paho
from .peer_support import read_n, running

pytestmark = pytest.mark.slow


async def crash(source: MqttSource) -> None:
    """What a kill -9 of the connector does to its connection: no DISCONNECT, no PUBACK
    for what was not acknowledged, the socket reset. (A ping first, so the PUBACKs
    already written have reached the broker: a reset drops what is still in the socket's
    send buffer, which a real crash may also do, and then more is redelivered.)"""
    client = source._client
    assert client is not None and client._writer is not None
    await client.ping()
    client._writer.transport.abort()
    source._client = None


async def publish(port: int, topic: str, payloads: list[bytes], v5: bool = False,
                  props: PahoProperties | None = None) -> None:
    def run() -> None:
        pub = Paho(port, "", v5=v5)
        for p in payloads:
            pub.publish(topic, p, qos=1, properties=props)
        pub.disconnect()
    await asyncio.to_thread(run)


@pytest.mark.parametrize("version", ["5", "3.1.1"])
async def test_source_acknowledges_only_what_the_target_stored(mosquitto: int,
                                                             version: str) -> None:
    peer = MqttPeer(port=mosquitto, version=version, client_id=f"src-ack-{version}")
    source = MqttSource("mosq", peer, f"ack{version}/#")
    await source.open()
    payloads = [f"m{i}".encode() for i in range(10)]
    await publish(mosquitto, f"ack{version}/a", payloads)
    first = await read_n(source, source.topic_filter, 10)
    assert [r.message.body for r in first] == payloads
    assert all(r.queue == f"ack{version}/#" for r in first)
    offsets = [r.offset for r in first]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    assert all(r.message.topic == f"ack{version}/a" for r in first)
    await source.acknowledge(source.topic_filter, first[5].offset)  # m0..m5 stored
    await crash(source)

    again = MqttSource("mosq", peer, f"ack{version}/#")
    await again.open()
    redelivered = await read_n(again, again.topic_filter, 4)
    # the unacknowledged ones come again, in order, with the ids they had
    assert [r.message.body for r in redelivered] == payloads[6:]
    ids = {r.message.body: r.message.msg_id for r in first}
    assert all(r.message.msg_id == ids[r.message.body] for r in redelivered)
    # (a broker may repeat them more than once, as MQTT allows: never an acknowledged one)
    more = await again.read(again.topic_filter, None, "latest", 10, 300)
    assert all(r.message.body in payloads[6:] and r.message.msg_id == ids[r.message.body]
               for r in more)
    last = (more or redelivered)[-1].offset
    await again.acknowledge(again.topic_filter, last)
    await again.close()

    third = MqttSource("mosq", peer, f"ack{version}/#")
    await third.open()
    assert await third.read(third.topic_filter, None, "latest", 10, 300) == []
    await third.close()


async def test_source_offsets_continue_after_the_targets_high_water(mosquitto: int) -> None:
    source = MqttSource("mosq", MqttPeer(port=mosquitto, client_id="src-hw"), "hw/#")
    await source.open()
    await publish(mosquitto, "hw/x", [b"a", b"b"])
    far = 10**18
    records = await source.read("hw/#", far, "latest", 10, 2000)
    records += await read_n(source, "hw/#", 2 - len(records))
    assert [r.offset for r in records] == [far + 1, far + 2]
    await source.close()


async def test_source_maps_v5_user_properties_msg_id_and_path(mosquitto: int) -> None:
    source = MqttSource("mosq", MqttPeer(port=mosquitto, client_id="src-props"), "props/#")
    await source.open()
    props = PahoProperties(PacketTypes.PUBLISH)
    props.UserProperty = [("color", "red"), ("msg-id", "order-17"), (PATH, "gw-a,gw-b")]
    await publish(mosquitto, "props/1", [b"x"], v5=True, props=props)
    await publish(mosquitto, "props/2", [b"y"])
    r1, r2 = await read_n(source, "props/#", 2)
    assert r1.message.properties == {"color": "red"}
    assert r1.message.msg_id == "order-17"
    assert r1.message.path == ("gw-a", "gw-b")
    assert r2.message.properties == {} and r2.message.path == ()
    assert len(r2.message.msg_id) == 32
    await source.acknowledge("props/#", r2.offset)
    await source.close()


def test_digest_depends_on_packet_id_topic_and_payload() -> None:
    base = message_digest("c", 1, "t", b"p")
    assert base == message_digest("c", 1, "t", b"p")
    assert len({base, message_digest("c", 2, "t", b"p"), message_digest("c", 1, "u", b"p"),
                message_digest("c", 1, "t", b"q"), message_digest("d", 1, "t", b"p")}) == 5


@pytest.mark.parametrize("version", ["5", "3.1.1"])
async def test_target_publishes_qos1_with_properties(mosquitto: int, version: str) -> None:
    sub = Paho(mosquitto, f"sub-out-{version}", v5=True)
    sub.subscribe(f"out{version}/#", qos=1)
    target = MqttTarget("mosq", MqttPeer(port=mosquitto, version=version,
                                         client_id=f"tgt-{version}"))
    await target.open()
    assert await target.high_water("gw", ["q"]) is None
    messages = [CopyMessage(body=f"b{i}".encode(), topic="orders",
                            properties={"k": str(i)}, msg_id=f"id{i}", path=("gw-a",))
                for i in range(50)]
    await target.write(f"out{version}/orders", "orders:0", messages)
    got = await asyncio.to_thread(sub.get_n, 50)
    assert [m.payload for m in got] == [m.body for m in messages]
    assert all(m.qos == 1 and m.topic == f"out{version}/orders" for m in got)
    user = [dict(m.properties.UserProperty) if hasattr(m.properties, "UserProperty") else {}
            for m in got]
    if version == "5":
        assert user[7] == {"k": "7", "msg-id": "id7", PATH: "gw-a"}
    else:
        assert user[7] == {}  # MQTT 3.1.1 carries no properties
    await target.close()


async def test_target_refuses_a_bad_topic_and_reports_an_absent_broker(mosquitto: int) -> None:
    target = MqttTarget("mosq", MqttPeer(port=mosquitto, client_id="tgt-bad"))
    await target.open()
    with pytest.raises(MessageRefused) as info:
        await target.write("a/+/b", "q", [CopyMessage(body=b"x", topic="t")])
    assert info.value.index == 0
    await target.close()
    from bench.peers import free_port
    nobody = MqttTarget("none", MqttPeer(port=free_port(), timeout=1.0))
    with pytest.raises(EndpointUnavailable):
        await nobody.open()


async def test_source_reports_a_dead_broker_and_resumes_after_its_restart(
        tmp_path: Path) -> None:
    with running(Mosquitto(tmp_path / "m")) as broker:
        assert broker.mqtt_port is not None
        peer = MqttPeer(port=broker.mqtt_port, client_id="src-restart", timeout=2.0)
        source = MqttSource("mosq", peer, "r/#")
        await source.open()
        broker.kill9()
        with pytest.raises(EndpointUnavailable):
            await source.read("r/#", None, "latest", 10, 2000)
        with pytest.raises(EndpointUnavailable):
            await source.read("r/#", None, "latest", 10, 0)  # cannot reconnect yet
        broker.start(fresh=False)  # same port; persistence off: the session is new
        records = await source.read("r/#", None, "latest", 10, 0)  # reconnects, subscribes
        assert records == []
        await publish(broker.mqtt_port, "r/1", [b"after"])
        assert [r.message.body for r in await read_n(source, "r/#", 1)] == [b"after"]
        await source.close()


async def test_a_silent_broker_is_unavailable() -> None:
    """A peer that accepts and CONNACKs, then says nothing (a half-open connection):
    the keep-alive ends it. One that never CONNACKs: the connect times out."""
    done = asyncio.Event()

    async def connack_then_silence(reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"\x20\x02\x00\x00")  # CONNACK, MQTT 3.1.1, accepted
        await writer.drain()
        await done.wait()
        writer.close()

    async def silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await done.wait()
        writer.close()

    for handler in (connack_then_silence, silence):
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            target = MqttTarget("silent", MqttPeer(port=port, version="3.1.1", keep_alive=1,
                                                   timeout=1.0))
            with pytest.raises(EndpointUnavailable):
                await target.open()
                assert target._client is not None
                await asyncio.wait_for(target._client.closed.wait(), 5)
                raise EndpointUnavailable(target._client.error)
            await target.close()
        finally:
            done.set()
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0.05)  # the handlers close their sockets
        done.clear()


async def test_target_does_not_publish_the_runners_heartbeats(mosquitto: int) -> None:
    from gateway.connector.heartbeat import HEARTBEAT

    sub = Paho(mosquitto, "sub-hb", v5=True)
    sub.subscribe("hb/#", qos=1)
    target = MqttTarget("mosq", MqttPeer(port=mosquitto, client_id="tgt-hb"))
    await target.open()
    beat = CopyMessage(body=b"", topic="t", properties={HEARTBEAT: "r:1"})
    await target.write("hb/x", "q", [CopyMessage(body=b"1", topic="t"), beat,
                                     CopyMessage(body=b"2", topic="t")])
    with pytest.raises(MessageRefused) as info:  # indexes stay those of the whole batch
        await target.write("hb/+", "q", [beat, CopyMessage(body=b"3", topic="t")])
    assert info.value.index == 1
    await target.close()
    assert [m.payload for m in await asyncio.to_thread(sub.get_n, 2)] == [b"1", b"2"]
    assert sub.nothing_more(0.3)


def test_a_peer_whose_port_was_taken_starts_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``free_port`` only finds a port free a moment before the broker binds it; a
    parallel test may take it in between (RabbitMQ's MQTT listener lost its port so in
    one CI run). The fresh start is retried on new ports, when the broker's log says so."""
    import socket

    import bench.peers

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers the readiness probe
    ports = [taken.getsockname()[1]]
    real = bench.peers.free_port
    monkeypatch.setattr(bench.peers, "free_port", lambda: ports.pop() if ports else real())
    broker = Mosquitto(tmp_path)
    if broker.available():
        pytest.skip(str(broker.available()))
    try:
        with running(broker):
            assert broker.mqtt_port != taken.getsockname()[1]
            Paho(broker.mqtt_port or 0, "probe").disconnect()
            assert "address already in use" in broker.log_path.read_text().lower()
    finally:
        taken.close()
