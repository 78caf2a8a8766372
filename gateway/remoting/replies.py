"""Building remoting responses and server-to-client requests.

A handler returns ``response(...)`` or ``error(...)``; the connection fills in the
request's opaque and the response flag (:meth:`gateway.remoting.handler.RemotingHandler.reply`).
Header fields travel as ``extFields``, a map of strings in RocketMQ's JSON header, so
values are converted with ``str`` here (booleans as ``true``/``false``, as fastjson
writes them); ``None`` values are left out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from broker_core import DelayTooLong, MessageTooLarge, StorageFull, StoreError
from gateway.rocketmq import producer as p
from protocol.remoting import RemotingCommand
from protocol.remoting.codes import ResponseCode
from protocol.remoting.command import SERVER_VERSION

__all__ = [
    "RequestError", "encode_send_ok", "error", "failure", "field_str", "request", "response",
]


class RequestError(Exception):
    """Answer the request with ``code`` and ``remark`` (the connection stays open)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def field_str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fields(fields: Mapping[str, object] | None) -> dict[str, str]:
    if not fields:
        return {}
    return {k: field_str(v) for k, v in fields.items() if v is not None}


def response(
    code: int = ResponseCode.SUCCESS,
    remark: str | None = None,
    fields: Mapping[str, object] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response (opaque and flag are set when it is sent)."""
    return RemotingCommand(
        code=int(code), version=SERVER_VERSION, remark=remark, ext_fields=_fields(fields),
        body=body)


def error(code: int, remark: str, fields: Mapping[str, object] | None = None) -> RemotingCommand:
    """An error response: ``code`` (a ``ResponseCode``) with a human-readable remark."""
    return response(code, remark, fields)


#: The producer service's refusals as remoting answers them (RocketMQ's codes).
_PRODUCER_CODES: dict[type[p.ProducerError], int] = {
    p.InvalidTopic: ResponseCode.SYSTEM_ERROR,
    p.SystemTopic: ResponseCode.NO_PERMISSION,
    p.TopicNotFound: ResponseCode.TOPIC_NOT_EXIST,
    p.NotWritable: ResponseCode.NO_PERMISSION,
    p.Forbidden: ResponseCode.NO_PERMISSION,
    p.TypeMismatch: ResponseCode.MESSAGE_ILLEGAL,
    p.IllegalMessage: ResponseCode.MESSAGE_ILLEGAL,
    p.BadQueue: ResponseCode.SYSTEM_ERROR,
    p.TransactionNotFound: ResponseCode.SYSTEM_ERROR,
    p.TransactionConflict: ResponseCode.SYSTEM_ERROR,
    p.WrongProducerGroup: ResponseCode.SYSTEM_ERROR,
}


def failure(exc: BaseException) -> RemotingCommand:
    """The answer to a send or an end of transaction that failed with ``exc``: a
    refusal of the producer service, or the store's error."""
    if isinstance(exc, p.ProducerError):
        return error(_PRODUCER_CODES.get(type(exc), ResponseCode.SYSTEM_ERROR), str(exc))
    if isinstance(exc, (MessageTooLarge, DelayTooLong)):
        return error(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if isinstance(exc, StorageFull):
        return error(ResponseCode.SERVICE_NOT_AVAILABLE, f"the store is full: {exc}")
    if isinstance(exc, StoreError):
        return error(ResponseCode.SYSTEM_ERROR, f"the store refused the message: {exc}")
    return error(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def request(
    code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
) -> RemotingCommand:
    """A server-to-client request (the connection sets its opaque)."""
    return RemotingCommand(
        code=int(code), version=SERVER_VERSION, ext_fields=_fields(fields), body=body)


_SEND_OK = (
    b'{"code":0,"extFields":{"msgId":"%s","queueId":"%d","queueOffset":"%d"},"flag":1,'
    b'"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":'
    + str(SERVER_VERSION).encode() + b"}"
)
_FRAME_HEAD = struct.Struct(">ii")


def encode_send_ok(opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
    """The whole frame of a SUCCESS send response, written from a template: the bytes
    ``RemotingCommand(...).encode()`` writes for it (a test checks they are equal),
    without building a command and a JSON document per send. ``msg_id`` is hex, the
    rest integers: nothing needs escaping."""
    header = _SEND_OK % (msg_id.encode(), queue_id, queue_offset, opaque)
    return _FRAME_HEAD.pack(4 + len(header), len(header)) + header
