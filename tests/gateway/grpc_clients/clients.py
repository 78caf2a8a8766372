"""The official RocketMQ 5 gRPC clients as subprocesses the tests drive (no tests here).

- ``PyClient``: PyPI ``rocketmq-python-client`` (``py_client.py`` beside this file) --
  Producer, SimpleConsumer, PushConsumer. Its library logs under ``$HOME/logs``, so HOME
  is the test's own directory.
- ``NodeClient``: npm ``rocketmq-client-nodejs`` (``tests/node/grpc_client.js``) --
  Producer and SimpleConsumer.

Both clients wait for the gateway's Telemetry settings reply before they are usable (the
Node client with no timeout at all), so every start, call and stop here is bounded:
``ready`` waits at most ``START`` seconds, ``call`` at most its ``timeout``, and ``stop``
kills past its bound. Clients are stopped by PID.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..gateway_process import GatewayProcess
from ..line_process import LineProcess
from ..remoting.node_clients import NODE_DIR, require_node

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PY_SCRIPT = HERE / "py_client.py"
NODE_SCRIPT = NODE_DIR / "grpc_client.js"
#: a client's startup: route queries, Telemetry settings (the push consumer waits 10 s)
START = 30.0
#: one request (the clients' own deadline is 3 s, plus long polling for a receive)
CALL = 30.0


class ClientError(AssertionError):
    """A command the client answered with an error (the client's exception text)."""


class GrpcClient(LineProcess):
    """A client process that takes JSON commands and answers each with one reply."""

    _ids = itertools.count(1)

    def ready(self, timeout: float = START) -> GrpcClient:
        event = self.wait_for(lambda e: e.get("ready") is True, timeout)
        self.client_id = event.get("client_id") or event.get("clientId")
        return self

    def try_call(self, op: str, timeout: float = CALL, **args: Any) -> dict[str, Any]:
        """``{"ok": result}`` or ``{"error": text}``."""
        rid = next(self._ids)
        self.send({"id": rid, "op": op, **args})
        return self.wait_for(lambda e: e.get("reply") == rid, timeout)

    def call(self, op: str, timeout: float = CALL, **args: Any) -> Any:
        reply = self.try_call(op, timeout, **args)
        if "error" in reply:
            raise ClientError(f"{self.name} {op}: {reply['error']}")
        return reply["ok"]

    # the commands of py_client.py and grpc_client.js

    def send_message(self, topic: str, body: str, **fields: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.call("send", message={"topic": topic, "body": body,
                                                            **fields})
        return result

    def receive(self, max: int = 16, invisible: float = 15, timeout: float = CALL
                ) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = self.call("receive", timeout, max=max, invisible=invisible)
        return got

    def ack(self, message_id: str) -> None:
        self.call("ack", msg=message_id)

    def change_invisible(self, message_id: str, invisible: float) -> str:
        receipt: str = self.call("change", msg=message_id, invisible=invisible)["receipt"]
        return receipt

    def receive_all(self, n: int, timeout: float, invisible: float = 15
                    ) -> list[dict[str, Any]]:
        """Receive until ``n`` messages came (each long poll bounded), or fail."""
        deadline = time.monotonic() + timeout
        got: list[dict[str, Any]] = []
        while len(got) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: {len(got)} of {n} messages in {timeout} s: "
                                     f"{[m['body'] for m in got]}")
            got += self.receive(n - len(got), invisible)
        return got


class PyClient(GrpcClient):
    """``role`` is producer, simple or push; ``config`` as py_client.py reads it."""

    def __init__(self, role: str, home: Path, **config: Any) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1",
                   PYTHONPATH=str(ROOT))
        super().__init__(f"python {role}", [sys.executable, str(PY_SCRIPT), role,
                                            json.dumps(config)],
                         cwd=home, env=env, stdin=True)

    def log_tail(self, lines: int = 40) -> str:
        """The client library's own log (for failure messages)."""
        log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        if not log.exists():
            return ""
        return "".join(log.read_text(errors="replace").splitlines(True)[-lines:])

    def wait_for(self, pred: Any, timeout: float) -> dict[str, Any]:
        try:
            return super().wait_for(pred, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- client log ---\n{self.log_tail()}") from None


class NodeClient(GrpcClient):
    """``role`` is producer or simple; ``config`` as grpc_client.js reads it."""

    def __init__(self, role: str, **config: Any) -> None:
        node = require_node()
        super().__init__(f"node {role}", [node, str(NODE_SCRIPT), role, json.dumps(config)],
                         cwd=NODE_DIR, stdin=True)


def grpc_endpoint(gw: GatewayProcess, port: str = "unified") -> str:
    """``127.0.0.1:<port>``: the unified port (gRPC is handed off by its HTTP/2 preface)
    or the dedicated ``grpc`` port."""
    return f"127.0.0.1:{gw.ports[port]}"

