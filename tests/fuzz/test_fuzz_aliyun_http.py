"""Fuzzing the Aliyun MQ HTTP API and RIP-17's codes over a real socket (the server and
the exchange of ``test_fuzz_http``): valid SDK-shaped requests mutated, spliced and cut
into random chunks. Every byte the server sends parses as HTTP/1.1, only the APIs'
documented statuses come back (never a 500), and the gateway still serves the SDK
afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import AUTO

from ..gateway.amqp_support import ThreadGateway
from ._support import chunked, mutate, splice
from .test_fuzz_http import FAST, exchange

#: publish 201, consume 200, ack 204, RIP-17 200; errors 400/403/404/405; the server's
#: own 408/413/431.
ALLOWED = {200, 201, 204, 400, 403, 404, 405, 408, 413, 429, 431}
NS = 'xmlns="http://mq.aliyuncs.com/doc/v1/"'


def _request(method: str, target: str, body: bytes = b"", ctype: str = "text/xml") -> bytes:
    return (f"{method} {target} HTTP/1.1\r\nHost: x\r\nx-mq-version: 2015-06-06\r\n"
            f"Date: Tue, 24 Nov 2026 18:00:00 GMT\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


VALID = [
    _request("POST", "/topics/fz/messages?ns=I", (
        f'<?xml version="1.0" encoding="UTF-8"?><Message {NS}><MessageBody>b</MessageBody>'
        "<MessageTag>t</MessageTag><Properties>KEYS:k|a:b|__SHARDINGKEY:s|</Properties>"
        "</Message>").encode()),
    _request("POST", "/topics/fz/messages", (
        f"<Message {NS}><MessageBody><![CDATA[x]]></MessageBody><Properties>"
        "<![CDATA[__TransCheckT:5]]></Properties></Message>").encode()),
    _request("GET", "/topics/fz/messages?consumer=G&numOfMessages=3&ns=I&tag=t||u"),
    _request("GET", "/topics/fz/messages?consumer=G&numOfMessages=2&trans=order"),
    _request("DELETE", "/topics/fz/messages?consumer=G&ns=I", (
        f"<ReceiptHandles {NS}><ReceiptHandle>abc.def</ReceiptHandle>"
        "<ReceiptHandle>x</ReceiptHandle></ReceiptHandles>").encode()),
    _request("DELETE", "/topics/fz/messages?consumer=G&trans=commit",
             f"<ReceiptHandles {NS}><ReceiptHandle>a.b</ReceiptHandle></ReceiptHandles>"
             .encode()),
    _request("POST", "/", urlencode({"topic": "fz", "content": "c", "bizSeqNo": "b",
                                     "uniqueId": "u", "extfields": '{"a":"b"}'}).encode(),
             "application/x-www-form-urlencoded\r\nCode: 101\r\nGroupName: PG\r\nPid: 1"),
    _request("POST", "/", urlencode({"size": "1", "contents": '[{"topic":"fz","msg":"m"}]'})
             .encode(),
             "application/x-www-form-urlencoded\r\nCode: 102\r\nGroupName: PG\r\nPid: 1"),
]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadGateway]:
    path: Path = tmp_path_factory.mktemp("fuzz-aliyun")
    gateway = ThreadGateway(path / "data", http_port=AUTO, mqtt_port=0, amqp_port=0,
                            http_head_timeout=2.0, http_max_head_bytes=4096,
                            http_max_body_bytes=65536).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def check(gw: ThreadGateway, chunks: list[bytes]) -> None:
    statuses = exchange(gw, chunks)
    assert all(s in ALLOWED for s in statuses), statuses


@FAST
@given(st.data())
def test_mutated_aliyun_and_rip17_requests(gw, data):
    first = data.draw(st.sampled_from(VALID))
    second = data.draw(st.sampled_from(VALID))
    stream = data.draw(st.one_of(mutate(first), splice(first, second),
                                 st.just(first + second)))
    check(gw, data.draw(chunked(stream)))


def test_valid_requests_then_still_serving(gw):
    statuses = exchange(gw, VALID)
    # publish 201 twice; consume 200 (or 404 when the fuzzing drained the group);
    # the bogus handles 404 with <Errors>; RIP-17 200 twice
    assert statuses[:2] == [201, 201]
    assert statuses[2] in (200, 404) and statuses[3] in (200, 404)
    assert statuses[4:] == [404, 404, 200, 200]
