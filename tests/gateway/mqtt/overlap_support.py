"""Packet-level client helpers for the overlapping-subscription tests: a raw MQTT client
(our own sans-IO client machine over a socket) that subscribes with options and
identifiers, and a receiver that keeps the client side of QoS 1/2 flows the way a
conforming client does, so that a test can count what an application would see."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from protocol.mqtt import (
    Connack,
    Connect,
    MQTTVersion,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
)

from ..mqtt_clients import RawClient

V5 = MQTTVersion.V5
V311 = MQTTVersion.V3_1_1


def connect(
    port: int,
    client_id: str,
    version: MQTTVersion = V5,
    *,
    clean: bool = True,
    session_expiry: int | None = None,
) -> tuple[RawClient, Connack]:
    c = RawClient(port, version)
    props = Properties(session_expiry_interval=session_expiry) if version == V5 else Properties()
    c.send(Connect(client_id=client_id, protocol_version=version, clean_start=clean,
                   properties=props))
    ack = c.recv()
    assert isinstance(ack, Connack) and ack.reason_code == 0, ack
    return c, ack


_next_packet_id = [100]


def _packet_id() -> int:
    _next_packet_id[0] = _next_packet_id[0] % 60000 + 1
    return _next_packet_id[0]


def subscribe(
    c: RawClient,
    topic_filter: str,
    qos: int,
    *,
    sub_id: int | None = None,
    no_local: bool = False,
    retain_as_published: bool = False,
    retain_handling: int = 0,
) -> None:
    """One SUBSCRIBE (an identifier belongs to a whole SUBSCRIBE packet)."""
    props = Properties(subscription_identifiers=(sub_id,)) if sub_id is not None else Properties()
    c.send(Subscribe(
        packet_id=_packet_id(),
        subscriptions=(Subscription(topic_filter, qos=qos, no_local=no_local,
                                    retain_as_published=retain_as_published,
                                    retain_handling=retain_handling),),
        properties=props,
    ))
    ack = c.recv()
    assert isinstance(ack, Suback) and ack.reason_codes == (qos,), ack


def publishes(c: RawClient, n: int, timeout: float = 5.0) -> list[Publish]:
    """The next ``n`` PUBLISH packets, acknowledging nothing."""
    deadline = time.monotonic() + timeout
    got: list[Publish] = []
    while len(got) < n:
        packet = c.recv(timeout=max(0.05, deadline - time.monotonic()))
        assert isinstance(packet, Publish), packet
        got.append(packet)
    return got


def silent(c: RawClient, wait: float = 0.7) -> list[object]:
    """Whatever arrives within ``wait`` seconds (a test asserts it is empty)."""
    got: list[object] = []
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return got
        try:
            got.append(c.recv(timeout=left))
        except TimeoutError:
            return got


def barrier(c: RawClient) -> list[Publish]:
    """PINGREQ and wait for its PINGRESP: the server has handled every packet sent
    before it (one connection's packets are handled in order). Returns the PUBLISHes
    that came meanwhile."""
    c.send(Pingreq())
    got: list[Publish] = []
    while True:
        packet = c.recv()
        if isinstance(packet, Pingresp):
            return got
        assert isinstance(packet, Publish), packet
        got.append(packet)


def sub_ids(p: Publish) -> set[int]:
    return set(p.properties.subscription_identifiers)


@dataclass
class Receiver:
    """The client side of QoS 1/2 deliveries (MQTT 5 4.3.3 method B): a QoS 2 message
    goes to the application when its PUBLISH first arrives under a packet id the client
    holds no flow for; a PUBLISH under a held id (until PUBREL releases it) is the same
    message again and is only PUBREC'd. ``app`` is what the application saw, in order;
    ``wire`` every PUBLISH received. The held ids survive reconnects, like a client's
    persistent session state."""

    app: list[Publish] = field(default_factory=list)
    wire: list[Publish] = field(default_factory=list)
    held: set[int] = field(default_factory=set)  # QoS 2 ids PUBREC'd or to be, not released
    pubrels: list[int] = field(default_factory=list)
    #: PUBLISHes that came while waiting for a PUBREL, to be completed next.
    deferred: list[Publish] = field(default_factory=list)

    def take(self, packet: object) -> Publish | None:
        if isinstance(packet, Pubrel):
            self.pubrels.append(packet.packet_id)
            return None
        assert isinstance(packet, Publish), packet
        self.wire.append(packet)
        if packet.qos == 2 and packet.packet_id in self.held:
            return None
        if packet.qos == 2:
            self.held.add(packet.packet_id)  # type: ignore[arg-type]
        self.app.append(packet)
        return packet

    def complete(self, c: RawClient, packet: object) -> None:
        """Acknowledge one received packet fully (PUBACK, or PUBREC then PUBCOMP)."""
        if isinstance(packet, Pubrel):
            c.send(Pubcomp(packet_id=packet.packet_id))
            self.held.discard(packet.packet_id)
            return
        assert isinstance(packet, Publish)
        if packet.qos == 1:
            c.send(Puback(packet_id=packet.packet_id))  # type: ignore[arg-type]
        elif packet.qos == 2:
            self.pubrec(c, packet)
            c.send(Pubcomp(packet_id=packet.packet_id))  # type: ignore[arg-type]
            self.held.discard(packet.packet_id)  # type: ignore[arg-type]

    def pubrec(self, c: RawClient, packet: Publish) -> None:
        """PUBREC a QoS 2 PUBLISH and wait for its PUBREL (not answered: the flow stays
        half done). Deliveries that come first are taken and kept in ``deferred``."""
        c.send(Pubrec(packet_id=packet.packet_id))  # type: ignore[arg-type]
        rel = c.recv()
        while isinstance(rel, Publish):
            self.take(rel)
            self.deferred.append(rel)
            rel = c.recv()
        assert rel == Pubrel(packet_id=packet.packet_id), rel  # type: ignore[arg-type]

    def drain(self, c: RawClient, n: int, timeout: float = 10.0) -> None:
        """Receive and complete until the application has ``n`` messages, then check
        that nothing more comes."""
        deadline = time.monotonic() + timeout
        while len(self.app) < n:
            if self.deferred:
                packet: object = self.deferred.pop(0)
            else:
                packet = c.recv(timeout=max(0.05, deadline - time.monotonic()))
                self.take(packet)
            self.complete(c, packet)
        while self.deferred:
            self.complete(c, self.deferred.pop(0))
        for packet in silent(c):
            self.take(packet)
            self.complete(c, packet)
