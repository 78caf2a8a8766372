"""The OpenAPI 3.1 document of the JSON API, served at ``/v1/openapi.json``. The tests
validate it (openapi-spec-validator) and check the real responses against its schemas
(JSON Schema 2020-12, as OpenAPI 3.1 uses)."""

from __future__ import annotations

from typing import Any

from gateway.admin.openapi import admin_paths
from gateway.http.v1.openapi_components import COMPONENTS, ref

__all__ = ["OPENAPI"]


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_PROBLEM: dict[str, Any] = {"description": "An RFC 9457 problem",
            "content": {"application/problem+json": {"schema": ref("Problem")}}}
_ERRORS = {str(s): _PROBLEM for s in (400, 401, 403, 404, 413, 415, 429, 503)}

_GROUP = {"name": "group", "in": "path", "required": True, "schema": {"type": "string"},
          "description": "Consumer group (a RocketMQ consumer group)"}
_TOPIC = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"},
          "description": "RocketMQ topic"}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_SETTLE_BODY = {"type": "object", "required": ["receipt_handles"], "properties": {
    "receipt_handles": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "invisible_seconds": {"type": "number", "minimum": 0, "maximum": 43200}}}

_AMQP_QUEUE = [{"name": "vhost", "in": "path", "required": True,
                "schema": {"type": "string"}, "description": "AMQP vhost (/ is %2F)"},
               {"name": "queue", "in": "path", "required": True,
                "schema": {"type": "string"}, "description": "AMQP queue"}]


