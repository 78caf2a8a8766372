"""A TCP relay whose link can be cut, for the network-cut tests and benches (no tests
here): 127.0.0.1:``port`` forwards to 127.0.0.1:``target`` on its own event-loop thread.

``cut()`` drops every relayed connection on both sides at once (``transport.abort()``:
what is unsent is discarded, the peers see the connection closed) and closes the
listening socket, so a new connection is refused by the kernel (ECONNREFUSED), as when
the network to the target is gone; ``restore()`` listens on the same port again and forwards. The
target itself stays up throughout. ``stop()`` ends the thread; everything it opened is
closed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CutRelay:
    """Relay 127.0.0.1:``port`` -> 127.0.0.1:``target``; ``cut``/``restore`` are
    thread-safe and return once done."""

    def __init__(self, target: int, port: int = 0) -> None:
        self.target = target
        self.port = port or _free_port()
        self.cuts = 0
        self.accepted = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the relay did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._listen())
        ready.set()
        self.loop.run_forever()
        # the relayed connections' tasks end here, not as "destroyed but pending"
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted just before a cut
            writer.transport.abort()
            return
        try:
            r2, w2 = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        self._writers |= {writer, w2}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()
                self._writers.discard(dst)

        await asyncio.gather(pipe(reader, w2), pipe(r2, writer))

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        self.cuts += 1

    def _call(self, coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(10)

    def cut(self) -> None:
        """Drop every relayed connection and refuse new ones until :meth:`restore`."""
        self._call(self._cut)

    def restore(self) -> None:
        """Listen on the same port again and forward."""
        if self._server is None:
            self._call(self._listen)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self._call(self._cut)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class RelayProcess:
    """The relay as a child process (``python -m tests.gateway.connector.cut_relay``),
    so its forwarding does not share the caller's interpreter; same ``port``, ``cut``,
    ``restore``, ``stop``. ``pid`` is the child's."""

    def __init__(self, target: int) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.gateway.connector.cut_relay", str(target)],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": root},
            start_new_session=True,
        )
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the relay did not start: {line!r}")
        self.port = int(line.split()[1])

    def _say(self, what: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()

    def cut(self) -> None:
        self._say("cut")

    def restore(self) -> None:
        self._say("restore")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def main() -> None:
    """``python -m tests.gateway.connector.cut_relay TARGET_PORT``: the relay as a process
    of its own (benches keep its forwarding off their own CPU time); prints ``port N``,
    then obeys ``cut`` / ``restore`` lines on stdin (answering ``ok``) until EOF."""
    relay = CutRelay(int(sys.argv[1]))
    print(f"port {relay.port}", flush=True)
    for line in sys.stdin:
        if line.strip() == "cut":
            relay.cut()
        elif line.strip() == "restore":
            relay.restore()
        print("ok", flush=True)
    relay.stop()


if __name__ == "__main__":
    main()
