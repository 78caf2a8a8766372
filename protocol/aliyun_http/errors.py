"""The error codes the Aliyun MQ HTTP API answers with, and their HTTP statuses.

An error is ``<Error><Code/><Message/><RequestId/><HostId/></Error>`` (the Python SDK's
``ErrorDecoder`` requires all four elements; the Node SDK reads ``Code``, ``Message``
and ``RequestId``), sent as ``text/xml`` (the Node SDK parses a body only under an XML
content type) with the request id in ``x-mq-request-id`` too.
"""

from __future__ import annotations

import enum

__all__ = ["ApiError", "ErrorCode"]


class ErrorCode(enum.Enum):
    """``(code, HTTP status)``."""

    MESSAGE_NOT_EXIST = ("MessageNotExist", 404)
    RECEIPT_HANDLE_ERROR = ("ReceiptHandleError", 400)
    INVALID_ARGUMENT = ("InvalidArgument", 400)
    MALFORMED_XML = ("MalformedXML", 400)
    SIGNATURE_DOES_NOT_MATCH = ("SignatureDoesNotMatch", 403)
    ACCESS_DENIED = ("AccessDenied", 403)
    TOPIC_NOT_EXIST = ("TopicNotExist", 404)
    TOO_MANY_REQUESTS = ("QPSLimitExceeded", 429)
    INTERNAL_ERROR = ("InternalError", 500)

    @property
    def code(self) -> str:
        return self.value[0]

    @property
    def status(self) -> int:
        return self.value[1]


class ApiError(Exception):
    """An error answered as an ``<Error>`` body."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
