"""Harness of the Aliyun MQ HTTP API tests: an in-process gateway on its own loop
thread (:class:`ThreadGateway`) with the API's handlers served over real loopback
sockets.

The HTTP server here (:class:`RouterServer`) is a stand-in until the gateway's own h11
server (branch h-http) is merged: HTTP/1.1 keep-alive, Content-Length bodies only, each
request parsed into the handler contract's :class:`Request` and routed by the same
:class:`Router`. It exists so the real SDKs can talk to the real handlers; it is not
what the gateway serves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gateway.http.aliyun import AliyunHttpApi
from gateway.http.messages import Request, Response
from gateway.http.routes import Router

from ..amqp_support import ThreadGateway

_REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request",
            403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            429: "Too Many Requests", 500: "Internal Server Error"}


class RouterServer:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=2)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [(k.strip().lower(), v.strip()) for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)]
                length = int(dict(headers).get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                request = Request(method, target, headers, body, peer=f"{peer[0]}:{peer[1]}")
                match = self.router.match(method, request.path)
                if match is None or match.handler is None:
                    response = Response(404 if match is None else 405)
                else:
                    request.params = match.params
                    response = await match.handler(request)
                data = response.body if isinstance(response.body, bytes) else b""
                out = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'X')}"]
                out += [f"{k}: {v}" for k, v in response.headers]
                if response.status != 204:
                    out.append(f"Content-Length: {len(data)}")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + data)
                await writer.drain()
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class AliyunGateway:
    """A ThreadGateway with the Aliyun API served on :attr:`endpoint`."""

    def __init__(self, data_dir: Path, **options: Any) -> None:
        self.gw = ThreadGateway(data_dir, **options)
        self.api: AliyunHttpApi | None = None
        self.server: RouterServer | None = None
        #: Called before the gateway stops (tests close their clients here).
        self.on_stop: list[Callable[[], object]] = []

    def start(self) -> AliyunGateway:
        self.gw.start()

        async def serve() -> None:
            assert self.gw.gateway is not None
            self.api = AliyunHttpApi(self.gw.gateway.ctx)
            router = Router()
            self.api.routes(router)
            self.server = RouterServer(router)
            await self.server.start()

        self.gw.call(serve())
        return self

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        for close in self.on_stop:
            with contextlib.suppress(Exception):
                close()
        if self.server is not None:
            self.gw.call(self.server.stop())
        if self.api is not None:
            self.gw.run(self.api.close)
        self.gw.stop()


@contextlib.contextmanager
def aliyun_gateway(data_dir: Path, **options: Any) -> Iterator[AliyunGateway]:
    gateway = AliyunGateway(data_dir, **options).start()
    try:
        yield gateway
    finally:
        gateway.stop()
