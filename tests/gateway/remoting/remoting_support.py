"""Support for the remoting front-end tests (no tests here): an in-process gateway on the
test's event loop with the remoting front end on the unified port, and a small asyncio
remoting client built on the project's sans-IO codec (``protocol.remoting``): requests
paired with responses by opaque, server-to-client requests collected."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config import AUTO, GatewayConfig
from gateway.frontends import FRONT_ENDS, FrontEndSpec
from gateway.server import Gateway
from protocol.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode

BOUND = 15.0


def _sniff_remoting(prefix: bytes) -> bool | None:
    """Until the gateway registers remoting on the unified port itself: a 4-byte length
    below 16 MiB, then a header mark whose type byte is 0 or 1."""
    if len(prefix) < 5:
        return None if not prefix or prefix[0] == 0 else False
    return prefix[0] == 0 and prefix[4] in (0, 1)


def front_end_specs() -> tuple[FrontEndSpec, ...]:
    if any(spec.name == "remoting" for spec in FRONT_ENDS):
        return FRONT_ENDS
    return (*FRONT_ENDS, FrontEndSpec("remoting", "gateway.remoting", _sniff_remoting))


@asynccontextmanager
async def running_gateway(data_dir: Path, **options: Any) -> AsyncIterator[Gateway]:
    config = GatewayConfig(**{
        "data_dir": data_dir, "mqtt_port": AUTO, "amqp_port": 0, "unified_port": AUTO,
        "grpc_port": 0, "shutdown_timeout": 2.0, **options})
    gateway = Gateway(config, front_ends=front_end_specs())
    await asyncio.wait_for(gateway.start(), BOUND)
    try:
        yield gateway
    finally:
        await asyncio.wait_for(gateway.stop(), BOUND)


def port_of(gateway: Gateway, name: str = "unified") -> int:
    listener = gateway.listener(name)
    assert listener is not None
    return listener.port


class RemotingError(Exception):
    def __init__(self, response: RemotingCommand) -> None:
        super().__init__(f"code {response.code}: {response.remark}")
        self.response = response


class Client:
    """One remoting connection. ``call`` sends a request and awaits its response;
    ``oneway`` sends without waiting; ``server_requests`` collects what the server
    sends unasked (NOTIFY_CONSUMER_IDS_CHANGED)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self._opaque = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.server_requests: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> Client:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), BOUND)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.decoder.feed(data)
                while (cmd := self.decoder.next_command()) is not None:
                    if cmd.is_response:
                        fut = self._waiting.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    else:
                        self.server_requests.put_nowait(cmd)
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def request(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"",
                **kw: Any) -> tuple[int, asyncio.Future[RemotingCommand]]:
        opaque = next(self._opaque)
        cmd = RemotingCommand.request(
            code, {k: _s(v) for k, v in (fields or {}).items()}, body, opaque=opaque, **kw)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[opaque] = fut
        self.writer.write(cmd.encode())
        return opaque, fut

    async def call(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"",
                   timeout: float = BOUND, **kw: Any) -> RemotingCommand:
        _, fut = self.request(code, fields, body, **kw)
        return await asyncio.wait_for(fut, timeout)

    async def ok(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"",
                 **kw: Any) -> RemotingCommand:
        response = await self.call(code, fields, body, **kw)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(response)
        return response

    def oneway(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"") -> None:
        cmd = RemotingCommand.request(
            code, {k: _s(v) for k, v in (fields or {}).items()}, body,
            opaque=next(self._opaque), oneway=True)
        self.writer.write(cmd.encode())

    async def heartbeat(self, client_id: str, group: str, topic: str,
                        expression: str = "*", producer: str | None = None) -> None:
        body = {
            "clientID": client_id,
            "producerDataSet": [{"groupName": producer}] if producer else [],
            "consumerDataSet": [{
                "groupName": group, "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [{
                    "topic": topic, "subString": expression, "tagsSet": [],
                    "codeSet": [], "subVersion": 1, "expressionType": "TAG"}],
            }] if group else [],
        }
        await self.ok(RequestCode.HEART_BEAT, body=json.dumps(body).encode())

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), BOUND)
        except (ConnectionError, OSError):
            pass
        self._task.cancel()


def _s(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
