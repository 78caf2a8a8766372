"""The gateway core without a Gateway: the ServerState admitting and releasing real
sockets, the Connection outbox, the Publisher's caught-up event over a real store, and
the thread -> loop hand-off of store listeners."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from broker_core import Message, MessageStore, MessageTooLarge, StoreConfig
from gateway import publisher as publisher_module
from gateway.config import GatewayConfig
from gateway.connection import FLUSH_AT, Connection, GatewayProtocol, ListenerSpec
from gateway.context import loop_callback
from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.metrics import Registry
from gateway.publisher import Publisher
from gateway.sniff import sniff_amqp
from gateway.state import ServerState

BOUND = 10.0


class Recorder(ConnectionHandler):
    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        self.received = b""

    def data_received(self, data: bytes) -> None:
        self.received += data


class RecordingFrontEnd(FrontEnd):
    """A front end that only records what it is given (the test drives its output)."""

    name = "rec"

    def __init__(self) -> None:  # no context: the core must not need one
        self.handlers: list[Recorder] = []
        self.connected = asyncio.Event()

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        handler = Recorder(conn)
        self.handlers.append(handler)
        self.connected.set()
        return handler


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServerState, RecordingFrontEnd, Any]]:
    """A listener on 127.0.0.1 served by GatewayProtocol over a bare ServerState."""
    state = ServerState(GatewayConfig(data_dir=tmp_path, max_connections=2), Registry())
    front = RecordingFrontEnd()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: GatewayProtocol(state, ListenerSpec("rec", None), {"rec": front},
                                [("rec", sniff_amqp)]),
        "127.0.0.1", 0)
    try:
        yield state, front, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for conn in list(state.connections.values()):
            conn.abort("test over")
        await asyncio.wait_for(state.idle.wait(), BOUND)
        await server.wait_closed()


async def test_state_admits_assigns_releases(served: Any) -> None:
    state, front, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"AMQP\x00\x00\x09\x01")
    await asyncio.wait_for(front.connected.wait(), BOUND)
    (conn,) = state.connections.values()
    assert conn.protocol == "rec" and front.handlers[0].received == b"AMQP\x00\x00\x09\x01"
    assert not state.idle.is_set()
    writer.close()
    await asyncio.wait_for(state.idle.wait(), BOUND)
    assert state.connections == {} and conn.is_closed


async def test_state_refuses_past_max_connections(served: Any) -> None:
    state, _front, port = served
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    # the third is closed by the server at once: EOF without a byte
    assert await asyncio.wait_for(streams[2][0].read(), BOUND) == b""
    assert len(state.connections) == 2
    for _, writer in streams:
        writer.close()


async def test_outbox_writes_once_per_loop_turn_in_order(served: Any) -> None:
    state, front, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"AMQP")
    await asyncio.wait_for(front.connected.wait(), BOUND)
    conn = front.handlers[0].conn
    sent_before = conn.bytes_out
    for i in range(100):
        conn.queue(b"%03d;" % i)
    conn.queue(b"")  # ignored
    assert conn.bytes_out == sent_before  # nothing written inside the turn
    await asyncio.sleep(0)
    assert conn.bytes_out == sent_before + 400  # one write at the end of the turn
    got = await asyncio.wait_for(reader.readexactly(400), BOUND)
    assert got == b"".join(b"%03d;" % i for i in range(100))
    # past FLUSH_AT the outbox is written at once, still in order
    conn.queue(b"a")
    conn.queue(b"b" * FLUSH_AT)
    assert conn.bytes_out == sent_before + 400 + 1 + FLUSH_AT
    conn.queue(b"c")
    conn.flush()  # an explicit flush, before the turn ends
    tail = await asyncio.wait_for(reader.readexactly(FLUSH_AT + 2), BOUND)
    assert tail == b"a" + b"b" * FLUSH_AT + b"c"
    writer.close()


async def test_deferred_flush_is_the_callers(served: Any) -> None:
    state, front, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"AMQP")
    await asyncio.wait_for(front.connected.wait(), BOUND)
    conn = front.handlers[0].conn
    before = conn.bytes_out
    conn.defer_flush()
    conn.queue(b"held")
    await asyncio.sleep(0.01)
    assert conn.bytes_out == before  # no flush was scheduled: the caller owes one
    conn.flush()
    assert await asyncio.wait_for(reader.readexactly(4), BOUND) == b"held"
    writer.close()


async def test_publisher_caught_up_event(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(publisher_module, "LAG_LIMIT", 100)
    store = MessageStore.open(tmp_path / "s", replace(StoreConfig(), flush_interval_ms=10))
    try:
        pub = Publisher(store, asyncio.get_running_loop())
        assert pub.caught_up.is_set() and not pub.lagging
        for i in range(150):
            pub.submit_nowait(Message(topic="t", body=b"%d" % i), ["q"])
        assert pub.lagging and not pub.caught_up.is_set()
        await asyncio.wait_for(pub.caught_up.wait(), BOUND)  # the batch is appended
        assert not pub.lagging and pub.appended == 150
        too_big = Message(topic="t", body=b"x" * (store.config.max_message_bytes + 1))
        assert pub.submit_nowait(too_big, ["q"]) is False and pub.failed == 1
        fut = pub.submit(too_big, ["q"])
        with pytest.raises(MessageTooLarge):
            await fut
    finally:
        store.close()


async def test_loop_callback_hands_over_from_other_threads() -> None:
    loop = asyncio.get_running_loop()
    calls: list[tuple[int, str]] = []
    done = asyncio.Event()

    def on_loop(tag: str) -> None:
        calls.append((threading.get_ident(), tag))
        if len(calls) == 2:
            done.set()

    call = loop_callback(loop, on_loop)
    call("same thread")
    assert calls == [(threading.get_ident(), "same thread")]  # at once, not later
    thread = threading.Thread(target=call, args=("other thread",))
    thread.start()
    thread.join(BOUND)
    await asyncio.wait_for(done.wait(), BOUND)
    assert calls[1] == (threading.get_ident(), "other thread")  # ran on the loop
