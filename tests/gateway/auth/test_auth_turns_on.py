"""The first user added to a running open-mode gateway turns authentication on at every
door (docs/security.md, "Adding the first user to a running gateway"), against a real
``lmq serve`` and real clients: paho (MQTT 5 and 3.1.1), pika (AMQP), grpcio (RocketMQ 5
gRPC), a remoting connection, an HTTP event stream. The connections let in without a
login are closed, the protocol's way; from then on every login is checked."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import queue
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest
from click.testing import CliRunner
from paho.mqtt.enums import CallbackAPIVersion
from rocketmq.grpc_protocol import service_pb2

from cli.main import main
from protocol.grpc import Code
from protocol.mqtt import Connect, MQTTVersion, ReasonCode
from protocol.remoting import RequestCode, ResponseCode
from tests.grpc.grpc_core_support import BOUND, channel, query_route, stub

from ..gateway_process import GatewayProcess
from ..mqtt_clients import RawClient
from ..remoting.remoting_support import Client

#: Bound on waiting for the switch (the watch looks every second).
SWITCH = 20.0


def lmq(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


class Paho5:
    """paho-mqtt 5 that records how the server disconnected it (and does not reconnect)."""

    def __init__(self, port: int, client_id: str) -> None:
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.connacks: queue.Queue[Any] = queue.Queue()
        c = self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        c.on_connect = lambda cl, u, flags, rc, props=None: self.connacks.put(rc)
        c.on_disconnect = lambda cl, u, flags, rc, props=None: self.disconnects.put(rc)
        c.connect("127.0.0.1", port)
        c.loop_start()
        assert self.connacks.get(timeout=BOUND) == 0

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
        # paho closes its socket and wake-up pair only on a disconnect of its own; a
        # connection the gateway closed would leak them until garbage collection, whose
        # ResourceWarning fails whichever later test it runs in
        self.client._reset_sockets()


def mqtt_login(port: int, username: str | None, password: str | None) -> int:
    c = RawClient(port, MQTTVersion.V5)
    c.send(
        Connect(
            client_id="login",
            protocol_version=MQTTVersion.V5,
            username=username,
            password=password.encode() if password is not None else None,
        )
    )
    code = int(c.recv().reason_code)
    c.close()
    return code


def amqp(port: int, user: str = "guest", password: str = "guest") -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            port,
            credentials=pika.PlainCredentials(user, password),
            connection_attempts=1,
            socket_timeout=BOUND,
            blocked_connection_timeout=BOUND,
        )
    )


async def never_ending() -> AsyncIterator[service_pb2.TelemetryCommand]:
    await asyncio.Event().wait()
    yield service_pb2.TelemetryCommand()  # pragma: no cover


def http_stream(port: int) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SWITCH)
    conn.request("GET", "/v1/groups/watchers/topics/t/stream")
    response = conn.getresponse()
    assert response.status == 200
    assert "text/event-stream" in (response.getheader("content-type") or "")
    return conn, response


async def test_first_user_turns_authentication_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    gw = GatewayProcess(data, "--remoting-port", "auto").start()
    try:
        mqtt_port, unified, grpc_port = gw.ports["mqtt"], gw.ports["unified"], gw.ports["grpc"]
        # open mode: every door lets anonymous clients in
        v5 = Paho5(mqtt_port, "anon-5")
        v3 = RawClient(mqtt_port, MQTTVersion.V3_1_1)
        v3.send(Connect(client_id="anon-3", protocol_version=MQTTVersion.V3_1_1))
        assert v3.recv().return_code == 0
        pika_conn = amqp(gw.ports["amqp"])
        pika_conn.channel().queue_declare("", exclusive=True)
        remoting = await Client.connect(gw.ports["remoting"])
        route = await remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        assert route.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        events_conn, events = http_stream(unified)
        async with channel(grpc_port) as ch:
            s = stub(ch)
            assert (await query_route(s, "t", grpc_port)).status.code == Code.OK
            telemetry = s.Telemetry(never_ending(), metadata=[("x-mq-client-id", "anon@1")])
            telemetry_ended = asyncio.ensure_future(_drain(telemetry))

            # the first user, non-interactively (the README's way), and her rules
            lmq("users", "add", "alice", "--password", "wonderland", "--data-dir", str(data))
            # (through the admin API, open until now; her rule with the file named: alice
            # is no administrator, and the gateway reloads its file)
            named = ("--users-file", str(data / "users.json"))
            lmq("users", "acl", "add", "alice", "--both", "t/#", *named)

            # MQTT 5: DISCONNECT 0x87 (not authorized); MQTT 3.1.1: the socket closes
            assert v5.disconnects.get(timeout=SWITCH) == ReasonCode.NOT_AUTHORIZED
            v5.close()
            assert v3.closed_by_server(timeout=SWITCH)
            # AMQP: connection.close 320 CONNECTION_FORCED
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                pika_conn.process_data_events(time_limit=SWITCH)
            assert closed.value.reply_code == 320
            assert "authentication on" in closed.value.reply_text
            # remoting: the connection closes (RocketMQ clients reconnect and sign)
            await asyncio.wait_for(remoting.closed.wait(), SWITCH)
            await remoting.close()
            # gRPC: the Telemetry stream served without a login ends
            await asyncio.wait_for(telemetry_ended, SWITCH)
            # HTTP: the event stream ends
            assert _read_to_end(events)
            events.close()
            events_conn.close()

            # from now on every login is checked, at every door
            assert mqtt_login(mqtt_port, None, None) == ReasonCode.NOT_AUTHORIZED
            assert mqtt_login(mqtt_port, "alice", "wrong") == ReasonCode.BAD_USER_NAME_OR_PASSWORD
            assert mqtt_login(mqtt_port, "nobody", "x") == ReasonCode.BAD_USER_NAME_OR_PASSWORD
            assert mqtt_login(mqtt_port, "alice", "wonderland") == 0
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                amqp(gw.ports["amqp"])
            reply = await query_route(s, "t", grpc_port)
            assert reply.status.code == Code.UNAUTHORIZED
        remoting = await Client.connect(gw.ports["remoting"])
        route = await remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        assert route.code == ResponseCode.NO_PERMISSION
        await remoting.close()
        assert _publish(unified, None) == 401
        assert _publish(unified, ("alice", "wrong")) == 401
        assert _publish(unified, ("alice", "wonderland")) == 201
        log = "".join(gw.output)
        assert "authentication on" in log and "users file loaded" in log
    finally:
        gw.stop()


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


def _read_to_end(response: http.client.HTTPResponse) -> bool:
    """Reads the event stream until the server ends it; True when it did in time."""
    deadline = time.monotonic() + SWITCH
    while time.monotonic() < deadline:
        try:
            chunk = response.read1(65536)
        except (http.client.IncompleteRead, ConnectionError):
            return True
        except TimeoutError:
            return False
        if not chunk:
            return True
    return False


def _publish(port: int, basic: tuple[str, str] | None) -> int:
    headers = {"Content-Type": "application/json"}
    if basic is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(basic).encode()).decode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
    try:
        conn.request("POST", "/v1/mqtt/t%2Fx/messages", json.dumps({"body": "hi"}), headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_allow_anonymous_and_a_malformed_file(tmp_path: Path) -> None:
    """With --allow-anonymous, anonymous clients stay welcome after the switch but get
    the @anonymous rules only; a malformed file first changes nothing (logged)."""
    data = tmp_path / "data"
    data.mkdir()
    gw = GatewayProcess(data, "--allow-anonymous").start()
    try:
        port = gw.mqtt_port
        (data / "users.json").write_text("{not json")
        _wait_for(gw, "users file not reloaded")
        assert mqtt_login(port, "nobody", "x") == 0  # still open
        (data / "users.json").unlink()
        lmq("users", "add", "alice", "--password", "wonderland", "--data-dir", str(data))
        users = str(data / "users.json")  # named: no administrator for the admin API
        lmq("users", "acl", "add", "@anonymous", "--subscribe", "public/#", "--users-file", users)
        _wait_for(gw, "anonymous=allowed")
        anonymous = Paho5(port, "anon-after")  # anonymous is still let in...
        (public,) = _subscribe(anonymous, "public/news")
        (private,) = _subscribe(anonymous, "private/x")
        anonymous.close()
        assert (public, private) == (1, ReasonCode.NOT_AUTHORIZED)  # ...with @anonymous's rules
        assert mqtt_login(port, "nobody", "x") == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    finally:
        gw.stop()


def _subscribe(client: Paho5, topic: str) -> list[int]:
    granted: queue.Queue[Any] = queue.Queue()
    client.client.on_subscribe = lambda c, u, mid, codes, props=None: granted.put(codes)
    client.client.subscribe(topic, qos=1)
    return [int(code.value) for code in granted.get(timeout=BOUND)]


def _wait_for(gw: GatewayProcess, text: str) -> None:
    deadline = time.monotonic() + SWITCH
    while not any(text in line for line in gw.output):
        assert time.monotonic() < deadline, f"no {text!r} in:\n" + "".join(gw.output)
        time.sleep(0.05)
