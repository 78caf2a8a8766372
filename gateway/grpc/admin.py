"""An operator's request to a running gateway over its gRPC port, beside RocketMQ's
protocol: ``/lmq.admin.v1.Admin/ReleaseMessageGroup`` (unary), which releases a
blocked FIFO message group (``lmq groups release ... --gateway HOST:PORT``).

The request and the response are JSON objects in UTF-8 (no generated code on either
side): ``{"group", "topic", "message_group"}`` ->
``{"code", "message", "queue_id", "offset", "dead_letter_topic"}`` (``code`` is a
RocketMQ 5 status code: OK, BAD_REQUEST, MESSAGE_NOT_FOUND (the message group has no
message out on the topic), TOPIC_NOT_FOUND, UNAUTHORIZED, FORBIDDEN...). The release:
the group's head message goes to ``%DLQ%<group>`` (created when missing) and the group
moves on (:meth:`broker_core.MessageStore.release_message_group`), whether the head is
in flight or waiting for its retry; a consumer's receipt of it is void after.

Authorization: the call is authenticated as any gRPC call of the gateway (the access
key signature in ``authorization``, when it has users) and needs permission to
consume the topic as the group, what ForwardMessageToDeadLetterQueue needs: a consumer
of the group may already send the head to the dead-letter queue itself.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gateway.grpc.records import group_config, readable_topic
from gateway.rocketmq.groups import release_message_group as release_message_group_in
from protocol.grpc import Code, StatusError

if TYPE_CHECKING:
    from gateway.grpc.call import Call
    from gateway.grpc.frontend import GrpcFrontEnd

__all__ = ["RELEASE", "SERVICE", "handler", "release_message_group"]

SERVICE = "lmq.admin.v1.Admin"
RELEASE = f"/{SERVICE}/ReleaseMessageGroup"


def release_message_group(call: Call, request: dict[str, Any]) -> dict[str, Any]:
    group, topic, mgroup = (request.get(k) for k in ("group", "topic", "message_group"))
    if not all(isinstance(v, str) and v for v in (group, topic, mgroup)):
        raise StatusError(Code.BAD_REQUEST,
                          "group, topic and message_group must be non-empty strings")
    assert isinstance(group, str) and isinstance(topic, str) and isinstance(mgroup, str)
    group_config(call, group)
    readable_topic(call, topic, group)
    released = release_message_group_in(call.services.store, call.services.topics.ensure,
                                        group, topic, mgroup)
    if released is not None:
        return {"code": int(Code.OK), "message": "released", "queue_id": released.queue_id,
                "offset": released.offset, "dead_letter_topic": released.dead_letter_topic}
    raise StatusError(Code.MESSAGE_NOT_FOUND,
                      f"message group {mgroup!r} of {group!r} has no message out on {topic}")


def handler(front: GrpcFrontEnd) -> Callable[[bytes, Any], Awaitable[bytes]]:
    """The unary handler of :data:`RELEASE` (request and response bytes; ``context`` is
    the door's per-call object, :class:`gateway.grpc.server.ServerCall`)."""

    async def release(request: bytes, context: Any) -> bytes:
        try:
            call = front.new_call("ReleaseMessageGroup", context)
            try:
                body = json.loads(request)
            except ValueError:
                raise StatusError(Code.BAD_REQUEST, "the request is not JSON") from None
            if not isinstance(body, dict):
                raise StatusError(Code.BAD_REQUEST, "the request is not a JSON object")
            answer = release_message_group(call, body)
        except StatusError as exc:
            answer = {"code": int(exc.code), "message": exc.message}
        front.count("ReleaseMessageGroup", answer["code"])
        return json.dumps(answer).encode()

    return release
