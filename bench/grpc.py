"""RocketMQ 5 gRPC scenario (the gateway only; other brokers skip it).

* ``grpc_1to1`` -- 100-byte messages sent with ``SendMessage`` and received with
  ``ReceiveMessage`` (long polling, batches of 32) + ``AckMessage``, one producer client
  and one consumer client, at most ``window`` messages in flight end to end (like
  ``remoting_1to1`` and ``mqtt_qos1``: run them in the same ``python -m bench`` run, the
  store is the same, so the rates compare the front ends).

The generator is lean on purpose, so that the gateway and not the generator is measured:
raw ``grpc.aio`` calls on one HTTP/2 channel per side, no client library. Each side
first opens ``Telemetry`` and sends its settings as the official clients do (the
gateway answers with its settings); then ``SENDERS`` send calls run concurrently, each
request made by patching a pre-serialized ``SendMessageRequest`` (message id and the
body's timestamp), and ``RECEIVERS`` receive streams run concurrently, each batch acked
with one ``AckMessage`` that does not hold up the next receive. ``gen_cpu_pct`` is
what the generator costs (all its threads, gRPC's C core included).

``cpu_us_per_msg`` is the gateway's CPU time over the measured window divided by the
messages delivered in it: one send, one delivery and 1/32 of a receive and an ack each.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import time
from typing import Any

import grpc
import grpc.aio
from google.protobuf import duration_pb2, timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from bench.loadgen import Monitor, percentiles
from bench.peers import Broker

_perf = time.perf_counter
_stamp = struct.Struct(">dQ")
SERVICE = "/apache.rocketmq.v2.MessagingService/"
SENDERS = 64  # concurrent SendMessage calls
RECEIVERS = 4  # concurrent ReceiveMessage streams
BATCH = 32  # messages per receive, as the official push consumer asks
GROUP = "benchGrpcConsumers"
_ID = b"0" * 32  # the placeholder message id of the request template


def _port(b: Broker) -> int:
    port = getattr(b, "grpc_port", None) or getattr(b, "remoting_port", None)
    if not port:
        from bench.scenarios import Skip  # registered by bench.scenarios: import late

        raise Skip("no RocketMQ gRPC listener")
    return int(port)


def _metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "5.1.2"),
        ("x-mq-request-id", "bench"),
    )


def _seconds(s: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(s), nanos=int((s % 1) * 1e9))


class _Stub:
    """The MessagingService methods the scenario calls, over one channel. SendMessage
    takes already serialized requests (bytes)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.query_route = channel.unary_unary(
            SERVICE + "QueryRoute", request_serializer=svc.QueryRouteRequest.SerializeToString,
            response_deserializer=svc.QueryRouteResponse.FromString)
        self.send = channel.unary_unary(
            SERVICE + "SendMessage", request_serializer=None,
            response_deserializer=svc.SendMessageResponse.FromString)
        self.receive = channel.unary_stream(
            SERVICE + "ReceiveMessage",
            request_serializer=svc.ReceiveMessageRequest.SerializeToString,
            response_deserializer=svc.ReceiveMessageResponse.FromString)
        self.ack = channel.unary_unary(
            SERVICE + "AckMessage", request_serializer=svc.AckMessageRequest.SerializeToString,
            response_deserializer=svc.AckMessageResponse.FromString)
        self.telemetry = channel.stream_stream(
            SERVICE + "Telemetry", request_serializer=svc.TelemetryCommand.SerializeToString,
            response_deserializer=svc.TelemetryCommand.FromString)


async def _telemetry(stub: _Stub, md: Any, settings: pb.Settings) -> Any:
    """Open Telemetry, send the client's settings, wait for the gateway's reply (the
    official clients do the same before they send or receive)."""
    call = stub.telemetry(metadata=md)
    await call.write(svc.TelemetryCommand(settings=settings))
    reply = await asyncio.wait_for(call.read(), 10.0)
    if reply is grpc.aio.EOF or reply.status.code != pb.Code.OK:
        raise RuntimeError(f"Telemetry settings refused: {reply}")
    return call


