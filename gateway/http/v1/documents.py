"""The JSON API's documents: its constants, errors (RFC 9457 problems), request bodies,
receipt handles, message and cursor documents, and the maps from the producer
service's and the store's errors to HTTP statuses. Helpers without state."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from broker_core import (
    DelayTooLong,
    Message,
    MessageTooLarge,
    PopConsumer,
    PoppedMessage,
    Record,
    StorageFull,
    StoreError,
)
from gateway.http.messages import Request, Response
from gateway.http.server import problem
from gateway.rocketmq import producer as p
from gateway.rocketmq.pop_service import PopItem
from gateway.rocketmq.producer import ProducerError
from gateway.rocketmq.records import (
    PROPS,
    rocketmq_properties,
)
from lmq.rocketmq import (
    HIDDEN_PROPERTIES,
    RESERVED_PROPERTIES,
)
from protocol.remoting.messages import decode_properties

log = logging.getLogger("gateway.http.v1")


ROUTE_ORDER = 10
JSON = "application/json"
#: Most messages in one publish request, and in one receive.
MAX_BATCH = 1000
MAX_RECEIVE = 32
#: Longest long poll, seconds (Aliyun's and SQS's limit is 20-30 s).
MAX_WAIT_SECONDS = 30.0
DEFAULT_INVISIBLE_SECONDS = 30.0
#: The property an idempotent publish's key goes to: RocketMQ's message id, which the
#: store's key index holds (StoreConfig.key_index_properties), durable with the record.
ID_PROPERTY = "UNIQ_KEY"


class ApiError(Exception):
    def __init__(self, status: int, detail: str, *, title: str | None = None,
                 headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title
        self.headers = headers

    def response(self) -> Response:
        return problem(self.status, self.detail, title=self.title, headers=self.headers)


def json_response(status: int, doc: object, headers: list[tuple[str, str]] | None = None
                  ) -> Response:
    try:  # orjson: ~0.3 us a document against json's 3-6 us; json for what it refuses
        data = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # (an integer past 64 bits)
        data = (json.dumps(doc, separators=(",", ":")) + "\n").encode()
    return Response.of(status, data, JSON, headers)  # the newline: a prompt starts anew


#: 19 digits in a row: perhaps an integer past 64 bits, which only json reads exactly.
_LONG_NUMBER = re.compile(rb"\d{19}")
_DIGITS = b"0123456789"


def json_body(request: Request) -> Any:
    if not request.body:
        return {}
    ctype = (request.header("content-type") or JSON).split(";")[0].strip().lower()
    if ctype not in (JSON, "application/*+json", "text/json") and not ctype.endswith("+json"):
        raise ApiError(415, f"the body must be JSON (application/json), not {ctype}")
    body = request.body
    # (the count of digits first: most bodies have too few for the search to be needed)
    if len(body) - len(body.translate(None, _DIGITS)) < 19 or _LONG_NUMBER.search(body) is None:
        # orjson reads integers past 64 bits as floats
        try:
            return orjson.loads(request.body)
        except orjson.JSONDecodeError:
            pass  # json decides (it reads UTF-16 and -32 too) and says what is wrong
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None


def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON body, which must be an object (400 otherwise)."""
    doc = json_body(request)
    if not isinstance(doc, dict):
        raise ApiError(400, "the body is a JSON object")
    return doc


# -- receipt handles ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Receipt:
    topic: str
    queue_id: int
    offset: int
    extra_info: str

    def encode(self) -> str:
        raw = f"{self.topic}\n{self.queue_id}\n{self.offset}\n{self.extra_info}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, handle: object) -> Receipt:
        if not isinstance(handle, str) or not handle:
            raise ValueError("a receipt handle is a non-empty string")
        handle = handle.partition(".")[0]  # an event id's stream cursor
        try:
            raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
            topic, queue_id, offset, extra = raw.split("\n")
            return cls(topic, int(queue_id), int(offset), extra)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise ValueError(f"not a receipt handle of this gateway: {handle[:64]!r}") from None



def number_option(doc: dict[str, Any], query: dict[str, list[str]], name: str,
                  default: float, low: float, high: float) -> float:
    """A numeric request option from the JSON body, else the query string (400 when it is
    not a number in [low, high]); ``default`` when given in neither."""
    raw = doc.get(name, query.get(name, [None])[0])
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must be a number") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low:g} and {high:g}")
    return value


CHALLENGE = [("WWW-Authenticate", 'Basic realm="lmq-gateway", charset="UTF-8"')]


def half_group(message: Message) -> str | None:
    """The producer group of a transactional message (None for any other)."""
    raw = message.properties.get(PROPS) if message.properties else None
    if raw is None or b"TRAN_MSG" not in raw:
        return None  # (the common case: no decoding)
    props = decode_properties(raw.decode())
    return props.get("PGROUP") if props.get("TRAN_MSG") == "true" else None


def per_entry(results: list[dict[str, Any]]) -> Response:
    failed = sum(1 for r in results if r["status"] >= 300)
    status = 200 if not failed else (207 if failed < len(results) else common_status(results))
    return json_response(status, {"results": results})


def common_status(results: list[dict[str, Any]]) -> int:
    statuses = {r["status"] for r in results}
    return statuses.pop() if len(statuses) == 1 else 207


MQTT_SUB_META = "http.mqtt-sub:"
#: Receipt handles of messages received from an MQTT topic filter start with this.
MQTT_HANDLE = "m."


