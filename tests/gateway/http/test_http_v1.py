"""The JSON API under /v1/ with real clients over real sockets (requests, curl, the
sseclient-py SSE client, paho for MQTT), each response checked against the OpenAPI
document the gateway serves (itself validated as OpenAPI 3.1)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import sseclient
from openapi_spec_validator import validate

from gateway.config import AUTO

from ..amqp_support import ThreadGateway
from ..mqtt_clients import Paho

BOUND = 10.0


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[ThreadGateway]:
    gateway = ThreadGateway(tmp_path / "data", http_port=AUTO).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def base(gw: ThreadGateway) -> str:
    assert gw.gateway is not None
    listener = gw.gateway.listener("http")
    assert listener is not None
    return f"http://127.0.0.1:{listener.port}"


class Api:
    """requests with a keep-alive session; every response checked against the
    OpenAPI document (its status must be documented, its body valid)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.spec = self.session.get(f"{url}/v1/openapi.json", timeout=BOUND).json()
        validate(self.spec)

    def call(self, method: str, path: str, template: str, **kwargs: Any) -> requests.Response:
        resp = self.session.request(method, self.url + path, timeout=BOUND, **kwargs)
        op = self.spec["paths"][template][method.lower()]
        documented = op["responses"].get(str(resp.status_code))
        assert documented is not None, (resp.status_code, resp.text)
        ctype = resp.headers["Content-Type"].split(";")[0]
        schema = documented["content"][ctype]["schema"]
        resolver = {**schema, "components": self.spec["components"]}
        jsonschema.validate(resp.json(), resolver)
        return resp

    def publish(self, topic: str, doc: object, **kwargs: Any) -> requests.Response:
        return self.call("POST", f"/v1/topics/{topic}/messages", "/v1/topics/{topic}/messages",
                         json=doc, **kwargs)

    def receive(self, group: str, topic: str, **doc: Any) -> list[dict[str, Any]]:
        resp = self.call("POST", f"/v1/groups/{group}/topics/{topic}/receive",
                         "/v1/groups/{group}/topics/{topic}/receive", json=doc)
        assert resp.status_code == 200
        return resp.json()["messages"]

    def settle(self, group: str, what: str, handles: list[str], **doc: Any
               ) -> requests.Response:
        return self.call("POST", f"/v1/groups/{group}/{what}", f"/v1/groups/{{group}}/{what}",
                         json={"receipt_handles": handles, **doc})


def test_publish_receive_ack(gw):
    api = Api(base(gw))
    resp = api.publish("orders", {"body": "hello", "tag": "eu", "keys": ["k1", "k2"],
                                  "properties": {"region": "eu"}})
    assert resp.status_code == 201
    sent = resp.json()
    assert sent["topic"] == "orders" and len(sent["message_id"]) == 32

    got = api.receive("g1", "orders", max_messages=4, wait_seconds=2)
    assert len(got) == 1
    msg = got[0]
    assert msg["body"] == "hello" and msg["tag"] == "eu" and msg["keys"] == ["k1", "k2"]
    assert msg["properties"] == {"region": "eu"} and msg["message_id"] == sent["message_id"]
    assert msg["delivery_count"] == 1 and msg["offset"] == sent["offset"]

    # in flight: another receive finds nothing (and waits no longer than asked)
    assert api.receive("g1", "orders", wait_seconds=0) == []
    resp = api.settle("g1", "ack", [msg["receipt_handle"], "garbage"])
    assert resp.status_code == 207
    assert [r["status"] for r in resp.json()["results"]] == [200, 400]
    # acked again: no longer in flight
    resp = api.settle("g1", "ack", [msg["receipt_handle"]])
    assert resp.status_code == 410


def test_long_poll_wakes_on_publish(gw):
    api = Api(base(gw))
    api.publish("t", {"body": "first"})  # creates the topic
    assert len(api.receive("g", "t", wait_seconds=0)) == 1
    import threading

    def later() -> None:
        time.sleep(0.3)
        requests.post(f"{api.url}/v1/topics/t/messages", json={"body": "late"}, timeout=BOUND)

    threading.Thread(target=later).start()
    started = time.monotonic()
    got = api.receive("g", "t", wait_seconds=5)
    assert [m["body"] for m in got] == ["late"]
    assert time.monotonic() - started < 5