class _Template:
    """A serialized SendMessageRequest whose message id and first body bytes are patched
    per message: the generator never builds a protobuf object while it measures."""

    def __init__(self, topic: str, payload: int) -> None:
        body = b"\x01" * max(payload, _stamp.size)
        msg = pb.Message(
            topic=pb.Resource(name=topic),
            system_properties=pb.SystemProperties(
                tag="bench", message_id=_ID.decode(), body_encoding=pb.Encoding.IDENTITY,
                message_type=pb.MessageType.NORMAL, born_host="127.0.0.1",
                born_timestamp=timestamp_pb2.Timestamp(seconds=int(time.time())),
            ),
            body=body,
        )
        self.raw = bytearray(svc.SendMessageRequest(messages=[msg]).SerializeToString())
        self.id_at = self.raw.index(_ID)
        self.body_at = self.raw.index(body)
        self.prefix = f"{os.getpid() & 0xFFFF:04X}".encode()
        self.seq = itertools.count()

    def next(self) -> bytes:
        seq = next(self.seq)
        raw = self.raw
        raw[self.id_at:self.id_at + 32] = self.prefix + b"%028X" % seq
        raw[self.body_at:self.body_at + _stamp.size] = _stamp.pack(_perf(), seq)
        return bytes(raw)


async def grpc_1to1(b: Broker, cfg: Any) -> dict[str, Any]:
    address = f"127.0.0.1:{_port(b)}"
    topic = f"benchGrpc{int(time.time())}"
    endpoints = pb.Endpoints(scheme=pb.AddressScheme.IPv4,
                             addresses=[pb.Address(host="127.0.0.1", port=_port(b))])
    mon = Monitor(b.pid).start()
    pch = grpc.aio.insecure_channel(address)
    cch = grpc.aio.insecure_channel(address)
    pstub, cstub = _Stub(pch), _Stub(cch)
    pmd = _metadata(f"bench@{os.getpid()}@p")
    cmd = _metadata(f"bench@{os.getpid()}@c")
    calls: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    errors: list[str] = []
    st = {"sent": 0, "confirmed": 0, "nacked": 0, "delivered": 0, "acked": 0, "receives": 0}
    latencies: list[float] = []
    room = asyncio.Event()
    running = True  # receivers
    sending = True  # senders: stop first, the receivers drain what is in flight
    try:
        route = await pstub.query_route(
            svc.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints),
            metadata=pmd, timeout=10)
        if route.status.code != pb.Code.OK or not route.message_queues:
            raise RuntimeError(f"QueryRoute: {route.status}")
        queue0 = route.message_queues[0]
        calls.append(await _telemetry(pstub, pmd, pb.Settings(
            client_type=pb.ClientType.PRODUCER, access_point=endpoints,
            request_timeout=_seconds(3),
            publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))))
        calls.append(await _telemetry(cstub, cmd, pb.Settings(
            client_type=pb.ClientType.SIMPLE_CONSUMER, access_point=endpoints,
            request_timeout=_seconds(3),
            subscription=pb.Subscription(
                group=pb.Resource(name=GROUP),
                subscriptions=[pb.SubscriptionEntry(
                    topic=pb.Resource(name=topic),
                    expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"))],
                long_polling_timeout=_seconds(5)))))
        template = _Template(topic, cfg.payload)
        window = cfg.window

        def outstanding() -> int:
            return st["sent"] - st["nacked"] - st["delivered"]

        async def sender() -> None:
            while sending:
                if outstanding() >= window:
                    room.clear()
                    try:
                        await asyncio.wait_for(room.wait(), 0.05)
                    except TimeoutError:
                        pass
                    continue
                st["sent"] += 1
                try:
                    r = await pstub.send(template.next(), metadata=pmd, timeout=10)
                except grpc.aio.AioRpcError as exc:
                    st["nacked"] += 1
                    errors.append(f"send: {exc.code()}")
                    continue
                if r.status.code == pb.Code.OK:
                    st["confirmed"] += 1
                else:
                    st["nacked"] += 1

        receive_req = svc.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP), message_queue=queue0,
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            batch_size=BATCH, invisible_duration=_seconds(30), auto_renew=False,
            long_polling_timeout=_seconds(5))
        group_res, topic_res = pb.Resource(name=GROUP), pb.Resource(name=topic)

        async def ack(entries: list[svc.AckMessageEntry]) -> None:
            try:
                r = await cstub.ack(svc.AckMessageRequest(
                    group=group_res, topic=topic_res, entries=entries),
                    metadata=cmd, timeout=10)
                if r.status.code == pb.Code.OK:
                    st["acked"] += len(entries)
                else:
                    errors.append(f"ack: {r.status.code}")
            except grpc.aio.AioRpcError as exc:
                errors.append(f"ack: {exc.code()}")

        async def receiver() -> None:
            while running:
                entries = []
                try:
                    async for r in cstub.receive(receive_req, metadata=cmd, timeout=15):
                        if r.HasField("message"):
                            m = r.message
                            t, _ = _stamp.unpack_from(m.body)
                            latencies.append(_perf() - t)
                            entries.append(svc.AckMessageEntry(
                                message_id=m.system_properties.message_id,
                                receipt_handle=m.system_properties.receipt_handle))
                except grpc.aio.AioRpcError as exc:
                    if running:
                        errors.append(f"receive: {exc.code()}")
                        await asyncio.sleep(0.1)
                st["receives"] += 1
                if entries:
                    st["delivered"] += len(entries)
                    room.set()
                    tasks.append(asyncio.ensure_future(ack(entries)))

        tasks += [asyncio.ensure_future(receiver()) for _ in range(RECEIVERS)]
        tasks += [asyncio.ensure_future(sender()) for _ in range(SENDERS)]
        await asyncio.sleep(cfg.warmup)
        snap = dict(st, t=_perf(), cpu=mon.cpu_seconds(), gen=time.process_time(),
                    lat=len(latencies))
        await asyncio.sleep(cfg.duration)
        end = dict(st, t=_perf(), cpu=mon.cpu_seconds(), gen=time.process_time(),
                   lat=len(latencies))
        sending = False
        # drain: what was sent arrives (for the loss count)
        deadline = _perf() + 5.0
        while _perf() < deadline and st["delivered"] < st["confirmed"]:
            await asyncio.sleep(0.05)
    finally:
        running = sending = False
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in calls:
            c.cancel()
        await pch.close()
        await cch.close()
        await mon.stop()
    secs = end["t"] - snap["t"]
    delivered = end["delivered"] - snap["delivered"]
    p50, p99, pmax = percentiles(latencies[int(snap["lat"]):int(end["lat"])])
    cpu = end["cpu"] - snap["cpu"]
    return {
        "published": int(end["confirmed"] - snap["confirmed"]),
        "delivered": int(delivered),
        "seconds": round(secs, 3),
        "pub_rate": round((end["confirmed"] - snap["confirmed"]) / secs, 1),
        "del_rate": round(delivered / secs, 1),
        "p50_ms": p50, "p99_ms": p99, "max_ms": pmax,
        "cpu_pct": round(cpu / secs * 100, 1),
        "gen_cpu_pct": round((end["gen"] - snap["gen"]) / secs * 100, 1),
        "peak_rss_mb": round(mon.peak_rss / 2**20, 1),
        "lost": max(0, st["confirmed"] - st["delivered"]),
        "cpu_us_per_msg": round(cpu / delivered * 1e6, 1) if delivered else None,
        "receives": int(end["receives"] - snap["receives"]),
        "acked": st["acked"],
        "nacked": st["nacked"],
        "senders": SENDERS,
        "receivers": RECEIVERS,
        "window": cfg.window,
        "errors": sorted(set(errors))[:10],
    }


SCENARIOS = {"grpc_1to1": grpc_1to1}

DESCRIPTIONS = {
    "grpc_1to1": "RocketMQ 5 gRPC SendMessage -> ReceiveMessage + AckMessage, 1 -> 1, "
    "raw grpc.aio calls",
}
