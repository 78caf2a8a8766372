"""A real client in a subprocess that talks to the test in lines (no tests here).

The client program prints one ``LMQ {json}`` line per event meant for the test; anything
else it prints (the client library's own logging) is kept for failure messages. Commands
can be written to its standard input as JSON lines (``send``). Every wait is bounded, and
the process is stopped by its PID: SIGTERM (so a consumer can close cleanly), then SIGKILL
past a bound.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class LineProcess:
    """One client process; ``name`` prefixes its failure messages."""

    def __init__(self, name: str, argv: list[str], *, cwd: Path,
                 env: dict[str, str] | None = None, stdin: bool = False) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("LMQ "):
                self.events.put(json.loads(line[4:]))
            else:
                self.stderr.append(line)
        self.events.put({"exit": True})

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send(self, command: dict[str, Any]) -> None:
        """One JSON command line to the client's standard input."""
        assert self.proc.stdin is not None, "started without stdin"
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first event not yet taken that matches ``pred``; events that do not match
        stay for later calls (and every event is in ``seen``)."""
        for i, event in enumerate(self.pending):
            if pred(event):
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{self.name}: no matching event in {timeout} s; seen {self.seen[-10:]}\n"
                    + "".join(self.stderr[-30:])
                )
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(event)
            if "fatal" in event:
                raise AssertionError(
                    f"{self.name} failed: {event['fatal']}\n" + "".join(self.stderr[-30:])
                )
            if pred(event):
                return event
            if event.get("exit"):
                raise AssertionError(
                    f"{self.name} exited ({self.proc.poll()}); seen {self.seen[-10:]}\n"
                    + "".join(self.stderr[-30:])
                )
            self.pending.append(event)

    def collect(self, key: str, n: int, timeout: float) -> list[dict[str, Any]]:
        """The next ``n`` events carrying ``key`` (e.g. ``"msg"``), as their values."""
        out = []
        for _ in range(n):
            out.append(self.wait_for(lambda e: key in e, timeout)[key])
        return out

    def quiet(self, key: str, wait: float) -> list[dict[str, Any]]:
        """Events carrying ``key`` not yet taken or arriving within ``wait`` seconds
        (a test expects none)."""
        got = [e[key] for e in self.pending if key in e]
        self.pending = [e for e in self.pending if key not in e]
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(event)
            if key in event:
                got.append(event[key])
            else:
                self.pending.append(event)
        return got

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (a consumer closes cleanly), then SIGKILL past ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass  # a broken stdin pipe of a client that already exited

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
