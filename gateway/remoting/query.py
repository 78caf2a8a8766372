"""Looking messages up: QUERY_MESSAGE (by key) and VIEW_MESSAGE_BY_ID (by log position).

- QUERY_MESSAGE ``{topic, key, maxNum, beginTimestamp, endTimestamp}`` finds, through
  the store's key index (``KEYS`` entries and ``UNIQ_KEY``, indexed under the topic's
  first level), the newest ``maxNum`` messages stored in the time range; with
  ``_UNIQUE_KEY_QUERY`` only those whose ``UNIQ_KEY`` is the key, else those whose
  ``KEYS`` name it. The body holds them in the stored-message layout, each shown as a
  message of its queue of ``topic``; none found is QUERY_NOT_FOUND, as the broker.
- VIEW_MESSAGE_BY_ID ``{offset}``: the record starting at that log position (the
  position an offsetMsgId carries); SYSTEM_ERROR when none starts there.

Delayed and transactional messages: QUERY_MESSAGE finds only what a consumer can see: a
delayed message once it fired, a transactional one once committed (a half message's
keys are indexed when it is stored, and it is skipped until its commit; a broker
indexes it under its system topic, so a query of the real topic does not find it
either). VIEW_MESSAGE_BY_ID shows any of them, pending or not (a broker shows the half
or timer message at that offset too). Such a message is shown at queue offset 0: its
offset in the queue is assigned by the fire or commit record, which a lookup by the
message's own position does not read (a pull or pop shows the real offset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core import MessageStore, Outcome, RecordType
from gateway.remoting.dispatch import DispatchTable, RequestContext
from gateway.remoting.fields import get_bool, get_int, get_str
from gateway.remoting.messages import encode_record
from gateway.remoting.replies import error, response
from gateway.remoting.stored import pack_host
from lmq.rocketmq import parse_queue_lmq, split_mqtt_topic
from protocol.remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from broker_core import Record
    from protocol.remoting import RemotingCommand

MAX_QUERY = 64


def register(table: DispatchTable) -> None:
    table.register(RequestCode.QUERY_MESSAGE, query_message)
    table.register(RequestCode.VIEW_MESSAGE_BY_ID, view_message_by_id)


def queue_of(record: Record, topic: str | None = None) -> tuple[str, int, int]:
    """``(RocketMQ topic, queue id, queue offset)`` the record is shown as: its entry in
    a queue of ``topic`` (any RocketMQ queue when None); else its topic's first level,
    queue 0, offset 0 (a message no RocketMQ queue holds)."""
    for lmq, offset in record.dispatch:
        parsed = parse_queue_lmq(lmq)
        if parsed is not None and (topic is None or parsed[0] == topic):
            # a delayed record names its queues with its due time: offset not known here
            return parsed[0], parsed[1], 0 if record.delayed else offset
    return topic or split_mqtt_topic(record.topic)[0], 0, 0


def visible(store: MessageStore, record: Record) -> bool:
    """Whether a consumer can see ``record``: not a delayed message still pending, not
    a half message that was not committed."""
    if record.type == RecordType.TXN_HALF:
        return store.transaction_outcome(record.position) == Outcome.ALREADY_COMMITTED
    if record.delayed:
        return store.pending_timer(record.position) is None
    return True


def _store_host(ctx: RequestContext) -> tuple[bytes, bool]:
    return pack_host("{}:{}".format(*ctx.store_address))


def query_message(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic = get_str(cmd, "topic")
    key = get_str(cmd, "key")
    max_num = max(1, min(get_int(cmd, "maxNum", 32), MAX_QUERY))
    begin = get_int(cmd, "beginTimestamp", 0)
    end = get_int(cmd, "endTimestamp", 0) or None
    unique = get_bool(cmd, "_UNIQUE_KEY_QUERY")
    ctx.services.check_subscribe(ctx, topic, "-")
    store = ctx.services.store
    records = store.find_by_key(topic, key, max_num * 2 if unique else max_num, begin, end)
    host = _store_host(ctx)
    out = bytearray()
    found = 0
    for record in records:
        props = record.properties
        if unique:
            if props.get("UNIQ_KEY", b"").decode(errors="replace") != key:
                continue
        elif key not in props.get("KEYS", b"").decode(errors="replace").split():
            continue
        if not visible(store, record):
            continue
        name, queue_id, offset = queue_of(record, topic)
        try:
            encode_record(out, record, topic=name, queue_id=queue_id, queue_offset=offset,
                          store_host=host)
        except ValueError:
            continue
        found += 1
        if found >= max_num:
            break
    if not found:
        return error(ResponseCode.QUERY_NOT_FOUND,
                     "can not find message, maybe time range not correct")
    return response(fields={
        "indexLastUpdateTimestamp": records[-1].store_ms if records else 0,
        "indexLastUpdatePhyoffset": records[-1].position if records else 0,
    }, body=bytes(out))


def view_message_by_id(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    position = get_int(cmd, "offset")
    record = ctx.services.store.record_at(position)
    if record is None:
        return error(ResponseCode.SYSTEM_ERROR,
                     f"can not find message by the offset, {position}")
    topic = get_str(cmd, "topic", "") or None
    name, queue_id, offset = queue_of(record, topic)
    ctx.services.check_subscribe(ctx, name, "-")
    out = bytearray()
    encode_record(out, record, topic=name, queue_id=queue_id, queue_offset=offset,
                  store_host=_store_host(ctx))
    return response(body=bytes(out))
