"""``lmq messages send``: the CLI sends through a running gateway (a real ``lmq serve``
process) with the project's remoting client, and what it prints finds the message again:
``lmq messages show`` by either id, a paho subscriber of the MQTT name receives it."""

from __future__ import annotations

import json
import socket

from click.testing import CliRunner

from cli.main import main

from ..gateway_process import GatewayProcess
from ..mqtt_clients import Paho


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_send_then_show_and_mqtt(gateway: GatewayProcess) -> None:
    server = f"127.0.0.1:{gateway.ports['unified']}"
    sub = Paho(gateway.mqtt_port, "cli-sub", v5=True)
    sub.subscribe("orders/eu/+", qos=1)
    code, out = _run(
        "messages", "send", "--server", server, "--topic", "orders", "--tag", "eu",
        "--key", "order-7", "--property", "mqttSecondTopic=/eu/42", "--json", "hello",
    )
    assert code == 0, out
    sent = json.loads(out)
    assert sent["topic"] == "orders" and sent["queue_offset"] == 0
    assert len(sent["msg_id"]) == 32 and len(sent["offset_msg_id"]) == 32
    got = sub.get()
    assert (got.topic, got.payload) == ("orders/eu/42", b"hello")
    data = str(gateway.data_dir)
    for msg_id in (sent["offset_msg_id"], sent["msg_id"]):
        code, out = _run("messages", "show", "--data-dir", data, "--json", msg_id)
        assert code == 0, out
        shown = json.loads(out.splitlines()[0])
        assert shown["topic"] == "orders/eu/42"
    code, out = _run("messages", "find", "--data-dir", data, "--topic", "orders",
                     "--key", "order-7", "--json")
    assert code == 0 and len(out.splitlines()) == 1, out


def test_send_errors_are_one_line(gateway: GatewayProcess) -> None:
    server = f"127.0.0.1:{gateway.ports['unified']}"
    code, out = _run("messages", "send", "--server", server, "--topic", "bad/topic", "x")
    assert code == 1 and "refused" in out and "Traceback" not in out, out
    code, out = _run("messages", "send", "--server", server, "--topic", "t",
                     "--property", "novalue", "x")
    assert code == 2 and "NAME=VALUE" in out
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    code, out = _run("messages", "send", "--server", f"127.0.0.1:{dead}", "--topic", "t",
                     "--timeout", "2", "x")
    assert code == 1 and "cannot reach the gateway" in out, out
