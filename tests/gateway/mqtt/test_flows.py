"""The QoS flows of a session (gateway.mqtt.flows) driven back to back with the sans-IO
protocol machine: a client :class:`protocol.mqtt.Connection` talks to a server machine
whose flow decisions come from :class:`Flows`; the effects are carried out here as the
connection handler carries them out. No socket, no store, no event loop.

"Saved" is the durable state as last encoded when an effect asked for a save: a crash
is a new :class:`Flows` over ``SessionState.decode`` of it."""

from __future__ import annotations

import pytest

from gateway.mqtt.flows import Effects, Flows, Inbound
from gateway.mqtt.session_state import SessionState
from protocol.mqtt import (
    NEED_DATA,
    Connack,
    Connect,
    Connection,
    MQTTVersion,
    Puback,
    Pubacks,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Role,
)

V311, V5 = MQTTVersion.V3_1_1, MQTTVersion.V5
VERSIONS = pytest.mark.parametrize("version", [V311, V5], ids=lambda v: f"v{int(v)}")


class FakeReader:
    """A subscription's reader as the flows see it: its LMQ and the offsets advanced."""

    shared = False

    def __init__(self, lmq: str = "f/a") -> None:
        self.lmq = lmq
        self.advanced: list[int] = []

    def acked(self, offset: int) -> None:
        self.advanced.append(offset)


class Server:
    """The server half: a protocol machine, a session's flows, and the effects applied."""

    def __init__(self, version: MQTTVersion, state: SessionState | None = None) -> None:
        self.version = version
        self.state = state or SessionState("dev-1", expiry=3600)
        self.flows = Flows(self.state)
        self.saved = self.state.encode()
        self.acked_receipts: list[str] = []
        self.wakes = 0
        self.client, self.proto = connect(version)

    # what the handler does with Effects
    def apply(self, fx: Effects) -> None:
        for reader, offset in fx.advance:
            reader.acked(offset)
        self.acked_receipts.extend(fx.receipts)
        if fx.save:
            self.saved = self.state.encode()
        for packet in fx.send:
            self.to_client(packet)
        self.wakes += fx.wake

    def to_client(self, packet) -> None:
        self.client.receive_data(self.proto.send(packet))

    def deliver(self, qos: int, offset: int, reader=None, receipt=None, pid=None) -> int:
        """A stored message goes out (what delivery.deliver does with the flows)."""
        resend = pid is not None
        pid = pid if resend else self.flows.allocate()
        self.to_client(Publish(topic="f/a", payload=b"m%d" % offset, qos=qos, dup=resend,
                               packet_id=pid))
        if self.flows.sent(pid, qos, reader, offset, receipt,
                           durable=qos == 2 and not resend and reader is not None):
            self.saved = self.state.encode()
        return pid

    def from_client(self, packet) -> None:
        """The client sends ``packet``; the server machine's events go to the flows."""
        self.proto.receive_data(self.client.send(packet))
        while (event := self.proto.next_event()) is not NEED_DATA:
            self.handle(event)

    def handle(self, event) -> None:
        v5 = self.version == V5
        if isinstance(event, Pubacks):
            self.apply(self.flows.on_pubacks(event.packet_ids))
        elif isinstance(event, Puback):
            self.apply(self.flows.on_puback(event.packet_id))
        elif isinstance(event, Pubrec):
            self.apply(self.flows.on_pubrec(event.packet_id, event.reason_code, v5))
        elif isinstance(event, Pubcomp):
            self.apply(self.flows.on_pubcomp(event.packet_id))
        elif isinstance(event, Pubrel):
            code, changed = self.flows.on_pubrel(event.packet_id, v5)
            if changed:
                self.saved = self.state.encode()
            self.to_client(Pubcomp(packet_id=event.packet_id, reason_code=code))
        elif isinstance(event, Publish):
            self.inbound.append(event)
        else:
            raise AssertionError(event)

    inbound: list[Publish]

    def crash(self) -> Server:
        """kill -9: a new server over the saved state; the client reconnects (its own
        session state, the packet ids it holds, is in the client machine's caller)."""
        return Server(self.version, SessionState.decode(self.saved))


