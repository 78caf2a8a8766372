"""Receive Maximum (MQTT 5 3.3.4, 4.9): a peer with more QoS 1 / 2 PUBLISH unacknowledged
than the Receive Maximum we sent is an error with reason code 0x93, answered with a
DISCONNECT 0x93. Client and server machines back to back, no sockets."""

from __future__ import annotations

import random

import pytest

from protocol.mqtt import (
    NEED_DATA,
    Connack,
    Connect,
    Connection,
    Disconnect,
    MQTTVersion,
    PacketType,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    RemoteProtocolError,
    Role,
    State,
    decode_packet,
)

V311, V5 = MQTTVersion.V3_1_1, MQTTVersion.V5


def pair(receive_maximum: int | None, version: MQTTVersion = V5,
         client_receive_maximum: int | None = None) -> tuple[Connection, Connection]:
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.send(Connect(
        "dev", version, properties=Properties(receive_maximum=client_receive_maximum)
        if version is V5 else Properties())))
    assert isinstance(server.next_event(), Connect)
    client.receive_data(server.send(Connack(
        properties=Properties(receive_maximum=receive_maximum) if version is V5
        else Properties())))
    assert isinstance(client.next_event(), Connack)
    return client, server


def publish(pid: int, qos: int = 1, dup: bool = False) -> Publish:
    return Publish("t", b"x", qos, dup=dup, packet_id=pid)


def feed(receiver: Connection, data: bytes) -> list[object]:
    receiver.receive_data(data)
    out: list[object] = []
    while (event := receiver.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def assert_receive_maximum_exceeded(receiver: Connection, data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as err:
        feed(receiver, data)
    assert err.value.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert receiver.state is State.ERROR
    answer, used = decode_packet(receiver.error_response(), V5)
    assert isinstance(answer, Disconnect)
    assert answer.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED


@pytest.mark.parametrize("qos", [1, 2])
def test_one_publish_above_the_maximum_is_disconnected(qos: int) -> None:
    client, server = pair(3)
    assert server.receive_maximum == 3
    assert len(feed(server, b"".join(client.send(publish(i, qos)) for i in (1, 2, 3)))) == 3
    assert_receive_maximum_exceeded(server, client.send(publish(4, qos)))


def test_acknowledgements_free_the_window() -> None:
    """QoS 1 ends at our PUBACK (either way of sending it); QoS 2 at our PUBCOMP, or at
    a PUBREC refusing it; a successful PUBREC does not end it."""
    client, server = pair(2)
    feed(server, client.send(publish(1)) + client.send(publish(2)))
    server.send_ack_success(PacketType.PUBACK, 1)
    server.send(Puback(2))
    feed(server, client.send(publish(3, 2)) + client.send(publish(4, 2)))
    server.send_ack_success(PacketType.PUBREC, 3)
    server.send(Pubrec(4))
    # both QoS 2 flows still open: a fifth PUBLISH would be the third
    data5 = client.send(publish(5))
    server.send(Pubrec(4, ReasonCode.QUOTA_EXCEEDED))  # refused: flow 4 ends
    assert len(feed(server, data5)) == 1  # 3 and 5 unacknowledged
    assert isinstance(feed(server, client.send(Pubrel(3)))[0], Pubrel)
    server.send_ack_success(PacketType.PUBCOMP, 3)
    assert len(feed(server, client.send(publish(6)))) == 1  # 5 and 6
    assert_receive_maximum_exceeded(server, client.send(publish(7)))


def test_a_resent_packet_id_counts_once() -> None:
    client, server = pair(2)
    data = client.send(publish(1, 2)) + client.send(publish(1, 2, dup=True))
    data += client.send(publish(2, 1)) + client.send(publish(2, 1, dup=True))
    assert len(feed(server, data)) == 4
    server.send(Pubcomp(1))
    assert len(feed(server, client.send(publish(3)))) == 1


def test_qos_0_is_not_counted_and_65535_is_no_limit() -> None:
    client, server = pair(1)
    assert len(feed(server, b"".join(client.send(Publish("t", b"")) for _ in range(50)))) == 50
    for maximum in (None, 65535):
        client, server = pair(maximum)
        assert server.receive_maximum == 65535
        data = b"".join(client.send(publish(i)) for i in range(1, 2001))
        assert len(feed(server, data)) == 2000


def test_mqtt_3_has_no_receive_maximum() -> None:
    client, server = pair(None, V311)
    data = b"".join(client.send(publish(i)) for i in range(1, 2001))
    assert len(feed(server, data)) == 2000


def test_the_client_side_holds_its_own_receive_maximum() -> None:
    client, server = pair(None, client_receive_maximum=2)
    assert client.receive_maximum == 2 and server.peer_receive_maximum == 2
    feed(client, server.send(publish(1)) + server.send(publish(2)))
    assert_receive_maximum_exceeded(client, server.send(publish(3)))


@pytest.mark.parametrize("maximum", [1, 5, 20])
def test_a_client_that_respects_the_window_is_never_disconnected(maximum: int) -> None:
    """A client keeping at most the server's Receive Maximum in flight, QoS 1 and 2
    mixed, the server acknowledging in random order and late (as a server does that
    acknowledges after its store has the message): 3,000 messages, no error."""
    rnd = random.Random(maximum)
    client, server = pair(maximum)
    window = client.peer_receive_maximum
    assert window == maximum
    in_flight: dict[int, int] = {}  # packet id -> QoS, as the client sees it
    received: list[tuple[int, int]] = []  # (id, QoS) the server has, not yet acked
    next_id, sent = 1, 0
    while sent < 3000 or in_flight:
        while sent < 3000 and len(in_flight) < window:
            qos = rnd.choice((1, 2))
            in_flight[next_id] = qos
            for event in feed(server, client.send(publish(next_id, qos))):
                assert isinstance(event, Publish)
                received.append((event.packet_id, event.qos))  # type: ignore[arg-type]
            next_id = next_id % 65535 + 1
            sent += 1
        rnd.shuffle(received)
        for pid, qos in received[: rnd.randint(1, len(received))]:
            received.remove((pid, qos))
            if qos == 1:
                acks = server.send_ack_success(PacketType.PUBACK, pid)
            else:
                acks = server.send(Pubrec(pid))
            for ack in feed(client, acks):
                if isinstance(ack, Puback):
                    del in_flight[ack.packet_id]
                else:  # PUBREC: release, and the PUBCOMP ends the flow
                    assert isinstance(ack, Pubrec)
                    (rel,) = feed(server, client.send(Pubrel(ack.packet_id)))
                    assert isinstance(rel, Pubrel)
                    (comp,) = feed(client, server.send(Pubcomp(rel.packet_id)))
                    assert isinstance(comp, Pubcomp)
                    del in_flight[comp.packet_id]
    assert server.state is client.state is State.CONNECTED
