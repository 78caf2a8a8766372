"""``apache.rocketmq.v2.Status``: a code of ``apache.rocketmq.v2.Code`` and a message.

Every v2 response carries one; the clients decide on ``status.code`` alone (the gRPC
call itself succeeds). :class:`Code` names the values the gateway answers with, as the
Java proxy uses them (``proxy/.../grpc/v2/common/ResponseBuilder.java``).
"""

from __future__ import annotations

from enum import IntEnum

from rocketmq.grpc_protocol import definition_pb2

Status = definition_pb2.Status


class Code(IntEnum):
    """``apache.rocketmq.v2.Code`` values used by the gateway (same numbers)."""

    OK = definition_pb2.OK
    BAD_REQUEST = definition_pb2.BAD_REQUEST
    ILLEGAL_ACCESS_POINT = definition_pb2.ILLEGAL_ACCESS_POINT
    ILLEGAL_TOPIC = definition_pb2.ILLEGAL_TOPIC
    ILLEGAL_CONSUMER_GROUP = definition_pb2.ILLEGAL_CONSUMER_GROUP
    ILLEGAL_MESSAGE_TAG = definition_pb2.ILLEGAL_MESSAGE_TAG
    ILLEGAL_MESSAGE_KEY = definition_pb2.ILLEGAL_MESSAGE_KEY
    ILLEGAL_MESSAGE_GROUP = definition_pb2.ILLEGAL_MESSAGE_GROUP
    ILLEGAL_MESSAGE_PROPERTY_KEY = definition_pb2.ILLEGAL_MESSAGE_PROPERTY_KEY
    INVALID_TRANSACTION_ID = definition_pb2.INVALID_TRANSACTION_ID
    ILLEGAL_MESSAGE_ID = definition_pb2.ILLEGAL_MESSAGE_ID
    ILLEGAL_FILTER_EXPRESSION = definition_pb2.ILLEGAL_FILTER_EXPRESSION
    ILLEGAL_INVISIBLE_TIME = definition_pb2.ILLEGAL_INVISIBLE_TIME
    ILLEGAL_DELIVERY_TIME = definition_pb2.ILLEGAL_DELIVERY_TIME
    INVALID_RECEIPT_HANDLE = definition_pb2.INVALID_RECEIPT_HANDLE
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = definition_pb2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    UNRECOGNIZED_CLIENT_TYPE = definition_pb2.UNRECOGNIZED_CLIENT_TYPE
    MESSAGE_CORRUPTED = definition_pb2.MESSAGE_CORRUPTED
    CLIENT_ID_REQUIRED = definition_pb2.CLIENT_ID_REQUIRED
    ILLEGAL_POLLING_TIME = definition_pb2.ILLEGAL_POLLING_TIME
    ILLEGAL_OFFSET = definition_pb2.ILLEGAL_OFFSET
    UNAUTHORIZED = definition_pb2.UNAUTHORIZED
    FORBIDDEN = definition_pb2.FORBIDDEN
    NOT_FOUND = definition_pb2.NOT_FOUND
    MESSAGE_NOT_FOUND = definition_pb2.MESSAGE_NOT_FOUND
    TOPIC_NOT_FOUND = definition_pb2.TOPIC_NOT_FOUND
    CONSUMER_GROUP_NOT_FOUND = definition_pb2.CONSUMER_GROUP_NOT_FOUND
    OFFSET_NOT_FOUND = definition_pb2.OFFSET_NOT_FOUND
    REQUEST_TIMEOUT = definition_pb2.REQUEST_TIMEOUT
    PAYLOAD_TOO_LARGE = definition_pb2.PAYLOAD_TOO_LARGE
    MESSAGE_BODY_TOO_LARGE = definition_pb2.MESSAGE_BODY_TOO_LARGE
    MESSAGE_BODY_EMPTY = definition_pb2.MESSAGE_BODY_EMPTY
    PRECONDITION_FAILED = definition_pb2.PRECONDITION_FAILED
    TOO_MANY_REQUESTS = definition_pb2.TOO_MANY_REQUESTS
    REQUEST_HEADER_FIELDS_TOO_LARGE = definition_pb2.REQUEST_HEADER_FIELDS_TOO_LARGE
    MESSAGE_PROPERTIES_TOO_LARGE = definition_pb2.MESSAGE_PROPERTIES_TOO_LARGE
    INTERNAL_ERROR = definition_pb2.INTERNAL_ERROR
    INTERNAL_SERVER_ERROR = definition_pb2.INTERNAL_SERVER_ERROR
    NOT_IMPLEMENTED = definition_pb2.NOT_IMPLEMENTED
    PROXY_TIMEOUT = definition_pb2.PROXY_TIMEOUT
    UNSUPPORTED = definition_pb2.UNSUPPORTED
    VERSION_UNSUPPORTED = definition_pb2.VERSION_UNSUPPORTED


def status(code: Code | int, message: str = "") -> definition_pb2.Status:
    """A ``Status`` with ``code`` and ``message``."""
    return definition_pb2.Status(code=int(code), message=message)


_OK = definition_pb2.Status(code=Code.OK, message="OK")


def ok(message: str = "OK") -> definition_pb2.Status:
    """``Status{code: OK}``; the Java proxy's message is ``OK`` too.

    The default one is one shared instance (built once, not per response: a response
    given a status, ``Response(status=ok())``, takes a copy of it, about half the cost
    of adopting a new one): use it as a field value, never change it in place."""
    if message == "OK":
        return _OK
    return definition_pb2.Status(code=Code.OK, message=message)


class StatusError(Exception):
    """An RPC's answer is this status (raised by the code serving it; the servicer puts
    it in the RPC's response type). Not a transport error: the gRPC call succeeds."""

    def __init__(self, code: Code | int, message: str) -> None:
        super().__init__(message)
        self.code = Code(code) if code in Code._value2member_map_ else code
        self.message = message

    def status(self) -> definition_pb2.Status:
        return status(self.code, self.message)