def connect(version: MQTTVersion, batch: bool = True) -> tuple[Connection, Connection]:
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER, batch_pubacks=batch)
    server.receive_data(client.send(Connect("dev-1", version, clean_start=False)))
    server.next_event()
    client.receive_data(server.send(Connack()))
    client.next_event()
    return client, server


def client_events(server: Server) -> list:
    out = []
    while (event := server.client.next_event()) is not NEED_DATA:
        out.append(event)
    return out


@pytest.fixture
def reader() -> FakeReader:
    return FakeReader()


# -- outbound QoS 1 ------------------------------------------------------------------------


@VERSIONS
def test_qos1_outbound_puback_advances_once_and_wakes(version, reader):
    s = Server(version)
    pids = [s.deliver(1, off, reader) for off in (10, 11, 12)]
    assert pids == [1, 2, 3]
    got = client_events(s)
    assert [(p.packet_id, p.qos, p.dup) for p in got] == [(1, 1, False), (2, 1, False),
                                                         (3, 1, False)]
    assert s.flows.in_flight() == 3
    for p in got:  # back to back: the server machine batches them (Pubacks)
        s.proto.receive_data(s.client.send(Puback(packet_id=p.packet_id)))
    events = []
    while (event := s.proto.next_event()) is not NEED_DATA:
        events.append(event)
    assert [type(e) for e in events] == [Pubacks]
    for event in events:
        s.handle(event)
    assert reader.advanced == [10, 11, 12]
    assert s.flows.in_flight() == 0 and s.wakes == 1
    # a duplicate PUBACK: nothing to end, no wake, nothing advanced twice
    s.from_client(Puback(packet_id=2))
    assert reader.advanced == [10, 11, 12] and s.wakes == 1


def test_qos1_shared_puback_acks_the_receipt(reader):
    s = Server(V5)
    pid = s.deliver(1, 5, reader, receipt="r-5")
    client_events(s)
    s.from_client(Puback(packet_id=pid))
    assert s.acked_receipts == ["r-5"] and reader.advanced == [5]


# -- outbound QoS 2 ------------------------------------------------------------------------


@VERSIONS
def test_qos2_outbound_full_flow(version, reader):
    s = Server(version)
    pid = s.deliver(2, 7, reader)
    assert SessionState.decode(s.saved).qos2_out == {pid: ["f/a", 7]}  # durable first
    (publish,) = client_events(s)
    assert publish.qos == 2
    s.from_client(Pubrec(packet_id=pid))
    (pubrel,) = client_events(s)
    assert isinstance(pubrel, Pubrel) and pubrel.packet_id == pid
    assert reader.advanced == [7]  # the offset may be committed past from PUBREC on
    saved = SessionState.decode(s.saved)
    assert saved.pubrel_pending == {pid: ["f/a", 7]} and saved.qos2_out == {}
    assert s.wakes == 0 and s.flows.in_flight() == 1  # still in the window till PUBCOMP
    # a duplicate PUBREC: PUBREL again, nothing advanced again
    s.from_client(Pubrec(packet_id=pid))
    assert [type(e) for e in client_events(s)] == [Pubrel]
    assert reader.advanced == [7]
    s.from_client(Pubcomp(packet_id=pid))
    saved = SessionState.decode(s.saved)
    assert saved.pubrel_pending == {} and saved.qos2_done == {"f/a": [7]}
    assert s.wakes == 1 and s.flows.in_flight() == 0
    # a duplicate PUBCOMP ends nothing
    s.from_client(Pubcomp(packet_id=pid))
    assert s.wakes == 1


def test_pubrec_with_an_error_code_ends_the_flow_without_pubrel(reader):
    s = Server(V5)
    pid = s.deliver(2, 3, reader)
    client_events(s)
    s.from_client(Pubrec(packet_id=pid, reason_code=ReasonCode.QUOTA_EXCEEDED))
    assert client_events(s) == []  # no PUBREL
    assert reader.advanced == [3] and s.wakes == 1 and s.flows.in_flight() == 0
    saved = SessionState.decode(s.saved)
    # not resent after a reconnect or a crash, and its id is free again
    assert saved.qos2_out == {} and saved.pubrel_pending == {}
    assert s.crash().flows.restore("f/a", 0) == (set(), {})


