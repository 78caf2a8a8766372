"""The front end's fast writers write the codec's bytes: the stored-message writer
(gateway/remoting/stored.py) against protocol.remoting.messages for IPv4, IPv6 and
IPv4-mapped hosts, compressed flags, long topics and odd properties, and the send
response template against RemotingCommand.encode; and the front end's record <->
properties mapping."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Message, MessageStore, Protocol, Record, RecordType, StoreConfig
from broker_core.record import RawMessage
from gateway.remoting.messages import (
    encode_record,
    rocketmq_properties,
    to_store_message,
    write_raw,
    write_record,
)
from gateway.remoting.replies import encode_send_ok
from gateway.remoting.stored import encode_stored, pack_host, topic_field
from gateway.user_properties import encode_user_properties
from protocol.remoting import RemotingCommand
from protocol.remoting.codes import LanguageCode
from protocol.remoting.command import RESPONSE_FLAG, SERVER_VERSION
from protocol.remoting.messages import (
    StoredMessage,
    decode_properties,
    decode_stored,
    encode_properties,
)
from protocol.remoting.messages import encode_stored as codec_encode

HOSTS = [("127.0.0.1", 8080), ("10.1.2.3", 1), ("::1", 10911), ("2001:db8::7", 65535)]


def _fmt(host: tuple[str, int]) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


@given(
    born=st.sampled_from(HOSTS), store=st.sampled_from(HOSTS),
    topic=st.text(st.sampled_from("abcXYZ09_-%"), min_size=1, max_size=200),
    body=st.binary(max_size=300),
    props=st.dictionaries(st.text(st.sampled_from("ABCkey_"), min_size=1, max_size=8),
                          st.text(st.characters(blacklist_characters="\x01\x02",
                                                blacklist_categories=("Cs",)),
                                  min_size=1, max_size=20), max_size=5),
    sys_flag=st.sampled_from([0, 1, 0x301, 0x80]),
    ints=st.tuples(st.integers(0, 2**31 - 1), st.integers(-5, 2**31 - 1),
                   st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**45),
                   st.integers(0, 2**45), st.integers(0, 100)),
)
def test_writer_matches_the_codec(born, store, topic, body, props, sys_flag, ints) -> None:
    queue_id, flag, queue_offset, physical, born_ms, store_ms, reconsume = ints
    text = encode_properties(props)
    out = bytearray()
    encode_stored(
        out, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        physical_offset=physical, sys_flag=sys_flag, born_ms=born_ms,
        born_host=pack_host(_fmt(born)), store_ms=store_ms, store_host=pack_host(_fmt(store)),
        reconsume_times=reconsume, body=body, topic=topic, properties=text)
    expected = codec_encode(StoredMessage(
        topic=topic, body=body, properties=props, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, commit_log_offset=physical, sys_flag=sys_flag,
        born_timestamp=born_ms, born_host=born, store_timestamp=store_ms,
        store_host=store, reconsume_times=reconsume))
    assert bytes(out) == expected
    (decoded,) = decode_stored(bytes(out), decompress=False, check_crc=True)
    assert decoded.properties == props and decoded.topic == topic


def test_ipv4_mapped_and_unparseable_hosts() -> None:
    assert pack_host("[::ffff:10.0.0.1]:5") == pack_host("10.0.0.1:5")
    assert pack_host("not-an-ip:80") == (bytes(8), False)
    out = bytearray()
    with pytest.raises(ValueError):
        encode_stored(out, queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
                      born_ms=0, born_host=pack_host("1.2.3.4:1"), store_ms=0,
                      store_host=pack_host("1.2.3.4:1"), reconsume_times=0, body=b"",
                      topic="t", properties="k\x01" + "v" * 40000 + "\x02")


def _record(message, protocol=Protocol.INTERNAL) -> Record:
    return Record(position=0, size=0, type=RecordType.MESSAGE, protocol=protocol, qos=1,
                  retain=False, store_ms=1, born_ms=1, origin="", topic=message.topic,
                  tag=message.tag, properties=dict(message.properties or {}),
                  body=message.body, dispatch=())


def test_record_mapping() -> None:
    text = encode_properties({"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "U",
                              "mqttSecondTopic": "/eu/42", "color": "red"})
    message = to_store_message("orders", b"b", text, decode_properties(text), sys_flag=1)
    assert message.topic == "orders/eu/42" and message.tag == "A"
    assert message.properties["KEYS"] == b"k1 k2" and message.properties["UNIQ_KEY"] == b"U"
    assert message.properties["rmq.sysflag"] == b"1"
    assert rocketmq_properties(_record(message)) == text  # as sent
    # an MQTT record: user properties, tag and second topic
    mqtt = _record(to_store_message("x", b"", "", {}))
    mqtt.topic, mqtt.tag = "orders/us/7", "T"
    mqtt.properties = {"user_properties": encode_user_properties([("size", "XL")])}
    assert decode_properties(rocketmq_properties(mqtt)) == {
        "size": "XL", "TAGS": "T", "mqttSecondTopic": "/us/7"}
    # an AMQP record: its routing key mapped to MQTT
    amqp = _record(to_store_message("x", b"", "", {}), Protocol.AMQP)
    amqp.topic, amqp.properties = "orders.eu.42", {}
    assert decode_properties(rocketmq_properties(amqp)) == {"mqttSecondTopic": "/eu/42"}


@given(opaque=st.integers(-(2**31), 2**31 - 1), queue_id=st.integers(0, 1023),
       offset=st.integers(0, 2**62), position=st.integers(0, 2**62))
def test_send_response_template_matches_the_codec(opaque, queue_id, offset, position) -> None:
    msg_id = f"7F00000100001F90{position:016X}"
    expected = RemotingCommand(
        0, opaque, RESPONSE_FLAG, LanguageCode.JAVA, SERVER_VERSION, None,
        {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(offset)}).encode()
    assert encode_send_ok(opaque, msg_id, queue_id, offset) == expected


# -- the pull path: records read undecoded (store.pull_raw + write_raw) and decoded
# (hot tail, store.pull + write_record) write the codec's bytes --------------------------

_words = st.text(st.sampled_from("abcxyz019_-"), min_size=1, max_size=6)
_values = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                  min_size=1, max_size=12)
_origins = st.sampled_from(["rocketmq", "mqtt", "amqp", "amqp-key", "internal"])
_lmq_names = itertools.count()


def _expected(kind, rmq, tag, user, first, rest, born_host):
    """(properties, sysFlag, flag, reconsume, born host) a consumer must get, worked out
    here from what was sent (not with the front end's mapping)."""
    if kind == "rocketmq":
        return rmq["props"], rmq["sys_flag"], rmq["flag"], rmq["reconsume"], born_host
    props = dict(user)
    if tag:
        props["TAGS"] = tag
    if rest:
        props["mqttSecondTopic"] = "/" + "/".join(rest)
    return props, 0, 0, 0, None


def _message(kind, rmq, tag, user, first, rest, body, born_ms, born_host):
    if kind == "rocketmq":
        props = dict(rmq["props"])
        if rest:
            props["mqttSecondTopic"] = "/" + "/".join(rest)
        rmq["props"] = props
        text = encode_properties(props)
        return to_store_message(
            first, body, text, decode_properties(text), origin="pg", born_ms=born_ms,
            sys_flag=rmq["sys_flag"], flag=rmq["flag"], reconsume_times=rmq["reconsume"],
            born_host=_fmt(born_host) if born_host else "")
    stored = {"user_properties": encode_user_properties(list(user.items()))} if user else {}
    name = "/".join([first, *rest])
    protocol = {"mqtt": Protocol.MQTT, "internal": Protocol.INTERNAL}.get(kind, Protocol.AMQP)
    if kind == "amqp":
        name = name.replace("/", ".")  # an AMQP record's topic is its routing key
    elif kind == "amqp-key":
        stored["amqp.routing_key"] = name.replace("/", ".").encode()
        name = "ignored.when.the.key.is.there"
    return Message(name, body, properties=stored, tag=tag, qos=1, protocol=protocol,
                   born_ms=born_ms)


@pytest.fixture(scope="module")
def pull_store(tmp_path_factory):
    with MessageStore.open(tmp_path_factory.mktemp("pull") / "data", StoreConfig()) as store:
        yield store


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=_origins,
    rmq=st.fixed_dictionaries({
        "props": st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "color"]),
                                 _values, max_size=4),
        "sys_flag": st.sampled_from([0, 1, 0x301, 0x80, 0x10]),
        "flag": st.integers(-5, 2**31 - 1), "reconsume": st.integers(0, 20)}),
    tag=st.one_of(st.just(""), _words), user=st.dictionaries(_words, _values, max_size=3),
    first=_words, rest=st.lists(_words, max_size=3), body=st.binary(max_size=300),
    born_ms=st.sampled_from([0, 1, 1_700_000_000_123]),
    born_host=st.sampled_from([None, *HOSTS]), store_host=st.sampled_from(HOSTS),
    topic=st.sampled_from(["orders", "%RETRY%g", "t" * 127, "L" * 128, "x" * 300]),
    queue_id=st.integers(0, 1023), n=st.integers(1, 3),
)
def test_pulled_records_match_the_codec(pull_store, kind, rmq, tag, user, first, rest, body,
                                        born_ms, born_host, store_host, topic, queue_id, n):
    """Every way PULL_MESSAGE writes a record (read undecoded from the log, decoded from
    the log, from the hot tail) gives the bytes of the codec's ``encode_stored`` for
    what was sent: RocketMQ sends with properties, flags, reconsume times, IPv4/IPv6
    born hosts; MQTT, AMQP and internal records with user properties, tags and second
    topics; V1 and V2 magic; several records per pull."""
    store = pull_store
    lmq = f"q{next(_lmq_names)}"
    message = _message(kind, rmq, tag, user, first, rest, body, born_ms, born_host)
    hot = n == 2
    remove = store.add_listener(lmq, lambda *_: None) if hot else None
    results = store.append_batch([(message, [lmq])] * n)
    props, sys_flag, flag, reconsume, born = _expected(kind, rmq, tag, user, first, rest,
                                                      born_host)
    host = pack_host(_fmt(store_host))
    expected = b"".join(codec_encode(StoredMessage(
        topic=topic, body=body, properties=props, queue_id=queue_id, flag=flag,
        queue_offset=i, commit_log_offset=r.position, sys_flag=sys_flag,
        born_timestamp=born_ms or r.store_ms, born_host=born or store_host,
        store_timestamp=r.store_ms, store_host=store_host, reconsume_times=reconsume))
        for i, r in enumerate(results))
    field = topic_field(topic)
    raw_out = bytearray()
    pulled = store.pull_raw(lmq, 0, 10).messages
    assert len(pulled) == n
    for m in pulled:
        if isinstance(m, RawMessage):
            write_raw(raw_out, m, field, queue_id, host)
        else:
            write_record(raw_out, m.record, field, queue_id, m.offset, host)
    assert all(isinstance(m, RawMessage) for m in pulled) != hot
    decoded_out = bytearray()
    for m in store.pull(lmq, 0, 10).messages:
        encode_record(decoded_out, m.record, topic=topic, queue_id=queue_id,
                      queue_offset=m.offset, store_host=host)
    assert bytes(raw_out) == expected
    assert bytes(decoded_out) == expected
    if remove is not None:
        remove()


def test_a_record_whose_properties_do_not_fit_is_refused_by_every_writer(tmp_path) -> None:
    text = "k\x01" + "v" * 40000 + "\x02"
    message = to_store_message("t", b"b", text, decode_properties(text))
    with MessageStore.open(tmp_path / "data", StoreConfig()) as store:
        store.append(message, ["q"])
        (raw,) = store.pull_raw("q", 0).messages
        with pytest.raises(ValueError, match="exceed"):
            write_raw(bytearray(), raw, topic_field("t"), 0, pack_host("1.2.3.4:1"))
        (decoded,) = store.pull("q", 0).messages
        with pytest.raises(ValueError, match="exceed"):
            write_record(bytearray(), decoded.record, topic_field("t"), 0, 0,
                         pack_host("1.2.3.4:1"))
