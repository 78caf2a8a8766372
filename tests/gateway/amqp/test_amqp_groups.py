"""JMSXGroupID message groups over real sockets with pika (ActiveMQ/Artemis semantics):
a group's messages go to one of the queue's competing consumers, in order, while groups
spread over consumers; a consumer leaving mid-group hands its groups (and its unacked
messages, in order) to the others; JMSXGroupSeq -1 closes a group."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..amqp_support import ThreadGateway, drain, pika_connect
from ..gateway_process import GatewayProcess
from .test_amqp_crash import close_quietly


class Member:
    """One consumer on its own connection; records (group, seq) it acks, in order, into
    ``log`` shared by all members (one thread: the order of appends is the ack order)."""

    def __init__(self, gw: ThreadGateway, name: str, queue: str, log: list[Any],
                 prefetch: int = 5, ack_first: int | None = None) -> None:
        self.name = name
        self.conn = pika_connect(gw)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.log = log
        self.ack_first = ack_first  # ack this many, then keep the rest unacked
        self.acked = 0
        self.received: list[tuple[str, int]] = []
        self.unacked: list[tuple[int, str, int]] = []
        self.open = True
        self.ch.basic_consume(queue, self._on, consumer_tag=name)

    def _on(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        group = props.headers["JMSXGroupID"]
        seq = int(body)
        self.received.append((group, seq))
        if self.ack_first is not None and self.acked >= self.ack_first:
            self.unacked.append((method.delivery_tag, group, seq))
            return  # held unacked until the connection closes (or ack_rest)
        self.acked += 1
        self.log.append((group, seq, self.name))
        ch.basic_ack(method.delivery_tag)

    def ack_rest(self) -> None:
        for tag, group, seq in self.unacked:
            self.log.append((group, seq, self.name))
            self.ch.basic_ack(tag)
        self.unacked.clear()

    def pump(self) -> None:
        if self.open:
            self.conn.process_data_events(time_limit=0.02)

    def close(self) -> None:
        if self.open:
            self.open = False
            self.conn.close()


def publish_groups(gw: ThreadGateway, queue: str, groups: int, per_group: int,
                   close_last: bool = False) -> None:
    conn = pika_connect(gw)
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(per_group):
        for g in range(groups):
            headers: dict[str, Any] = {"JMSXGroupID": f"g{g}"}
            if close_last and i == per_group - 1:
                headers["JMSXGroupSeq"] = -1
            ch.basic_publish("", queue, str(i).encode(), pika.BasicProperties(headers=headers))
    conn.close()


def pump_until(members: list[Member], done: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        for m in members:
            m.pump()
    assert done(), "timed out"


def consumers_of(gw: ThreadGateway, queue: str) -> int:
    return gw.run(lambda: len(gw.front.broker.vhost("/").queues[queue].consumers))


def per_group(log: list[Any]) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for group, seq, who in log:
        out.setdefault(group, []).append((seq, who))
    return out


def test_groups_stick_to_one_consumer_in_order_and_spread(gw: ThreadGateway) -> None:
    setup = pika_connect(gw)
    setup.channel().queue_declare("grp")
    log: list[Any] = []
    members = [Member(gw, n, "grp", log) for n in ("c1", "c2", "c3")]
    pump_until(members, lambda: consumers_of(gw, "grp") == 3)
    publish_groups(gw, "grp", groups=30, per_group=20)
    pump_until(members, lambda: len(log) == 600)
    by_group = per_group(log)
    assert len(by_group) == 30
    owners: dict[str, set[str]] = {}
    for group, entries in by_group.items():
        assert [seq for seq, _ in entries] == list(range(20)), group  # in order, once
        owners[group] = {who for _, who in entries}
        assert len(owners[group]) == 1, (group, owners[group])  # one consumer
    load = {n: sum(1 for o in owners.values() if n in o) for n in ("c1", "c2", "c3")}
    assert load == {"c1": 10, "c2": 10, "c3": 10}  # spread: fewest groups first
    for m in members:
        m.close()
    setup.close()


def test_consumer_closing_mid_group_hands_over_in_order(gw: ThreadGateway) -> None:
    setup = pika_connect(gw)
    setup.channel().queue_declare("grp")
    log: list[Any] = []
    quitter = Member(gw, "quitter", "grp", log, prefetch=5, ack_first=7)
    stayer = Member(gw, "stayer", "grp", log, prefetch=5)
    members = [quitter, stayer]
    pump_until(members, lambda: consumers_of(gw, "grp") == 2)
    publish_groups(gw, "grp", groups=8, per_group=25)
    # the quitter acks 7, then holds a full prefetch window unacked, and leaves
    pump_until(members, lambda: len(quitter.received) >= 12)
    quitter_groups = {g for g, _ in quitter.received}
    assert quitter_groups and len(quitter_groups) < 8
    quitter.close()
    pump_until([stayer], lambda: len(log) == 200)
    for group, entries in per_group(log).items():
        # every message acked exactly once, in order, across the hand-over
        assert [seq for seq, _ in entries] == list(range(25)), (group, entries)
        whos = [who for _, who in entries]
        if group in quitter_groups:  # the quitter's prefix, then the stayer's rest
            assert whos == sorted(whos, key=lambda w: w != "quitter"), (group, whos)
        else:
            assert set(whos) == {"stayer"}
    stayer.close()
    setup.close()


def test_abrupt_disconnect_hands_over_in_order(gw: ThreadGateway) -> None:
    setup = pika_connect(gw)
    setup.channel().queue_declare("grp")
    log: list[Any] = []
    quitter = Member(gw, "quitter", "grp", log, prefetch=4, ack_first=3)
    stayer = Member(gw, "stayer", "grp", log, prefetch=4)
    pump_until([quitter, stayer], lambda: consumers_of(gw, "grp") == 2)
    publish_groups(gw, "grp", groups=4, per_group=15)
    pump_until([quitter, stayer], lambda: len(quitter.received) >= 7)
    quitter.open = False
    # no basic.cancel, no channel.close: the socket is gone
    quitter.conn._impl._transport._sock.shutdown(socket.SHUT_RDWR)
    pump_until([stayer], lambda: len(log) == 60)
    close_quietly(quitter.conn)
    for _group, entries in per_group(log).items():
        assert [seq for seq, _ in entries] == list(range(15))
    stayer.close()
    setup.close()


def test_cancelled_consumer_keeps_its_groups_until_it_settles(gw: ThreadGateway) -> None:
    """basic.cancel leaves the unacked messages with the channel (which stays open and
    could still requeue them): the group waits; once they are acked, the next consumer
    gets the rest, in order; the cancelled consumer gets nothing more."""
    setup = pika_connect(gw)
    ch = setup.channel()
    ch.confirm_delivery()
    ch.queue_declare("grp")
    log: list[Any] = []
    first = Member(gw, "first", "grp", log, prefetch=2, ack_first=0)
    pump_until([first], lambda: consumers_of(gw, "grp") == 1)

    def send(seq: int) -> None:
        ch.basic_publish("", "grp", str(seq).encode(),
                         pika.BasicProperties(headers={"JMSXGroupID": "g"}))

    send(0)
    pump_until([first], lambda: len(first.received) == 1)
    second = Member(gw, "second", "grp", log)
    pump_until([first, second], lambda: consumers_of(gw, "grp") == 2)
    for seq in range(1, 10):
        send(seq)
    pump_until([first, second], lambda: len(first.received) == 2)
    first.ch.basic_cancel("first")
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        first.pump()
        second.pump()
    assert second.received == []  # the group waits for the first's two
    first.ack_rest()
    pump_until([first, second], lambda: len(log) == 10)
    assert [(s, w) for _, s, w in log] == [(0, "first"), (1, "first")] + [
        (s, "second") for s in range(2, 10)]
    assert first.received == [("g", 0), ("g", 1)]
    first.close()
    second.close()
    setup.close()


def test_group_seq_minus_one_closes_the_group(gw: ThreadGateway) -> None:
    setup = pika_connect(gw)
    ch = setup.channel()
    ch.confirm_delivery()
    ch.queue_declare("grp")
    log: list[Any] = []
    first = Member(gw, "first", "grp", log)
    pump_until([first], lambda: consumers_of(gw, "grp") == 1)

    def send(group: str, seq: int, close: bool = False) -> None:
        headers: dict[str, Any] = {"JMSXGroupID": group}
        if close:
            headers["JMSXGroupSeq"] = -1
        ch.basic_publish("", "grp", str(seq).encode(), pika.BasicProperties(headers=headers))

    send("keep", 0)
    send("closing", 0)
    send("closing", 1, close=True)
    pump_until([first], lambda: len(log) == 3)
    second = Member(gw, "second", "grp", log)
    pump_until([first, second], lambda: consumers_of(gw, "grp") == 2)
    send("keep", 1)      # still the first's: assigned, open
    send("closing", 2)   # closed: assigned afresh, to the consumer with fewest groups
    pump_until([first, second], lambda: len(log) == 5)
    assert {(g, s): w for g, s, w in log[3:]} == {("keep", 1): "first", ("closing", 2): "second"}
    first.close()
    second.close()
    setup.close()


def test_basic_get_does_not_take_an_owned_groups_message(gw: ThreadGateway) -> None:
    setup = pika_connect(gw)
    ch = setup.channel()
    ch.confirm_delivery()
    ch.queue_declare("grp")
    log: list[Any] = []
    owner = Member(gw, "owner", "grp", log, prefetch=1, ack_first=0)  # never acks
    pump_until([owner], lambda: consumers_of(gw, "grp") == 1)
    for i in range(3):
        ch.basic_publish("", "grp", str(i).encode(),
                         pika.BasicProperties(headers={"JMSXGroupID": "g"}))
    pump_until([owner], lambda: len(owner.received) == 1)
    method, _, _ = ch.basic_get("grp")
    assert method is None  # the rest of g waits for its consumer
    owner.close()
    got = [int(b) for _, _, b in drain(ch, "grp")]
    assert got == [0, 1, 2]  # all back, in order, once the owner is gone
    setup.close()


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.integers(1, 12), per=st.integers(1, 12), consumers=st.integers(1, 3),
       prefetch=st.integers(1, 6))
def test_order_per_group_over_shapes(gw: ThreadGateway, groups: int, per: int,
                                     consumers: int, prefetch: int) -> None:
    name = f"grp-{groups}-{per}-{consumers}-{prefetch}-{time.monotonic_ns()}"
    setup = pika_connect(gw)
    setup.channel().queue_declare(name, auto_delete=False)
    log: list[Any] = []
    members = [Member(gw, f"c{i}", name, log, prefetch=prefetch) for i in range(consumers)]
    pump_until(members, lambda: consumers_of(gw, name) == consumers)
    publish_groups(gw, name, groups, per)
    pump_until(members, lambda: len(log) == groups * per)
    for entries in per_group(log).values():
        assert [seq for seq, _ in entries] == list(range(per))
        assert len({who for _, who in entries}) == 1
    for m in members:
        m.close()
    setup.close()


@pytest.mark.slow
def test_kill_9_keeps_each_groups_order(tmp_path: Path) -> None:
    """kill -9 while two consumers hold groups: after the restart every message comes
    (none lost), each group's deliveries continue in order from its first unacked
    message (acks the crash lost come again, in order: at least once), and a group
    again goes to one consumer."""
    gateway = GatewayProcess(tmp_path / "data").start()
    conns: list[Any] = []

    def connect() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", gateway.ports["amqp"], socket_timeout=10))
        conns.append(conn)
        return conn

    try:
        ch = connect().channel()
        ch.confirm_delivery()
        ch.queue_declare("gq", durable=True)
        for i in range(40):
            for g in range(6):
                ch.basic_publish("", "gq", str(i).encode(), pika.BasicProperties(
                    headers={"JMSXGroupID": f"g{g}"}, delivery_mode=2))
        before: dict[str, list[int]] = {}
        consumers = []
        for _ in range(2):
            cch = connect().channel()
            cch.basic_qos(prefetch_count=3)

            def on(c: Any, m: Any, p: Any, body: bytes) -> None:
                before.setdefault(p.headers["JMSXGroupID"], []).append(int(body))
                c.basic_ack(m.delivery_tag)

            cch.basic_consume("gq", on)
            consumers.append(cch)
        deadline = time.monotonic() + 15
        while sum(map(len, before.values())) < 90 and time.monotonic() < deadline:
            for cch in consumers:
                cch.connection.process_data_events(time_limit=0.02)
        gateway.kill()
        for conn in conns:
            close_quietly(conn)
        conns.clear()
        gateway.ports = {}
        gateway.start()
        after: dict[str, list[tuple[int, str]]] = {}
        members = []
        for name in ("c", "d"):
            cch = connect().channel()
            cch.basic_qos(prefetch_count=3)

            def on2(c: Any, m: Any, p: Any, body: bytes, name: str = name) -> None:
                after.setdefault(p.headers["JMSXGroupID"], []).append((int(body), name))
                c.basic_ack(m.delivery_tag)

            cch.basic_consume("gq", on2)
            members.append(cch)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
                after.get(f"g{g}") and after[f"g{g}"][-1][0] == 39 for g in range(6)):
            for cch in members:
                cch.connection.process_data_events(time_limit=0.02)
        for g in range(6):
            group = f"g{g}"
            got = [seq for seq, _ in after.get(group, [])]
            seen = before.get(group, [])
            assert seen == list(range(len(seen)))  # in order before the crash
            assert got and got == list(range(got[0], 40)), (group, got)  # in order after
            assert got[0] <= len(seen)  # nothing lost between the two
            assert len({who for _, who in after[group]}) == 1
    finally:
        for conn in conns:
            close_quietly(conn)
        gateway.stop()
