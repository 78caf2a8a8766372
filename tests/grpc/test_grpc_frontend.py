"""The gRPC front end's frame against a real ``lmq serve``: raw ``grpc.aio`` channels and
the generated stub (the official clients' tests are elsewhere). Routes, heartbeats,
Telemetry settings, assignments, client termination, metrics, the dedicated port and
the unified port, bad input, graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
import socket
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from broker_core import MessageStore
from gateway.rocketmq.groups import GroupRegistry
from gateway.rocketmq.topics import TopicRegistry
from lmq.rocketmq import GroupConfig, MessageType, Perm, TopicConfig
from protocol.grpc import Code
from tests.gateway.gateway_process import GatewayProcess
from tests.grpc.grpc_core_support import (
    BOUND,
    channel,
    endpoints,
    metadata,
    query_route,
    resource,
    stub,
)

MAX_BODY = 16 * 1024 * 1024  # the store's default max_message_bytes


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    data = tmp_path / "data"
    with MessageStore.open(data) as store:
        topics = TopicRegistry(store, True, 8)
        topics.create(TopicConfig("Split", read_queues=2, write_queues=4))
        topics.create(TopicConfig("Fifo", 3, 3, message_type=MessageType.FIFO))
        topics.create(TopicConfig("ReadOnly", 2, 2, perm=Perm.READ))
        topics.create(TopicConfig("Wide", 1024, 1024))
        groups = GroupRegistry(store)
        groups.create(GroupConfig("Orderly", retry_max_times=3, consume_message_orderly=True))
    process = GatewayProcess(data).start()
    try:
        yield process
    finally:
        process.stop()


def ports(gw: GatewayProcess) -> list[int]:
    """The dedicated gRPC port and the unified port."""
    return [gw.ports["grpc"], gw.ports["unified"]]


def metrics(gw: GatewayProcess) -> str:
    url = f"http://127.0.0.1:{gw.ports['unified']}/metrics"
    with urllib.request.urlopen(url, timeout=BOUND) as response:
        return str(response.read().decode())


async def test_query_route_on_both_ports(gw: GatewayProcess) -> None:
    for port in ports(gw):
        async with channel(port) as ch:
            s = stub(ch)
            route = await query_route(s, "Plain", port)  # auto-created, 8 queues
            assert route.status.code == Code.OK
            queues = route.message_queues
            assert [q.id for q in queues] == list(range(8))
            assert {q.permission for q in queues} == {definition_pb2.READ_WRITE}
            # auto-created: MIXED, every message type listed
            assert all(list(q.accept_message_types) == [
                definition_pb2.NORMAL, definition_pb2.FIFO, definition_pb2.DELAY,
                definition_pb2.TRANSACTION] for q in queues)
            broker = queues[0].broker
            assert broker.name == "lmq-gateway" and broker.id == 0
            assert broker.endpoints == endpoints(port)  # the access point the client used
            # no endpoints in the request: the address the connection reached
            bare = await s.QueryRoute(
                service_pb2.QueryRouteRequest(topic=resource("Plain")),
                metadata=metadata(), timeout=BOUND)
            address = bare.message_queues[0].broker.endpoints.addresses[0]
            assert (address.host, address.port) == ("127.0.0.1", port)
            assert bare.message_queues[0].broker.endpoints.scheme == definition_pb2.IPv4


async def test_route_permissions_and_message_types(gw: GatewayProcess) -> None:
    port = gw.ports["grpc"]
    async with channel(port) as ch:
        s = stub(ch)
        split = (await query_route(s, "Split", port)).message_queues
        # queue i is readable below read_queues (2), writable below write_queues (4)
        assert [q.permission for q in split] == [
            definition_pb2.READ_WRITE, definition_pb2.READ_WRITE,
            definition_pb2.WRITE, definition_pb2.WRITE]
        fifo = (await query_route(s, "Fifo", port)).message_queues
        assert [list(q.accept_message_types) for q in fifo] == [[definition_pb2.FIFO]] * 3
        read_only = (await query_route(s, "ReadOnly", port)).message_queues
        assert [q.permission for q in read_only] == [definition_pb2.READ] * 2
        wide = await query_route(s, "Wide", gw.ports["unified"])  # a 60 KB answer
        assert len(wide.message_queues) == 1024


async def test_route_errors(gw: GatewayProcess) -> None:
    port = gw.ports["grpc"]
    async with channel(port) as ch:
        s = stub(ch)
        assert (await query_route(s, "", port)).status.code == Code.ILLEGAL_TOPIC
        assert (await query_route(s, "a/b", port)).status.code == Code.ILLEGAL_TOPIC
        # a system topic is never auto-created
        missing = await query_route(s, "TBW102", port)
        assert missing.status.code == Code.TOPIC_NOT_FOUND
        assert "TBW102" in missing.status.message and not missing.message_queues


async def test_route_without_auto_create(tmp_path: Path) -> None:
    config = tmp_path / "lmq.toml"
    config.write_text("rocketmq_auto_create_topics = false\n")
    process = GatewayProcess(tmp_path / "data", "--config", str(config)).start()
    try:
        port = process.ports["grpc"]
        async with channel(port) as ch:
            route = await query_route(stub(ch), "Unknown", port)
            assert route.status.code == Code.TOPIC_NOT_FOUND
    finally:
        process.stop()


async def test_strict_message_type(tmp_path: Path) -> None:
    """rocketmq_strict_message_type: auto-created topics are NORMAL (RocketMQ 5's
    default), the route lists NORMAL only and a FIFO send is refused."""
    config = tmp_path / "lmq.toml"
    config.write_text("rocketmq_strict_message_type = true\n")
    process = GatewayProcess(tmp_path / "data", "--config", str(config)).start()
    try:
        port = process.ports["grpc"]
        async with channel(port) as ch:
            route = await query_route(stub(ch), "Strict", port)
            assert route.status.code == Code.OK
            assert {tuple(q.accept_message_types) for q in route.message_queues} == {
                (definition_pb2.NORMAL,)}
    finally:
        process.stop()


async def test_heartbeat_and_client_termination(gw: GatewayProcess) -> None:
    port = gw.ports["unified"]
    async with channel(port) as ch:
        s = stub(ch)
        consumer = service_pb2.HeartbeatRequest(
            client_type=definition_pb2.SIMPLE_CONSUMER, group=resource("GroupA"))
        anonymous = await s.Heartbeat(consumer, metadata=metadata(client_id=""), timeout=BOUND)
        assert anonymous.status.code == Code.CLIENT_ID_REQUIRED
        ok = await s.Heartbeat(consumer, metadata=metadata("c1"), timeout=BOUND)
        assert ok.status.code == Code.OK
        producer = service_pb2.HeartbeatRequest(client_type=definition_pb2.PRODUCER)
        assert (await s.Heartbeat(producer, metadata=metadata("p1"), timeout=BOUND)
                ).status.code == Code.OK
        no_group = service_pb2.HeartbeatRequest(client_type=definition_pb2.PUSH_CONSUMER)
        assert (await s.Heartbeat(no_group, metadata=metadata("c2"), timeout=BOUND)
                ).status.code == Code.ILLEGAL_CONSUMER_GROUP
        bad_group = service_pb2.HeartbeatRequest(
            client_type=definition_pb2.SIMPLE_CONSUMER, group=resource("bad/group"))
        assert (await s.Heartbeat(bad_group, metadata=metadata("c3"), timeout=BOUND)
                ).status.code == Code.ILLEGAL_CONSUMER_GROUP
        assert await _gauge(gw, "lmq_grpc_clients") == 2  # c1 and p1
        bye = await s.NotifyClientTermination(
            service_pb2.NotifyClientTerminationRequest(group=resource("GroupA")),
            metadata=metadata("c1"), timeout=BOUND)
        assert bye.status.code == Code.OK
        assert await _gauge(gw, "lmq_grpc_clients") == 1
    text = metrics(gw)
    assert 'lmq_grpc_calls_total{rpc="Heartbeat",code="20000"} 2' in text
    assert f'lmq_grpc_calls_total{{rpc="Heartbeat",code="{Code.CLIENT_ID_REQUIRED}"}} 1' in text


async def _gauge(gw: GatewayProcess, name: str) -> float:
    text = await asyncio.to_thread(metrics, gw)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


class Telemetry:
    """One Telemetry stream: commands written with ``send``, replies read with ``next``."""

    def __init__(self, s: Any, client_id: str, timeout: float = 60, **md: Any) -> None:
        self.outbox: asyncio.Queue[service_pb2.TelemetryCommand | None] = asyncio.Queue()
        self.call = s.Telemetry(self._requests(), metadata=metadata(client_id, **md),
                                timeout=timeout)

    async def _requests(self) -> AsyncIterator[service_pb2.TelemetryCommand]:
        while (command := await self.outbox.get()) is not None:
            yield command

    def send(self, command: service_pb2.TelemetryCommand) -> None:
        self.outbox.put_nowait(command)

    async def next(self, timeout: float = BOUND) -> Any:
        return await asyncio.wait_for(self.call.read(), timeout)

    def close(self) -> None:
        self.outbox.put_nowait(None)


def producer_settings(*topics: str) -> service_pb2.TelemetryCommand:
    return service_pb2.TelemetryCommand(settings=definition_pb2.Settings(
        client_type=definition_pb2.PRODUCER,
        publishing=definition_pb2.Publishing(topics=[resource(t) for t in topics])))


def consumer_settings(group: str, kind: int = definition_pb2.PUSH_CONSUMER) -> Any:
    return service_pb2.TelemetryCommand(settings=definition_pb2.Settings(
        client_type=kind,
        subscription=definition_pb2.Subscription(
            group=resource(group),
            subscriptions=[definition_pb2.SubscriptionEntry(
                topic=resource("Plain"),
                expression=definition_pb2.FilterExpression(
                    type=definition_pb2.TAG, expression="*"))])))


async def test_telemetry_answers_settings(gw: GatewayProcess) -> None:
    for port in ports(gw):
        async with channel(port) as ch:
            s = stub(ch)
            producer = Telemetry(s, f"producer-{port}")
            producer.send(producer_settings("Plain", "Fifo"))
            reply = await producer.next()
            assert reply.status.code == Code.OK
            settings = reply.settings
            assert settings.client_type == definition_pb2.PRODUCER
            assert [t.name for t in settings.publishing.topics] == ["Plain", "Fifo"]
            assert settings.publishing.max_body_size == MAX_BODY
            assert settings.publishing.validate_message_type
            policy = settings.backoff_policy
            assert policy.max_attempts == 3
            assert policy.WhichOneof("strategy") == "exponential_backoff"
            assert policy.exponential_backoff.multiplier == 2.0
            assert policy.exponential_backoff.max.seconds == 1

            consumer = Telemetry(s, f"consumer-{port}")
            consumer.send(consumer_settings("Orderly"))
            reply = await consumer.next()
            assert reply.status.code == Code.OK
            sub = reply.settings.subscription
            assert sub.group.name == "Orderly" and sub.fifo
            assert sub.long_polling_timeout.seconds == 30 and sub.receive_batch_size == 32
            assert [e.topic.name for e in sub.subscriptions] == ["Plain"]
            policy = reply.settings.backoff_policy
            assert policy.max_attempts == 4  # the group's retry_max_times (3) + 1
            assert policy.WhichOneof("strategy") == "customized_backoff"
            assert policy.customized_backoff.next[0].seconds == 1
            assert len(policy.customized_backoff.next) == 18

            plain = Telemetry(s, f"simple-{port}")
            plain.send(consumer_settings("NewGroup", definition_pb2.SIMPLE_CONSUMER))
            reply = await plain.next()
            assert not reply.settings.subscription.fifo
            assert reply.settings.backoff_policy.max_attempts == 17  # the default 16 + 1
            # each stream's reply is repeated once, 0.5 s later (the Node client's race)
            for t, first in ((producer, None), (consumer, None), (plain, reply)):
                repeat = await t.next(timeout=3)
                assert repeat.status.code == Code.OK and repeat.HasField("settings")
                if first is not None:
                    assert repeat == first

            # an empty command: a status, and the stream goes on
            plain.send(service_pb2.TelemetryCommand())
            assert (await plain.next()).status.code == Code.BAD_REQUEST
            assert await _gauge(gw, "lmq_grpc_open_streams") == 3
            for t in (producer, consumer, plain):
                t.close()
                assert await t.next() is grpc.aio.EOF
                assert await asyncio.wait_for(t.call.code(), BOUND) == grpc.StatusCode.OK


async def test_telemetry_settings_repeated_after_route_queries(gw: GatewayProcess) -> None:
    # The Node client arms its wait for settings only after fetching every topic's
    # route: the reply is repeated 0.5 s after the settings and after each QueryRoute
    # of the stream's first 30 s.
    port = gw.ports["unified"]
    async with channel(port) as ch:
        s = stub(ch)
        t = Telemetry(s, "node-like")
        t.send(producer_settings("Plain", "Split"))
        assert (await t.next()).settings.publishing.max_body_size == MAX_BODY
        repeat = await t.next(timeout=3)
        assert repeat.status.code == Code.OK and repeat.settings.publishing.max_body_size
        assert (await query_route(s, "Split", port, client_id="node-like")).status.code == Code.OK
        again = await t.next(timeout=3)
        assert again.status.code == Code.OK and again.settings.publishing.max_body_size
        # another client's route query repeats nothing on this stream
        await query_route(s, "Split", port, client_id="someone-else")
        with pytest.raises(asyncio.TimeoutError):
            await t.next(timeout=1.5)
        t.close()


async def test_telemetry_needs_client_id(gw: GatewayProcess) -> None:
    port = gw.ports["grpc"]
    async with channel(port) as ch:
        t = Telemetry(stub(ch), "")
        t.send(producer_settings("Plain"))
        reply = await t.next()
        assert reply.status.code == Code.CLIENT_ID_REQUIRED
        assert await t.next() is grpc.aio.EOF


async def test_query_assignment(gw: GatewayProcess) -> None:
    port = gw.ports["unified"]
    async with channel(port) as ch:
        s = stub(ch)

        async def assign(topic: str, group: str) -> Any:
            return await s.QueryAssignment(
                service_pb2.QueryAssignmentRequest(
                    topic=resource(topic), group=resource(group), endpoints=endpoints(port)),
                metadata=metadata(), timeout=BOUND)

        pop = await assign("Plain", "GroupA")
        assert pop.status.code == Code.OK
        [only] = pop.assignments
        assert only.message_queue.id == -1  # any queue: a receive pops across them all
        assert only.message_queue.permission == definition_pb2.READ_WRITE
        assert only.message_queue.broker.endpoints == endpoints(port)
        orderly = await assign("Fifo", "Orderly")
        assert [a.message_queue.id for a in orderly.assignments] == [0, 1, 2]
        split = await assign("Split", "Orderly")  # 2 readable queues of 4
        assert [a.message_queue.id for a in split.assignments] == [0, 1]
        assert (await assign("Plain", "bad/group")).status.code == Code.ILLEGAL_CONSUMER_GROUP
        assert (await assign("TBW102", "GroupA")).status.code == Code.TOPIC_NOT_FOUND


async def test_unimplemented_rpcs_answer_a_status(gw: GatewayProcess) -> None:
    # SyncLiteSubscription (lite topics) is not supported: a status, not a transport error
    port = gw.ports["grpc"]
    async with channel(port) as ch:
        reply = await stub(ch).SyncLiteSubscription(
            service_pb2.SyncLiteSubscriptionRequest(topic=resource("Plain")),
            metadata=metadata(), timeout=BOUND)
        assert reply.status.code == Code.UNSUPPORTED


async def test_malformed_unknown_fields_and_oversized(tmp_path: Path) -> None:
    config = tmp_path / "lmq.toml"
    config.write_text("[store]\nmax_message_bytes = 65536\n")
    process = GatewayProcess(tmp_path / "data", "--config", str(config)).start()
    try:
        for port in (process.ports["grpc"], process.ports["unified"]):
            async with channel(port) as ch:
                raw = ch.unary_unary(
                    "/apache.rocketmq.v2.MessagingService/QueryRoute",
                    request_serializer=None, response_deserializer=None)
                # not protobuf: BAD_REQUEST in the RPC's own response
                bad = service_pb2.QueryRouteResponse.FromString(
                    await raw(b"\x0a\xff\xff\xff\xff\x0f", metadata=metadata(), timeout=BOUND))
                assert bad.status.code == Code.BAD_REQUEST
                assert "malformed request" in bad.status.message
                # unknown fields are skipped
                request = service_pb2.QueryRouteRequest(
                    topic=resource("Plain"), endpoints=endpoints(port)).SerializeToString()
                extra = b"\xf8\x06\x2a" + b"\x82\x07\x03abc"  # fields 111 (varint) and 112
                reply = service_pb2.QueryRouteResponse.FromString(
                    await raw(request + extra, metadata=metadata(), timeout=BOUND))
                assert reply.status.code == Code.OK and len(reply.message_queues) == 8
                # a request above the store's largest message + 1 MiB: refused by size
                huge = request + b"\x82\x07" + _varint(2 * 1024 * 1024) + bytes(2 * 1024 * 1024)
                with pytest.raises(grpc.aio.AioRpcError) as too_big:
                    await raw(huge, metadata=metadata(), timeout=BOUND)
                assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                # and the server goes on
                s = stub(ch)
                assert (await query_route(s, "Plain", port)).status.code == Code.OK
                # a big request within the limit arrives intact
                big = request + b"\x82\x07" + _varint(900_000) + bytes(900_000)
                reply = service_pb2.QueryRouteResponse.FromString(
                    await raw(big, metadata=metadata(), timeout=BOUND))
                assert reply.status.code == Code.OK
    finally:
        process.stop()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


async def test_graceful_shutdown_ends_streams(gw: GatewayProcess) -> None:
    streams = []
    channels = []
    for port in ports(gw):
        ch = channel(port)
        channels.append(ch)
        t = Telemetry(stub(ch), f"c-{port}")
        t.send(producer_settings("Plain"))
        assert (await t.next()).status.code == Code.OK
        assert (await t.next(timeout=3)).status.code == Code.OK  # the repeat
        streams.append(t)
    assert gw.proc is not None
    proc = gw.proc
    loop = asyncio.get_running_loop()
    started = loop.time()
    proc.send_signal(signal.SIGTERM)
    for t in streams:
        # the stream ends (the server stops it) rather than waiting for its deadline
        end = await t.next(timeout=BOUND)
        assert end is grpc.aio.EOF
        assert await asyncio.wait_for(t.call.code(), BOUND) in (
            grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert await asyncio.to_thread(proc.wait, BOUND) == 0
    assert loop.time() - started < BOUND
    for ch in channels:
        await ch.close()
    output = "".join(gw.output)
    assert "shutdown: done" in output and "Traceback" not in output


async def test_malformed_telemetry_command(gw: GatewayProcess) -> None:
    port = gw.ports["unified"]
    async with channel(port) as ch:
        raw = ch.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=None, response_deserializer=None)
        good = producer_settings("Plain").SerializeToString()
        call = raw(iter([b"\x12\xff\xff", good]), metadata=metadata("raw-1"), timeout=BOUND)
        replies = [service_pb2.TelemetryCommand.FromString(r) async for r in call]
        assert [r.status.code for r in replies] == [Code.BAD_REQUEST, Code.OK]
        assert replies[1].settings.publishing.max_body_size == MAX_BODY
    assert "Traceback" not in "".join(gw.output)


@pytest.mark.parametrize("listener", ["grpc", "mqtt"])
def test_port_in_use_is_a_clean_start_failure(tmp_path: Path, listener: str) -> None:
    """grpcio's own listener (bound by grpcio) and one of the gateway's (asyncio)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = GatewayProcess(tmp_path / "data", f"--{listener}-port", str(port))
        with pytest.raises(RuntimeError, match="gateway exited") as failed:
            process.start()
    out = str(failed.value)
    # one line naming the port and the flag that changes it, no gRPC C-core log line
    assert (f"Error: cannot start: {listener} listener: cannot bind 127.0.0.1:{port}"
            " (address already in use)") in out
    assert f"choose another port with --{listener}-port PORT" in out
    assert "Traceback" not in out and "chttp2" not in out and "E0000" not in out
