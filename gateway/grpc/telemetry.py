"""Telemetry: the bidirectional stream of a client's settings and the server's commands.

A client opens one Telemetry stream per endpoint and writes its settings
(``TelemetryCommand{settings}``) at once and every five minutes. Each is answered on
the stream with ``TelemetryCommand{status: OK, settings}``, the client's settings
completed with the server's (the Java proxy's ``GrpcClientSettingsManager``):

- producers: ``publishing.max_body_size`` (the store's largest message; a client
  refuses every send when it is 0), ``validate_message_type`` true, and a
  ``backoff_policy`` with ``exponential_backoff`` (3 attempts, 10 ms doubling to 1 s;
  the Node producer asserts it is there);
- consumers: ``subscription.fifo`` (the group's ``consume_message_orderly``),
  ``receive_batch_size`` 32, ``long_polling_timeout`` 30 s, and a ``backoff_policy``
  of ``max_attempts`` = the group's ``retry_max_times`` + 1 with ``customized_backoff``
  (RocketMQ's delay levels from 1 s; the Python push consumer reads ``next``).

The Node client arms its wait for the first settings reply only after the routes of
all its topics are fetched, so a reply that arrives in between is lost and its start
waits five minutes. The gateway therefore repeats the settings reply
:data:`RESEND_DELAY_S` after the settings command and after each QueryRoute from a
client whose stream has settings, within :data:`RESEND_WINDOW_S` of the stream's
opening (clients apply settings idempotently; the Python push consumer reads only the
first reply).

The stream stays open (the client's outbox in the :class:`~gateway.grpc.clients.
ClientRegistry`) until the client closes it or the gateway stops; server commands
(transaction check-backs) are written through ``ClientRegistry.send_command``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gateway.grpc.registry import OUTBOX_MAX, GrpcClient
from gateway.grpc.requests import Malformed
from protocol.grpc import Code, StatusError, ok, status

if TYPE_CHECKING:
    from gateway.grpc.call import Call
    from gateway.grpc.services import GrpcServices

log = logging.getLogger(__name__)

RESEND_DELAY_S = 0.5
RESEND_WINDOW_S = 30.0
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF = definition_pb2.ExponentialBackoff(
    initial=Duration(nanos=10_000_000), max=Duration(seconds=1), multiplier=2.0)
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 30
#: RocketMQ's default consumer retry delays (CustomizedRetryPolicy: delay levels 3-18).
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600,
                      1200, 1800, 3600, 7200)

PRODUCERS = frozenset((definition_pb2.PRODUCER,))
CONSUMERS = frozenset((
    definition_pb2.PUSH_CONSUMER, definition_pb2.SIMPLE_CONSUMER, definition_pb2.PULL_CONSUMER))


def reply_settings(
    services: GrpcServices, settings: definition_pb2.Settings
) -> definition_pb2.Settings:
    """The client's settings completed with the server's (see the module docstring)."""
    reply = definition_pb2.Settings()
    reply.CopyFrom(settings)
    if settings.HasField("publishing") or settings.client_type in PRODUCERS:
        reply.publishing.max_body_size = services.max_body
        reply.publishing.validate_message_type = True
        policy = reply.backoff_policy
        policy.Clear()
        policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        policy.exponential_backoff.CopyFrom(PRODUCER_BACKOFF)
    elif settings.HasField("subscription") or settings.client_type in CONSUMERS:
        sub = reply.subscription
        group = services.groups.get(sub.group.name) if sub.group.name else None
        sub.fifo = bool(group is not None and group.consume_message_orderly)
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.CopyFrom(Duration(seconds=LONG_POLLING_TIMEOUT_S))
        policy = reply.backoff_policy
        policy.Clear()
        policy.max_attempts = (group.retry_max_times if group is not None else 16) + 1
        policy.customized_backoff.next.extend(Duration(seconds=s) for s in CONSUMER_BACKOFF_S)
    return reply


def _settings_reply(services: GrpcServices, client: GrpcClient) -> service_pb2.TelemetryCommand:
    assert client.settings is not None
    return service_pb2.TelemetryCommand(
        status=ok(), settings=reply_settings(services, client.settings))


def route_queried(call: Call) -> None:
    """A QueryRoute from ``call``'s client: repeat its settings reply shortly after."""
    services = call.services
    client = services.clients.get(call.client_id) if call.client_id else None
    if client is not None:
        _schedule_resend(services, client)


