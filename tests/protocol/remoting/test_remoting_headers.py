"""Typed headers: wire names, required fields, Java's number parsing, pop receipts."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import HeaderError, PullSysFlag, RequestCode, pop
from protocol.remoting import headers as h

SEND_V2 = {
    "a": "pg",
    "b": "orders",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01eu\x02",
    "j": "0",
    "k": "false",
    "l": "16",
    "m": "true",
    "n": "gw",
    # Fields every header ignores: the signature and RpcRequestHeader's.
    "AccessKey": "ak",
    "Signature": "sig",
    "bname": "x",
}


def test_send_v2_single_letters():
    header = h.SendMessageRequestHeader.for_request(RequestCode.SEND_MESSAGE_V2, SEND_V2)
    assert header == h.SendMessageRequestHeader(
        producer_group="pg",
        topic="orders",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="TAGS\x01eu\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
        batch=True,
        broker_name="gw",
    )
    assert header.to_v2_fields() == {k: v for k, v in SEND_V2.items() if len(k) == 1}


def test_send_v1_names_and_batch_code_uses_v2():
    v1 = {
        "producerGroup": "pg",
        "topic": "orders",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "3",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
    }
    header = h.SendMessageRequestHeader.for_request(RequestCode.SEND_MESSAGE, v1)
    assert header.topic == "orders" and header.properties is None and header.batch is None
    assert header.to_fields() == v1
    with pytest.raises(HeaderError, match="missing field a"):
        h.SendMessageRequestHeader.for_request(RequestCode.SEND_BATCH_MESSAGE, v1)


@pytest.mark.parametrize("letter", list("abcdefgh"))
def test_send_v2_required_letters(letter):
    fields = dict(SEND_V2)
    del fields[letter]
    with pytest.raises(HeaderError, match=f"^missing field {letter}$"):
        h.SendMessageRequestHeader.from_v2_fields(fields)


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "1_000", "0x10", "1.0", "++1", "-", "١٢", "abc", "1e3"]
)
def test_ints_parse_like_java(text):
    with pytest.raises(HeaderError, match="^field queueId: not an int$"):
        h.TopicQueueRequestHeader.from_fields({"topic": "t", "queueId": text})


def test_int_ranges_and_signs():
    assert h.TopicQueueRequestHeader.from_fields({"topic": "t", "queueId": "+7"}).queue_id == 7
    assert h.TopicQueueRequestHeader.from_fields({"topic": "t", "queueId": "-1"}).queue_id == -1
    with pytest.raises(HeaderError, match="field queueId: 2147483648 is out of range for an? int"):
        h.TopicQueueRequestHeader.from_fields({"topic": "t", "queueId": "2147483648"})
    big = str(2**63 - 1)
    assert h.OffsetResponseHeader.from_fields({"offset": big}).offset == 2**63 - 1
    with pytest.raises(HeaderError, match="out of range for a long"):
        h.OffsetResponseHeader.from_fields({"offset": str(2**63)})


def test_booleans_never_fail():
    parse = h.GetMaxOffsetRequestHeader.from_fields
    assert parse({"topic": "t", "queueId": "0"}).committed is True  # Java's default
    assert parse({"topic": "t", "queueId": "0", "committed": "TRUE"}).committed is True
    assert parse({"topic": "t", "queueId": "0", "committed": "yes"}).committed is False


def test_pull_header_and_lite_pull_flag():
    fields = {
        "consumerGroup": "g",
        "topic": "orders",
        "queueId": "1",
        "queueOffset": "10",
        "maxMsgNums": "32",
        "sysFlag": str(
            PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION | PullSysFlag.LITE_PULL_MESSAGE
        ),
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subscription": "eu || us",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    header = h.PullMessageRequestHeader.from_fields(fields)
    assert header.suspend and header.lite_pull and header.has_subscription
    assert not header.has_commit_offset
    assert header.to_fields() == fields
    for name in (
        "consumerGroup",
        "topic",
        "queueId",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subVersion",
    ):
        broken = {k: v for k, v in fields.items() if k != name}
        with pytest.raises(HeaderError, match=f"^missing field {name}$"):
            h.PullMessageRequestHeader.from_fields(broken)
    for name in ("subscription", "expressionType"):
        h.PullMessageRequestHeader.from_fields({k: v for k, v in fields.items() if k != name})


HEADER_CLASSES = [
    cls
    for module in (h, pop)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, h.Header) and cls is not h.Header
]


def test_every_header_class_is_listed():
    names = {cls.__name__ for cls in HEADER_CLASSES}
    for expected in (
        "SendMessageRequestHeader",
        "SendMessageResponseHeader",
        "PullMessageRequestHeader",
        "PullMessageResponseHeader",
        "QueryConsumerOffsetRequestHeader",
        "UpdateConsumerOffsetRequestHeader",
        "OffsetResponseHeader",
        "SearchOffsetRequestHeader",
        "TopicQueueRequestHeader",
        "GetMaxOffsetRequestHeader",
        "GetEarliestMsgStoretimeResponseHeader",
        "UnregisterClientRequestHeader",
        "ConsumerGroupRequestHeader",
        "ConsumerSendMsgBackRequestHeader",
        "GetRouteInfoRequestHeader",
        "QueryMessageRequestHeader",
        "QueryMessageResponseHeader",
        "ViewMessageRequestHeader",
        "EndTransactionRequestHeader",
        "CheckTransactionStateRequestHeader",
        "PopMessageRequestHeader",
        "PopMessageResponseHeader",
        "AckMessageRequestHeader",
        "ChangeInvisibleTimeRequestHeader",
        "ChangeInvisibleTimeResponseHeader",
        "PeekMessageRequestHeader",
        "NotificationRequestHeader",
        "NotificationResponseHeader",
        "PollingInfoRequestHeader",
        "PollingInfoResponseHeader",
    ):
        assert expected in names


def _value(kind: str):
    return {
        "str": st.text(max_size=8),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "bool": st.booleans(),
    }[kind]


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
@settings(deadline=None)
@given(data=st.data())
def test_header_round_trip_and_required_fields(cls, data):
    values = {}
    for f in dataclasses.fields(cls):
        strategy = _value(f.metadata["kind"])
        if not f.metadata["req"]:
            strategy = st.none() | strategy
        values[f.name] = data.draw(strategy, label=f.name)
    header = cls(**values)
    wire = header.to_fields()
    assert all(isinstance(v, str) for v in wire.values())
    parsed = cls.from_fields(wire)
    # An absent optional field takes its Java default.
    expected = {
        f.name: (values[f.name] if values[f.name] is not None else f.default)
        for f in dataclasses.fields(cls)
    }
    assert parsed == cls(**expected)
    for f in dataclasses.fields(cls):
        if f.metadata["req"]:
            with pytest.raises(HeaderError, match=f"^missing field {f.metadata['wire']}$"):
                cls.from_fields({k: v for k, v in wire.items() if k != f.metadata["wire"]})


def test_extra_info_build_and_parse():
    info = pop.ExtraInfo.build(100, 1700000000000, 30000, 3, "orders", "gw", 2, 105)
    assert str(info) == "100 1700000000000 30000 3 0 gw 2 105"
    assert pop.ExtraInfo.parse(str(info)) == info
    retry = pop.ExtraInfo.build(1, 2, 3, 999, "%RETRY%g_orders", "gw", 0)
    assert str(retry) == "1 2 3 999 1 gw 0" and retry.is_order
    assert pop.ExtraInfo.build(1, 2, 3, 4, "%RETRY%g+orders", "gw", 0).retry == "2"
    assert pop.real_topic("orders", "g", "1") == "%RETRY%g_orders"
    assert pop.real_topic("orders", "g", "2") == "%RETRY%g+orders"
    assert pop.real_topic("orders", "g", "0") == "orders"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 2 3", "3 parts, expected 7 or 8"),
        ("1 2 3 4 0 gw 5 6 7", "9 parts"),
        ("x 2 3 4 0 gw 5", "field extraInfo ckQueueOffset: not an int"),
        ("1 2 3 4 9 gw 5", "retry marker '9' is not 0, 1 or 2"),
        ("1 2 3 4 0 gw 5 z", "field extraInfo queueOffset: not an int"),
        ("1  3 4 0 gw 5", "field extraInfo popTime: not an int"),
    ],
)
def test_extra_info_errors(text, message):
    with pytest.raises(HeaderError, match=message):
        pop.ExtraInfo.parse(text)


@settings(deadline=None)
@given(st.text(max_size=40))
def test_extra_info_parse_never_raises_anything_else(text):
    try:
        pop.ExtraInfo.parse(text)
    except HeaderError:
        pass


def test_receipts_split_as_java_does():
    # String.split drops trailing empty strings: a trailing space or ';' is harmless.
    info = pop.ExtraInfo.parse("1 2 3 4 0 gw 5 ")
    assert info.queue_id == 5 and info.queue_offset is None
    assert pop.parse_offset_info("0 1 5;") == {"0@1": "5"}
    assert pop.java_split("   ", " ") == [] and pop.java_split("", " ") == [""]
    with pytest.raises(HeaderError, match="popTime: not an int"):
        pop.ExtraInfo.parse("1  3 4 0 gw 5")  # an empty part inside still counts


def test_offset_info_build_and_parse():
    start = pop.build_offset_info([("orders", 1, 100), ("%RETRY%g_orders", 0, 7)])
    assert start == "0 1 100;1 0 7"
    assert pop.parse_offset_info(start) == {"0@1": "100", "1@0": "7"}
    msgs = pop.build_offset_info([("orders", 1, [100, 101, 105])])
    assert msgs == "0 1 100,101,105"
    assert pop.parse_offset_info(None) == {}
    with pytest.raises(HeaderError, match="duplicate"):
        pop.parse_offset_info("0 1 5;0 1 6")
    with pytest.raises(HeaderError, match="expected 3 parts"):
        pop.parse_offset_info("0 1")
