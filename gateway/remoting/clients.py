"""Clients and groups: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
NOTIFY_CONSUMER_IDS_CHANGED (server to client), LOCK_BATCH_MQ and UNLOCK_BATCH_MQ.

The state is the services' (``ctx.services``)
:class:`~gateway.remoting.consumers.ConsumerManager` and
:class:`~gateway.remoting.locks.LockManager`; these handlers translate the requests.
A heartbeat of a consumer group makes sure the group exists (auto-created unless
``rocketmq_auto_create_groups`` is off) and its ``%RETRY%<group>`` topic, as the
broker's ``ClientManageProcessor`` does, so a consumer can pull its retries.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from gateway.remoting.consumers import parse_heartbeat
from gateway.remoting.dispatch import DispatchTable, RequestContext, RequestError
from gateway.remoting.fields import get_str, json_body
from gateway.remoting.replies import error, request, response
from lmq.rocketmq import InvalidName, retry_topic
from protocol.remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)


def register(table: DispatchTable) -> None:
    table.register(RequestCode.HEART_BEAT, heart_beat)
    table.register(RequestCode.UNREGISTER_CLIENT, unregister_client)
    table.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, get_consumer_list_by_group)
    table.register(RequestCode.LOCK_BATCH_MQ, lock_batch_mq)
    table.register(RequestCode.UNLOCK_BATCH_MQ, unlock_batch_mq)


def heart_beat(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    data = json_body(cmd)
    if not isinstance(data, dict):
        raise RequestError(ResponseCode.INVALID_PARAMETER, "the heartbeat body is not an object")
    try:
        client_id, producers, consumers = parse_heartbeat(data)
    except (ValueError, TypeError) as exc:
        raise RequestError(ResponseCode.INVALID_PARAMETER, f"bad heartbeat: {exc}") from None
    services = ctx.services
    for group in consumers:
        try:
            if ctx.services.groups.ensure(group) is not None:
                ctx.services.topics.ensure(retry_topic(group))
        except InvalidName as exc:
            raise RequestError(ResponseCode.INVALID_PARAMETER, str(exc)) from None
    language = getattr(cmd, "language", "JAVA")
    if client_id not in services.consumers.clients:
        log.info("remoting client registered", extra={
            **ctx.conn.log_fields(), "client_id": client_id,
            "producer_groups": ",".join(sorted(producers)) or "-",
            "consumer_groups": ",".join(sorted(consumers)) or "-"})
    ctx.client_id = client_id
    services.consumers.heartbeat(
        ctx, client_id, producers, consumers,
        language=getattr(language, "name", str(language)), version=int(cmd.version or 0))
    return response()


def unregister_client(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    services = ctx.services
    client_id = get_str(cmd, "clientID")
    producer_group = get_str(cmd, "producerGroup", "")
    consumer_group = get_str(cmd, "consumerGroup", "")
    services.consumers.unregister(client_id, producer_group, consumer_group)
    if client_id not in services.consumers.clients:
        services.locks.release_client(client_id)
    return response()


def get_consumer_list_by_group(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = get_str(cmd, "consumerGroup")
    ids = ctx.services.consumers.consumer_ids(group)
    if not ids:
        return error(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return response(body=json.dumps({"consumerIdList": ids}).encode())


def notify_consumer_ids_changed(channel: RequestContext, group: str) -> None:
    """Tell one client that ``group``'s membership changed (oneway, no answer)."""
    channel.send_request(
        request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))


def _lock_body(cmd: RemotingCommand) -> tuple[str, str, list[dict[str, Any]]]:
    data = json_body(cmd)
    if not isinstance(data, dict):
        raise RequestError(ResponseCode.INVALID_PARAMETER, "the lock body is not an object")
    group = data.get("consumerGroup")
    client_id = data.get("clientId")
    mqs = data.get("mqSet") or []
    if not isinstance(group, str) or not group or not isinstance(client_id, str) or not client_id:
        raise RequestError(
            ResponseCode.INVALID_PARAMETER, "the lock body needs consumerGroup and clientId")
    if not isinstance(mqs, list) or not all(
        isinstance(mq, dict) and isinstance(mq.get("topic"), str)
        and isinstance(mq.get("queueId"), int) for mq in mqs
    ):
        raise RequestError(ResponseCode.INVALID_PARAMETER, "bad mqSet in the lock body")
    return group, client_id, mqs


def lock_batch_mq(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group, client_id, mqs = _lock_body(cmd)
    queues = [(m["topic"], m["queueId"]) for m in mqs]
    granted = set(ctx.services.locks.lock(group, client_id, queues))
    ok = [m for m in mqs if (m["topic"], m["queueId"]) in granted]
    return response(body=json.dumps({"lockOKMQSet": ok}).encode())


def unlock_batch_mq(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group, client_id, mqs = _lock_body(cmd)
    ctx.services.locks.unlock(group, client_id, [(m["topic"], m["queueId"]) for m in mqs])
    return response()
