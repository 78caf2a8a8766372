"""protocol/grpc/messages.py: v2 Message <-> RocketMQ properties, bodies, digests and the
proxy's checks, against the official Python client's own message model (what it sends
and how it reads what it gets)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb

from lmq.rocketmq import SYSTEM_PROPERTIES
from protocol.grpc import Code, StatusError
from protocol.grpc.messages import (
    Delivery,
    body_digest,
    decode_message,
    digest_matches,
    duration_ms,
    encode_message,
    inflate,
    message_type_of,
    millis,
    timestamp,
)
from protocol.remoting.messages import decode_properties, encode_properties

MAX = 4 * 1024 * 1024


def sent(body: bytes = b"hello", **system: object) -> pb.Message:
    sysp = pb.SystemProperties(message_id=str(system.pop("message_id", "01ABC")), **system)
    return pb.Message(topic=pb.Resource(name="orders"), body=body, system_properties=sysp)


def decode(msg: pb.Message, max_body: int = MAX, peer: str = "10.1.2.3"):
    return decode_message(msg, reserved=SYSTEM_PROPERTIES, max_body=max_body, peer_host=peer)


def test_send_properties_are_the_remoting_names() -> None:
    msg = sent(tag="TagA", keys=["k1", "k2"], born_timestamp=timestamp(1_700_000_000_000),
               message_type=pb.FIFO, message_group="g1", born_host="producer-host")
    msg.user_properties["color"] = "red"
    out = decode(msg)
    assert out.properties == {
        "color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC",
        "__SHARDINGKEY": "g1", "BORN_HOST": "producer-host",
        "BORN_TIMESTAMP": "1700000000000",
    }
    assert out.born_ms == 1_700_000_000_000
    assert out.message_group == "g1" and out.message_type == pb.FIFO
    assert out.delivery_ms is None
    # without a born host the producer's address is the born host
    assert decode(sent()).properties["BORN_HOST"] == "10.1.2.3"


def test_delay_and_transaction_properties() -> None:
    delay = decode(sent(message_type=pb.DELAY, delivery_timestamp=timestamp(1_700_000_005_000)))
    assert delay.delivery_ms == 1_700_000_005_000
    assert delay.properties["TIMER_DELIVER_MS"] == "1700000005000"
    assert message_type_of(delay.properties) == pb.DELAY
    tx = decode(sent(message_type=pb.TRANSACTION))
    assert tx.properties["TRAN_MSG"] == "true"
    assert message_type_of(tx.properties) == pb.TRANSACTION


@pytest.mark.parametrize("msg,code", [
    (sent(message_id=""), Code.ILLEGAL_MESSAGE_ID),
    (sent(message_id="  "), Code.ILLEGAL_MESSAGE_ID),
    (sent(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    (sent(tag="   "), Code.ILLEGAL_MESSAGE_TAG),
    (sent(tag="a\nb"), Code.ILLEGAL_MESSAGE_TAG),
    (sent(keys=["ok", " "]), Code.ILLEGAL_MESSAGE_KEY),
    (sent(keys=["a\x01"]), Code.ILLEGAL_MESSAGE_KEY),
    # Java's javaIsoControl: U+0000-U+001F and U+007F-U+009F, both ends
    (sent(message_id="01\x00"), Code.ILLEGAL_MESSAGE_ID),
    (sent(message_id="01\x1f"), Code.ILLEGAL_MESSAGE_ID),
    (sent(message_id="01\x7f"), Code.ILLEGAL_MESSAGE_ID),
    (sent(message_id="\x9f01"), Code.ILLEGAL_MESSAGE_ID),
    (sent(message_group="g\x85"), Code.ILLEGAL_MESSAGE_GROUP),
    (sent(message_group="x" * 64), Code.ILLEGAL_MESSAGE_GROUP),
    (sent(message_group=" "), Code.ILLEGAL_MESSAGE_GROUP),
    (sent(body=b"x" * 11), Code.MESSAGE_BODY_TOO_LARGE),
    (sent(body=b"not gzip", body_encoding=pb.GZIP), Code.MESSAGE_CORRUPTED),
    (sent(body=gzip.compress(b"y" * 11), body_encoding=pb.GZIP), Code.MESSAGE_BODY_TOO_LARGE),
    (sent(body=gzip.compress(b"y" * 8)[:-6], body_encoding=pb.GZIP), Code.MESSAGE_CORRUPTED),
    (sent(body=b"abc", body_digest=pb.Digest(type=pb.CRC32, checksum="00000000")),
     Code.MESSAGE_CORRUPTED),
])
def test_send_checks(msg: pb.Message, code: Code) -> None:
    with pytest.raises(StatusError) as err:
        decode(msg, max_body=10)
    assert err.value.code == code


def test_characters_beside_the_control_ranges_are_accepted() -> None:
    for text in ("01\x20", "01~", "01\xa0", "01\u0100", "01\U0001f600"):
        assert decode(sent(message_id=text, tag=f"t{text}")).message_id == text


def test_user_property_checks() -> None:
    for name, value in (("TAGS", "x"), ("UNIQ_KEY", "x"), ("__SHARDINGKEY", "x"),
                        ("mqttSecondTopic", "/a"), ("a\x02", "x"), ("a", "b\x01")):
        msg = sent()
        msg.user_properties[name] = value
        with pytest.raises(StatusError) as err:
            decode(msg)
        assert err.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY, name
    many = sent()
    for i in range(129):
        many.user_properties[f"p{i}"] = "v"
    with pytest.raises(StatusError) as err:
        decode(many)
    assert err.value.code == Code.MESSAGE_PROPERTIES_TOO_LARGE
    big = sent()
    big.user_properties["p"] = "v" * (16 * 1024)
    with pytest.raises(StatusError) as err:
        decode(big)
    assert err.value.code == Code.MESSAGE_PROPERTIES_TOO_LARGE


def test_gzip_body_is_stored_inflated() -> None:
    payload = b"compress me " * 100
    for packed in (gzip.compress(payload), zlib.compress(payload)):
        msg = sent(body=packed, body_encoding=pb.GZIP)
        msg.system_properties.body_digest.CopyFrom(
            pb.Digest(type=pb.MD5, checksum=body_digest(packed, pb.MD5)))
        assert decode(msg).body == payload


def test_inflate_cap() -> None:
    bomb = gzip.compress(b"\0" * 1_000_000)
    with pytest.raises(ValueError, match="more than"):
        inflate(bomb, 1000)
    assert inflate(bomb, 1_000_000) == b"\0" * 1_000_000


def test_digests_as_the_client_computes_them() -> None:
    from rocketmq.v5.util.misc import Misc

    for body in (b"", b"a", b"hello world" * 10, bytes(range(256))):
        assert body_digest(body) == Misc.crc32_checksum(body)
        assert body_digest(body, pb.MD5) == Misc.md5_checksum(body)
        assert body_digest(body, pb.SHA1) == Misc.sha1_checksum(body)
    assert body_digest(b"\xff" * 3) == format(zlib.crc32(b"\xff" * 3), "08X")


def test_producer_crc32_digests_in_every_client_format() -> None:
    # Python writes 8 hex digits, Java hex without leading zeros, Node decimal
    body = next(b for b in (bytes([i]) * 3 for i in range(256)) if zlib.crc32(b) < 1 << 28)
    value = zlib.crc32(body)
    for text in (format(value, "08X"), format(value, "X"), format(value, "x"), str(value)):
        assert digest_matches(body, pb.CRC32, text), text
        decode_message(sent(body=body, body_digest=pb.Digest(type=pb.CRC32, checksum=text)),
                       reserved=SYSTEM_PROPERTIES, max_body=MAX)
    for text in (format(value + 1, "08X"), str(value + 1), "not a number", ""):
        assert not digest_matches(body, pb.CRC32, text), text
    md5 = body_digest(body, pb.MD5)
    assert digest_matches(body, pb.MD5, md5.lower()) and not digest_matches(body, pb.MD5, "00")


def delivery(props: dict[str, str], **kw: object) -> Delivery:
    base = dict(topic="orders", body=b"payload", properties=props,
                fallback_message_id="0A0000010000000000000042", born_ms=1_700_000_000_123,
                store_ms=1_700_000_000_456, queue_id=3, queue_offset=17,
                store_host="10.0.0.1:8081", receipt_handle="1 2 3 0 0 b 3 17",
                delivery_attempt=2, invisible_ms=30_000)
    base.update(kw)
    return Delivery(**base)  # type: ignore[arg-type]


def test_delivery_reads_in_the_official_client() -> None:
    from rocketmq.v5.model.message import Message as ClientMessage

    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01XYZ", "__SHARDINGKEY": "g1",
             "BORN_HOST": "producer", "color": "red", "PGROUP": "orders", "rmq.x": "1"}
    reserved = SYSTEM_PROPERTIES | {"rmq.x"}
    out = encode_message(delivery(props), reserved=reserved, max_body=MAX)
    view = ClientMessage().fromProtobuf(out)
    assert not view.corrupted
    assert view.body == b"payload"
    assert view.message_id == "01XYZ"
    assert view.tag == "TagA" and set(view.keys) == {"k1", "k2"}
    assert view.message_group == "g1"
    assert view.delivery_attempt == 2
    assert view.receipt_handle == "1 2 3 0 0 b 3 17"
    assert view.born_timestamp == 1_700_000_000_123
    assert view.properties == {"color": "red"}
    sysp = out.system_properties
    assert sysp.message_type == pb.FIFO
    assert sysp.queue_id == 3 and sysp.queue_offset == 17
    assert millis(sysp.store_timestamp) == 1_700_000_000_456
    assert sysp.born_host == "producer" and sysp.store_host == "10.0.0.1:8081"
    assert duration_ms(sysp.invisible_duration) == 30_000
    assert sysp.body_encoding == pb.IDENTITY
    assert sysp.body_digest.type == pb.MD5
    assert sysp.body_digest.checksum == body_digest(b"payload", pb.MD5)


def test_delivery_without_client_id_or_born_time() -> None:
    out = encode_message(delivery({}, born_ms=0, receipt_handle=None, invisible_ms=None,
                                  delivery_attempt=0),
                         reserved=SYSTEM_PROPERTIES, max_body=MAX)
    sysp = out.system_properties
    assert sysp.message_id == "0A0000010000000000000042"
    assert millis(sysp.born_timestamp) == 1_700_000_000_456
    assert not sysp.HasField("receipt_handle") and not sysp.HasField("tag")
    assert sysp.delivery_attempt == 1
    assert sysp.message_type == pb.NORMAL


def test_delivery_written_into_a_response_is_the_same_message() -> None:
    from rocketmq.grpc_protocol import service_pb2 as svc

    for d in (delivery({"TAGS": "t", "KEYS": "a b", "color": "red"}),
              delivery({}, born_ms=0, receipt_handle=None, invisible_ms=None)):
        alone = encode_message(d, reserved=SYSTEM_PROPERTIES, max_body=MAX)
        response = svc.ReceiveMessageResponse()
        written = encode_message(d, reserved=SYSTEM_PROPERTIES, max_body=MAX,
                                 into=response.message)
        assert written == alone and response.message == alone
        assert response.SerializeToString() == svc.ReceiveMessageResponse(
            message=alone).SerializeToString()


def test_compressed_record_is_delivered_inflated() -> None:
    from rocketmq.v5.model.message import Message as ClientMessage

    plain = b"remoting compressed this " * 20
    out = encode_message(delivery({}, body=zlib.compress(plain), compressed=True),
                         reserved=SYSTEM_PROPERTIES, max_body=MAX)
    assert out.system_properties.body_encoding == pb.IDENTITY and out.body == plain
    # undecodable compressed data goes as stored, flagged GZIP (as the proxy sends it)
    raw = encode_message(delivery({}, body=b"lz4 stuff", compressed=True),
                         reserved=SYSTEM_PROPERTIES, max_body=MAX)
    assert raw.system_properties.body_encoding == pb.GZIP and raw.body == b"lz4 stuff"
    assert not ClientMessage().fromProtobuf(out).corrupted


names = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="|"),
                min_size=1, max_size=12)
values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFFFF,
                               exclude_categories=("Cs", "Cc")), max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=300),
    tag=st.one_of(st.just(""), names),
    keys=st.lists(names, max_size=3),
    users=st.dictionaries(names.filter(lambda n: n not in SYSTEM_PROPERTIES), values,
                          max_size=5),
    group=st.one_of(st.just(""), names),
    gz=st.booleans(),
)
def test_round_trip(body: bytes, tag: str, keys: list[str], users: dict[str, str],
                    group: str, gz: bool) -> None:
    """What a producer sends is what a consumer gets: body, tag, keys, group, id and
    user properties (the empty values a properties string cannot carry aside)."""
    msg = sent(body=gzip.compress(body) if gz else body, tag=tag, keys=keys,
               message_group=group, body_encoding=pb.GZIP if gz else pb.IDENTITY,
               message_id="ID-1")
    for k, v in users.items():
        msg.user_properties[k] = v
    incoming = decode(msg)
    assert incoming.body == body
    # stored as the RocketMQ properties string, read back from it
    stored = decode_properties(encode_properties(incoming.properties))
    out = encode_message(delivery(stored, body=incoming.body),
                         reserved=SYSTEM_PROPERTIES, max_body=MAX)
    sysp = out.system_properties
    assert out.body == body and sysp.body_digest.checksum == body_digest(body, pb.MD5)
    assert sysp.message_id == "ID-1"
    assert sysp.tag == tag and sysp.HasField("tag") == bool(tag)
    assert list(sysp.keys) == keys
    assert sysp.message_group == group
    assert dict(out.user_properties) == {k: v for k, v in users.items() if v}