@VERSIONS
def test_pubrec_for_an_unknown_id(version):
    s = Server(version)
    s.from_client(Pubrec(packet_id=99))
    events = client_events(s)
    if version == V5:
        assert [(type(e), e.packet_id, e.reason_code) for e in events] == [
            (Pubrel, 99, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)]
    else:
        assert events == []


# -- reconnect and crash -------------------------------------------------------------------


def test_reconnect_resends_with_the_same_ids_and_allocates_around_them(reader):
    s = Server(V5)
    p1 = s.deliver(1, 0, reader)
    p2 = s.deliver(2, 1, reader)
    p3 = s.deliver(2, 2, reader)
    client_events(s)
    s.from_client(Pubrec(packet_id=p3))  # p3 reached PUBREC before the disconnect
    client_events(s)
    assert s.flows.offline() == []
    assert s.flows.held == {p1, p2}
    # the new connection: the PUBREL-pending flow resumes first
    s.client, s.proto = connect(V5)
    assert [(type(p), p.packet_id) for p in s.flows.resume()] == [(Pubrel, p3)]
    skip, resend = s.flows.restore("f/a", 0)
    assert skip == {2} and resend == {1: p2}  # QoS 1 resends are the reader's (rewind)
    fresh = s.flows.allocate()
    assert fresh not in (p1, p2, p3)
    s.deliver(1, 0, reader, pid=p1)
    s.deliver(2, 1, reader, pid=p2)
    assert s.flows.held == set()
    got = client_events(s)
    assert [(p.packet_id, p.dup) for p in got] == [(p1, True), (p2, True)]


def test_shared_receipts_are_given_back_at_disconnect():
    s = Server(V5)
    shared = FakeReader()
    shared.shared = True
    s.deliver(1, 0, shared, receipt="r0")
    pid = s.deliver(2, 1, shared, receipt="r1")
    client_events(s)
    s.from_client(Pubrec(packet_id=pid))  # acked at PUBREC: not given back
    assert s.acked_receipts == ["r1"]
    assert s.flows.offline() == ["r0"]
    assert s.flows.held == set()  # another member gets it, with its own id


def test_crash_image_restores_every_flow(reader):
    """kill -9 in the middle of every kind of flow: what the saved state says is what
    the next process does."""
    s = Server(V5)
    sent = s.deliver(2, 0, reader)  # sent, no PUBREC
    recd = s.deliver(2, 1, reader)  # PUBREC'd, PUBREL sent
    done = s.deliver(2, 2, reader)  # completed
    s.deliver(1, 3, reader)  # QoS 1: from the committed offset again, not in the image
    client_events(s)
    s.from_client(Pubrec(packet_id=recd))
    s.from_client(Pubrec(packet_id=done))
    s.from_client(Pubcomp(packet_id=done))
    client_events(s)
    # inbound QoS 2: one stored and PUBREC'd (no PUBREL yet), one being stored
    assert s.flows.inbound_publish(41) is Inbound.STORE
    assert s.flows.inbound_stored(41, True)
    s.saved = s.state.encode()
    assert s.flows.inbound_publish(42) is Inbound.STORE

    after = s.crash()
    assert [p.packet_id for p in after.flows.resume()] == [recd]
    skip, resend = after.flows.restore("f/a", 0)
    assert skip == {1, 2} and resend == {0: sent}
    assert after.flows.restore("f/a", 3) == (set(), {})  # committed past them
    assert after.flows.allocate() not in (sent, recd)
    # the client resends its inbound ones: 41 is a duplicate, 42 is stored (once)
    assert after.flows.inbound_publish(41) is Inbound.DUPLICATE
    assert after.flows.inbound_publish(42) is Inbound.STORE
    # the resumed QoS 2 flow completes on the new connection
    after.to_client(Pubrel(packet_id=recd))
    after.from_client(Pubcomp(packet_id=recd))
    saved = SessionState.decode(after.saved)
    assert saved.pubrel_pending == {} and sorted(saved.qos2_done["f/a"]) == [1, 2]


# -- inbound QoS 2 -------------------------------------------------------------------------


