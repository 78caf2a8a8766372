"""The XML bodies of the Aliyun MQ HTTP API (namespace :data:`NAMESPACE`).

Requests (both SDKs send the namespace; the Node SDK wraps every value in CDATA, the
Python SDK escapes text):

- publish: ``<Message><MessageBody/><MessageTag/><Properties/></Message>``;
- ack, commit, rollback: ``<ReceiptHandles><ReceiptHandle/>...</ReceiptHandles>``.

Responses:

- publish: ``<Message><MessageId/><MessageBodyMD5/>[<ReceiptHandle/>]</Message>``
  (the handle only for a transactional half message);
- consume: ``<Messages><Message>`` with ``MessageId``, ``ReceiptHandle``,
  ``MessageBodyMD5``, ``MessageBody``, ``PublishTime``, ``FirstConsumeTime``,
  ``NextConsumeTime``, ``ConsumedTimes``, ``MessageTag``, ``Properties``;
- per-handle ack failures: ``<Errors><Error><ErrorCode/><ErrorMessage/><ReceiptHandle/>``
  (the Python SDK requires exactly these three children);
- errors: ``<Error><Code/><Message/><RequestId/><HostId/></Error>``.

Parsing uses the standard library's expat parser (``xml.etree``). A document with a
DOCTYPE is refused before parsing: neither SDK sends one, and without a DTD there is no
entity to expand (no "billion laughs", no external entity), so ``defusedxml`` is not
needed. Text the XML 1.0 character set cannot hold (control characters in a body sent
over another protocol) is answered as U+FFFD.
"""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

__all__ = [
    "MAX_HANDLES",
    "NAMESPACE",
    "AckError",
    "ConsumedMessage",
    "PublishRequest",
    "XmlError",
    "body_md5",
    "parse_publish",
    "parse_receipt_handles",
    "render_ack_errors",
    "render_error",
    "render_messages",
    "render_published",
]

NAMESPACE = "http://mq.aliyuncs.com/doc/v1/"
#: Receipt handles in one ack (the API's limit, as ``numOfMessages``).
MAX_HANDLES = 16
_PROLOG = '<?xml version="1.0" encoding="UTF-8"?>\n'
_DOCTYPE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class XmlError(ValueError):
    """A request body that is not the XML the API takes."""


@dataclass(frozen=True, slots=True)
class PublishRequest:
    body: str
    tag: str
    properties: str


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    message_id: str
    receipt_handle: str
    body: str
    publish_time: int
    first_consume_time: int
    next_consume_time: int
    consumed_times: int
    tag: str
    properties: str


@dataclass(frozen=True, slots=True)
class AckError:
    code: str
    message: str
    receipt_handle: str


def body_md5(body: str) -> str:
    """``MessageBodyMD5``: the upper-case hex MD5 of the body's UTF-8 (neither SDK
    checks it; Aliyun's service sends this form)."""
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest().upper()


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _root(data: bytes, name: str) -> ET.Element:
    if not data.strip():
        raise XmlError(f"the body is empty; expected <{name}>")
    if _DOCTYPE.search(data):
        raise XmlError("a DOCTYPE or ENTITY declaration is not accepted")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise XmlError(f"the body is not well-formed XML: {exc}") from None
    if _local(root.tag) != name:
        raise XmlError(f"expected <{name}>, got <{_local(root.tag)}>")
    return root


def parse_publish(data: bytes) -> PublishRequest:
    """The ``<Message>`` of a publish."""
    root = _root(data, "Message")
    fields: dict[str, str] = {}
    for child in root:
        fields[_local(child.tag)] = child.text or ""
    if not fields.get("MessageBody"):
        raise XmlError("<MessageBody> is missing or empty")
    return PublishRequest(fields["MessageBody"], fields.get("MessageTag", ""),
                          fields.get("Properties", ""))


def parse_receipt_handles(data: bytes) -> list[str]:
    """The handles of an ack (1 to :data:`MAX_HANDLES`, none empty)."""
    root = _root(data, "ReceiptHandles")
    handles = [(child.text or "").strip() for child in root
               if _local(child.tag) == "ReceiptHandle"]
    if not handles:
        raise XmlError("no <ReceiptHandle>")
    if len(handles) > MAX_HANDLES:
        raise XmlError(f"{len(handles)} receipt handles; at most {MAX_HANDLES}")
    if not all(handles):
        raise XmlError("an empty <ReceiptHandle>")
    return handles


def _text(value: str) -> str:
    return escape(_ILLEGAL.sub("\ufffd", value))


def _element(name: str, value: str | int) -> str:
    return f"<{name}>{_text(str(value))}</{name}>"


def _document(root: str, inner: str) -> bytes:
    return f'{_PROLOG}<{root} xmlns="{NAMESPACE}">{inner}</{root}>'.encode()


def render_published(message_id: str, md5: str, receipt_handle: str = "") -> bytes:
    inner = _element("MessageId", message_id) + _element("MessageBodyMD5", md5)
    if receipt_handle:
        inner += _element("ReceiptHandle", receipt_handle)
    return _document("Message", inner)


def render_messages(messages: Iterable[ConsumedMessage]) -> bytes:
    parts = []
    for m in messages:
        parts.append("<Message>" + "".join((
            _element("MessageId", m.message_id),
            _element("ReceiptHandle", m.receipt_handle),
            _element("MessageBodyMD5", body_md5(m.body)),
            _element("MessageBody", m.body),
            _element("PublishTime", m.publish_time),
            _element("FirstConsumeTime", m.first_consume_time),
            _element("NextConsumeTime", m.next_consume_time),
            _element("ConsumedTimes", m.consumed_times),
            _element("MessageTag", m.tag),
            _element("Properties", m.properties),
        )) + "</Message>")
    return _document("Messages", "".join(parts))


def render_ack_errors(errors: Sequence[AckError]) -> bytes:
    inner = "".join(
        "<Error>" + _element("ErrorCode", e.code) + _element("ErrorMessage", e.message)
        + _element("ReceiptHandle", e.receipt_handle) + "</Error>"
        for e in errors)
    return _document("Errors", inner)


def render_error(code: str, message: str, request_id: str, host_id: str) -> bytes:
    inner = (_element("Code", code) + _element("Message", message)
             + _element("RequestId", request_id) + _element("HostId", host_id))
    return _document("Error", inner)