def _schedule_resend(services: GrpcServices, client: GrpcClient) -> None:
    """Repeat the client's settings reply in :data:`RESEND_DELAY_S` (once, however often
    asked meanwhile), within :data:`RESEND_WINDOW_S` of its stream's opening."""
    if client.outbox is None or client.settings is None or client.resend_scheduled:
        return
    if services.loop.time() - client.stream_opened > RESEND_WINDOW_S:
        return
    client.resend_scheduled = True
    outbox = client.outbox

    def resend() -> None:
        client.resend_scheduled = False
        if client.outbox is outbox and client.settings is not None:
            with contextlib.suppress(asyncio.QueueFull):
                outbox.put_nowait(_settings_reply(services, client))

    services.loop.call_later(RESEND_DELAY_S, resend)


def _handle(
    services: GrpcServices, client: GrpcClient, command: service_pb2.TelemetryCommand
) -> service_pb2.TelemetryCommand | None:
    kind = command.WhichOneof("command")
    if kind == "settings":
        settings = command.settings
        if settings.client_type == definition_pb2.CLIENT_TYPE_UNSPECIFIED and not (
            settings.HasField("publishing") or settings.HasField("subscription")
        ):
            return service_pb2.TelemetryCommand(status=status(
                Code.UNRECOGNIZED_CLIENT_TYPE, "settings without a client type"))
        client.settings = settings
        if settings.client_type:
            client.client_type = settings.client_type
        if settings.HasField("subscription") and settings.subscription.group.name:
            client.groups.add(settings.subscription.group.name)
        _schedule_resend(services, client)  # for a route query that crossed this command
        return _settings_reply(services, client)
    if kind in ("thread_stack_trace", "verify_message_result"):
        return None  # answers to commands the gateway never sends
    return service_pb2.TelemetryCommand(status=status(
        Code.BAD_REQUEST, f"unsupported telemetry command {kind or 'none'}"))


async def telemetry(
    call: Call, requests: AsyncIterator[service_pb2.TelemetryCommand]
) -> AsyncIterator[service_pb2.TelemetryCommand]:
    services = call.services
    if not call.client_id:
        raise StatusError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
    client = services.clients.seen(call.client_id, call.metadata)
    outbox: asyncio.Queue[service_pb2.TelemetryCommand] = asyncio.Queue(OUTBOX_MAX)
    client.outbox = outbox
    client.stream_opened = services.loop.time()

    async def read() -> None:
        async for command in requests:
            client.last_seen = services.loop.time()
            if isinstance(command, Malformed):
                reply = service_pb2.TelemetryCommand(
                    status=status(Code.BAD_REQUEST, f"malformed command: {command.error}"))
            else:
                reply = _handle(services, client, command)
            if reply is not None:
                outbox.put_nowait(reply)

    reader = asyncio.ensure_future(read())
    stopping = asyncio.ensure_future(call.must_end())
    try:
        while True:
            if not outbox.empty():
                yield outbox.get_nowait()
                continue
            getter = asyncio.ensure_future(outbox.get())
            done, _ = await asyncio.wait(
                (getter, reader, stopping), return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
                continue
            getter.cancel()
            if reader in done:
                reader.result()  # a failed read is an error of the call
                while not outbox.empty():
                    yield outbox.get_nowait()
            return  # the client closed its side, or the gateway stops (Call.must_end)
    finally:
        for task in (reader, stopping):
            task.cancel()
        if client.outbox is outbox:
            client.outbox = None
            client.last_seen = services.loop.time()
