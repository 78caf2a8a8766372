"""Broker groups of real gateway processes for the replication tests: members started
with ``lmq serve`` on free loopback ports, their /health read over HTTP, QoS 1
publishers that record what was acknowledged, and the commit log read back."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from broker_core import MessageStore, RecordType
from gateway.clients import PullConsumer, RemotingClient
from gateway.clients.remoting import RemotingConnection
from lmq.rocketmq import BROKER_NAME
from protocol.remoting.bodies import MessageQueue
from protocol.remoting.codes import RequestCode
from tests.gateway.gateway_process import GatewayProcess

WAIT_S = 30.0


class Member(GatewayProcess):
    """A gateway in a broker group; ``role_args`` are its replication flags."""

    def __init__(self, data_dir: Path, *role_args: str) -> None:
        super().__init__(data_dir, "--http-port", "0", "--replication-port", "auto", *role_args)

    @property
    def replication_address(self) -> str:
        return f"127.0.0.1:{self.ports['replication']}"

    def health(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.ports['unified']}/health"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def replication(self) -> dict[str, Any]:
        health = self.health()
        if "replication" not in health:
            raise AssertionError(f"no replication status in /health: {health}")
        return health["replication"]

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def promote(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR2)  # what `lmq replication promote` sends

    def says(self, text: str) -> bool:
        return any(text in line for line in self.output)


def static_pair(root: Path, *master_args: str) -> tuple[Member, Member]:
    """Master ``root/a`` (started; ``master_args`` after its role) and its slave
    ``root/b`` (not started: the caller starts it inside its ``try``)."""
    a = Member(root / "a", "--replication-role", "master", *master_args).start()
    b = Member(
        root / "b", "--replication-role", "slave", "--replication-master", a.replication_address
    )
    return a, b


def wait_for(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """Until ``check()`` holds (a bound on waiting, not a timed assertion). A check that
    raises (a member answering between two states) counts as not yet."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if check():
                return
        except (KeyError, OSError, AssertionError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")
        time.sleep(0.05)


def caught_up(slave: Member, master: Member) -> bool:
    """The slave's log ends where the master's does."""
    return slave.replication()["log_end"] == master.replication()["log_end"]


def bodies_in_log(data_dir: Path) -> list[bytes]:
    """The bodies of the message records of a store's log (read-only, beside a running
    gateway or after it stopped)."""
    store = MessageStore.open_read_only(data_dir)
    try:
        return [r.body for r in store.records_from(store.log_start) if r.type == RecordType.MESSAGE]
    finally:
        store.close()


def log_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((data_dir / "commitlog").iterdir()))


class Publisher:
    """A paho QoS 1 publisher in its own thread: publishes ``prefix-N`` to ``topic`` one
    after another (each waits for its PUBACK) until stopped or the connection fails;
    ``acked`` holds every body acknowledged."""

    def __init__(self, port: int, topic: str = "rep/t", prefix: str = "m") -> None:
        self.port = port
        self.topic = topic
        self.prefix = prefix
        self.acked: list[bytes] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Publisher:
        self.thread.start()
        return self

    def _run(self) -> None:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{self.prefix}")
        gone = threading.Event()
        client.on_disconnect = lambda *args: gone.set()
        try:
            client.connect("127.0.0.1", self.port)
            client.loop_start()
            n = 0
            while not self.stopped.is_set():
                body = f"{self.prefix}-{n}".encode()
                info = client.publish(self.topic, body, qos=1)
                while not (info.is_published() or gone.is_set()):
                    info.wait_for_publish(timeout=0.1)
                if not info.is_published():
                    return
                self.acked.append(body)
                n += 1
        except (OSError, RuntimeError, ValueError):
            return
        finally:
            client.loop_stop()
            client.disconnect()
            client._reset_sockets()  # after a lost connection paho closes neither socket

    def stop(self) -> list[bytes]:
        self.stopped.set()
        self.thread.join(timeout=60)
        return self.acked


async def route_addrs(address: str, topic: str) -> dict[str, str]:
    """The ``brokerAddrs`` of ``topic``'s route from the gateway at ``address``."""
    async with RemotingClient(address) as client:
        conn = await client.connection(client.namesrv)
        reply = await conn.call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True}
        )
        addrs: dict[str, str] = json.loads(reply.body)["brokerDatas"][0]["brokerAddrs"]
        return addrs


class _PullerAt(PullConsumer):
    """A pull consumer reading from one broker address of the route, as RocketMQ's
    clients read from a slave when the route has no master (findBrokerAddressInSubscribe)."""

    def __init__(self, client: RemotingClient, group: str, address: str) -> None:
        super().__init__(client, group)
        self.address = address

    async def _conn(self, mq: MessageQueue) -> RemotingConnection:
        return await self.client.connection(self.address)


async def pull_at(address: str, topic: str, queue_id: int) -> list[bytes]:
    """The bodies of queue ``queue_id`` of ``topic`` pulled from the broker at
    ``address``, with the commit flag set as the Java client's pulls carry it."""
    async with RemotingClient(address) as client:
        consumer = _PullerAt(client, "CG_reads", address)
        mq = MessageQueue(topic, BROKER_NAME, queue_id)
        result = await consumer.pull(mq, 0, max_nums=64, commit_offset=0)
        return [m.body for m in result.messages]