@VERSIONS
def test_inbound_qos2_duplicates_and_pubrel(version):
    s = Server(version)
    s.inbound = []
    s.from_client(Publish(topic="up", payload=b"x", qos=2, packet_id=5))
    (publish,) = s.inbound
    assert s.flows.inbound_publish(5) is Inbound.STORE
    # a resend (DUP) while the first copy is being stored waits for its PUBREC
    assert s.flows.inbound_publish(5) is Inbound.WAIT
    assert s.flows.inbound_stored(5, True)
    s.to_client(Pubrec(packet_id=5))
    assert [type(e) for e in client_events(s)] == [Pubrec]
    # a resend after the PUBREC is a duplicate: PUBREC again, not stored again
    assert s.flows.inbound_publish(5) is Inbound.DUPLICATE
    s.from_client(Pubrel(packet_id=5))
    (pubcomp,) = client_events(s)
    assert pubcomp.packet_id == 5 and pubcomp.reason_code == ReasonCode.SUCCESS
    assert SessionState.decode(s.saved).inbound_qos2 == []
    # after the PUBREL the id is free: the same id is a new message
    assert s.flows.inbound_publish(5) is Inbound.STORE
    s.flows.inbound_stored(5, False)  # the append failed: nothing recorded
    assert s.state.inbound_qos2 == [] and s.flows.storing == set()
    # an unknown PUBREL: 0x92 in MQTT 5, plain PUBCOMP in 3.1.1
    s.from_client(Pubrel(packet_id=6))
    (pubcomp,) = client_events(s)
    expected = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if version == V5 else 0
    assert pubcomp.reason_code == expected


def test_inbound_qos1_has_no_flow_state():
    s = Server(V311)
    s.inbound = []
    s.from_client(Publish(topic="up", payload=b"x", qos=1, packet_id=5))
    assert [p.qos for p in s.inbound] == [1]
    assert s.flows.storing == set() and s.state.inbound_qos2 == []


# -- packet identifiers --------------------------------------------------------------------


def test_packet_ids_wrap_and_skip_every_id_in_use(reader):
    flows = Flows(SessionState("c"))
    flows._next_pid = 65534
    flows.state.pubrel_pending[65535] = ["f/a", 0]
    flows.state.qos2_out[1] = ["f/a", 1]
    flows.held.add(2)
    flows.sent(3, 1, reader, 2)
    assert [flows.allocate() for _ in range(2)] == [65534, 4]


def test_packet_id_exhaustion(reader):
    flows = Flows(SessionState("c"))
    for off in range(65535):
        flows.sent(flows.allocate(), 1, reader, off)
    with pytest.raises(RuntimeError, match="no free packet identifier"):
        flows.allocate()
    fx = flows.on_puback(300)
    assert fx.wake and fx.advance == [(reader, 299)]
    assert flows.allocate() == 300


# -- one delivery through several LMQs (overlapping subscriptions) -------------------------


def test_a_merged_delivery_advances_and_remembers_every_entry():
    a, b = FakeReader("f/a"), FakeReader("f/+")
    s = Server(V5)
    pid = s.flows.allocate()
    s.flows.sent(pid, 2, a, 4, durable=True, more=[(b, 9)])
    assert SessionState.decode(s.state.encode()).qos2_out == {pid: ["f/a", 4, "f/+", 9]}
    crashed = Flows(SessionState.decode(s.state.encode()))
    assert crashed.restore("f/+", 0) == (set(), {9: pid})  # resent, same id, either LMQ
    s.apply(s.flows.on_pubrec(pid, 0, True))
    assert a.advanced == [4] and b.advanced == [9]
    crashed = Flows(SessionState.decode(s.saved))
    assert crashed.restore("f/a", 0)[0] == {4} and crashed.restore("f/+", 0)[0] == {9}
    s.apply(s.flows.on_pubcomp(pid))
    assert SessionState.decode(s.saved).qos2_done == {"f/a": [4], "f/+": [9]}


def test_forgetting_one_reader_of_a_merged_delivery_keeps_the_other():
    a, b = FakeReader("f/a"), FakeReader("f/+")
    flows = Flows(SessionState("c"))
    flows.sent(7, 1, a, 1, more=[(b, 2)])
    flows.forget_reader(a)
    assert flows.on_puback(7).advance == [(b, 2)]
