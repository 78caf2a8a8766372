"""A real gateway in a subprocess (``python -m cli.serve``) for integration tests:
ephemeral loopback ports, a bounded start, stop by SIGTERM or kill -9, restart on the
same data directory."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


class GatewayProcess:
    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.ports: dict[str, int] = {}
        self.output: list[str] = []

    def start(self) -> GatewayProcess:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                sys.executable,
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
            ],
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
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(
                    "gateway did not become ready:\n" + "".join(self.output)
                ) from None
            if line is None:
                assert self.proc is not None
                self.proc.wait(timeout=10)
                self._close()
                raise RuntimeError("gateway exited:\n" + "".join(self.output))
            if line.startswith("listening "):
                _, name, address = line.split()
                self.ports[name] = int(address.rsplit(":", 1)[1])
            if line.strip() == "ready":
                return self

    @property
    def mqtt_port(self) -> int:
        return self.ports["mqtt"]

    def stop(self, timeout: float = 20.0) -> int:
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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def restart(self) -> GatewayProcess:
        self.stop()
        self.ports = {}
        return self.start()
