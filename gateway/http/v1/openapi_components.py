"""The ``components`` of the JSON API's OpenAPI document (:mod:`gateway.http.v1.openapi`):
its security schemes and the schemas its paths refer to (``#/components/schemas/...``)."""

from __future__ import annotations

from typing import Any

__all__ = ["COMPONENTS", "ref"]


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name`` of :data:`COMPONENTS`."""
    return {"$ref": f"#/components/schemas/{name}"}


COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"basic": {"type": "http", "scheme": "basic"},
                        "mqSignature": {
                            "type": "apiKey", "in": "header", "name": "Authorization",
                            "description": "MQ <AccessKeyId>:<Signature>, signed as"
                                           " the Aliyun MQ HTTP SDKs sign"}},
    "schemas": {
        "Problem": {"type": "object", "required": ["type", "title", "status"],
                    "properties": {"type": {"type": "string"},
                                   "title": {"type": "string"},
                                   "status": {"type": "integer"},
                                   "detail": {"type": "string"},
                                   "field": {"type": "string",
                                             "description": "The admin API: the"
                                                            " input at fault"}}},
        "OutgoingMessage": {
            "type": "object",
            "properties": {
                "body": {"description": "Text, or any JSON value (stored as its JSON)"},
                "body_base64": {"type": "string", "contentEncoding": "base64"},
                "tag": {"type": "string"},
                "keys": {"oneOf": [{"type": "string"},
                                   {"type": "array", "items": {"type": "string"}}]},
                "properties": {"type": "object",
                               "additionalProperties": {"type": "string"}},
                "message_group": {"type": "string",
                                  "description": "FIFO order within the group"},
                "delay_ms": {"type": "integer", "minimum": 0},
                "deliver_at_ms": {"type": "integer", "minimum": 0},
                "transaction": {"type": "boolean",
                                "description": "A half message: delivered once"
                                               " committed"},
                "producer_group": {"type": "string"},
                "idempotency_key": {"type": "string",
                                    "description": "In a batch entry: as the"
                                                   " Idempotency-Key header"},
            },
        },
        "Batch": {"type": "object", "required": ["messages"], "properties": {
            "messages": {"type": "array", "minItems": 1, "maxItems": 1000,
                         "items": ref("OutgoingMessage")}}},
        "PublishResult": {
            "type": "object", "required": ["status"],
            "properties": {
                "status": {"type": "integer"},
                "message_id": {"type": "string"},
                "topic": {"type": "string"},
                "queue_id": {"type": "integer"},
                "offset": {"type": "integer"},
                "position": {"type": "integer"},
                "deliver_at_ms": {"type": "integer"},
                "transaction_id": {"type": "string"},
                "duplicate": {"type": "boolean"},
                "detail": {"type": "string"},
            },
        },
        "PublishResults": {"type": "object", "required": ["results"], "properties": {
            "results": {"type": "array", "items": ref("PublishResult")}}},
        "MqttPublishResult": {
            "type": "object", "required": ["status", "topic", "position"],
            "properties": {"status": {"type": "integer"}, "topic": {"type": "string"},
                           "position": {"type": "integer"},
                           "routed_to": {"type": "integer"}}},
        "ExchangePublishResult": {
            "type": "object", "required": ["status", "message_id", "routed_to"],
            "properties": {"status": {"type": "integer"},
                           "message_id": {"type": "string"},
                           "topic": {"type": "string"},
                           "routed_to": {"type": "integer"},
                           "refused": {"type": "integer"},
                           "position": {"type": "integer"},
                           "deliver_at_ms": {"type": "integer"},
                           "detail": {"type": "string"}}},
        "ReceivedMessage": {
            "type": "object",
            "required": ["receipt_handle", "message_id", "topic", "queue_id", "offset",
                         "delivery_count", "next_visible_ms"],
            "properties": {
                "receipt_handle": {"type": "string"},
                "message_id": {"type": "string"},
                "topic": {"type": "string"},
                "queue_id": {"type": "integer"},
                "offset": {"type": "integer"},
                "tag": {"type": "string"},
                "keys": {"type": "array", "items": {"type": "string"}},
                "properties": {"type": "object",
                               "additionalProperties": {"type": "string"}},
                "message_group": {"type": "string"},
                "delivery_count": {"type": "integer", "minimum": 1},
                "born_ms": {"type": "integer"},
                "store_ms": {"type": "integer"},
                "next_visible_ms": {"type": "integer"},
                "body": {"type": "string"},
                "body_base64": {"type": "string"},
            },
        },
        "Received": {"type": "object", "required": ["messages"], "properties": {
            "messages": {"type": "array", "items": ref("ReceivedMessage")}}},
        "SettleResult": {
            "type": "object", "required": ["status", "receipt_handle"],
            "properties": {"status": {"type": "integer"},
                           "receipt_handle": {"type": "string"},
                           "new_receipt_handle": {"type": "string"},
                           "next_visible_ms": {"type": "integer"},
                           "detail": {"type": "string"}}},
        "SettleResults": {"type": "object", "required": ["results"], "properties": {
            "results": {"type": "array", "items": ref("SettleResult")}}},
        "AmqpMessage": {
            "type": "object",
            "required": ["receipt_handle", "vhost", "queue", "exchange", "routing_key",
                         "redelivered", "delivery_count", "properties",
                         "next_visible_ms"],
            "properties": {
                "receipt_handle": {"type": "string"},
                "vhost": {"type": "string"},
                "queue": {"type": "string"},
                "exchange": {"type": "string"},
                "routing_key": {"type": "string"},
                "redelivered": {"type": "boolean"},
                "delivery_count": {"type": "integer", "minimum": 1},
                "properties": {
                    "type": "object",
                    "description": "The AMQP basic properties that are set: headers"
                                   " (an object), content_type, delivery_mode,"
                                   " priority, correlation_id, reply_to, expiration,"
                                   " message_id, timestamp (epoch seconds),"
                                   " message_type, user_id, app_id",
                    "properties": {"headers": {"type": "object"},
                                   "delivery_mode": {"type": "integer"},
                                   "priority": {"type": "integer"},
                                   "timestamp": {"type": "integer"}}},
                "next_visible_ms": {"type": "integer"},
                "body": {"type": "string"},
                "body_base64": {"type": "string"},
            },
        },
        "AmqpReceived": {"type": "object", "required": ["messages"], "properties": {
            "messages": {"type": "array", "items": ref("AmqpMessage")}}},
        "HalfMessage": {
            "type": "object",
            "required": ["transaction_id", "producer_group", "topic", "message_id",
                         "checks", "next_check_ms"],
            "properties": {
                "transaction_id": {"type": "string",
                                   "description": "End it with /v1/transactions/"
                                                  "{transaction_id}/commit or"
                                                  " rollback"},
                "producer_group": {"type": "string"},
                "topic": {"type": "string"},
                "message_id": {"type": "string"},
                "tag": {"type": "string"},
                "keys": {"type": "array", "items": {"type": "string"}},
                "properties": {"type": "object",
                               "additionalProperties": {"type": "string"}},
                "checks": {"type": "integer", "minimum": 0,
                           "description": "Check-backs so far (this one included)"},
                "born_ms": {"type": "integer"},
                "store_ms": {"type": "integer"},
                "next_check_ms": {"type": "integer"},
                "body": {"type": "string"},
                "body_base64": {"type": "string"},
            },
        },
        "SeekResult": {"type": "object", "required": ["group", "topic", "offsets"],
                       "properties": {"group": {"type": "string"},
                                      "topic": {"type": "string"},
                                      "offsets": {"type": "object",
                                                  "additionalProperties":
                                                      {"type": "integer"}}}},
    },
}
