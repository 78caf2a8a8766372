"""The Aliyun MQ HTTP API with the real PyPI ``mq-http-sdk`` (unchanged) over loopback:
publish, consume with long polling, ack, tag filters, ordered consume, delayed and
transactional messages, namespaces, signatures, forged handles, and MQTT on the other
side."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_producer import TopicMessage

from broker_core import StoreConfig
from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule

from .aliyun_support import AliyunGateway, aliyun_gateway

INSTANCE = ""


@pytest.fixture
def ali(tmp_path: Path) -> Iterator[AliyunGateway]:
    store = StoreConfig(txn_first_check_ms=500, txn_check_interval_ms=1000)
    with aliyun_gateway(tmp_path / "data", aliyun_invisible_seconds=2, store=store) as gw:
        yield gw


def client(gw: AliyunGateway, ak: str = "ak", sk: str = "sk") -> MQClient:
    """An SDK client, its keep-alive connection closed when the gateway stops."""
    c = MQClient(gw.endpoint, ak, sk)
    gw.on_stop.append(c.close_connection)
    return c


def consume_all(consumer, want: int, wait: int = 2, orderly: bool = False) -> list:
    got: list = []
    deadline = time.monotonic() + 10
    while len(got) < want and time.monotonic() < deadline:
        try:
            if orderly:
                got += consumer.consume_message_orderly(16, wait)
            else:
                got += consumer.consume_message(16, wait)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
    return got


def test_publish_consume_ack_and_empty_is_message_not_exist(ali: AliyunGateway) -> None:
    c = client(ali)
    producer = c.get_producer(INSTANCE, "orders")
    sent = []
    for i in range(3):
        msg = TopicMessage(f"body-{i}", "tagA")
        msg.set_message_key(f"key-{i}")
        msg.put_property("color", "red")
        sent.append(producer.publish_message(msg))
    assert all(s.message_id and len(s.message_body_md5) == 32 for s in sent)
    consumer = c.get_consumer(INSTANCE, "orders", "GID_a")
    got = consume_all(consumer, 3)
    assert sorted(m.message_body for m in got) == ["body-0", "body-1", "body-2"]
    assert {m.message_id for m in got} == {s.message_id for s in sent}
    for m in got:
        assert m.message_tag == "tagA"
        assert m.get_property("color") == "red"
        assert m.get_message_key().startswith("key-")
        assert m.consumed_times == 1
        assert m.next_consume_time > m.first_consume_time
    consumer.ack_message([m.receipt_handle for m in got])
    with pytest.raises(MQServerException) as err:
        consumer.consume_message(16, 1)
    assert err.value.type == "MessageNotExist"
    assert err.value.req_id
    # an acked handle acks nothing twice: a per-handle error
    with pytest.raises(MQServerException) as err:
        consumer.ack_message([got[0].receipt_handle])
    assert err.value.sub_errors[0]["ErrorCode"] == "MessageNotExist"


def test_long_poll_wakes_on_publish(ali: AliyunGateway) -> None:
    c = client(ali)
    consumer = c.get_consumer(INSTANCE, "lp", "GID_lp")
    with pytest.raises(MQServerException):
        consumer.consume_message(1, 0)  # creates the topic and group, nothing there
    result: list = []

    def poll() -> None:
        result.extend(consumer.consume_message(1, 10))

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)  # let the poll be suspended first
    client(ali).get_producer(INSTANCE, "lp").publish_message(TopicMessage("late", ""))
    t.join(15)
    assert [m.message_body for m in result] == ["late"]


def test_unacked_comes_back_after_invisible_time(ali: AliyunGateway) -> None:
    c = client(ali)
    c.get_producer(INSTANCE, "redo").publish_message(TopicMessage("again", ""))
    consumer = c.get_consumer(INSTANCE, "redo", "GID_r")
    first = consume_all(consumer, 1)
    assert first[0].consumed_times == 1
    second = consume_all(consumer, 1, wait=5)  # invisible for 2 s, then back
    assert second[0].message_id == first[0].message_id
    assert second[0].consumed_times == 2
    # the first handle is stale now
    with pytest.raises(MQServerException) as err:
        consumer.ack_message([first[0].receipt_handle])
    assert err.value.sub_errors[0]["ErrorCode"] == "MessageNotExist"
    consumer.ack_message([second[0].receipt_handle])


def test_tag_filter(ali: AliyunGateway) -> None:
    c = client(ali)
    producer = c.get_producer(INSTANCE, "tags")
    for tag in ("a", "b", "c", "a"):
        producer.publish_message(TopicMessage(f"m-{tag}", tag))
    consumer = c.get_consumer(INSTANCE, "tags", "GID_t", "a||c")
    got = consume_all(consumer, 3)
    assert sorted(m.message_tag for m in got) == ["a", "a", "c"]


def test_ordered_consume_by_sharding_key(ali: AliyunGateway) -> None:
    c = client(ali)
    producer = c.get_producer(INSTANCE, "fifo")
    for i in range(6):
        msg = TopicMessage(f"{i % 2}-{i}", "")
        msg.set_sharding_key(f"k{i % 2}")
        producer.publish_message(msg)
    consumer = c.get_consumer(INSTANCE, "fifo", "GID_o")
    seen: dict[str, list[str]] = {"k0": [], "k1": []}
    deadline = time.monotonic() + 15
    while sum(map(len, seen.values())) < 6 and time.monotonic() < deadline:
        try:
            batch = consumer.consume_message_orderly(16, 1)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
            continue
        for m in batch:
            seen[m.get_sharding_key()].append(m.message_body)
        consumer.ack_message([m.receipt_handle for m in batch])
    assert seen == {"k0": ["0-0", "0-2", "0-4"], "k1": ["1-1", "1-3", "1-5"]}


def test_delayed_message_not_before_its_time(ali: AliyunGateway) -> None:
    c = client(ali)
    deliver_at = int(time.time() * 1000) + 1500
    msg = TopicMessage("later", "")
    msg.set_start_deliver_time(deliver_at)
    c.get_producer(INSTANCE, "delays").publish_message(msg)
    consumer = c.get_consumer(INSTANCE, "delays", "GID_d")
    with pytest.raises(MQServerException):
        consumer.consume_message(1, 0)
    got = consume_all(consumer, 1, wait=5)
    assert got[0].message_body == "later"
    assert got[0].first_consume_time >= deliver_at
    assert got[0].get_start_deliver_time() == deliver_at


def test_transaction_commit_rollback_and_half_polling(ali: AliyunGateway) -> None:
    c = client(ali)
    trans = c.get_trans_producer(INSTANCE, "txn", "GID_p")
    consumer = c.get_consumer(INSTANCE, "txn", "GID_c")
    with pytest.raises(MQServerException):
        consumer.consume_message(1, 0)

    def half(body: str):
        msg = TopicMessage(body, "")
        msg.set_trans_check_immunity_time(1)
        sent = trans.publish_message(msg)
        assert sent.receipt_handle
        return sent

    committed = half("commit-me")
    rolled = half("roll-me-back")
    with pytest.raises(MQServerException):
        consumer.consume_message(16, 0)  # halves are invisible
    trans.commit(committed.receipt_handle)
    trans.rollback(rolled.receipt_handle)
    got = consume_all(consumer, 1)
    assert [m.message_body for m in got] == ["commit-me"]
    consumer.ack_message([got[0].receipt_handle])
    # a rolled-back half cannot be committed
    with pytest.raises(MQServerException) as err:
        trans.commit(rolled.receipt_handle)
    assert err.value.sub_errors[0]["ErrorCode"] == "MessageNotExist"
    # an unresolved half is handed to the producer group's poll once its check is due
    pending = half("decide-later")
    polled = []
    deadline = time.monotonic() + 15
    while not polled and time.monotonic() < deadline:
        try:
            polled = trans.consume_half_message(1, 3)
        except MQServerException as exc:
            assert exc.type == "MessageNotExist"
    assert [m.message_body for m in polled] == ["decide-later"]
    assert polled[0].message_id == pending.message_id
    trans.commit(polled[0].receipt_handle)
    got = consume_all(consumer, 1)
    assert [m.message_body for m in got] == ["decide-later"]


def test_namespaces_separate_topics(ali: AliyunGateway) -> None:
    c = client(ali)
    c.get_producer("INST1", "shared").publish_message(TopicMessage("in-1", ""))
    c.get_producer("INST2", "shared").publish_message(TopicMessage("in-2", ""))
    got1 = consume_all(c.get_consumer("INST1", "shared", "GID"), 1)
    got2 = consume_all(c.get_consumer("INST2", "shared", "GID"), 1)
    assert [m.message_body for m in got1] == ["in-1"]
    assert [m.message_body for m in got2] == ["in-2"]
    assert ali.gw.run(lambda: ali.gw.gateway.ctx.rocketmq_topics.get("INST1%shared")) is not None


def test_forged_or_foreign_handles_are_refused(ali: AliyunGateway) -> None:
    c = client(ali)
    c.get_producer(INSTANCE, "forge").publish_message(TopicMessage("x", ""))
    consumer = c.get_consumer(INSTANCE, "forge", "GID_f")
    got = consume_all(consumer, 1)
    handle = got[0].receipt_handle
    payload, _, tag = handle.partition(".")
    forged = payload + "." + ("A" if tag[0] != "A" else "B") + tag[1:]
    other_group = c.get_consumer(INSTANCE, "forge", "GID_other")
    for bad, who in ((forged, consumer), ("garbage", consumer), (handle, other_group)):
        with pytest.raises(MQServerException) as err:
            who.ack_message([bad])
        assert err.value.sub_errors[0]["ErrorCode"] == "ReceiptHandleError"
    consumer.ack_message([handle])  # still good after the refusals


def test_handle_acks_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with aliyun_gateway(data) as gw:
        c = client(gw)
        c.get_producer(INSTANCE, "durable").publish_message(TopicMessage("keep", ""))
        got = consume_all(c.get_consumer(INSTANCE, "durable", "GID"), 1)
    with aliyun_gateway(data) as gw:
        consumer = client(gw).get_consumer(INSTANCE, "durable", "GID")
        consumer.ack_message([got[0].receipt_handle])
        with pytest.raises(MQServerException) as err:
            consumer.consume_message(1, 0)
        assert err.value.type == "MessageNotExist"


def test_signatures_with_a_users_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("both allowed/#"))
    db.save(data / "users.json")
    with aliyun_gateway(data) as gw:
        good = client(gw, "AK_app", "secret-app")
        good.get_producer(INSTANCE, "allowed").publish_message(TopicMessage("ok", ""))
        assert consume_all(good.get_consumer(INSTANCE, "allowed", "GID"), 1)
        for ak, sk in (("AK_app", "wrong"), ("AK_nobody", "secret-app")):
            with pytest.raises(MQServerException) as err:
                client(gw, ak, sk).get_producer(INSTANCE, "allowed").publish_message(
                    TopicMessage("no", ""))
            assert err.value.type == "SignatureDoesNotMatch"
        with pytest.raises(MQServerException) as err:
            good.get_producer(INSTANCE, "secret").publish_message(TopicMessage("no", ""))
        assert err.value.type == "AccessDenied"
        with pytest.raises(MQServerException) as err:
            good.get_consumer(INSTANCE, "secret", "GID").consume_message(1, 0)
        assert err.value.type == "AccessDenied"


def test_bad_arguments_and_bodies(ali: AliyunGateway) -> None:
    import http.client

    c = client(ali)
    consumer = c.get_consumer(INSTANCE, "bad", "GID_b")
    for batch, wait in ((17, 1), (0, 1), (1, 31)):
        with pytest.raises(MQServerException) as err:
            consumer.consume_message(batch, wait)
        assert err.value.type == "InvalidArgument"
    host = ali.endpoint.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=10)
    try:
        for body in (b"<Message><MessageBody>x</Message>", b"<Other/>",
                     b'<!DOCTYPE m [<!ENTITY a "b">]><Message><MessageBody>&a;</MessageBody>'
                     b"</Message>"):
            conn.request("POST", "/topics/bad/messages", body,
                         {"Content-Type": "text/xml;charset=UTF-8"})
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 400
            assert b"<Code>MalformedXML</Code>" in data
            assert resp.getheader("x-mq-request-id")
        conn.request("POST", "/topics/bad/messages",
                      b"<Message><MessageBody>x</MessageBody><Properties>a:b:c|</Properties>"
                      b"</Message>", {"Content-Type": "text/xml"})
        resp = conn.getresponse()
        assert resp.status == 400 and b"InvalidArgument" in resp.read()
        # a Content-MD5 (the Node SDK's, signed) must match the body
        conn.request("POST", "/topics/bad/messages",
                     b"<Message><MessageBody>x</MessageBody></Message>",
                     {"Content-Type": "text/xml", "Content-MD5": "bm90IHRoZSBtZDU="})
        resp = conn.getresponse()
        assert resp.status == 400 and b"Content-MD5" in resp.read()
    finally:
        conn.close()
    with pytest.raises(MQServerException) as err:
        consumer.consume_message(1, 0)
    assert err.value.type == "MessageNotExist"  # nothing was stored


def test_configured_handle_key(tmp_path: Path) -> None:
    """A handle signed with the configured ``aliyun_handle_key`` acks on a gateway
    configured with the same key (another node, or this one restarted), and is refused
    by one with another key."""
    data = tmp_path / "data"
    key = "cluster-wide-handle-key"
    with aliyun_gateway(data, aliyun_handle_key=key, aliyun_invisible_seconds=60) as gw:
        c = client(gw)
        c.get_producer(INSTANCE, "keyed").publish_message(TopicMessage("a", ""))
        c.get_producer(INSTANCE, "keyed").publish_message(TopicMessage("b", ""))
        got = consume_all(c.get_consumer(INSTANCE, "keyed", "GID"), 2)
    with aliyun_gateway(data, aliyun_handle_key="another-key-entirely") as gw:
        with pytest.raises(MQServerException) as err:
            client(gw).get_consumer(INSTANCE, "keyed", "GID").ack_message(
                [got[0].receipt_handle])
        assert err.value.sub_errors[0]["ErrorCode"] == "ReceiptHandleError"
    with aliyun_gateway(data, aliyun_handle_key=key) as gw:
        client(gw).get_consumer(INSTANCE, "keyed", "GID").ack_message(
            [m.receipt_handle for m in got])
