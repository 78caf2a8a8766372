"""The name server's answers: GET_ROUTEINFO_BY_TOPIC and GET_BROKER_CLUSTER_INFO.

Like RocketMQ 5's proxy, the gateway is the name server and the one broker: a route
names one broker name, its master as broker id 0 (and, in a broker group, its slaves
as ids 1.., :func:`broker_addrs`), whose address is ``advertised_address`` when configured, else
the gateway address this client connected to (so ``namesrvAddr=host:8080`` is all a
client needs, and a client reuses the connection it already has when the two are the
same string).

Unknown topics are created on a route query when ``rocketmq_auto_create_topics`` is on
(a producer's first step is this query, and ali-ons cannot fall back to RocketMQ's
``TBW102`` default route); retry and dead-letter topics always are. Otherwise the
answer is TOPIC_NOT_EXIST, as the name server's.

JSON: standard JSON when the request's version is V4_9_4 (401) or later or it asks
``acceptStandardJsonOnly``; else fastjson's style with the broker id as an unquoted
numeric key (``{0:"host:port"}``), which older clients and ali-ons expect and parse
(GetTopicRouteActivity does the same).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway.remoting.dispatch import DispatchTable, RequestContext
from gateway.remoting.fields import get_bool, get_str
from gateway.remoting.replies import error, response
from lmq.rocketmq import BROKER_NAME, InvalidName
from protocol.remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from lmq.rocketmq import TopicConfig
    from protocol.remoting import RemotingCommand

#: The one broker's cluster in routes (its name is lmq.rocketmq.BROKER_NAME).
CLUSTER_NAME = "DefaultCluster"
#: Requests from this client version on get standard JSON (MQVersion V4_9_4).
STANDARD_JSON_VERSION = 401


def register(table: DispatchTable) -> None:
    table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, get_routeinfo_by_topic)
    table.register(RequestCode.GET_BROKER_CLUSTER_INFO, get_broker_cluster_info)


def own_address(ctx: RequestContext) -> str:
    advertised = ctx.services.advertised_address
    if advertised:
        return advertised
    host, port = ctx.local_address
    return f"{host}:{port}"


def broker_addrs(ctx: RequestContext) -> dict[int, str]:
    """The broker ids and addresses of the one broker name (docs/replication.md, as
    RocketMQ's name server has them for a master/slave group): 0 the master, 1.. the
    slaves, which RocketMQ clients read from when the route has no master (or the
    master suggests it). A master names its connected slaves; a slave names the master
    and itself while its stream from the master is live, and only itself while not
    (the master is gone or unreachable: pulls go on from the slave, sends have no
    route until a master is back, as when RocketMQ's name server dropped a dead
    master). No group: this gateway as broker 0."""
    intro = ctx.services.introspection
    own = own_address(ctx)
    role = intro.replication_role()
    if role == "master":
        return {0: own, **dict(enumerate(intro.replication_slaves("remoting"), 1))}
    if role == "slave":
        master = intro.replication_master("remoting") or intro.replication_master("unified")
        if master and intro.replication_following():
            return {0: master, 1: own}
        return {1: own}
    return {0: own}


def _standard(cmd: RemotingCommand) -> bool:
    return int(cmd.version or 0) >= STANDARD_JSON_VERSION or get_bool(
        cmd, "acceptStandardJsonOnly")


def _broker_addrs(addrs: dict[int, str], standard: bool) -> str:
    """The ``brokerAddrs`` map, already serialised (fastjson's unquoted keys if asked)."""
    if standard:
        return json.dumps({str(k): v for k, v in sorted(addrs.items())})
    return "{" + ",".join(f"{k}:{json.dumps(v)}" for k, v in sorted(addrs.items())) + "}"


def route_json(config: TopicConfig, address: dict[int, str], standard: bool) -> bytes:
    queue_data = json.dumps([{
        "brokerName": BROKER_NAME,
        "perm": int(config.perm),
        "readQueueNums": config.read_queues,
        "topicSysFlag": 0,
        "writeQueueNums": config.write_queues,
    }])
    broker_data = (
        '[{"brokerAddrs":' + _broker_addrs(address, standard)
        + ',"brokerName":' + json.dumps(BROKER_NAME)
        + ',"cluster":' + json.dumps(CLUSTER_NAME) + "}]"
    )
    text = (
        '{"brokerDatas":' + broker_data + ',"filterServerTable":{}'
        + ',"queueDatas":' + queue_data + "}"
    )
    return text.encode()


def get_routeinfo_by_topic(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic = get_str(cmd, "topic")
    try:
        config = ctx.services.topics.ensure(topic)
    except InvalidName:
        config = None
    if config is None:
        return error(
            ResponseCode.TOPIC_NOT_EXIST,
            f"No topic route info in name server for the topic: {topic}")
    return response(body=route_json(config, broker_addrs(ctx), _standard(cmd)))


def get_broker_cluster_info(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    address = broker_addrs(ctx)
    standard = _standard(cmd)
    broker = (
        '{"brokerAddrs":' + _broker_addrs(address, standard)
        + ',"brokerName":' + json.dumps(BROKER_NAME)
        + ',"cluster":' + json.dumps(CLUSTER_NAME) + "}"
    )
    text = (
        '{"brokerAddrTable":{' + json.dumps(BROKER_NAME) + ":" + broker + "}"
        + ',"clusterAddrTable":{' + json.dumps(CLUSTER_NAME) + ":"
        + json.dumps([BROKER_NAME]) + "}}"
    )
    return response(body=text.encode())
