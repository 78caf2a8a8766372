"""The gRPC front end: shared state, the ``grpc.aio`` server and its listeners.

Event-loop thread only (grpc.aio runs its servicer on the gateway's loop).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc.aio
from rocketmq.grpc_protocol import service_pb2_grpc

from gateway.frontend import ConnectionHandler, FrontEnd
from gateway.frontends import h2_goaway
from gateway.grpc.call import CLIENT_ID, Call
from gateway.grpc.service import MessagingService

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)


class GrpcFrontEnd(FrontEnd):
    name = "grpc"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        self.loop = ctx.loop
        self.store = ctx.store
        self.publisher = ctx.publisher
        self.topics = ctx.rocketmq_topics
        self.groups = ctx.rocketmq_groups
        self.max_body = ctx.store.config.max_message_bytes
        self.advertised_address = ctx.config.advertised_address
        self.server: grpc.aio.Server | None = None
        self.service = MessagingService(self)
        #: Calls by RPC and status code (copied into the labelled counter at scrape).
        self.call_counts: dict[tuple[str, int], int] = {}

    async def start(self) -> None:
        server = grpc.aio.server()
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        port = self.ctx.config.port("grpc") if hasattr(self.ctx.config, "grpc_port") else None
        if port is not None:
            server.add_insecure_port(f"{self.ctx.config.bind}:{port}")
        await server.start()
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(1.0)

    def connection_made(self, conn: Connection) -> ConnectionHandler:
        conn.write(h2_goaway(b"gRPC is not served on this port yet"))
        conn.close("grpc")
        return ConnectionHandler(conn)

    # -- calls -------------------------------------------------------------------------

    def new_call(self, rpc: str, context: grpc.aio.ServicerContext[Any, Any]) -> Call:
        metadata: dict[str, str] = {}
        for key, value in context.invocation_metadata() or ():
            metadata[key.lower()] = value if isinstance(value, str) else value.decode("latin-1")
        remaining = context.time_remaining()
        deadline = None if remaining is None else self.loop.time() + remaining
        return Call(self, rpc, context, metadata, metadata.get(CLIENT_ID, ""),
                    context.peer() or "", None, deadline=deadline)

    def count(self, rpc: str, code: int) -> None:
        key = (rpc, code)
        self.call_counts[key] = self.call_counts.get(key, 0) + 1
