"""Looking messages up in the store by id or key, read-only (``lmq messages``, the admin
API): a record as a JSON-able document, and the message an id names.

An id is an ``offsetMsgId`` (the store address and the log position,
:func:`protocol.remoting.messages.parse_offset_msg_id`) or a client message id (the
``UNIQ_KEY`` property, found through the key index). Both are 32 hex digits for IPv4,
so both are tried; a position only counts when a valid record starts there (CRC and
stored position agree), so a UNIQ_KEY is never taken for a position by accident.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from broker_core import MessageStore, Record
from lmq.rocketmq import parse_queue_lmq
from protocol.remoting.errors import MessageError
from protocol.remoting.messages import parse_offset_msg_id

__all__ = ["find_message", "record_dict"]


def record_dict(record: Record, found_by: str) -> dict[str, Any]:
    queues = []
    others = []
    for lmq, offset in record.dispatch:
        # a delayed record's list names its LMQs with the due time, not offsets (their
        # offsets are assigned when its timer fires)
        at = None if record.delayed else offset
        parsed = parse_queue_lmq(lmq)
        if parsed is None:
            others.append({"lmq": lmq, "offset": at})
        else:
            queues.append({"topic": parsed[0], "queue_id": parsed[1], "queue_offset": at})
    try:
        body: dict[str, Any] = {"body": record.body.decode("utf-8")}
    except UnicodeDecodeError:
        body = {"body_base64": base64.b64encode(record.body).decode()}
    return {
        "found_by": found_by,
        "position": record.position,
        "topic": record.topic,
        "tag": record.tag,
        "protocol": record.protocol.name,
        "store_ms": record.store_ms,
        "born_ms": record.born_ms,
        "origin": record.origin,
        "queues": queues,
        # a delayed message: when it is (or was) due for delivery, epoch ms
        "delayed_until": record.dispatch[0][1] if record.delayed and record.dispatch else None,
        "other_lmqs": others,
        "properties": {k: v.decode("utf-8", "replace") for k, v in record.properties.items()},
        "body_bytes": len(record.body),
        **body,
    }


def find_message(store: MessageStore, msgid: str, topics: Iterable[str]) -> list[dict[str, Any]]:
    """The messages ``msgid`` names: an offsetMsgId's record, and the records of
    ``topics`` whose UNIQ_KEY it is."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    try:
        (host, port), position = parse_offset_msg_id(msgid)
    except MessageError:
        position = -1
    if position >= 0:
        record = store.record_at(position)
        if record is not None:
            seen.add(record.position)
            found.append(record_dict(record, f"offsetMsgId of {host}:{port}"))
    for name in topics:
        for record in store.find_by_key(name, msgid, max_num=16):
            if record.position not in seen and (
                record.properties.get("UNIQ_KEY") == msgid.encode()
            ):
                seen.add(record.position)
                found.append(record_dict(record, "UNIQ_KEY"))
    return found
