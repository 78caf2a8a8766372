"""The Aliyun MQ HTTP API and RocketMQ 5 gRPC on one topic (``lmq serve`` subprocess, the
official Python gRPC client and PyPI ``mq-http-sdk``, both unchanged): an HTTP publish
reaches a gRPC SimpleConsumer with its id, tag, key and properties; a gRPC send reaches
an HTTP consumer; one consumer group popped over both shares the messages."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_producer import TopicMessage

from lmq.rocketmq import MessageType

from ..gateway_process import GatewayProcess
from .clients import grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0


def _http_consume(consumer: Any, want: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + WAIT
    while len(got) < want and time.monotonic() < deadline:
        try:
            got += consumer.consume_message(16, 2)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
    return got


def test_aliyun_http_and_grpc_both_ways(start_gateway: Callable[..., GatewayProcess],
                                        clients: Clients) -> None:
    gw = start_gateway("--http-port", "auto", topics={"xali": MessageType.NORMAL})
    http = MQClient(f"http://127.0.0.1:{gw.ports['http']}", "ak", "sk")
    try:
        c = clients.py("simple", endpoints=grpc_endpoint(gw), group="GID_xali_grpc",
                       subscriptions={"xali": "*"}, await_s=3)
        msg = TopicMessage("from-http", "tagH")
        msg.set_message_key("hk")
        msg.put_property("origin", "http")
        sent = http.get_producer("", "xali").publish_message(msg)
        [got] = c.receive_all(1, WAIT)
        assert got["body"] == "from-http" and got["id"] == sent.message_id
        assert got["tag"] == "tagH" and got["keys"] == ["hk"]
        assert got["properties"]["origin"] == "http"
        c.ack(got["id"])

        p = clients.py("producer", endpoints=grpc_endpoint(gw), topics=["xali"])
        result = p.send_message("xali", "from-grpc", tag="G", keys=["gk"],
                                properties={"origin": "grpc"})
        consumer = http.get_consumer("", "xali", "GID_xali_http")
        got_http = _http_consume(consumer, 2)
        by_body = {m.message_body: m for m in got_http}
        assert set(by_body) == {"from-http", "from-grpc"}
        from_grpc = by_body["from-grpc"]
        assert from_grpc.message_tag == "G" and from_grpc.get_message_key() == "gk"
        assert from_grpc.get_property("origin") == "grpc"
        assert from_grpc.message_id == result["id"]
        consumer.ack_message([m.receipt_handle for m in got_http])

        # one group over both protocols: each message goes to one of them
        shared = http.get_consumer("", "xali", "GID_xali_shared")
        s = clients.py("simple", endpoints=grpc_endpoint(gw), group="GID_xali_shared",
                       subscriptions={"xali": "*"}, await_s=1)
        for i in range(4):
            http.get_producer("", "xali").publish_message(TopicMessage(f"s{i}", ""))
        # the group saw the two earlier messages too: six in all
        over_http = [m.message_body for m in _http_consume(shared, 3)]
        over_grpc = [m["body"] for m in s.receive_all(6 - len(over_http), WAIT,
                                                       invisible=60)]
        assert sorted(over_http + over_grpc) == sorted(
            ["from-http", "from-grpc", "s0", "s1", "s2", "s3"])
    finally:
        http.close_connection()
