"""The Aliyun MQ HTTP API (the one PyPI ``mq-http-sdk`` and npm ``@aliyunmq/mq-http-sdk``
speak), sans-IO: the XML bodies, the ``Authorization: MQ ak:signature`` HMAC, the
properties string, receipt handles and error bodies. No sockets, no asyncio, no store.
"""

from protocol.aliyun_http.errors import ApiError, ErrorCode
from protocol.aliyun_http.handles import Handle, HandleCodec, HandleKind, InvalidHandle
from protocol.aliyun_http.properties import (
    FORBIDDEN_CHARS,
    PropertyError,
    decode_properties,
    encode_properties,
)
from protocol.aliyun_http.signature import (
    Authorization,
    AuthorizationError,
    parse_authorization,
    sign,
    string_to_sign,
    verify,
)
from protocol.aliyun_http.xml import (
    NAMESPACE,
    AckError,
    ConsumedMessage,
    PublishRequest,
    XmlError,
    body_md5,
    parse_publish,
    parse_receipt_handles,
    render_ack_errors,
    render_error,
    render_messages,
    render_published,
)

__all__ = [
    "FORBIDDEN_CHARS",
    "NAMESPACE",
    "AckError",
    "ApiError",
    "Authorization",
    "AuthorizationError",
    "ConsumedMessage",
    "ErrorCode",
    "Handle",
    "HandleCodec",
    "HandleKind",
    "InvalidHandle",
    "PropertyError",
    "PublishRequest",
    "XmlError",
    "body_md5",
    "decode_properties",
    "encode_properties",
    "parse_authorization",
    "parse_publish",
    "parse_receipt_handles",
    "render_ack_errors",
    "render_error",
    "render_messages",
    "render_published",
    "sign",
    "string_to_sign",
    "verify",
]
