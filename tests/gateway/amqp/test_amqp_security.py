"""AMQP logins and vhost permissions with a real users file, over pika."""

from __future__ import annotations

from pathlib import Path

import pika
import pika.exceptions
import pytest
from click.testing import CliRunner

from cli.main import main

from ..gateway_process import GatewayProcess


def lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture
def secured(tmp_path: Path):
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "alice", "--password", "wonderland", *d)
    lmq("users", "set-permissions", "alice", "--vhost", "/", "--configure", "^alice\\.",
        "--write", ".*", "--read", ".*", *d)
    lmq("users", "add", "bob", "--password", "builder", *d)  # no permissions at all
    gw = GatewayProcess(data).start()
    yield gw
    gw.stop()


def params(gw: GatewayProcess, user: str, password: str) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1", gw.ports["amqp"], "/", pika.PlainCredentials(user, password),
        connection_attempts=1, socket_timeout=5,
    )


def test_amqp_logins_and_permissions(secured):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params(secured, "alice", "wrong"))
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(params(secured, "bob", "builder"))  # no access to "/"
    conn = pika.BlockingConnection(params(secured, "alice", "wonderland"))
    try:
        ch = conn.channel()
        ch.queue_declare("alice.inbox")
        ch.basic_publish("", "alice.inbox", b"hi")
        method, _, body = ch.basic_get("alice.inbox", auto_ack=True)
        assert body == b"hi"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare("not-hers")
        assert exc.value.reply_code == 403
    finally:
        conn.close()


@pytest.fixture
def topic_acl(tmp_path: Path):
    """carol may do anything in vhost "/" by its permissions; her MQTT topic ACL lets
    her publish to sensors/# except sensors/secret/key, and subscribe to sensors/+/temp
    and (partly denied) alerts/#."""
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "carol", "--password", "pw", *d)
    lmq("users", "set-permissions", "carol", "--vhost", "/", "--configure", ".*",
        "--write", ".*", "--read", ".*", *d)
    lmq("users", "acl", "add", "carol", "--deny", "sensors/secret/key", *d)
    lmq("users", "acl", "add", "carol", "--publish", "sensors/#", *d)
    lmq("users", "acl", "add", "carol", "--subscribe", "sensors/+/temp", *d)
    lmq("users", "acl", "add", "carol", "--deny", "alerts/private", *d)
    lmq("users", "acl", "add", "carol", "--subscribe", "alerts/#", *d)
    gw = GatewayProcess(data).start()
    yield gw
    gw.stop()


def _refused(ch, fn, *args, **kw) -> int:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        fn(*args, **kw)
    assert "amq.topic" in exc.value.reply_text
    return exc.value.reply_code


def test_amq_topic_applies_the_mqtt_topic_acl(topic_acl):
    conn = pika.BlockingConnection(params(topic_acl, "carol", "pw"))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("carol.q")
        # bindings: the filter the key covers must be granted whole
        ch.queue_bind("carol.q", "amq.topic", "sensors.*.temp")
        assert _refused(ch, ch.queue_bind, "carol.q", "amq.topic", "sensors.#") == 403
        ch = conn.channel()
        ch.confirm_delivery()
        # alerts/# is granted with a deny inside it: no per-message filter on a queue
        assert _refused(ch, ch.queue_bind, "carol.q", "amq.topic", "alerts.#") == 403
        ch = conn.channel()
        # "#" in the middle is checked as the filter up to it (a.#.b -> a/#)
        assert _refused(ch, ch.queue_bind, "carol.q", "amq.topic", "sensors.#.temp") == 403
        ch = conn.channel()
        ch.confirm_delivery()
        # publishes: routing key a.b.c is MQTT topic a/b/c
        ch.basic_publish("amq.topic", "sensors.kitchen.temp", b"21.5")
        assert _refused(ch, ch.basic_publish, "amq.topic", "sensors.secret.key", b"x") == 403
        ch = conn.channel()
        ch.confirm_delivery()
        assert _refused(ch, ch.basic_publish, "amq.topic", "other.topic", b"x") == 403
        ch = conn.channel()
        ch.confirm_delivery()
        # other exchanges and vhost permissions are unchanged by the topic ACL
        ch.exchange_declare("carol.x", "topic")
        ch.basic_publish("carol.x", "other.topic", b"free")
        method, _, body = ch.basic_get("carol.q", auto_ack=True)
        assert body == b"21.5" and method.routing_key == "sensors.kitchen.temp"
        # an exchange bound to amq.topic reads from the topic space: checked like a queue
        assert _refused(ch, ch.exchange_bind, "carol.x", "amq.topic", "secrets.#") == 403
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_bind("carol.x", "amq.topic", "sensors.*.temp")
        # and one that publishes into amq.topic is checked at each publish
        ch.exchange_declare("carol.in", "fanout")
        ch.exchange_bind("amq.topic", "carol.in", "")
        assert _refused(ch, ch.basic_publish, "carol.in", "other.topic", b"x") == 403
    finally:
        if conn.is_open:
            conn.close()
