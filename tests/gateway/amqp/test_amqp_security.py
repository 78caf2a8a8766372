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
