"""Raw gRPC access to a real ``lmq serve`` for the front end's own tests: the generated
stub of ``rocketmq-python-client`` over ``grpc.aio`` channels, the metadata RocketMQ's
clients send, and the signature. Every call has a deadline."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from typing import Any

import grpc
import grpc.aio
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

BOUND = 10.0


def metadata(client_id: str = "host@1@0@test", ak: str = "", sk: str = "",
             **extra: str) -> list[tuple[str, str]]:
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signature = hmac.new(sk.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    md = [
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "5.1.2"),
        ("x-mq-date-time", date_time),
        ("x-mq-request-id", str(uuid.uuid4())),
        ("x-mq-namespace", ""),
        ("authorization",
         f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"),
    ]
    if client_id:
        md.append(("x-mq-client-id", client_id))
    md.extend(extra.items())
    return md


def channel(port: int, tls_root: bytes | None = None) -> grpc.aio.Channel:
    target = f"127.0.0.1:{port}"
    if tls_root is None:
        return grpc.aio.insecure_channel(target)
    options = [("grpc.ssl_target_name_override", "localhost")]
    return grpc.aio.secure_channel(
        target, grpc.ssl_channel_credentials(root_certificates=tls_root), options)


def stub(ch: grpc.aio.Channel) -> Any:
    return service_pb2_grpc.MessagingServiceStub(ch)


def resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def endpoints(port: int) -> definition_pb2.Endpoints:
    return definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4, addresses=[definition_pb2.Address(host="127.0.0.1", port=port)])


async def query_route(s: Any, topic: str, port: int, **md: Any) -> Any:
    return await s.QueryRoute(
        service_pb2.QueryRouteRequest(topic=resource(topic), endpoints=endpoints(port)),
        metadata=metadata(**md), timeout=BOUND)
