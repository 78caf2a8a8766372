"""JSON bodies: what real clients send, fastjson's dialect, round trips, bad bodies."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import bodies as b
from protocol.remoting.errors import BodyError
from protocol.remoting.route import (
    BrokerData,
    QueueData,
    TopicRouteData,
    wants_standard_json,
)

# What ali-ons' _prepareHeartbeatData and a subscription of "eu || us" produce.
ALI_ONS_HEARTBEAT = json.dumps(
    {
        "clientID": "10.0.0.5@1234",
        "consumerDataSet": [
            {
                "groupName": "GID_orders",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "topic": "orders",
                        "subString": "eu || us",
                        "tagsSet": ["eu", "us"],
                        "codeSet": [3248, 3742],
                        "subVersion": 1700000000000,
                    }
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [{"groupName": "PID_orders"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
    }
).encode()


def test_ali_ons_heartbeat():
    hb = b.HeartbeatData.parse(ALI_ONS_HEARTBEAT)
    assert hb.client_id == "10.0.0.5@1234"
    assert hb.producer_groups == ("PID_orders", "CLIENT_INNER_PRODUCER")
    [consumer] = hb.consumers
    assert consumer.group_name == "GID_orders" and consumer.consume_type == "CONSUME_PASSIVELY"
    [sub] = consumer.subscription_data_set
    assert sub.tags_set == ("eu", "us") and sub.expression_type == "TAG"  # Java's default
    assert b.HeartbeatData.parse(hb.serialize()) == hb


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "bad JSON body"),
        (b"[]", "heartbeat body is not a JSON object"),
        (b'{"producerDataSet":[]}', "heartbeat without a clientID"),
        (b'{"clientID":"c","producerDataSet":{}}', "producerDataSet: not a list"),
        (b'{"clientID":"c","producerDataSet":[1]}', "an element is not an object"),
        (b'{"clientID":"c","consumerDataSet":[{}]}', "consumer data without a groupName"),
        (
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{}]}]}',
            "subscription without a topic",
        ),
        (b'{"clientID":"c","heartbeatFingerprint":"x"}', "heartbeatFingerprint: not an int"),
        (b'{"clientID":"\xff"}', "not UTF-8"),
    ],
)
def test_bad_heartbeats(body, message):
    with pytest.raises(BodyError, match=message):
        b.HeartbeatData.parse(body)


def test_lock_batch_request_and_response():
    body = (
        b'{"consumerGroup":"g","clientId":"c1","onlyThisBroker":true,'
        b'"mqSet":[{"topic":"orders","brokerName":"gw","queueId":2}]}'
    )
    req = b.LockBatchRequestBody.parse(body)
    assert req.mq_set == (b.MessageQueue("orders", "gw", 2),) and req.only_this_broker
    assert b.LockBatchRequestBody.parse(req.serialize()) == req
    resp = b.LockBatchResponseBody(req.mq_set)
    assert json.loads(resp.serialize()) == {
        "lockOKMQSet": [{"brokerName": "gw", "queueId": 2, "topic": "orders"}]
    }
    with pytest.raises(BodyError, match="needs topic, brokerName and queueId"):
        b.LockBatchRequestBody.parse(b'{"consumerGroup":"g","clientId":"c","mqSet":[{}]}')


def test_consumer_list():
    body = b.ConsumerListBody(("a@1", "b@2")).serialize()
    assert body == b'{"consumerIdList":["a@1","b@2"]}'
    assert b.ConsumerListBody.parse(body).consumer_id_list == ("a@1", "b@2")
    with pytest.raises(BodyError, match="not a list of strings"):
        b.ConsumerListBody.parse(b'{"consumerIdList":[1]}')


def test_batch_ack_bitset_is_java_little_endian_base64():
    # Java: BitSet with bits 0, 3 and 9 set -> toByteArray() = [0x09, 0x02].
    body = json.dumps(
        {
            "brokerName": "gw",
            "acks": [
                {
                    "c": "g",
                    "t": "orders",
                    "r": "0",
                    "so": 100,
                    "q": 1,
                    "rq": 0,
                    "pt": 5,
                    "it": 30000,
                    "b": base64.b64encode(bytes([0x09, 0x02])).decode(),
                }
            ],
        }
    ).encode()
    parsed = b.BatchAckMessageRequestBody.parse(body)
    [ack] = parsed.acks
    assert ack.offsets == [100, 103, 109]
    assert b.BatchAckMessageRequestBody.parse(parsed.serialize()) == parsed
    assert json.loads(parsed.serialize())["acks"][0]["b"] == "CQI="
    long_names = body.replace(b'"c"', b'"consumerGroup"').replace(b'"so"', b'"startOffset"')
    assert b.BatchAckMessageRequestBody.parse(long_names) == parsed
    with pytest.raises(BodyError, match="batch ack without so"):
        b.BatchAckMessageRequestBody.parse(body.replace(b'"so"', b'"xx"'))
    with pytest.raises(BodyError, match="not base64"):
        b.BatchAckMessageRequestBody.parse(body.replace(b"CQI=", b"C*I="))


ROUTE = TopicRouteData(
    queue_datas=(QueueData("gw", 4, 4, 6, 0),),
    broker_datas=(BrokerData("lmq", "gw", {0: "127.0.0.1:10911"}),),
)


def test_route_both_dialects():
    fastjson = ROUTE.serialize(standard=False)
    assert fastjson == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"gw",'
        b'"cluster":"lmq","enableActingMaster":false}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"gw","perm":6,"readQueueNums":4,"topicSysFlag":0,'
        b'"writeQueueNums":4}]}'
    )
    standard = ROUTE.serialize()
    assert json.loads(standard)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert TopicRouteData.parse(fastjson) == ROUTE == TopicRouteData.parse(standard)
    assert ROUTE.broker_datas[0].master_addr == "127.0.0.1:10911"
    with pytest.raises(ValueError):
        json.loads(fastjson)  # the reason for the lenient reader


def test_route_standard_escapes_non_ascii_like_browser_compatible():
    route = TopicRouteData(
        (QueueData("zoé", 1, 1),), (BrokerData("ç", "zoé", {1: "h:1", 0: "h:0"}),)
    )
    standard = route.serialize()
    assert standard.isascii() and b'"zo\\u00e9"' in standard
    assert b'{"0":"h:0","1":"h:1"}' in standard  # MapSortField
    assert "zoé".encode() in route.serialize(standard=False)
    assert (
        TopicRouteData.parse(standard)
        == route
        == TopicRouteData.parse(route.serialize(standard=False))
    )


def test_route_dialect_rule():
    assert wants_standard_json(401, None) and wants_standard_json(0, True)
    assert not wants_standard_json(400, False) and not wants_standard_json(121, None)


def test_lenient_reader_leaves_strings_and_arrays_alone():
    text = '{1:"{2:3}", "a":[1, -2, {3:[4]}], -5: "x\\"{6:7}", "b": {}}'
    assert b.loads_lenient(text) == {
        "1": "{2:3}",
        "a": [1, -2, {"3": [4]}],
        "-5": 'x"{6:7}',
        "b": {},
    }
    with pytest.raises(BodyError):
        b.loads_lenient("{-:1}")


@settings(deadline=None)
@given(st.text(max_size=60))
def test_lenient_reader_raises_only_body_error(text):
    try:
        b.loads_lenient(text)
    except BodyError:
        pass


def _containers(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(children, max_size=3) | st.dictionaries(
        st.text(max_size=4), children, max_size=3
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5), _containers, max_leaves=10
)


@settings(deadline=None)
@given(json_values)
def test_lenient_reader_agrees_with_json_on_standard_text(value):
    assert b.loads_lenient(json.dumps(value)) == value
