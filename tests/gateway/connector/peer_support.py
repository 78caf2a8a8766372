"""Real peers for the connector's endpoint tests: Debian's mosquitto and rabbitmq-server
(bench/peers.py's classes: loopback ephemeral ports, their own data directories, stopped
by PID; an ``atexit`` hook kills whatever a crash left running), and small helpers."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bench.peers import ROOT, Mosquitto, RabbitMQ, free_port, wait_accepts


def start_mosquitto(workdir: Path) -> Mosquitto:
    broker = Mosquitto(workdir)
    why = broker.available()
    if why:
        pytest.skip(why)
    broker.start()
    return broker


def make_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA): (cert, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


class MosquittoTls(Mosquitto):
    """Mosquitto with a second listener, MQTT over TLS (server certificate only) on
    ``tls_port``."""

    def __init__(self, workdir: Path, cert: Path, key: Path) -> None:
        super().__init__(workdir)
        self.cert, self.key = cert, key
        self.tls_port = 0

    def _prepare(self) -> None:
        super()._prepare()
        self.tls_port = free_port()
        conf = self.data_dir / "mosquitto.conf"
        conf.write_text(conf.read_text() + "\n".join([
            # started as root, mosquitto drops to user mosquitto before it reads the
            # certificate, which lies in pytest's private (0700) tmp directory; a
            # broker not started as root ignores this
            "user root",
            f"listener {self.tls_port} 127.0.0.1",
            f"certfile {self.cert}",
            f"keyfile {self.key}",
        ]) + "\n")  # fmt: skip

    def _wait_ready(self) -> None:
        super()._wait_ready()
        wait_accepts(self.tls_port, self.start_timeout, self.proc)


class RabbitMQTls(RabbitMQ):
    """RabbitMQ with an AMQPS listener (server certificate only) on ``tls_port``."""

    def __init__(self, workdir: Path, cert: Path, key: Path) -> None:
        super().__init__(workdir)
        self.cert, self.key = cert, key
        self.tls_port = 0

    def _prepare(self) -> None:
        super()._prepare()
        self.tls_port = free_port()
        conf = self.data_dir / "rabbitmq.conf"
        conf.write_text(conf.read_text() + "\n".join([
            f"listeners.ssl.default = 127.0.0.1:{self.tls_port}",
            f"ssl_options.cacertfile = {self.cert}",
            f"ssl_options.certfile = {self.cert}",
            f"ssl_options.keyfile = {self.key}",
            "ssl_options.verify = verify_none",
            "ssl_options.fail_if_no_peer_cert = false",
        ]) + "\n")  # fmt: skip

    def _wait_ready(self) -> None:
        super()._wait_ready()
        wait_accepts(self.tls_port, self.start_timeout, self.proc)


def start_broker(broker: Mosquitto | RabbitMQ) -> Mosquitto | RabbitMQ:
    why = broker.available()
    if why:
        pytest.skip(why)
    broker.start()
    return broker


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """Await ``check`` until it is true (polled every 20 ms), at most ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


class ConnectorProcess:
    """``lmq connector run --rules FILE`` in a subprocess: waits for ``ready``, stopped
    (or killed with SIGKILL) by PID, bounded in time."""

    def __init__(self, rules: Path) -> None:
        self.rules = rules
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, timeout: float = 20.0) -> ConnectorProcess:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from cli.main import main; main()", "connector", "run",
             "--rules", str(self.rules),
             "--status-address", "", "--log-level", "info"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError("connector not ready:\n" + "".join(self.output)) from None
            if line is None:
                assert self.proc is not None
                self.proc.wait(timeout=10)
                self._close()
                raise RuntimeError("connector exited:\n" + "".join(self.output))
            if line.strip() == "ready":
                return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


async def pull_all(namesrv: str, topic: str) -> list[Any]:
    """Every message of ``topic`` on a gateway, pulled from offset 0 of each queue."""
    from gateway.clients.remoting import PullConsumer, RemotingClient

    out: list[Any] = []
    async with RemotingClient(namesrv) as client:
        consumer = PullConsumer(client, "peers-check")
        try:
            queues = await consumer.queues(topic)
        except Exception:
            return []
        for mq in queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=32)
                if not result.found:
                    break
                out += result.messages
                offset = result.next_begin_offset
    return out
