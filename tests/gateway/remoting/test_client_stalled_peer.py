"""The remoting client against a peer that accepts a connection and never reads (a
frozen process, or a link that drops packets without a reset): nothing the client does
may wait for good. The connector found this the hard way: a close that waited for the
buffered bytes to go out left its copy tasks blocked, silently."""

from __future__ import annotations

import asyncio
import time

from gateway.clients.remoting import (
    CLOSE_TIMEOUT,
    DEFAULT_TIMEOUT,
    RemotingConnection,
    RequestTimeout,
)
from protocol.remoting.codes import RequestCode

BIG = b"x" * (12 << 20)  # under the 16 MiB frame limit; a few fill any loopback buffers


async def _silent_server() -> tuple[asyncio.Server, list[asyncio.StreamWriter], str]:
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # never read: the peer's receive buffer fills up

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, held, f"127.0.0.1:{port}"


async def test_oneway_to_a_peer_that_never_reads_times_out_and_close_returns():
    server, held, address = await _silent_server()
    try:
        conn = await RemotingConnection.open(address)
        t0 = time.monotonic()
        async def send() -> None:
            for _ in range(4):
                await conn.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "t"}, BIG)

        try:
            # bounded here too, so a client that waits for good fails the test
            await asyncio.wait_for(send(), DEFAULT_TIMEOUT + 10)
        except RequestTimeout:
            pass
        else:
            raise AssertionError("48 MiB of oneways went into a peer that never reads")
        assert conn.closed
        await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT + 3)
        assert time.monotonic() - t0 < DEFAULT_TIMEOUT + CLOSE_TIMEOUT + 5
    finally:
        for w in held:
            w.transport.abort()
        server.close()
        await server.wait_closed()


async def test_close_with_unsent_bytes_returns():
    server, held, address = await _silent_server()
    try:
        conn = await RemotingConnection.open(address)
        # a request whose bytes cannot all leave: it times out, the bytes stay buffered
        try:
            await conn.invoke(RequestCode.SEND_MESSAGE, {"topic": "t"}, BIG, timeout=0.5)
        except RequestTimeout:
            pass
        t0 = time.monotonic()
        await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT + 3)  # aborts instead of flushing
        assert time.monotonic() - t0 >= CLOSE_TIMEOUT * 0.5
        assert conn.closed
    finally:
        for w in held:
            w.transport.abort()
        server.close()
        await server.wait_closed()
