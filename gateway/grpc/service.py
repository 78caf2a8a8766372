"""The servicer of ``apache.rocketmq.v2.MessagingService``: one method per RPC.

Every method does the same three things: build the per-call context
(:class:`~gateway.grpc.call.Call`: metadata, client id, peer, deadline, and the
principal from the ``authorization`` metadata, :mod:`gateway.grpc.auth`), call the one
function that serves the RPC, and turn what escapes it into the RPC's response:

- :class:`protocol.grpc.StatusError` (raised by the delegate, or by authentication) is
  answered as a response of the RPC's type carrying that status;
- any other exception is logged and answered ``INTERNAL_SERVER_ERROR``. A streamed RPC
  ends with one such status response; the stream is never broken by a crash.
  Cancellation (the client went away, the server stops) propagates.

The delegates (``call`` is a :class:`~gateway.grpc.call.Call`, requests and responses
the ``rocketmq.grpc_protocol.service_pb2`` classes):

- :mod:`gateway.grpc.route`:
  ``async query_route(call, req: QueryRouteRequest) -> QueryRouteResponse``;
  ``async query_assignment(call, req: QueryAssignmentRequest) -> QueryAssignmentResponse``.
- :mod:`gateway.grpc.clients`:
  ``async heartbeat(call, req: HeartbeatRequest) -> HeartbeatResponse``;
  ``async notify_client_termination(call, req) -> NotifyClientTerminationResponse``.
- :mod:`gateway.grpc.telemetry`: ``telemetry(call, requests:
  AsyncIterator[TelemetryCommand]) -> AsyncIterator[TelemetryCommand]`` (async generator).
- :mod:`gateway.grpc.send`:
  ``async send_message(call, req: SendMessageRequest) -> SendMessageResponse``.
- :mod:`gateway.grpc.receive`: ``receive_message(call, req: ReceiveMessageRequest) ->
  AsyncIterator[ReceiveMessageResponse]`` (async generator: messages, a
  ``delivery_timestamp``, then one status).
- :mod:`gateway.grpc.ack`:
  ``async ack_message(call, req: AckMessageRequest) -> AckMessageResponse``;
  ``async change_invisible_duration(call, req: ChangeInvisibleDurationRequest) ->
  ChangeInvisibleDurationResponse``;
  ``async forward_message_to_dead_letter_queue(call, req:
  ForwardMessageToDeadLetterQueueRequest) -> ForwardMessageToDeadLetterQueueResponse``.
- :mod:`gateway.grpc.offsets`: ``pull_message(call, req: PullMessageRequest) ->
  AsyncIterator[PullMessageResponse]`` (async generator);
  ``async update_offset(call, req: UpdateOffsetRequest) -> UpdateOffsetResponse``;
  ``async get_offset(call, req: GetOffsetRequest) -> GetOffsetResponse``;
  ``async query_offset(call, req: QueryOffsetRequest) -> QueryOffsetResponse``.
- :mod:`gateway.grpc.transactions`:
  ``async end_transaction(call, req: EndTransactionRequest) -> EndTransactionResponse``;
  ``async recall_message(call, req: RecallMessageRequest) -> RecallMessageResponse``.

A delegate is looked up on its module at every call (``send.send_message``), so a module
can be replaced without touching this file. Inside a delegate: ``call.services`` is the
:class:`~gateway.grpc.services.GrpcServices` (``store``, ``producer``, ``pop``,
``topics``, ``groups``, ``clients``, ``max_body``; never the front end),
``call.check_publish(topic)`` /
``call.check_subscribe(topic, group)`` raise FORBIDDEN, ``with call.receive_slot():``
holds one of the client's concurrent receives (TOO_MANY_REQUESTS beyond),
``call.time_remaining()`` is the client's deadline, ``call.services.stopping`` (an Event)
is set when the gateway shuts down (end long polls then), ``call.context.cancelled()``
says whether the client went away (or its deadline passed). Request messages may be a
:class:`~gateway.grpc.requests.Malformed`: the wrappers answer those before delegating.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from google.protobuf.message import Message
from rocketmq.grpc_protocol import service_pb2

from gateway.grpc import ack, clients, offsets, receive, route, send, telemetry, transactions
from gateway.grpc.call import Call
from gateway.grpc.requests import check_parsed
from protocol.grpc import Code, StatusError, status

if TYPE_CHECKING:
    from gateway.grpc.server import ServerCall

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)

#: The door's per-call object (:class:`gateway.grpc.server.ServerCall`).
Context: TypeAlias = "ServerCall"


class MessagingService:
    """Served by the gRPC door (:mod:`gateway.grpc.server`), which finds each RPC here
    by its name in the generated service descriptor; an RPC without a method is
    UNIMPLEMENTED."""

    def __init__(self, front: Any) -> None:
        #: The GrpcFrontEnd.
        self.front = front

    # -- the wrappers ------------------------------------------------------------------

    async def _unary(
        self,
        rpc: str,
        request: Message,
        context: Context,
        delegate: Callable[[Call, Any], Awaitable[R]],
        response_type: type[R],
    ) -> R:
        front = self.front
        try:
            check_parsed(request)
            call = front.new_call(rpc, context)
            response = await delegate(call, request)
        except StatusError as exc:
            response = response_type(status=exc.status())
        except Exception:
            log.exception("gRPC call failed", extra={"protocol": "grpc", "rpc": rpc})
            response = response_type(
                status=status(Code.INTERNAL_SERVER_ERROR, f"{rpc} failed inside the gateway"))
        front.count(rpc, response.status.code)  # type: ignore[attr-defined]
        return response

    async def _stream(
        self,
        rpc: str,
        request: Any,
        context: Context,
        delegate: Callable[[Call, Any], AsyncIterator[R]],
        response_type: type[R],
    ) -> AsyncIterator[R]:
        front = self.front
        code: int = Code.OK
        front.open_streams += 1
        try:
            check_parsed(request)  # a stream of requests (Telemetry) checks each one
            call = front.new_call(rpc, context)
            async for response in delegate(call, request):
                if response.HasField("status"):
                    code = response.status.code  # type: ignore[attr-defined]
                yield response
        except StatusError as exc:
            code = exc.code
            yield response_type(status=exc.status())
        except Exception:
            log.exception("gRPC call failed", extra={"protocol": "grpc", "rpc": rpc})
            code = Code.INTERNAL_SERVER_ERROR
            yield response_type(
                status=status(Code.INTERNAL_SERVER_ERROR, f"{rpc} failed inside the gateway"))
        finally:
            front.open_streams -= 1
            front.count(rpc, code)

    # -- the RPCs ----------------------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Context) -> Any:
        return await self._unary("QueryRoute", request, context,
                                 lambda c, r: route.query_route(c, r),
                                 service_pb2.QueryRouteResponse)

    async def Heartbeat(self, request: Any, context: Context) -> Any:
        return await self._unary("Heartbeat", request, context,
                                 lambda c, r: clients.heartbeat(c, r),
                                 service_pb2.HeartbeatResponse)

    async def SendMessage(self, request: Any, context: Context) -> Any:
        return await self._unary("SendMessage", request, context,
                                 lambda c, r: send.send_message(c, r),
                                 service_pb2.SendMessageResponse)

    async def QueryAssignment(self, request: Any, context: Context) -> Any:
        return await self._unary("QueryAssignment", request, context,
                                 lambda c, r: route.query_assignment(c, r),
                                 service_pb2.QueryAssignmentResponse)

    def ReceiveMessage(self, request: Any, context: Context) -> AsyncIterator[Any]:
        return self._stream("ReceiveMessage", request, context,
                            lambda c, r: receive.receive_message(c, r),
                            service_pb2.ReceiveMessageResponse)

    async def AckMessage(self, request: Any, context: Context) -> Any:
        return await self._unary("AckMessage", request, context,
                                 lambda c, r: ack.ack_message(c, r),
                                 service_pb2.AckMessageResponse)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Context) -> Any:
        return await self._unary("ForwardMessageToDeadLetterQueue", request, context,
                                 lambda c, r: ack.forward_message_to_dead_letter_queue(c, r),
                                 service_pb2.ForwardMessageToDeadLetterQueueResponse)

    def PullMessage(self, request: Any, context: Context) -> AsyncIterator[Any]:
        return self._stream("PullMessage", request, context,
                            lambda c, r: offsets.pull_message(c, r),
                            service_pb2.PullMessageResponse)

    async def UpdateOffset(self, request: Any, context: Context) -> Any:
        return await self._unary("UpdateOffset", request, context,
                                 lambda c, r: offsets.update_offset(c, r),
                                 service_pb2.UpdateOffsetResponse)

    async def GetOffset(self, request: Any, context: Context) -> Any:
        return await self._unary("GetOffset", request, context,
                                 lambda c, r: offsets.get_offset(c, r),
                                 service_pb2.GetOffsetResponse)

    async def QueryOffset(self, request: Any, context: Context) -> Any:
        return await self._unary("QueryOffset", request, context,
                                 lambda c, r: offsets.query_offset(c, r),
                                 service_pb2.QueryOffsetResponse)

    async def EndTransaction(self, request: Any, context: Context) -> Any:
        return await self._unary("EndTransaction", request, context,
                                 lambda c, r: transactions.end_transaction(c, r),
                                 service_pb2.EndTransactionResponse)

    def Telemetry(self, request_iterator: Any, context: Context) -> AsyncIterator[Any]:
        return self._stream("Telemetry", request_iterator, context,
                            lambda c, r: telemetry.telemetry(c, r),
                            service_pb2.TelemetryCommand)

    async def NotifyClientTermination(self, request: Any, context: Context) -> Any:
        return await self._unary("NotifyClientTermination", request, context,
                                 lambda c, r: clients.notify_client_termination(c, r),
                                 service_pb2.NotifyClientTerminationResponse)

    async def ChangeInvisibleDuration(self, request: Any, context: Context) -> Any:
        return await self._unary("ChangeInvisibleDuration", request, context,
                                 lambda c, r: ack.change_invisible_duration(c, r),
                                 service_pb2.ChangeInvisibleDurationResponse)

    async def RecallMessage(self, request: Any, context: Context) -> Any:
        return await self._unary("RecallMessage", request, context,
                                 lambda c, r: transactions.recall_message(c, r),
                                 service_pb2.RecallMessageResponse)

    async def SyncLiteSubscription(self, request: Any, context: Context) -> Any:
        async def unsupported(call: Call, req: Any) -> Any:
            raise StatusError(Code.UNSUPPORTED, "lite topics are not supported by this gateway")

        return await self._unary("SyncLiteSubscription", request, context, unsupported,
                                 service_pb2.SyncLiteSubscriptionResponse)


__all__ = ["MessagingService"]
