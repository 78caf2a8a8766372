"""Processes of this repository run as children for integration tests and benches:
:class:`ReadyProcess`, the one harness (started with the repository on ``PYTHONPATH``, a
bounded wait for its ``ready`` line, stopped by PID with SIGTERM then SIGKILL, its output
kept), and :class:`GatewayProcess` on it: a real gateway (``python -m cli.serve``) on
ephemeral loopback ports, restarted on the same data directory."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[2]


class ReadyProcess:
    """A child that prints ``ready`` once it serves. Its stdout and stderr are read line
    by line into ``output`` by a thread of their own (so the child never blocks on a full
    pipe, and what it said is there for an assertion's message); the lines before
    ``ready`` go to :meth:`_saw` too, where a subclass takes the ports it names.
    Subclasses give :meth:`command`, ``name`` (for errors) and ``start_timeout``."""

    name = "process"
    start_timeout = 30.0

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def command(self) -> list[str]:
        """The arguments after ``python``."""
        raise NotImplementedError

    def _saw(self, line: str) -> None:
        """A line the child printed before ``ready``."""

    def start(self) -> Self:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, *self.command()],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(
                    f"{self.name} did not become ready:\n" + "".join(self.output)
                ) from None
            if line is None:
                assert self.proc is not None
                self.proc.wait(timeout=10)
                self._close()
                raise RuntimeError(f"{self.name} exited:\n" + "".join(self.output))
            if line.strip() == "ready":
                return self
            self._saw(line)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout`` s; its exit code
        (0 when it was not running)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._close()
        return code

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


class GatewayProcess(ReadyProcess):
    """``lmq serve`` on ephemeral loopback ports (``ports``: by listener name, from its
    ``listening NAME HOST:PORT`` lines); ``extra`` arguments follow the defaults."""

    name = "gateway"

    def __init__(self, data_dir: Path, *extra: str) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.extra = extra
        self.ports: dict[str, int] = {}

    def command(self) -> list[str]:
        return [
            "-m",
            "cli.serve",
            "--data-dir",
            str(self.data_dir),
            "--bind",
            "127.0.0.1",
            "--mqtt-port",
            "auto",
            "--amqp-port",
            "auto",
            "--unified-port",
            "auto",
            "--grpc-port",
            "auto",
            *self.extra,
        ]

    def _saw(self, line: str) -> None:
        if line.startswith("listening "):
            _, name, address = line.split()
            self.ports[name] = int(address.rsplit(":", 1)[1])

    @property
    def mqtt_port(self) -> int:
        return self.ports["mqtt"]

    def restart(self) -> GatewayProcess:
        self.stop()
        self.ports = {}
        return self.start()
