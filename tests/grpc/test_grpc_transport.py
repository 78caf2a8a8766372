"""The gRPC door's transport against a real ``lmq serve`` with grpcio's client, on the
dedicated port and the unified port: unknown methods, keep-alive pings on a long-lived
stream, a deadline ending a stream server-side, and a receive larger than the
flow-control windows streamed whole, a client's cancel ending the call on the server,
a client that stops reading holding only its own stream.
(Sizes, bad protobuf, TLS, shutdown:
test_grpc_frontend.py and test_grpc_security.py; the sans-IO layer's bad input:
tests/protocol/grpc/test_grpc_server.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import ngh2
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from gateway.config import AUTO
from protocol.grpc import Code
from tests.gateway.gateway_process import GatewayProcess
from tests.gateway.remoting.remoting_support import port_of, running_gateway
from tests.grpc.grpc_core_support import BOUND, channel, metadata, resource, stub
from tests.grpc.grpc_msg_support import Grpc, duration, message, parts, receive, send
from tests.grpc.test_grpc_frontend import Telemetry, _gauge, producer_settings

KEEPALIVE = [
    ("grpc.keepalive_time_ms", 200),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


async def _open_streams_drop_to(gw: GatewayProcess, value: float) -> None:
    async with asyncio.timeout(BOUND):
        while await _gauge(gw, "lmq_grpc_open_streams") != value:
            await asyncio.sleep(0.1)


async def test_transport_on_both_ports(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        for port in (gw.ports["grpc"], gw.ports["unified"]):
            async with channel(port) as ch:
                # an unknown method: UNIMPLEMENTED, and the connection goes on
                raw = ch.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchRpc")
                with pytest.raises(grpc.aio.AioRpcError) as unknown:
                    await raw(b"", metadata=metadata(), timeout=BOUND)
                assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
                assert "NoSuchRpc" in (unknown.value.details() or "")

                # a deadline ends a stream that would not end by itself: the call is
                # over on the server too
                t = Telemetry(stub(ch), f"deadline-{port}", timeout=0.5)
                t.send(producer_settings("Plain"))
                assert (await t.next()).status.code == Code.OK
                with pytest.raises(grpc.aio.AioRpcError) as late:
                    while True:
                        await t.next()
                assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await _open_streams_drop_to(gw, 0)

            # keep-alive pings every 200 ms are answered: the stream lives on
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", KEEPALIVE) as ch:
                t = Telemetry(stub(ch), f"keepalive-{port}")
                t.send(producer_settings("Plain"))
                assert (await t.next()).status.code == Code.OK
                await asyncio.sleep(1.5)
                t.send(service_pb2.TelemetryCommand())
                while (reply := await t.next()).HasField("settings"):
                    pass  # the settings reply's repeat
                assert reply.status.code == Code.BAD_REQUEST
                t.close()
                assert await t.next() is grpc.aio.EOF
                assert await t.call.code() == grpc.StatusCode.OK
    finally:
        gw.stop()
    assert "Traceback" not in "".join(gw.output)


async def test_receive_larger_than_the_windows_arrives_whole(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "data").start()
    g = Grpc(gw.ports["unified"])
    try:
        bodies = [bytes([i]) * 1_000_000 for i in range(6)]  # 6 MB in one stream
        for body in bodies:
            assert (await send(g, message("Big", body))).status.code == Code.OK
        got, _, status = parts(await receive(g, "g-big", "Big", batch=6))
        assert status.code == Code.OK
        assert sorted(m.body for m in got) == bodies
    finally:
        await g.close()
        gw.stop()


async def test_client_cancel_ends_the_call_on_the_server(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", grpc_port=AUTO) as gw:
        g = Grpc(port_of(gw, "grpc"))
        front = gw.front_ends["grpc"]
        try:
            await send(g, message("cancel", b"first"))
            parts(await receive(g, "g-cancel", "cancel"))  # the topic's one message
            calls: list[Any] = []
            waiting = asyncio.create_task(
                receive(g, "g-cancel", "cancel", poll=15, timeout=20, call=calls)
            )
            async with asyncio.timeout(BOUND):  # the gateway holds the long poll
                while front.services.receives.get(g.client_id) != 1:
                    await asyncio.sleep(0.02)
            calls[0].cancel()  # RST_STREAM CANCEL
            with pytest.raises((asyncio.CancelledError, grpc.aio.AioRpcError)):
                await waiting
            async with asyncio.timeout(BOUND):  # the call's task ended: slot and stream
                while front.services.receives or front.open_streams:
                    await asyncio.sleep(0.02)
            # the cancelled poll took nothing: the next message goes to the next receive
            await send(g, message("cancel", b"after"))
            got, _, status = parts(await receive(g, "g-cancel", "cancel"))
            assert status.code == Code.OK and [m.body for m in got] == [b"after"]
        finally:
            await g.close()


async def test_a_client_that_stops_reading_holds_only_its_own_stream(tmp_path: Path) -> None:
    """Flow control: a client that never opens its receive window gets 64 KiB of a 4 MB
    receive; the stream waits (other calls go on), and when the client goes away the
    popped messages are visible again at once."""
    async with running_gateway(tmp_path / "data", grpc_port=AUTO) as gw:
        port = port_of(gw, "grpc")
        g = Grpc(port)
        front = gw.front_ends["grpc"]
        store = gw.store
        assert store is not None
        try:
            bodies = [bytes([i]) * 1_000_000 for i in range(4)]
            for body in bodies:
                assert (await send(g, message("Held", body))).status.code == Code.OK
            client = ngh2.Connection(ngh2.Role.CLIENT, ngh2.Configuration(auto_window_update=False))
            client.initiate_connection()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = service_pb2.ReceiveMessageRequest(
                group=resource("g-held"),
                message_queue=pb.MessageQueue(topic=resource("Held")),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=4,
                invisible_duration=duration(60),
                long_polling_timeout=duration(0),
            ).SerializeToString()
            headers = [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/apache.rocketmq.v2.MessagingService/ReceiveMessage"),
                (b":authority", b"127.0.0.1"),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"x-mq-client-id", b"held@1"),
            ]
            sid = client.send_request(headers)
            client.send_data(sid, b"\x00" + len(request).to_bytes(4, "big") + request)
            client.end_stream(sid)
            writer.write(client.data_to_send())
            received = 0
            async with asyncio.timeout(BOUND):
                while received < 65_535:  # the client's whole initial window
                    client.receive_data(await reader.read(65_536))
                    for event in client.events():
                        if isinstance(event, ngh2.DataReceived):
                            received += len(event.data)
                    writer.write(client.data_to_send())  # SETTINGS and PING acks only
            assert received == 65_535 and front.open_streams == 1
            assert store.pop.inflight_count("g-held") == 4
            # the gateway serves other calls meanwhile
            assert (await send(g, message("Other", b"x"))).status.code == Code.OK
            writer.close()  # the consumer goes away without its messages
            async with asyncio.timeout(BOUND):
                while front.open_streams or store.pop.inflight_count("g-held"):
                    await asyncio.sleep(0.02)
            got, _, status = parts(await receive(g, "g-held", "Held", batch=4))
            assert status.code == Code.OK and sorted(m.body for m in got) == bodies
        finally:
            await g.close()
