"""Instructions the gateway spends per message delivered over RocketMQ 5 gRPC in the
official clients' pattern, counted by callgrind (as :mod:`bench.door_instructions` does
for HTTP and MQTT): a figure that does not move with the machine's load.

    .venv/bin/python -m bench.grpc_instructions --messages 3200

The gateway (``cli.serve``, ``durability = "async"``) runs under ``valgrind
--tool=callgrind`` with instrumentation off. The load is ``grpc_1to1``'s (bench/grpc.py:
one producer channel, 64 concurrent SendMessage calls of one 100-byte message each; one
consumer channel, 4 concurrent ReceiveMessage streams of batches of 32, each batch acked
with one AckMessage), first 1,000 messages of warm-up, then ``--messages`` with
instrumentation on. The figure is the instructions counted (user space, every thread of
the gateway) divided by the messages delivered; the kernel's socket work is not in it.

Needs valgrind. Ports: ``--port`` (gRPC), the next two (MQTT, unified).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import grpc.aio
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from bench.door_instructions import callgrind_gateway, counted
from bench.grpc import (
    BATCH,
    GROUP,
    RECEIVERS,
    SENDERS,
    _metadata,
    _seconds,
    _Stub,
    _telemetry,
    _Template,
)

WARMUP = 1000


async def _drive(port: int, topic: str, count: int) -> int:
    """Send ``count`` messages and receive and ack all of them; returns how many came."""
    address = f"127.0.0.1:{port}"
    pch, cch = grpc.aio.insecure_channel(address), grpc.aio.insecure_channel(address)
    pstub, cstub = _Stub(pch), _Stub(cch)
    pmd, cmd = _metadata(f"instr@{os.getpid()}@p"), _metadata(f"instr@{os.getpid()}@c")
    endpoints = pb.Endpoints(
        scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)]
    )
    topic_res, group_res = pb.Resource(name=topic), pb.Resource(name=GROUP)
    route = await pstub.query_route(
        svc.QueryRouteRequest(topic=topic_res, endpoints=endpoints), metadata=pmd, timeout=600
    )
    calls = [
        await _telemetry(
            pstub,
            pmd,
            pb.Settings(
                client_type=pb.ClientType.PRODUCER,
                access_point=endpoints,
                request_timeout=_seconds(3),
                publishing=pb.Publishing(topics=[topic_res]),
            ),
        ),
        await _telemetry(
            cstub,
            cmd,
            pb.Settings(
                client_type=pb.ClientType.SIMPLE_CONSUMER,
                access_point=endpoints,
                request_timeout=_seconds(3),
                subscription=pb.Subscription(
                    group=group_res,
                    subscriptions=[
                        pb.SubscriptionEntry(
                            topic=topic_res,
                            expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                        )
                    ],
                    long_polling_timeout=_seconds(5),
                ),
            ),
        ),
    ]
    template = _Template(topic, 100)
    st = {"sent": 0, "got": 0}

    async def sender() -> None:
        while st["sent"] < count:
            st["sent"] += 1
            r = await pstub.send(template.next(), metadata=pmd, timeout=600)
            if r.status.code != pb.Code.OK:
                raise RuntimeError(f"send: {r.status}")

    request = svc.ReceiveMessageRequest(
        group=group_res,
        message_queue=route.message_queues[0],
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=BATCH,
        invisible_duration=_seconds(300),
        auto_renew=False,
        long_polling_timeout=_seconds(1),
    )

    async def receiver() -> None:
        while st["got"] < count:
            entries = []
            async for r in cstub.receive(request, metadata=cmd, timeout=600):
                if r.HasField("message"):
                    props = r.message.system_properties
                    entries.append(
                        svc.AckMessageEntry(
                            message_id=props.message_id, receipt_handle=props.receipt_handle
                        )
                    )
            if entries:
                st["got"] += len(entries)
                a = await cstub.ack(
                    svc.AckMessageRequest(group=group_res, topic=topic_res, entries=entries),
                    metadata=cmd,
                    timeout=600,
                )
                if a.status.code != pb.Code.OK:
                    raise RuntimeError(f"ack: {a.status}")

    await asyncio.gather(
        *(sender() for _ in range(SENDERS)), *(receiver() for _ in range(RECEIVERS))
    )
    for call in calls:
        call.cancel()
    await pch.close()
    await cch.close()
    return st["got"]


def measure(messages: int, port: int) -> float:
    """Instructions per delivered message (see the module's docstring)."""
    with callgrind_gateway(
        "lmq-grpc-instr-", mqtt=port + 1, unified=port + 2, grpc=port, ready=port
    ) as (pid, tmp):
        topic = f"instr{int(time.time())}"
        asyncio.run(_drive(port, topic, WARMUP))
        delivered, total = counted(pid, tmp, lambda: asyncio.run(_drive(port, topic, messages)))
        return total / delivered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=3200)
    ap.add_argument("--port", type=int, default=25100, help="gRPC port (MQTT +1, unified +2)")
    args = ap.parse_args()
    per = measure(args.messages, args.port)
    print(f"grpc_1to1: {per:,.0f} instructions per delivered message ({args.messages} messages)")


if __name__ == "__main__":
    main()
