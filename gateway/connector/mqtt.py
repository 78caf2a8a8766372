"""MQTT brokers as connector endpoints: :class:`MqttSource` and :class:`MqttTarget`.

The client is the project's own sans-IO MQTT machine (:class:`protocol.mqtt.Connection`
in the client role) over an asyncio stream: neither amqtt's client (it PUBACKs a QoS 1
message as it hands it over) nor paho-mqtt (``manual_ack`` exists, but paho runs its own
network loop in a thread) lets a PUBACK wait for the target in an asyncio runner as
simply.

Source (what a Mosquitto bridge's ``topic ... in`` does, without losing its buffer):

- a persistent session: MQTT 3.1.1 clean session 0, MQTT 5 clean start 0 with a Session
  Expiry Interval (``session_expiry``, default one week), so what arrives while the
  connector is down waits in the broker;
- SUBSCRIBE at QoS 1 to the rule's filter; a QoS 1 PUBLISH is PUBACKed only when the
  runner calls :meth:`MqttSource.acknowledge` for it (the target stored it). A connector
  that dies before leaves it unacknowledged in the broker's session, which sends it
  again (DUP, same packet id) when the session resumes: at-least-once;
- the one source queue is the filter; offsets number the records in arrival order as
  they are read, starting at the wall clock in microseconds when the endpoint opens and
  never below ``after + 1`` of a read, so they grow across restarts (a gateway target keeps a
  high-water mark per source queue and must never see an offset go back);
- ``msg_id``: the MQTT 5 user property ``msg-id`` when the publisher set one, else
  :func:`message_digest` (client id, packet id, topic, payload), which a redelivery
  repeats (same packet id) and a gateway target deduplicates within its window;
- ``born_ms``: the MQTT 5 user property ``msg-timestamp`` (epoch milliseconds) when the
  publisher set one (the copy is ``stamped``: the rule's delay is measured from it),
  else the time of receipt.

Target: QoS 1 PUBLISH; :meth:`MqttTarget.write` returns when every PUBACK is in, at most
the broker's Receive Maximum in flight; MQTT 5 user properties carry the properties,
``msg-id`` and the connector's ``__LMQ_PATH`` (so an MQTT source further on keeps the
path and loops stop); MQTT 3.1.1 has no properties and carries the body only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import ssl
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.connector.endpoints import (
    CONNECTOR_PROPERTIES,
    PATH,
    CopyMessage,
    EndpointUnavailable,
    MessageRefused,
    SourceRecord,
)
from gateway.connector.heartbeat import HEARTBEAT
from gateway.connector.tls import peer_settings, verify_failure
from protocol.mqtt import (
    NEED_DATA,
    PAUSED,
    Connack,
    Connect,
    Connection,
    ConnectionClosed,
    Disconnect,
    MQTTError,
    MQTTVersion,
    OutgoingPacketTooLarge,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Publish,
    ReasonCode,
    Role,
    Suback,
    Subscribe,
    Subscription,
)

log = logging.getLogger(__name__)

#: The MQTT 5 user property a publisher may set to give its message an id.
MSG_ID_PROPERTY = "msg-id"
#: The MQTT 5 user property a publisher may set to its message's birth, epoch
#: milliseconds (decimal): the copy's ``born_ms``, and the rule's delay is measured from it.
TIMESTAMP_PROPERTY = "msg-timestamp"
_VERSIONS = {"3.1.1": MQTTVersion.V3_1_1, "311": MQTTVersion.V3_1_1, "4": MQTTVersion.V3_1_1,
             "5": MQTTVersion.V5, "5.0": MQTTVersion.V5}
#: PUBACK reason codes that say "not now" rather than "never".
_TRANSIENT = frozenset({ReasonCode.QUOTA_EXCEEDED, ReasonCode.SERVER_BUSY})


@dataclass(frozen=True, slots=True)
class MqttPeer:
    """An MQTT broker (a rules file's ``[clusters.NAME]`` of ``kind = "mqtt"``)."""

    host: str = "127.0.0.1"
    port: int = 1883
    #: "5" or "3.1.1"
    version: str = "5"
    #: the client id (the source's session is named by it: keep it stable); empty: one
    #: made from the rule's name by the runner
    client_id: str = ""
    username: str | None = None
    password: str | None = None
    keep_alive: int = 60
    #: seconds to connect and to wait for a CONNACK, SUBACK or PUBACK
    timeout: float = 10.0
    #: MQTT 5 Session Expiry Interval of the source's session, seconds
    session_expiry: int = 7 * 24 * 3600
    #: MQTT over TLS (the cluster's ``tls``: ``gateway.connector.tls``); None: plain TCP
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> MqttPeer:
        known = set(cls.__dataclass_fields__)
        unknown = set(config) - known - {"kind", "name"}
        if unknown:
            raise ValueError(f"unknown MQTT cluster settings: {', '.join(sorted(unknown))}")
        values = {k: v for k, v in config.items() if k in known}
        if "version" in values:
            values["version"] = str(values["version"])
        peer = cls(**values)
        if peer.version not in _VERSIONS:
            raise ValueError(f"version: 5 or 3.1.1, not {peer.version!r}")
        return peer

    @property
    def mqtt_version(self) -> MQTTVersion:
        return _VERSIONS[self.version]


def message_digest(client_id: str, packet_id: int | None, topic: str, payload: bytes) -> str:
    """The id of an MQTT message without a ``msg-id`` property: SHA-256 of the session's
    client id, the broker's packet id, the topic and the payload, 32 hex digits. A broker
    resending an unacknowledged message to a resumed session uses its packet id again
    (MQTT-4.4.0-1), so a redelivery has the same id; two different messages share one
    only with the same topic, payload and packet id (packet ids cycle through 65,535)."""
    h = hashlib.sha256(f"{client_id}\n{packet_id or 0}\n{topic}\n".encode())
    h.update(payload)
    return h.hexdigest()[:32].upper()


class _Client:
    """One MQTT connection: the sans-IO machine, its stream and its reader task.

    Received QoS 0/1 PUBLISH packets go to ``on_publish``; PUBACK and SUBACK resolve the
    futures waiting for them. When the connection ends every waiter gets
    :class:`EndpointUnavailable` and ``closed`` is set."""

    def __init__(self, peer: MqttPeer, client_id: str, clean_start: bool,
                 on_publish: Any = None) -> None:
        self.peer = peer
        self.client_id = client_id
        self.clean_start = clean_start
        self.on_publish = on_publish
        self.conn = Connection(Role.CLIENT)
        self.connack: Connack | None = None
        self.closed = asyncio.Event()
        self.error: str = ""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._ids = itertools.cycle(range(1, 0x10000))
        self._last_received = 0.0

    async def connect(self) -> Connack:
        peer = self.peer
        try:
            async with asyncio.timeout(peer.timeout):
                self._reader, self._writer = await asyncio.open_connection(
                    peer.host, peer.port, ssl=peer.ssl_context)
        except (OSError, TimeoutError) as exc:
            self._lost(str(exc) or type(exc).__name__)
            failure = verify_failure(exc, f"MQTT broker {peer.host}:{peer.port}")
            if failure is not None:
                raise failure from None
            raise EndpointUnavailable(
                f"MQTT broker {peer.host}:{peer.port}: {exc or type(exc).__name__}") from None
        v5 = peer.mqtt_version is MQTTVersion.V5
        props = Properties(session_expiry_interval=peer.session_expiry) if (
            v5 and not self.clean_start) else Properties()
        password = peer.password.encode() if peer.password is not None else None
        self._write(self.conn.send(Connect(
            client_id=self.client_id, protocol_version=peer.mqtt_version,
            clean_start=self.clean_start, keep_alive=peer.keep_alive,
            username=peer.username, password=password, properties=props)))
        connack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[("connack", 0)] = connack
        self._tasks.append(asyncio.create_task(self._read_loop(), name="mqtt-peer-read"))
        try:
            async with asyncio.timeout(peer.timeout):
                ack = await connack
        except TimeoutError:
            await self.close()
            raise EndpointUnavailable(f"no CONNACK from {peer.host}:{peer.port}") from None
        except EndpointUnavailable:
            await self.close()
            raise
        assert isinstance(ack, Connack)
        if ack.reason_code:
            await self.close()
            raise EndpointUnavailable(
                f"MQTT broker {peer.host}:{peer.port} refused the connection:"
                f" reason 0x{ack.reason_code:02X}")
        self.connack = ack
        if peer.keep_alive:
            self._tasks.append(asyncio.create_task(self._ping_loop(), name="mqtt-peer-ping"))
        return ack

    def next_id(self) -> int:
        for packet_id in self._ids:
            if ("puback", packet_id) not in self._waiters and (
                    ("suback", packet_id) not in self._waiters):
                return packet_id
        raise AssertionError("unreachable")

    def _write(self, data: bytes) -> None:
        if self._writer is None or self.closed.is_set():
            raise EndpointUnavailable(f"MQTT connection closed: {self.error or 'closed'}")
        self._writer.write(data)

    def send(self, packet: Any) -> None:
        try:
            data = self.conn.send(packet)
        except OutgoingPacketTooLarge:
            raise
        except MQTTError as exc:
            raise EndpointUnavailable(f"MQTT connection unusable: {exc}") from None
        self._write(data)

    async def drain(self) -> None:
        if self._writer is None:
            raise EndpointUnavailable("not connected")
        try:
            await self._writer.drain()
        except (OSError, ConnectionError) as exc:
            self._lost(str(exc))
            raise EndpointUnavailable(f"MQTT connection lost: {exc}") from None

    def expect(self, kind: str, packet_id: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed.is_set():
            future.set_exception(EndpointUnavailable(f"MQTT connection closed: {self.error}"))
        else:
            self._waiters[(kind, packet_id)] = future
        return future

    def forget(self, kind: str, packet_id: int) -> None:
        self._waiters.pop((kind, packet_id), None)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        conn = self.conn
        try:
            while True:
                data = await self._reader.read(65536)
                self._last_received = asyncio.get_running_loop().time()
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is NEED_DATA or event is PAUSED:
                        break
                    if isinstance(event, ConnectionClosed):
                        self._lost("the broker closed the connection")
                        return
                    self._dispatch(event)
                if not data:
                    self._lost("the broker closed the connection")
                    return
        except (OSError, ConnectionError) as exc:
            self._lost(str(exc))
        except MQTTError as exc:
            self._lost(f"protocol error from the broker: {exc}")
        except asyncio.CancelledError:
            self._lost("closed")
            raise

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, Publish):
            if self.on_publish is not None:
                self.on_publish(event)
        elif isinstance(event, Puback):
            self._resolve(("puback", event.packet_id), event)
        elif isinstance(event, Suback):
            self._resolve(("suback", event.packet_id), event)
        elif isinstance(event, Connack):
            self._resolve(("connack", 0), event)
        elif isinstance(event, Pingresp):
            self._resolve(("pingresp", 0), event)
        elif isinstance(event, Disconnect):
            self._lost(f"the broker disconnected: reason 0x{event.reason_code:02X}")
        # the rest needs nothing

    def _resolve(self, key: tuple[str, int], value: Any) -> None:
        future = self._waiters.pop(key, None)
        if future is not None and not future.done():
            future.set_result(value)

    def _lost(self, why: str) -> None:
        if self.closed.is_set():
            return
        self.error = why
        self.closed.set()
        waiters, self._waiters = self._waiters, {}
        for future in waiters.values():
            if not future.done():
                future.set_exception(EndpointUnavailable(f"MQTT connection lost: {why}"))
                future.exception()  # retrieved: a waiter cancelled first logs nothing
        if self._writer is not None:
            self._writer.close()

    async def ping(self) -> None:
        """A PINGREQ / PINGRESP round trip: the broker has read all we sent before."""
        future = self._waiters.get(("pingresp", 0)) or self.expect("pingresp", 0)
        self.send(Pingreq())
        try:
            async with asyncio.timeout(self.peer.timeout):
                await asyncio.shield(future)  # (other pings may wait for it too)
        except TimeoutError:
            raise EndpointUnavailable("no PINGRESP") from None

    async def _ping_loop(self) -> None:
        """PINGREQ every half keep-alive; nothing received for 1.5 keep-alives (a
        half-open connection: the broker or the network went away silently) is a lost
        connection, as the broker would judge us."""
        loop = asyncio.get_running_loop()
        interval = max(1.0, self.peer.keep_alive / 2)
        while not self.closed.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.closed.wait()
                return
            if loop.time() - self._last_received > 1.5 * self.peer.keep_alive:
                self._lost(f"nothing from the broker for {1.5 * self.peer.keep_alive:g} s")
                return
            try:
                self.send(Pingreq())
            except EndpointUnavailable:
                return

    async def close(self, disconnect: bool = False) -> None:
        if disconnect and not self.closed.is_set() and self.connack is not None:
            with contextlib.suppress(Exception):
                # A round trip first: Mosquitto drops a client whose socket it sees
                # closed without reading what is still in its buffer, so PUBACKs sent
                # just before a DISCONNECT were lost (the messages came again).
                async with asyncio.timeout(1.0):
                    await self.ping()
                self.send(Disconnect())
                async with asyncio.timeout(1.0):
                    await self.drain()
        self._lost("closed")
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        for task in self._tasks:
            if task is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._tasks.clear()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()


def _user_properties(
    publish: Publish,
) -> tuple[dict[str, str], str, tuple[str, ...], int | None]:
    """(properties, msg-id, path, msg-timestamp) from a received PUBLISH's MQTT 5 user
    properties (a ``msg-timestamp`` that is not a decimal number stays a property)."""
    props: dict[str, str] = {}
    msg_id = ""
    path: tuple[str, ...] = ()
    stamp: int | None = None
    for name, value in publish.properties.user_properties:
        if name == MSG_ID_PROPERTY:
            msg_id = value
        elif name == TIMESTAMP_PROPERTY and value.isdigit() and len(value) < 16:
            stamp = int(value)
        elif name == PATH:
            path = tuple(p for p in value.split(",") if p)
        elif name not in CONNECTOR_PROPERTIES:
            props[name] = value
    return props, msg_id, path, stamp


class MqttSource:
    """An MQTT broker's subscription as a connector source (see the module doc)."""

    def __init__(self, name: str, peer: MqttPeer, topic_filter: str,
                 client_id: str = "") -> None:
        self.name = name
        self.peer = peer
        self.topic_filter = topic_filter
        self.client_id = client_id or peer.client_id or f"lmq-connector-{name}"
        self._client: _Client | None = None
        #: (packet id, None for QoS 0; the message) received, not read yet
        self._received: deque[tuple[int | None, CopyMessage]] = deque()
        #: offset -> packet id of QoS 1 records read but not PUBACKed, arrival order
        self._pending: deque[tuple[int, int]] = deque()
        self._arrived = asyncio.Event()
        self._next_offset = time.time_ns() // 1000

    async def open(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        if self._client is not None:
            await self._client.close()
        # Whatever the old connection gave and we did not acknowledge, the broker sends
        # again on this one (with new offsets here): forget it.
        self._received.clear()
        self._pending.clear()
        client = _Client(self.peer, self.client_id, clean_start=False,
                         on_publish=self._on_publish)
        self._client = client
        await client.connect()
        packet_id = client.next_id()
        suback = client.expect("suback", packet_id)
        client.send(Subscribe(packet_id, (Subscription(self.topic_filter, qos=1),)))
        try:
            async with asyncio.timeout(self.peer.timeout):
                ack = await suback
        except TimeoutError:
            await client.close()
            raise EndpointUnavailable(f"no SUBACK for {self.topic_filter!r}") from None
        code = ack.reason_codes[0]
        if code >= 0x80:
            await client.close()
            raise EndpointUnavailable(
                f"the broker refused the subscription {self.topic_filter!r}: 0x{code:02X}")
        log.info("mqtt source %s: subscribed to %r on %s:%d (session present: %s)",
                 self.name, self.topic_filter, self.peer.host, self.peer.port,
                 client.connack.session_present if client.connack else False)

    def _on_publish(self, publish: Publish) -> None:
        props, msg_id, path, stamp = _user_properties(publish)
        if not msg_id:
            msg_id = message_digest(self.client_id, publish.packet_id, publish.topic,
                                    publish.payload)
        message = CopyMessage(body=publish.payload, topic=publish.topic, properties=props,
                              born_ms=int(time.time() * 1000) if stamp is None else stamp,
                              msg_id=msg_id, path=path, stamped=stamp is not None)
        if publish.qos == 2:
            log.warning("mqtt source %s: a QoS 2 message although QoS 1 was asked", self.name)
        self._received.append((publish.packet_id if publish.qos else None, message))
        self._arrived.set()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close(disconnect=True)
            self._client = None

    async def cluster_id(self) -> str:
        return self.name

    async def queues(self) -> list[str]:
        return [self.topic_filter]

    async def read(self, queue: str, after: int | None, start: str, max_messages: int,
                   wait_ms: int) -> list[SourceRecord]:
        """What arrived (``after`` only raises the next offset: a session cannot seek;
        ``start`` does not apply: the session delivers from when it was made)."""
        if queue != self.topic_filter:
            raise ValueError(f"unknown source queue {queue!r} (the filter is"
                             f" {self.topic_filter!r})")
        if after is not None and after + 1 > self._next_offset:
            self._next_offset = after + 1
        client = self._client
        if client is None or client.closed.is_set():
            await self._connect()
        if not self._received and wait_ms > 0:
            self._arrived.clear()
            client = self._client
            assert client is not None
            waits = [asyncio.ensure_future(self._arrived.wait()),
                     asyncio.ensure_future(client.closed.wait())]
            try:
                await asyncio.wait(waits, timeout=wait_ms / 1000,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        out: list[SourceRecord] = []
        while self._received and len(out) < max_messages:
            packet_id, message = self._received.popleft()
            offset = self._next_offset
            self._next_offset += 1
            if packet_id is not None:
                self._pending.append((offset, packet_id))
            out.append(SourceRecord(self.topic_filter, offset, message))
        if not out and self._client is not None and self._client.closed.is_set():
            raise EndpointUnavailable(f"MQTT connection lost: {self._client.error}")
        return out

    async def acknowledge(self, queue: str, up_to: int) -> None:
        """PUBACK, in arrival order, every QoS 1 message read up to offset ``up_to``."""
        client = self._client
        pending = self._pending
        if client is None or client.closed.is_set():
            return  # the broker keeps them: they come again when we reconnect
        sent = False
        while pending and pending[0][0] <= up_to:
            _, packet_id = pending.popleft()
            client.send(Puback(packet_id))
            sent = True
        if sent:
            await client.drain()

    async def end_offset(self, queue: str) -> int | None:
        return None


class MqttTarget:
    """An MQTT broker as a connector target: QoS 1 publishes (see the module doc)."""

    def __init__(self, name: str, peer: MqttPeer, client_id: str = "",
                 retain: bool = False) -> None:
        self.name = name
        self.peer = peer
        self.client_id = client_id or (f"{peer.client_id}-out" if peer.client_id
                                       else f"lmq-connector-{name}-out")
        self.retain = retain
        self._client: _Client | None = None

    async def open(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        if self._client is not None:
            await self._client.close()
        client = _Client(self.peer, self.client_id, clean_start=True)
        self._client = client
        await client.connect()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close(disconnect=True)
            self._client = None

    async def cluster_id(self) -> str:
        return self.name

    async def high_water(self, origin_cluster: str, queues: Sequence[str]) -> None:
        return None  # a broker keeps no origins: the rule is at-least-once

    def _properties(self, message: CopyMessage) -> Properties:
        if self.peer.mqtt_version is not MQTTVersion.V5:
            return Properties()
        user = [(k, v) for k, v in message.properties.items() if k not in CONNECTOR_PROPERTIES]
        if message.msg_id:
            user.append((MSG_ID_PROPERTY, message.msg_id))
        if message.path:
            user.append((PATH, ",".join(message.path)))
        return Properties(user_properties=tuple(user))

    async def write(self, topic: str, source_queue: str,
                    messages: Sequence[CopyMessage]) -> None:
        """Publish every message at QoS 1 and return when every PUBACK is in."""
        # The runner's heartbeats (gateway.connector.heartbeat) stop here: the delay is
        # measured when they are read, and a broker's subscribers would only see empty
        # messages (MQTT 3.1.1 could not even tell them apart).
        indexes = [i for i, m in enumerate(messages) if HEARTBEAT not in m.properties]
        if len(indexes) < len(messages):
            try:
                await self.write(topic, source_queue, [messages[i] for i in indexes])
            except MessageRefused as exc:
                raise MessageRefused(indexes[exc.index], exc.reason) from None
            return
        if not messages:
            return
        client = self._client
        if client is None or client.closed.is_set():
            await self._connect()
            client = self._client
        assert client is not None
        window = max(1, min(client.conn.peer_receive_maximum, 1000))
        inflight: list[tuple[int, asyncio.Future[Any]]] = []
        try:
            for index, message in enumerate(messages):
                while len(inflight) >= window:
                    await self._settle(client, inflight.pop(0), len(messages))
                packet_id = client.next_id()
                try:
                    publish = Publish(topic, message.body, qos=1, retain=self.retain,
                                      packet_id=packet_id, properties=self._properties(message))
                except MQTTError as exc:
                    raise MessageRefused(index, f"not an MQTT publish: {exc}") from None
                future = client.expect("puback", packet_id)
                try:
                    client.send(publish)
                except OutgoingPacketTooLarge as exc:
                    client.forget("puback", packet_id)
                    raise MessageRefused(index, f"too large for the broker: {exc}") from None
                inflight.append((index, future))
                await client.drain()
            while inflight:
                await self._settle(client, inflight.pop(0), len(messages))
        finally:
            for _, future in inflight:
                future.cancel()

    async def _settle(self, client: _Client, item: tuple[int, asyncio.Future[Any]],
                      total: int) -> None:
        index, future = item
        try:
            async with asyncio.timeout(self.peer.timeout):
                ack = await future
        except TimeoutError:
            await client.close()
            raise EndpointUnavailable(
                f"no PUBACK within {self.peer.timeout:g} s (message {index} of {total})"
            ) from None
        code = ack.reason_code
        if code >= 0x80:
            if code in _TRANSIENT:
                raise EndpointUnavailable(f"the broker answered 0x{code:02X} to message {index}")
            reason = ack.properties.reason_string or f"reason code 0x{code:02X}"
            raise MessageRefused(index, reason)


def peer_of(cluster: Any) -> MqttPeer:
    """An :class:`MqttPeer` from a rules file's cluster (``gateway.connector.rules``)."""
    return MqttPeer.from_config(peer_settings(
        cluster, user="username", password="password",
        options=(("client_id", "client_id"), ("protocol_version", "version"),
                 ("keepalive", "keep_alive"), ("session_expiry", "session_expiry"))))


def make_source(cluster: Any, rule: Any) -> MqttSource:
    peer = peer_of(cluster)
    return MqttSource(cluster.name, peer, rule.read,
                      client_id=peer.client_id and f"{peer.client_id}-{rule.name}"
                      or f"lmq-connector-{rule.name}")


def make_target(cluster: Any, rule: Any) -> MqttTarget:
    peer = peer_of(cluster)
    return MqttTarget(cluster.name, peer, client_id=f"{peer.client_id or 'lmq-connector'}"
                      f"-{rule.name}-out")
