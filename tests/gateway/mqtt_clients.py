"""Small synchronous MQTT test clients: a paho-mqtt wrapper with a message queue, and a
raw-socket client on our own sans-IO client machine for exact packet-level control."""

from __future__ import annotations

import queue
import socket
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.mqtt import NEED_DATA, Connection, ConnectionClosed, MQTTVersion, Role

TIMEOUT = 5.0

#: Every client made in a test; the ``close_clients`` fixture closes them after it.
OPEN: list[Any] = []


def close_all() -> None:
    while OPEN:
        client = OPEN.pop()
        try:
            client.close()
        except Exception:
            pass


class Paho:
    """paho-mqtt with received messages in a queue and blocking helpers."""

    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        v5: bool = False,
        clean: bool = True,
        session_expiry: int | None = None,
        will: tuple | None = None,
        keepalive: int = 60,
        will_delay: int | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        OPEN.append(self)
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        proto = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
        kwargs: dict[str, Any] = {"protocol": proto}
        if not v5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, **kwargs)
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.connack: queue.Queue[Any] = queue.Queue()
        self.client.on_connect = lambda c, u, flags, rc, props=None: self.connack.put(
            (flags, rc, props)
        )
        self.subacks: queue.Queue[Any] = queue.Queue()
        self.client.on_subscribe = lambda c, u, mid, codes, props=None: self.subacks.put(codes)
        if will is not None:
            will_props = None
            if will_delay is not None:
                from paho.mqtt.packettypes import PacketTypes
                from paho.mqtt.properties import Properties

                will_props = Properties(PacketTypes.WILLMESSAGE)
                will_props.WillDelayInterval = will_delay
            self.client.will_set(*will, properties=will_props)
        connect_kwargs: dict[str, Any] = {"keepalive": keepalive}
        if v5:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            props = Properties(PacketTypes.CONNECT)
            if session_expiry is not None:
                props.SessionExpiryInterval = session_expiry
            connect_kwargs["properties"] = props
            connect_kwargs["clean_start"] = clean
        self.client.connect("127.0.0.1", port, **connect_kwargs)
        self.client.loop_start()
        self.flags, self.rc, self.props = self.connack.get(timeout=TIMEOUT)

    @property
    def session_present(self) -> bool:
        return bool(self.flags.session_present)

    def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        self.client.subscribe(*args, **kwargs)
        return self.subacks.get(timeout=TIMEOUT)

    def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, properties: Any = None
    ) -> None:
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published()

    def get(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def get_n(self, n: int, timeout: float = TIMEOUT) -> list[mqtt.MQTTMessage]:
        deadline = time.monotonic() + timeout
        return [self.messages.get(timeout=max(0.01, deadline - time.monotonic())) for _ in range(n)]

    def nothing_more(self, wait: float = 0.5) -> bool:
        try:
            self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def disconnect(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (an abnormal disconnect)."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    def close(self) -> None:
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()
        # paho's wake-up socket pair (TCP on loopback) is closed only on paho's own
        # disconnect path: without this it lives until garbage collection, whose
        # ResourceWarning then fails whichever later test the collection runs in
        self.client._reset_sockets()


class RawClient:
    """A socket driven by our own client-side machine: send exactly what a test needs,
    read packets one by one."""

    def __init__(self, port: int, version: MQTTVersion = MQTTVersion.V3_1_1) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        OPEN.append(self)
        self.machine = Connection(Role.CLIENT)
        self.version = version

    def send(self, packet: Any) -> None:
        self.sock.sendall(self.machine.send(packet))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float = TIMEOUT) -> Any:
        self.sock.settimeout(timeout)
        while True:
            event = self.machine.next_event()
            if event is not NEED_DATA:
                return event
            data = self.sock.recv(65536)
            self.machine.receive_data(data)
            if not data:
                return self.machine.next_event()

    def closed_by_server(self, timeout: float = TIMEOUT) -> bool:
        """True once the server has closed the socket (reading any packets first)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


__all__ = ["ConnectionClosed", "Paho", "RawClient"]