def _amqp_settled(ok: str) -> dict[str, Any]:
    """Per-handle results; when every handle failed alike the status is theirs (400 a
    malformed handle or one of another queue, 409 another node's or run's, 410 no
    longer held), with the results as the body."""
    results = {"application/json": {"schema": ref("SettleResults")}}
    responses: dict[str, Any] = {**_ERRORS}
    for status in ("400", "409", "410"):
        responses[status] = {"description": "Every handle refused alike, or a problem",
                             "content": {**results, **_PROBLEM["content"]}}
    responses["200"] = _json(ref("SettleResults"), ok)
    responses["207"] = _json(ref("SettleResults"), "Mixed outcomes")
    return responses


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "LMQ Gateway JSON API",
        "version": "1",
        "description": "Publish, consume by group with long polling and receipt handles,"
                       " ack, nack, visibility, seek, and server-sent events. Errors are"
                       " RFC 9457 problem documents.",
    },
    "components": COMPONENTS,
    "security": [{"basic": []}, {"mqSignature": []}, {}],
    "paths": {
        "/v1/topics/{topic}/messages": {"post": {
            "summary": "Publish one message or a batch to a RocketMQ topic",
            "description": "Answered once stored under the configured durability. With"
                           " Idempotency-Key (one message) a retry within the window"
                           " stores nothing and answers 200 with duplicate: true.",
            "parameters": [_TOPIC, {"name": "Idempotency-Key", "in": "header",
                                    "schema": {"type": "string", "maxLength": 256}}],
            "requestBody": _body({"oneOf": [ref("OutgoingMessage"), ref("Batch")]}),
            "responses": {
                "201": _json(ref("PublishResult"), "Stored"),
                "200": _json({"oneOf": [ref("PublishResult"), ref("PublishResults")]},
                             "A duplicate (idempotency key), or a batch all stored"),
                "207": _json(ref("PublishResults"), "A batch with mixed outcomes"),
                **_ERRORS},
        }},
        "/v1/mqtt/{topic}/messages": {"post": {
            "summary": "Publish to an MQTT topic (one URL-encoded path segment: a%2Fb)",
            "parameters": [{"name": "topic", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "requestBody": _body(ref("OutgoingMessage")),
            "responses": {"201": _json(ref("MqttPublishResult"), "Stored"), **_ERRORS},
        }},
        "/v1/amqp/{vhost}/queues/{queue}/messages": {"post": {
            "summary": "Publish straight to an AMQP queue (declared over AMQP)",
            "parameters": [{"name": "vhost", "in": "path", "required": True,
                            "schema": {"type": "string"}},
                           {"name": "queue", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "requestBody": _body(ref("OutgoingMessage")),
            "responses": {"201": _json(ref("PublishResult"), "Stored"), **_ERRORS},
        }},
        "/v1/amqp/{vhost}/exchanges/{exchange}/messages": {"post": {
            "summary": "Publish through an AMQP exchange (declared over AMQP), routed"
                       " by its bindings",
            "parameters": [{"name": "vhost", "in": "path", "required": True,
                            "schema": {"type": "string"}},
                           {"name": "exchange", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "requestBody": _body({"allOf": [ref("OutgoingMessage"), {
                "type": "object", "properties": {
                    "routing_key": {"type": "string"}}}]}),
            "responses": {"201": _json(ref("ExchangePublishResult"), "Stored"),
                          "200": _json(ref("ExchangePublishResult"),
                                       "Routed to no queue: not stored"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/topics/{topic}/receive": {"post": {
            "summary": "Receive (pop) messages, long polling up to wait_seconds",
            "parameters": [_GROUP, _TOPIC],
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "max_messages": {"type": "integer", "minimum": 1, "maximum": 32},
                    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 30},
                    "invisible_seconds": {"type": "number", "minimum": 1},
                    "tag": {"type": "string", "description": "tag1||tag2, or *"},
                    "ordered": {"type": "boolean",
                                "description": "FIFO by message group"}}}}}},
            "responses": {"200": _json(ref("Received"), "Messages (maybe none)"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/mqtt/{filter}/receive": {"post": {
            "summary": "Receive messages of an MQTT topic filter (one URL-encoded"
                       " segment) as a group: a durable subscription made on first use;"
                       " shared with MQTT $share/{group}/{filter} subscribers",
            "parameters": [_GROUP, {"name": "filter", "in": "path", "required": True,
                                    "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "max_messages": {"type": "integer", "minimum": 1, "maximum": 32},
                    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 30},
                    "invisible_seconds": {"type": "number", "minimum": 1}}}}}},
            "responses": {"200": _json(ref("Received"), "Messages (maybe none)"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/mqtt/{filter}": {"delete": {
            "summary": "Drop the group's subscription to an MQTT topic filter",
            "parameters": [_GROUP, {"name": "filter", "in": "path", "required": True,
                                    "schema": {"type": "string"}}],
            "responses": {"200": _json({"type": "object", "required": ["group", "filter"],
                                        "properties": {"group": {"type": "string"},
                                                       "filter": {"type": "string"}}},
                                       "Dropped"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/topics/{topic}/stream": {"get": {
            "summary": "Server-sent events: one 'message' event per message",
            "parameters": [_GROUP, _TOPIC,
                           {"name": "ack", "in": "query",
                            "schema": {"enum": ["auto", "manual"]}},
                           {"name": "max_events", "in": "query",
                            "schema": {"type": "integer", "minimum": 0}},
                           {"name": "Last-Event-ID", "in": "header",
                            "description": "An event id of an earlier stream: acks that"
                                           " message (ack=auto) and sends again what the"
                                           " group took after it (the id's cursor)",
                            "schema": {"type": "string"}}],
            "responses": {"200": {"description": "An event stream",
                                  "content": {"text/event-stream": {
                                      "schema": {"type": "string"}}}},
                          **_ERRORS},
        }},
        "/v1/groups/{group}/topics/{topic}/seek": {"post": {
            "summary": "Set the group's offsets: earliest, latest, or by time",
            "parameters": [_GROUP, _TOPIC],
            "requestBody": _body({"type": "object", "properties": {
                "position": {"enum": ["earliest", "latest"]},
                "timestamp_ms": {"type": "integer", "minimum": 0}}}),
            "responses": {"200": _json(ref("SeekResult"), "The new offsets by queue"),
                          **_ERRORS},
        }},
        "/v1/transactions/{transaction}/{action}": {"post": {
            "summary": "Commit or roll back a transactional (half) message",
            "parameters": [{"name": "transaction", "in": "path", "required": True,
                            "schema": {"type": "string"}},
                           {"name": "action", "in": "path", "required": True,
                            "schema": {"enum": ["commit", "rollback"]}}],
            "responses": {
                "200": _json({"type": "object", "required": ["transaction_id", "outcome"],
                              "properties": {"transaction_id": {"type": "string"},
                                             "outcome": {"enum": [
                                                 "committed", "rolled_back",
                                                 "already_committed",
                                                 "already_rolled_back"]}}},
                             "Ended (or already ended that way)"),
                "409": _PROBLEM, **_ERRORS},
        }},
        "/v1/producers/{group}/transactions/receive": {"post": {
            "summary": "Poll the producer group's half messages that are due a"
                       " check-back (transactional check-back for HTTP producers)",
            "description": "The gateway's check-back loop hands a due half message to a"
                           " poll of its producer group (the producer_group of its"
                           " publish, default http) made within the last minute; end it"
                           " by its transaction_id. Not ended, it is due again after the"
                           " store's check interval, and dead-lettered after"
                           " store.txn_max_checks.",
            "parameters": [{"name": "group", "in": "path", "required": True,
                            "schema": {"type": "string"},
                            "description": "Producer group"}],
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "max_messages": {"type": "integer", "minimum": 1, "maximum": 32},
                    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 30}}}}}},
            "responses": {"200": _json({"type": "object", "required": ["transactions"],
                                        "properties": {"transactions": {
                                            "type": "array",
                                            "items": ref("HalfMessage")}}},
                                       "Half messages due a check (maybe none)"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/ack": {"post": {
            "summary": "Ack received messages by receipt handle",
            "parameters": [_GROUP],
            "requestBody": _body(_SETTLE_BODY),
            "responses": {"200": _json(ref("SettleResults"), "All acked"),
                          "207": _json(ref("SettleResults"), "Mixed outcomes"),
                          "410": _json(ref("SettleResults"), "None in flight any more"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/nack": {"post": {
            "summary": "Make received messages visible again now",
            "parameters": [_GROUP],
            "requestBody": _body(_SETTLE_BODY),
            "responses": {"200": _json(ref("SettleResults"), "All made visible"),
                          "207": _json(ref("SettleResults"), "Mixed outcomes"),
                          "410": _json(ref("SettleResults"), "None in flight any more"),
                          **_ERRORS},
        }},
        "/v1/groups/{group}/visibility": {"post": {
            "summary": "Change the invisible time of received messages (from now)",
            "parameters": [_GROUP],
            "requestBody": _body(_SETTLE_BODY),
            "responses": {"200": _json(ref("SettleResults"), "New receipt handles"),
                          "207": _json(ref("SettleResults"), "Mixed outcomes"),
                          "410": _json(ref("SettleResults"), "None in flight any more"),
                          **_ERRORS},
        }},
        "/v1/amqp/{vhost}/queues/{queue}/receive": {"post": {
            "summary": "Receive from an AMQP queue (declared over AMQP), long polling up"
                       " to wait_seconds, as one more consumer of the queue",
            "description": "The queue delivers as to its AMQP consumers (order, TTL,"
                           " dead-lettering, x-delivery-limit, priorities, single active"
                           " consumer, message groups); the messages are held under"
                           " receipt handles for invisible_seconds (at most 43200), then"
                           " requeued unless acked. The handles are this gateway run's: on"
                           " another node or after a restart they are refused (409) and"
                           " their messages come back to the queue on their own.",
            "parameters": _AMQP_QUEUE,
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "max_messages": {"type": "integer", "minimum": 1, "maximum": 32},
                    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 30},
                    "invisible_seconds": {"type": "number", "minimum": 1,
                                          "maximum": 43200}}}}}},
            "responses": {"200": _json(ref("AmqpReceived"), "Messages (maybe none)"),
                          "409": _PROBLEM, **_ERRORS},
        }},
        "/v1/amqp/{vhost}/queues/{queue}/ack": {"post": {
            "summary": "Ack messages received from an AMQP queue",
            "parameters": _AMQP_QUEUE,
            "requestBody": _body(_SETTLE_BODY),
            "responses": _amqp_settled("All acked"),
        }},
        "/v1/amqp/{vhost}/queues/{queue}/nack": {"post": {
            "summary": "Requeue messages received from an AMQP queue (requeue: true, the"
                       " default) or reject them (requeue: false: dead-lettered if the"
                       " queue has a dead-letter exchange, else dropped)",
            "parameters": _AMQP_QUEUE,
            "requestBody": _body({"type": "object", "required": ["receipt_handles"],
                                  "properties": {
                                      "receipt_handles": {"type": "array", "minItems": 1,
                                                          "items": {"type": "string"}},
                                      "requeue": {"type": "boolean"}}}),
            "responses": _amqp_settled("All requeued or rejected"),
        }},
        "/v1/amqp/{vhost}/queues/{queue}/visibility": {"post": {
            "summary": "Hold messages received from an AMQP queue invisible_seconds from"
                       " now (0: requeue now); the handle stays valid",
            "parameters": _AMQP_QUEUE,
            "requestBody": _body(_SETTLE_BODY),
            "responses": _amqp_settled("All extended"),
        }},
        "/v1/openapi.json": {"get": {
            "summary": "This document",
            "responses": {"200": {"description": "OpenAPI 3.1",
                                  "content": {"application/json": {
                                      "schema": {"type": "object"}}}}}}},
    },
}

#: The admin API (gateway/admin, docs/operations.md), in the same document.
OPENAPI["paths"].update(admin_paths())
