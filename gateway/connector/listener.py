"""The standalone connector's small HTTP status listener (loopback by default):

- ``GET /status``: JSON ``{"rules": [<RuleStats.snapshot()>...]}`` (``lmq connector
  status`` reads it);
- ``GET /metrics``: the ``lmq_connector_*`` metrics in the Prometheus text format.

One request per connection, ``Connection: close``; HTTP/1.1 parsed by h11 (one request
per connection: the gateway's HTTP server's pipelining and limits are not needed here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import h11

from gateway.metrics import Registry

READ_TIMEOUT = 5.0


class StatusListener:
    def __init__(
        self, host: str, port: int, snapshot: Callable[[], list[dict[str, Any]]], registry: Registry
    ) -> None:
        self.host = host
        self.port = port
        self.snapshot = snapshot
        self.registry = registry
        self._server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            request = None
            while request is None:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    async with asyncio.timeout(READ_TIMEOUT):
                        data = await reader.read(65536)
                    conn.receive_data(data)
                elif isinstance(event, h11.Request):
                    request = event
                else:
                    return
            target = request.target.decode("ascii", "replace").split("?")[0]
            if request.method != b"GET":
                status, ctype, body = 405, "text/plain", b"GET only\n"
            elif target == "/status":
                status, ctype = 200, "application/json"
                body = json.dumps({"rules": self.snapshot()}).encode()
            elif target == "/metrics":
                status, ctype = 200, "text/plain; version=0.0.4"
                body = self.registry.render().encode()
            else:
                status, ctype, body = 404, "text/plain", b"not found: /status, /metrics\n"
            headers = [
                ("Content-Type", ctype),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ]
            writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            writer.write(conn.send(h11.Data(data=body)) or b"")
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
        except (TimeoutError, OSError, h11.ProtocolError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
