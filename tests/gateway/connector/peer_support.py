"""Real peers for the connector's endpoint tests: Debian's mosquitto and rabbitmq-server
(bench/peers.py's classes: loopback ephemeral ports, their own data directories, stopped
by PID; an ``atexit`` hook kills whatever a crash left running), with TLS listeners,
and their certificates."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bench.peers import Broker, Mosquitto, RabbitMQ, free_port, wait_accepts

B = TypeVar("B", bound=Broker)


def start_broker(broker: B) -> B:
    """``broker`` started, or the test skipped where it cannot run here."""
    why = broker.available()
    if why:
        pytest.skip(why)
    broker.start()
    return broker


@contextmanager
def running(broker: B) -> Iterator[B]:
    """``broker`` started (see :func:`start_broker`), and stopped at the end."""
    start_broker(broker)
    try:
        yield broker
    finally:
        broker.stop()


async def read_n(source: Any, queue: str, n: int, timeout: float = 5.0) -> list[Any]:
    """Up to ``n`` records of an endpoint source's ``queue``, read for at most ``timeout``
    seconds."""
    records: list[Any] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(records) < n and loop.time() < deadline:
        records += await source.read(queue, None, "latest", n - len(records), 200)
    return records


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


class TlsListener(Broker):
    """A broker with a second listener, over TLS with ``cert`` and ``key`` (server
    certificate only), on ``tls_port``: the lines of :meth:`_tls_conf` added to its
    config file ``conf_name``. Comes before the broker's class in a subclass's bases."""

    conf_name = ""

    def __init__(self, workdir: Path, cert: Path, key: Path) -> None:
        super().__init__(workdir)
        self.cert, self.key = cert, key
        self.tls_port = 0

    def _tls_conf(self) -> list[str]:
        raise NotImplementedError

    def _prepare(self) -> None:
        super()._prepare()
        self.tls_port = free_port()
        conf = self.data_dir / self.conf_name
        conf.write_text(conf.read_text() + "\n".join(self._tls_conf()) + "\n")

    def _wait_ready(self) -> None:
        super()._wait_ready()
        wait_accepts(self.tls_port, self.start_timeout, self.proc)


class MosquittoTls(TlsListener, Mosquitto):
    """Mosquitto with MQTT over TLS on ``tls_port``."""

    conf_name = "mosquitto.conf"

    def _tls_conf(self) -> list[str]:
        return [
            # started as root, mosquitto drops to user mosquitto before it reads the
            # certificate, which lies in pytest's private (0700) tmp directory; a
            # broker not started as root ignores this
            "user root",
            f"listener {self.tls_port} 127.0.0.1",
            f"certfile {self.cert}",
            f"keyfile {self.key}",
        ]


class RabbitMQTls(TlsListener, RabbitMQ):
    """RabbitMQ with AMQPS on ``tls_port``."""

    conf_name = "rabbitmq.conf"

    def _tls_conf(self) -> list[str]:
        return [
            f"listeners.ssl.default = 127.0.0.1:{self.tls_port}",
            f"ssl_options.cacertfile = {self.cert}",
            f"ssl_options.certfile = {self.cert}",
            f"ssl_options.keyfile = {self.key}",
            "ssl_options.verify = verify_none",
            "ssl_options.fail_if_no_peer_cert = false",
        ]