def encode_mqtt_handle(topic_filter: str, receipt: str) -> str:
    raw = f"{topic_filter}\n{receipt}".encode()
    return MQTT_HANDLE + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_mqtt_handle(handle: str) -> tuple[str, str]:
    text = handle[len(MQTT_HANDLE):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        topic_filter, receipt = raw.split("\n")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a receipt handle of this gateway: {handle[:64]!r}") from None
    return topic_filter, receipt


def mqtt_message_doc(topic_filter: str, popped: PoppedMessage) -> dict[str, Any]:
    """A message received from an MQTT topic filter (``topic`` its MQTT topic name)."""
    record = popped.message.record
    props = decode_properties(rocketmq_properties(record))
    user = {k: v for k, v in props.items() if k not in HIDDEN_PROPERTIES}
    doc: dict[str, Any] = {
        "receipt_handle": encode_mqtt_handle(topic_filter, popped.receipt),
        "message_id": props.get(ID_PROPERTY, str(record.position)),
        "topic": record.topic,
        "queue_id": 0,
        "offset": popped.message.offset,
        "properties": user,
        "delivery_count": popped.deliveries,
        "born_ms": record.born_ms,
        "store_ms": record.store_ms,
        "next_visible_ms": PopConsumer.receipt_visible_at(popped.receipt),
    }
    return with_body(doc, record.body)


def encode_cursor(cursor: Mapping[int, int]) -> str:
    """An SSE event id's stream cursor: the last offset written per queue."""
    raw = ",".join(f"{q}:{o}" for q, o in sorted(cursor.items())).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> dict[int, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        pairs = (item.split(":") for item in raw.split(",") if item)
        cursor = {int(q): int(o) for q, o in pairs}
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("not a stream cursor") from None
    if len(cursor) > 1024 or any(q < 0 or o < -1 for q, o in cursor.items()):
        raise ValueError("not a stream cursor")
    return cursor


def message_doc(item: PopItem, visible_ms: int) -> dict[str, Any]:
    record: Record = item.message.record
    props = decode_properties(rocketmq_properties(record))
    user = {k: v for k, v in props.items() if k not in HIDDEN_PROPERTIES}
    doc: dict[str, Any] = {
        "receipt_handle": Receipt(item.source.topic, item.source.queue_id,
                                  item.message.offset, item.extra_info).encode(),
        "message_id": props.get(ID_PROPERTY, str(record.position)),
        "topic": item.source.topic,
        "queue_id": item.source.queue_id,
        "offset": item.message.offset,
        "tag": record.tag,
        "keys": props["KEYS"].split() if props.get("KEYS") else [],
        "properties": user,
        "delivery_count": item.reconsume_times + 1,
        "born_ms": record.born_ms,
        "store_ms": record.store_ms,
        "next_visible_ms": visible_ms,
    }
    if record.properties.get("__SHARDINGKEY"):
        doc["message_group"] = record.properties["__SHARDINGKEY"].decode()
    return with_body(doc, record.body)




def tag_filter(expression: str) -> Any:
    tags = {t.strip() for t in str(expression).split("||") if t.strip()}
    if not tags or "*" in tags:
        return None
    return lambda record: record.tag in tags


def text_field(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty string")
    return value


def int_field(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"'{name}' must be a non-negative number")
    return int(value)


def with_body(doc: dict[str, Any], body: bytes) -> dict[str, Any]:
    """``doc`` with the message body as ``body`` (UTF-8 text) or else ``body_base64``
    (what :func:`body_of` reads back)."""
    try:
        doc["body"] = body.decode()
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(body).decode()
    return doc


def body_of(entry: Mapping[str, Any]) -> bytes:
    if "body" in entry and "body_base64" in entry:
        raise ValueError("give 'body' or 'body_base64', not both")
    if "body_base64" in entry:
        raw = entry["body_base64"]
        if not isinstance(raw, str):
            raise ValueError("'body_base64' must be a string")
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"'body_base64' is not base64: {exc}") from None
    body = entry.get("body")
    if body is None:
        raise ValueError("a message needs 'body' (text or any JSON value) or 'body_base64'")
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()


def properties_of(entry: Mapping[str, Any]) -> dict[str, str]:
    props = entry.get("properties") or {}
    if not props:
        return {}  # (most messages: no generator, no list to make)
    if not isinstance(props, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in props.items()):
        raise ValueError("'properties' is an object of strings")
    bad = [k for k in props
           if k in RESERVED_PROPERTIES or "\x01" in k + props[k] or "\x02" in k + props[k]]
    if bad:
        raise ValueError(f"property {bad[0]!r} is reserved or has a control character")
    return props


#: The producer service's refusals as HTTP statuses.
_PRODUCER_STATUS: dict[type[ProducerError], int] = {
    p.InvalidTopic: 400,
    p.SystemTopic: 403,
    p.TopicNotFound: 404,
    p.NotWritable: 403,
    p.Forbidden: 403,
    p.TypeMismatch: 400,
    p.IllegalMessage: 400,
    p.BadQueue: 400,
    p.NotPending: 404,
    p.TransactionNotFound: 404,
    p.TransactionConflict: 409,
}


def producer_error(exc: ProducerError) -> ApiError:
    """A refusal of the producer service as this API answers it."""
    return ApiError(_PRODUCER_STATUS.get(type(exc), 400), str(exc))


def store_error(exc: BaseException) -> ApiError:
    if isinstance(exc, MessageTooLarge):
        return ApiError(413, str(exc))
    if isinstance(exc, DelayTooLong):
        return ApiError(400, str(exc))
    if isinstance(exc, StorageFull):
        return ApiError(507, f"the store is full: {exc}")
    if isinstance(exc, StoreError):
        return ApiError(503, f"the store refused the message: {exc}")
    log.exception("http publish failed", exc_info=exc)
    return ApiError(500, f"{type(exc).__name__}: {exc}")