def test_nack_and_visibility(gw):
    api = Api(base(gw))
    api.publish("t", {"body": "x"})
    [msg] = api.receive("g", "t", invisible_seconds=60)
    resp = api.settle("g", "visibility", [msg["receipt_handle"]], invisible_seconds=120)
    assert resp.status_code == 200
    renewed = resp.json()["results"][0]
    assert renewed["next_visible_ms"] > msg["next_visible_ms"]
    # the old handle no longer names what is in flight; the new one does
    resp = api.settle("g", "nack", [renewed["new_receipt_handle"]])
    assert resp.status_code == 200
    [again] = api.receive("g", "t", wait_seconds=2)
    assert again["body"] == "x" and again["delivery_count"] == 2
    assert api.settle("g", "ack", [again["receipt_handle"]]).status_code == 200


def test_batch_207_and_idempotency(gw):
    api = Api(base(gw))
    resp = api.publish("t", {"messages": [{"body": "a"}, {"nobody": 1}, {"body": {"j": 1}}]})
    assert resp.status_code == 207
    assert [r["status"] for r in resp.json()["results"]] == [201, 400, 201]
    resp = api.publish("t", {"messages": [{"body": "a"}, {"body": "b"}]})
    assert resp.status_code == 200

    first = api.publish("t", {"body": "once"}, headers={"Idempotency-Key": "abc-1"})
    again = api.publish("t", {"body": "once"}, headers={"Idempotency-Key": "abc-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["message_id"] == first.json()["message_id"]
    assert again.json()["position"] == first.json()["position"]
    bodies = [m["body"] for m in api.receive("g", "t", max_messages=32)]
    assert sorted(bodies) == sorted(["a", '{"j":1}', "a", "b", "once"])


def test_idempotency_across_restart(gw):
    api = Api(base(gw))
    first = api.publish("t", {"body": "once"}, headers={"Idempotency-Key": "k"}).json()
    gw.restart()
    api = Api(base(gw))
    again = api.publish("t", {"body": "once"}, headers={"Idempotency-Key": "k"})
    assert again.status_code == 200 and again.json()["position"] == first["position"]
    assert [m["body"] for m in api.receive("g", "t", max_messages=8)] == ["once"]


def test_problems(gw):
    api = Api(base(gw))
    api.publish("t", {"body": "first"})  # the topic exists; what follows stores nothing
    end = gw.run(lambda: gw.store.stats()["log_end_position"])
    resp = api.call("POST", "/v1/topics/t/messages", "/v1/topics/{topic}/messages",
                    data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["detail"]
    assert resp.headers["Content-Type"] == "application/problem+json"
    resp = api.call("POST", "/v1/topics/t/messages", "/v1/topics/{topic}/messages",
                    data=b"x", headers={"Content-Type": "text/plain"})
    assert resp.status_code == 415
    resp = api.publish("bad%20name", {"body": "x"})
    assert resp.status_code == 400
    resp = api.call("POST", "/v1/groups/g/topics/nope/receive",
                    "/v1/groups/{group}/topics/{topic}/receive", json={})
    assert resp.status_code == 404
    resp = api.call("POST", "/v1/groups/g/topics/t/receive",
                    "/v1/groups/{group}/topics/{topic}/receive", json={"wait_seconds": 99})
    assert resp.status_code in (400, 404)
    for bad in ({"nobody": 1}, {"body": "x", "body_base64": "AA=="}, {"body_base64": "!"},
                {"body": "x", "properties": {"UNIQ_KEY": "forged"}}, {"body": "x", "keys": 5},
                {"messages": []}, {"body": "x", "delay_ms": -1}, [1, 2]):
        assert api.publish("t", bad).status_code == 400, bad
    # (413 for a body over the limit: tests/gateway/http/test_http_server.py, raw socket)
    assert gw.run(lambda: gw.store.stats()["log_end_position"]) == end


def test_seek_by_position_and_time(gw):
    api = Api(base(gw))
    for i in range(3):
        api.publish("t", {"body": f"m{i}", "message_group": "one"})
    # a time strictly between m2's store time and m3's (a seek to a time finds the first
    # message stored at or after it, as RocketMQ's searchOffsetByTimestamp does)
    time.sleep(0.01)
    middle = int(time.time() * 1000)
    time.sleep(0.01)
    api.publish("t", {"body": "m3", "message_group": "one"})
    got = api.receive("g", "t", max_messages=8)
    assert len(got) == 4
    api.settle("g", "ack", [m["receipt_handle"] for m in got])
    # the JSON API's message counters (the overview's HTTP rates)
    scraped = requests.get(base(gw) + "/metrics", timeout=10).text.splitlines()
    assert "lmq_http_messages_received_total 4" in scraped
    assert "lmq_http_messages_sent_total 4" in scraped
    path, template = "/v1/groups/g/topics/t/seek", "/v1/groups/{group}/topics/{topic}/seek"
    assert api.call("POST", path, template, json={"position": "earliest"}).status_code == 200
    assert len(api.receive("g", "t", max_messages=8)) == 4
    assert api.call("POST", path, template, json={"timestamp_ms": middle}).status_code == 200
    assert [m["body"] for m in api.receive("g2", "t", max_messages=8)] == [
        "m0", "m1", "m2", "m3"]  # another group is not moved
    got = api.receive("g", "t", max_messages=8, invisible_seconds=1)
    assert [m["body"] for m in got] == ["m3"]
    assert api.call("POST", path, template, json={"position": "sideways"}).status_code == 400
    assert api.call("POST", path, template, json={"timestamp_ms": "soon"}).status_code == 400
    latest = api.call("POST", path, template, json={"position": "latest"})
    assert latest.status_code == 200 and sum(latest.json()["offsets"].values()) == 4


def test_delayed_publish(gw):
    api = Api(base(gw))
    resp = api.publish("t", {"body": "later", "delay_ms": 1000})
    assert resp.status_code == 201 and resp.json()["deliver_at_ms"] > time.time() * 1000
    assert api.receive("g", "t", wait_seconds=0) == []
    got = api.receive("g", "t", wait_seconds=5)
    assert [m["body"] for m in got] == ["later"]
    assert got[0]["store_ms"] >= resp.json()["deliver_at_ms"] - 1000


def test_http_publish_reaches_mqtt_and_mqtt_topics(gw):
    api = Api(base(gw))
    sub = Paho(gw.mqtt_port, "sub")
    sub.subscribe("orders/#", qos=1)
    api.publish("orders", {"body": "to mqtt"})
    assert sub.get().payload == b"to mqtt"
    resp = api.call("POST", "/v1/mqtt/orders%2Feu%2F42/messages", "/v1/mqtt/{topic}/messages",
                    json={"body": "by mqtt name"})
    assert resp.status_code == 201
    msg = sub.get()
    assert msg.topic == "orders/eu/42" and msg.payload == b"by mqtt name"
    # and an MQTT publish reaches an HTTP consumer of the RocketMQ topic
    pub = Paho(gw.mqtt_port, "pub")
    pub.publish("orders/x", b"from mqtt", qos=1)
    bodies = [m["body"] for m in api.receive("g", "orders", max_messages=8, wait_seconds=2)]
    assert "from mqtt" in bodies


def test_sse_stream_and_resume(gw):
    api = Api(base(gw))
    for i in range(3):
        api.publish("t", {"body": f"e{i}", "message_group": "s"})  # one queue: in order
    url = f"{api.url}/v1/groups/g/topics/t/stream?max_events=2"
    with requests.get(url, stream=True, timeout=BOUND) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        events = [e for e in sseclient.SSEClient(resp).events() if e.event == "message"]
    assert [json.loads(e.data)["body"] for e in events] == ["e0", "e1"]
    # resume: the last event id is acked if it was not; the rest follows
    url = f"{api.url}/v1/groups/g/topics/t/stream?max_events=1"
    with requests.get(url, stream=True, timeout=BOUND,
                      headers={"Last-Event-ID": events[-1].id}) as resp:
        more = [e for e in sseclient.SSEClient(resp).events() if e.event == "message"]
    assert [json.loads(e.data)["body"] for e in more] == ["e2"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_publish_and_receive(gw):
    url = base(gw)

    def curl(*args: str) -> dict[str, Any]:
        out = subprocess.run(["curl", "-sS", "--fail-with-body", "--max-time", "10", *args],
                             capture_output=True, text=True, timeout=BOUND, check=True)
        return json.loads(out.stdout)

    sent = curl("-H", "Content-Type: application/json", "-d", '{"body":"via curl"}',
                f"{url}/v1/topics/c/messages")
    assert sent["status"] == 201
    got = curl("-X", "POST", f"{url}/v1/groups/g/topics/c/receive?wait_seconds=1")
    assert [m["body"] for m in got["messages"]] == ["via curl"]


def test_transactions_commit_and_rollback(gw):
    api = Api(base(gw))
    template = "/v1/transactions/{transaction}/{action}"
    one = api.publish("t", {"body": "kept", "transaction": True, "producer_group": "pg"})
    two = api.publish("t", {"body": "dropped", "transaction": True})
    assert one.status_code == 201 and two.status_code == 201
    tx1, tx2 = one.json()["transaction_id"], two.json()["transaction_id"]
    assert api.receive("g", "t", wait_seconds=0) == []  # half messages are not delivered
    resp = api.call("POST", f"/v1/transactions/{tx1}/commit", template)
    assert resp.status_code == 200 and resp.json()["outcome"] == "committed"
    resp = api.call("POST", f"/v1/transactions/{tx2}/rollback", template)
    assert resp.json()["outcome"] == "rolled_back"
    assert [m["body"] for m in api.receive("g", "t", max_messages=8, wait_seconds=1)] == [
        "kept"]
    resp = api.call("POST", f"/v1/transactions/{tx1}/commit", template)
    assert resp.status_code == 200 and resp.json()["outcome"] == "already_committed"
    assert api.call("POST", f"/v1/transactions/{tx1}/rollback", template).status_code == 409
    assert api.call("POST", "/v1/transactions/12345/commit", template).status_code == 404
    bad = api.publish("t", {"body": "x", "transaction": True, "delay_ms": 1000})
    assert bad.status_code == 400


def test_publish_to_an_amqp_queue(gw):
    import pika

    api = Api(base(gw))
    template = "/v1/amqp/{vhost}/queues/{queue}/messages"
    assert api.call("POST", "/v1/amqp/%2F/queues/jobs/messages", template,
                    json={"body": "x"}).status_code == 404
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.port))
    try:
        ch = conn.channel()
        ch.queue_declare("jobs", durable=True)
        resp = api.call("POST", "/v1/amqp/%2F/queues/jobs/messages", template,
                        json={"body": "for amqp", "properties": {"k": "v"}})
        assert resp.status_code == 201
        method, props, body = None, None, None
        deadline = time.monotonic() + BOUND
        while method is None and time.monotonic() < deadline:
            method, props, body = ch.basic_get("jobs", auto_ack=True)
        assert body == b"for amqp" and props.headers.get("k") in ("v", b"v")
    finally:
        conn.close()


def test_ordered_receive_by_message_group(gw):
    api = Api(base(gw))
    for body, group in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a")):
        api.publish("fifo", {"body": body, "message_group": group})
    first = api.receive("g", "fifo", max_messages=8, ordered=True)
    # one message per group in flight: a2 waits for a1's ack
    assert sorted(m["body"] for m in first) == ["a1", "b1"]
    assert {m["message_group"] for m in first} == {"a", "b"}
    assert api.receive("g", "fifo", max_messages=8, ordered=True) == []
    a1 = next(m for m in first if m["body"] == "a1")
    assert api.settle("g", "ack", [a1["receipt_handle"]]).status_code == 200
    assert [m["body"] for m in api.receive("g", "fifo", max_messages=8, ordered=True)] == [
        "a2"]


def test_max_publish_rate_is_429_with_retry_after(tmp_path):
    gateway = ThreadGateway(tmp_path / "data", http_port=AUTO, max_publish_rate=5).start()
    try:
        api = Api(base(gateway))
        statuses = [api.publish("t", {"body": str(i)}) for i in range(15)]
        codes = [r.status_code for r in statuses]
        assert codes[:5] == [201] * 5 and 429 in codes[5:], codes
        refused = next(r for r in statuses if r.status_code == 429)
        assert int(refused.headers["Retry-After"]) >= 1
        stored = len(api.receive("g", "t", max_messages=32))
        assert stored == codes.count(201)
        # another connection has its own budget
        other = requests.post(f"{api.url}/v1/topics/t/messages", json={"body": "x"},
                              timeout=BOUND)
        assert other.status_code == 201
    finally:
        gateway.stop()


def test_concurrent_retries_with_one_key_store_once(gw):
    from concurrent.futures import ThreadPoolExecutor

    url = f"{base(gw)}/v1/topics/t/messages"

    def send(_: int) -> requests.Response:
        return requests.post(url, json={"body": "once"}, timeout=BOUND,
                             headers={"Idempotency-Key": "same"})

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(send, range(10)))
    assert sorted(r.status_code for r in answers) == [200] * 9 + [201]
    assert len({r.json()["message_id"] for r in answers}) == 1
    assert len({r.json()["position"] for r in answers}) == 1
    api = Api(base(gw))
    assert [m["body"] for m in api.receive("g", "t", max_messages=32)] == ["once"]


def _get(ch: Any, queue: str) -> bytes | None:
    """One message from ``queue`` by basic.get, waiting up to BOUND for it."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return body
        time.sleep(0.02)
    return None


def test_publish_through_amqp_exchanges(gw):
    import pika

    api = Api(base(gw))
    template = "/v1/amqp/{vhost}/exchanges/{exchange}/messages"

    def post(exchange: str, **doc: Any) -> requests.Response:
        return api.call("POST", f"/v1/amqp/%2F/exchanges/{exchange}/messages", template,
                        json=doc)

    assert post("nope", body="x").status_code == 404
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gw.port))
    try:
        ch = conn.channel()
        for q in ("t1", "f1", "f2", "h1", "d1"):
            ch.queue_declare(q)
        ch.exchange_declare("ex.topic", "topic")
        ch.queue_bind("t1", "ex.topic", "orders.*.eu")
        ch.exchange_declare("ex.fan", "fanout")
        ch.queue_bind("f1", "ex.fan")
        ch.queue_bind("f2", "ex.fan")
        ch.exchange_declare("ex.hdr", "headers")
        ch.queue_bind("h1", "ex.hdr", arguments={"x-match": "all", "kind": "big"})
        ch.exchange_declare("ex.later", "x-delayed-message",
                            arguments={"x-delayed-type": "direct"})
        ch.queue_bind("d1", "ex.later", "k")
        ch.exchange_declare("ex.inner", "fanout", internal=True)
        ch.exchange_bind("ex.inner", "ex.fan")  # reached from ex.fan, not published to
        ch.queue_bind("f1", "ex.inner")
        assert post("ex.inner", body="no").status_code == 403

        resp = post("ex.topic", body="t-hit", routing_key="orders.7.eu")
        assert resp.status_code == 201 and resp.json()["routed_to"] == 1
        miss = post("ex.topic", body="t-miss", routing_key="orders.7.us")
        assert miss.status_code == 200 and miss.json()["routed_to"] == 0
        assert post("ex.hdr", body="small", properties={"kind": "small"}).status_code == 200
        assert post("ex.hdr", body="big", properties={"kind": "big"}).status_code == 201
        sent = time.monotonic()
        delayed = post("ex.later", body="later", routing_key="k", delay_ms=400)
        assert delayed.status_code == 201 and "deliver_at_ms" in delayed.json()

        deadline = time.monotonic() + BOUND
        method = None
        while method is None and time.monotonic() < deadline:
            method, _props, body = ch.basic_get("t1", auto_ack=True)
        assert method is not None and body == b"t-hit"
        assert method.routing_key == "orders.7.eu"
        assert post("ex.fan", body="fan").json()["routed_to"] == 2  # f1 once, f2
        assert _get(ch, "f1") == b"fan" and _get(ch, "f2") == b"fan"
        assert _get(ch, "h1") == b"big"
        assert _get(ch, "d1") == b"later"
        assert time.monotonic() - sent >= 0.4  # not before its delay
        for q in ("t1", "h1", "f1", "f2"):  # nothing else got there
            assert ch.basic_get(q, auto_ack=True)[0] is None
    finally:
        conn.close()


def test_publish_through_amq_topic_reaches_mqtt(gw):
    api = Api(base(gw))
    sub = Paho(gw.mqtt_port, "http-amq-topic")
    sub.subscribe("room/+/temp", qos=1)
    resp = api.call("POST", "/v1/amqp/%2F/exchanges/amq.topic/messages",
                    "/v1/amqp/{vhost}/exchanges/{exchange}/messages",
                    json={"body": "19.5", "routing_key": "room.3.temp"})
    assert resp.status_code == 201
    msg = sub.get()
    assert msg.topic == "room/3/temp" and msg.payload == b"19.5"


def test_sse_last_event_id_rewinds(gw):
    """Events written (and so acked) after the one the client saw last are sent again
    when it reconnects with that Last-Event-ID; then the stream goes on."""
    api = Api(base(gw))
    api.publish("rw", {"body": "start", "message_group": "s"})
    api.receive("g", "rw")  # the group's offsets exist (a cursor starts from them)
    for i in range(3):
        api.publish("rw", {"body": f"e{i}", "message_group": "s"})
    # a second queue of the topic too, so the cursor covers more than one
    api.publish("rw", {"body": "other", "message_group": "zz-other"})

    def stream(n: int, last: str | None = None) -> list[Any]:
        url = f"{api.url}/v1/groups/g/topics/rw/stream?max_events={n}"
        headers = {"Last-Event-ID": last} if last else {}
        with requests.get(url, stream=True, timeout=BOUND, headers=headers) as resp:
            assert resp.status_code == 200
            return [e for e in sseclient.SSEClient(resp).events() if e.event == "message"]

    first = stream(4)
    bodies = [json.loads(e.data)["body"] for e in first]
    assert sorted(bodies) == ["e0", "e1", "e2", "other"]
    assert [b for b in bodies if b != "other"] == ["e0", "e1", "e2"]
    seen = next(e for e in first if json.loads(e.data)["body"] == "e0")
    # the client lost everything after e0: a reconnect with e0's id rewinds
    api.publish("rw", {"body": "e3", "message_group": "s"})
    again = stream(len(bodies) - bodies.index("e0"), seen.id)
    docs = [json.loads(e.data) for e in again]
    lost = [b for b in bodies[bodies.index("e0") + 1:]]
    assert [d["body"] for d in docs[:len(lost)]] == lost
    assert all(d.get("replayed") for d in docs[:len(lost)])
    assert docs[-1]["body"] == "e3" and not docs[-1].get("replayed")
    # the ids ack in manual mode too (the cursor is ignored by /ack)
    assert api.settle("g", "ack", [again[-1].id]).json()["results"][0]["status"] in (200, 410)
    # with the last id, nothing is replayed: the stream waits for new messages
    api.publish("rw", {"body": "e4", "message_group": "s"})
    tail = stream(1, again[-1].id)
    assert [json.loads(e.data)["body"] for e in tail] == ["e4"]


def test_receive_an_mqtt_topic_filter(gw):
    """A durable subscription per (group, filter), made on the first receive: an MQTT
    publish reaches it even with no MQTT subscriber; ack, nack by its handles; it
    survives a restart."""
    api = Api(base(gw))
    template = "/v1/groups/{group}/mqtt/{filter}/receive"

    def receive(group: str, filt: str, **doc: Any) -> list[dict[str, Any]]:
        path = f"/v1/groups/{group}/mqtt/{requests.utils.quote(filt, safe='')}/receive"
        resp = api.call("POST", path, template, json=doc)
        assert resp.status_code == 200, resp.text
        return resp.json()["messages"]

    pub = Paho(gw.mqtt_port, "pub-filter")
    early = Paho(gw.mqtt_port, "early-sub")  # so the filter's LMQ has a message already
    early.subscribe("site/+/temp", qos=1)
    pub.publish("site/0/temp", b"before", qos=1)
    assert early.get().payload == b"before"
    assert receive("g", "site/+/temp") == []  # subscribes; nothing before it counts
    pub.publish("site/1/temp", b"20.5", qos=1)
    pub.publish("site/1/hum", b"40", qos=1)  # not matched
    api.publish("site", {"body": "via rmq"})  # a RocketMQ topic: not an MQTT name match
    got = receive("g", "site/+/temp", wait_seconds=2)
    assert [(m["topic"], m["body"]) for m in got] == [("site/1/temp", "20.5")]
    # another group has its own subscription (made now: it starts here)
    assert receive("other", "site/+/temp") == []
    # nack: back at once, one more delivery; then ack
    resp = api.settle("g", "nack", [got[0]["receipt_handle"]])
    assert resp.status_code == 200
    again = receive("g", "site/+/temp", wait_seconds=2)
    assert [m["body"] for m in again] == ["20.5"] and again[0]["delivery_count"] == 2
    acked = api.settle("g", "ack", [again[0]["receipt_handle"]]).json()["results"]
    assert acked[0]["status"] == 200
    assert api.settle("g", "ack", [again[0]["receipt_handle"]]).json()[
        "results"][0]["status"] == 410
    # an HTTP publish by MQTT name reaches it too, and so after a restart
    gw.restart()
    api = Api(base(gw))
    api.call("POST", "/v1/mqtt/site%2F2%2Ftemp/messages", "/v1/mqtt/{topic}/messages",
             json={"body": "21"})
    assert [m["body"] for m in receive("g", "site/+/temp", wait_seconds=2)] == ["21"]
    assert [m["body"] for m in receive("other", "site/+/temp", wait_seconds=2)] == ["21"]
    # a bad filter is a 400
    assert api.call("POST", "/v1/groups/g/mqtt/a%2F%23%2Fb/receive", template,
                    json={}).status_code == 400
    # unsubscribe: g's drop leaves other's; once both are gone, nothing is routed there
    dtemplate = "/v1/groups/{group}/mqtt/{filter}"
    assert api.call("DELETE", "/v1/groups/g/mqtt/site%2F%2B%2Ftemp", dtemplate
                    ).status_code == 200
    assert api.call("DELETE", "/v1/groups/g/mqtt/site%2F%2B%2Ftemp", dtemplate
                    ).status_code == 404
    assert gw.gateway is not None
    space = gw.gateway.topic_space
    assert space.subscriptions_on("site/+/temp") == 1
    assert api.call("DELETE", "/v1/groups/other/mqtt/site%2F%2B%2Ftemp", dtemplate
                    ).status_code == 200
    assert space.subscriptions_on("site/+/temp") == 0


def test_mqtt_filter_group_shares_with_an_mqtt_shared_subscription(gw):
    """HTTP group g and MQTT $share/g/<filter> pop one store group: together they get
    every message once."""
    import queue as queue_mod

    api = Api(base(gw))
    sub = Paho(gw.mqtt_port, "share-member")
    sub.subscribe("$share/work/jobs/#", qos=1)
    path = "/v1/groups/work/mqtt/jobs%2F%23/receive"
    template = "/v1/groups/{group}/mqtt/{filter}/receive"
    assert api.call("POST", path, template, json={}).status_code == 200
    pub = Paho(gw.mqtt_port, "share-pub")
    sent = [f"j{i}" for i in range(20)]
    for body in sent:
        pub.publish(f"jobs/{body}", body.encode(), qos=1)
    by_http: list[str] = []
    for _ in range(3):
        got = api.call("POST", path, template, json={"max_messages": 32}).json()["messages"]
        by_http += [m["body"] for m in got]
        if got:
            api.settle("work", "ack", [m["receipt_handle"] for m in got])
    by_mqtt: list[str] = []
    deadline = time.monotonic() + BOUND
    while len(by_http) + len(by_mqtt) < len(sent) and time.monotonic() < deadline:
        try:
            by_mqtt.append(sub.get(timeout=0.5).payload.decode())
        except queue_mod.Empty:
            got = api.call("POST", path, template, json={"max_messages": 32}).json()
            by_http += [m["body"] for m in got["messages"]]
    assert sorted(by_http + by_mqtt) == sorted(sent)  # each once, between the two
