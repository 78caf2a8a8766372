"""The client side of a remoting connection (protocol/remoting/client.py), sans-IO:
request bytes built by hand from the documented frame layout, response matching by
opaque, server requests, the average allocation and the subscription data."""

from __future__ import annotations

import json
import struct

import pytest

from protocol.remoting import FrameError, LanguageCode, RemotingCommand, RequestCode
from protocol.remoting.client import (
    ClientConnection,
    Response,
    ServerRequest,
    Unmatched,
    allocate_averagely,
    java_string_hash,
    parse_tag_expression,
    subscription_data,
    tag_matches,
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """int32 length = 4 + headerLen + bodyLen | int32 (type << 24 | headerLen) | header | body"""
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + (
        header + body
    )


def test_first_request_is_opaque_1_in_a_json_header_laid_out_as_documented() -> None:
    conn = ClientConnection(language=LanguageCode.PYTHON, version=479)
    opaque, data = conn.send_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert opaque == 1
    header = (
        b'{"code":105,"extFields":{"topic":"orders"},"flag":0,"language":"PYTHON",'
        b'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    assert data == frame(header)
    assert conn.waiting == 1


def test_send_message_v2_field_by_field() -> None:
    conn = ClientConnection()
    fields = {
        "a": "pg",
        "b": "orders",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "TAGS\x01eu\x02KEYS\x01k1 k2\x02",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    _, data = conn.send_request(RequestCode.SEND_MESSAGE_V2, fields, b"hello")
    length, mark = struct.unpack_from(">ii", data)
    header_len = mark & 0xFFFFFF
    assert mark >> 24 == 0  # JSON
    assert length == 4 + header_len + 5 == len(data) - 4
    header = json.loads(data[8 : 8 + header_len])
    assert header["code"] == 310
    assert header["flag"] == 0
    assert header["extFields"] == fields  # every value a string, as Java's Map<String,String>
    assert data[8 + header_len :] == b"hello"


def test_oneway_sets_flag_bit_1_and_is_not_waited_for() -> None:
    conn = ClientConnection()
    _, data = conn.send_request(RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "t"}, oneway=True)
    header = json.loads(data[8:])
    assert header["flag"] == 2
    assert conn.waiting == 0


def test_opaques_count_up_and_wrap_inside_positive_int32() -> None:
    conn = ClientConnection()
    assert [conn.next_opaque() for _ in range(3)] == [1, 2, 3]
    conn._next = (1 << 31) - 2
    assert [conn.next_opaque() for _ in range(3)] == [(1 << 31) - 1, 1, 2]


def test_responses_match_by_opaque_whatever_the_order() -> None:
    conn = ClientConnection()
    o1, _ = conn.send_request(10, {})
    o2, _ = conn.send_request(11, {})
    r2 = b'{"code":0,"flag":1,"language":"JAVA","opaque":%d,"version":479}' % o2
    r1 = (
        b'{"code":17,"flag":1,"language":"JAVA","opaque":%d,"remark":"no topic",'
        b'"version":479}' % o1
    )
    data = frame(r2, b"body2") + frame(r1)
    events = []
    for i in range(len(data)):  # byte by byte: every strict prefix gives nothing more
        events += conn.receive_data(data[i : i + 1])
    assert [type(e) for e in events] == [Response, Response]
    assert events[0].command.opaque == o2 and events[0].command.body == b"body2"
    assert events[1].command.code == 17 and events[1].command.remark == "no topic"
    assert conn.waiting == 0


def test_a_forgotten_request_makes_its_late_response_unmatched() -> None:
    conn = ClientConnection()
    opaque, _ = conn.send_request(10, {})
    conn.forget(opaque)
    (event,) = conn.receive_data(
        frame(b'{"code":0,"flag":1,"opaque":%d}' % opaque)
    )
    assert isinstance(event, Unmatched)


def test_server_requests_are_reported_and_answered_with_their_opaque() -> None:
    conn = ClientConnection()
    notify = (
        b'{"code":40,"extFields":{"consumerGroup":"g"},"flag":2,"language":"JAVA",'
        b'"opaque":77,"version":479}'
    )
    (event,) = conn.receive_data(frame(notify))
    assert isinstance(event, ServerRequest)
    assert event.command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert event.command.is_oneway
    answer = conn.respond(RemotingCommand.request(39, opaque=5), 0)
    header = json.loads(answer[8:])
    assert header["opaque"] == 5 and header["flag"] == 1 and header["code"] == 0


def test_a_frame_over_the_limit_is_fatal() -> None:
    conn = ClientConnection(max_frame_length=1024)
    with pytest.raises(FrameError) as err:
        conn.receive_data(struct.pack(">i", 5000) + b"\0" * 8)
    assert err.value.fatal


@pytest.mark.parametrize(
    ("queues", "clients", "expected"),
    [
        # 8 queues, 3 clients: 3, 3, 2 consecutive queues
        (8, ["c1", "c2", "c3"], {"c1": [0, 1, 2], "c2": [3, 4, 5], "c3": [6, 7]}),
        (8, ["c1", "c2", "c3", "c4"], {"c1": [0, 1], "c2": [2, 3], "c3": [4, 5], "c4": [6, 7]}),
        (2, ["a", "b", "c"], {"a": [0], "b": [1], "c": []}),
        (5, ["b", "a"], {"a": [0, 1, 2], "b": [3, 4]}),  # sorted, whatever order given
        (4, ["x"], {"x": [0, 1, 2, 3], "y": []}),  # unknown client: nothing
    ],
)
def test_average_allocation(
    queues: int, clients: list[str], expected: dict[str, list[int]]
) -> None:
    qs = list(range(queues))[::-1]
    for cid, want in expected.items():
        assert allocate_averagely(qs, clients, cid) == want


def test_average_allocation_covers_every_queue_once() -> None:
    for n_q in range(0, 12):
        for n_c in range(1, 6):
            ids = [f"c{i}" for i in range(n_c)]
            got = [q for c in ids for q in allocate_averagely(list(range(n_q)), ids, c)]
            assert sorted(got) == list(range(n_q))


def test_java_string_hash() -> None:
    # Values of Java's "TagA".hashCode() etc., computed as s[0]*31^(n-1) + ... mod 2^32.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -(1 << 31)


def test_subscription_data_and_tag_filter() -> None:
    assert parse_tag_expression("*") == []
    assert parse_tag_expression(" a || b ||") == ["a", "b"]
    sub = subscription_data("orders", "eu || us", 7).to_json()
    assert sub["tagsSet"] == ["eu", "us"]
    assert sub["codeSet"] == [java_string_hash("eu"), java_string_hash("us")]
    assert sub["subString"] == "eu || us" and sub["subVersion"] == 7
    assert sub["expressionType"] == "TAG" and sub["topic"] == "orders"
    assert subscription_data("orders", None, 1).sub_string == "*"
    assert tag_matches([], None) and tag_matches(["a"], "a")
    assert not tag_matches(["a"], "b") and not tag_matches(["a"], None)


def test_end_transaction_fields_as_the_java_producer_fills_them() -> None:
    from protocol.remoting.client import COMMIT, ROLLBACK, UNKNOWN, end_transaction_fields

    base = dict(producer_group="PG", topic="t", commit_log_offset=4096, queue_offset=3,
                msg_id="U1", transaction_id="U1", from_check=False)
    fields = end_transaction_fields(commit=True, **base)  # type: ignore[arg-type]
    assert fields["commitOrRollback"] == COMMIT == 8
    assert fields["commitLogOffset"] == 4096 and fields["tranStateTableOffset"] == 3
    assert fields["producerGroup"] == "PG" and fields["fromTransactionCheck"] is False
    assert end_transaction_fields(commit=False, **base)["commitOrRollback"] == ROLLBACK == 12  # type: ignore[arg-type]
    assert end_transaction_fields(commit=None, **base)["commitOrRollback"] == UNKNOWN == 0  # type: ignore[arg-type]


def test_transaction_check_header_parsed() -> None:
    from protocol.remoting.client import TransactionCheck

    check = TransactionCheck.from_fields({
        "topic": "t", "commitLogOffset": "77", "tranStateTableOffset": "0", "msgId": "U",
        "transactionId": "U", "offsetMsgId": "AB", "brokerName": "lmq-gateway"})
    assert (check.topic, check.commit_log_offset, check.msg_id, check.broker_name) == (
        "t", 77, "U", "lmq-gateway")
    assert TransactionCheck.from_fields({}).commit_log_offset == 0
