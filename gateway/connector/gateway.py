"""The gateway endpoint (kinds ``gateway`` and ``rocketmq``): Source and Target over the
project's remoting client (``gateway/clients/``), so over RocketMQ's remoting protocol.

**Source.** A rule's ``topic`` is read queue by queue (``"<topic>:<queueId>"``, the
queues of its route) with PULL_MESSAGE by offset, as consumer group
``lmq-connector-<rule>``, with the rule's tag expression (and the heartbeats' tag) as the
subscription: what the gateway skips does not cross the wire, and ``scanned`` says how
far it looked, so the runner moves past a filtered range. A record's offset is its
queue offset. ``acknowledge`` commits the group's offset (one-way), which
is where a rule to a target that keeps no origins (at-least-once) resumes after a
restart. The topic a copy carries is the MQTT name (``T`` joined with
``mqttSecondTopic``): MQTT subscribers of the target see the same topic.

**Target.** Copies of one source queue go in one SEND_BATCH_MESSAGE (stored in one
append) to target queue ``source queueId mod target queue count``, to the RocketMQ topic
that is the first level of the rendered name (the rest is ``mqttSecondTopic``). Tags,
keys, user properties and the UNIQ_KEY are kept; the origin and path properties of
``endpoints.py`` are added. A gateway answers the private requests of
``protocol/remoting/origins.py`` (high-water marks, advances, offset translation); a
real RocketMQ cluster (kind ``rocketmq``) does not: ``high_water`` is ``None`` there
and the rule is at-least-once. Only our gateway was tested as both.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping, Sequence

from gateway.clients.origins import OriginClient
from gateway.clients.received import ReceivedMessage
from gateway.clients.remoting import (
    ConnectionLost,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    RemotingClient,
    RemotingError,
    RequestTimeout,
)
from lmq.rocketmq import (
    MQTT_SECOND_TOPIC,
    SYSTEM_PROPERTIES,
    join_mqtt_topic,
    split_mqtt_topic,
)
from protocol.remoting import ResponseCode

from .endpoints import (
    CONNECTOR_PROPERTIES,
    DEDUP_ID,
    ORIGIN_CLUSTER,
    ORIGIN_OFFSET,
    ORIGIN_QUEUE,
    PATH,
    CopyMessage,
    EndpointUnavailable,
    MessageRefused,
    SourceRecord,
)
from .heartbeat import HEARTBEAT_TAG
from .rules import Cluster, Rule, start_millis
from .tls import cluster_context, verify_failure

#: Answers that mean "not now" (retry with back-off), not "never".
_TRANSIENT = frozenset({
    ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.FLOW_CONTROL, ResponseCode.POLLING_FULL, ResponseCode.GO_AWAY,
    ResponseCode.BROKER_DISPATCH_NOT_COMPLETE, ResponseCode.NOT_LEADER_FOR_QUEUE,
})  # fmt: skip

CONNECTOR_GROUP_PREFIX = "lmq-connector-"

log = logging.getLogger("lmq.connector")


def connector_group(rule: Rule) -> str:
    return CONNECTOR_GROUP_PREFIX + rule.name


def unavailable(exc: Exception, what: str) -> EndpointUnavailable:
    return EndpointUnavailable(f"{what}: {exc}")


def is_transient(exc: Exception) -> bool:
    if isinstance(exc, ConnectionLost | RequestTimeout | OSError | TimeoutError):
        return True
    return isinstance(exc, RemotingError) and (exc.code in _TRANSIENT or exc.code == -1)


class _Endpoint:
    """The part Source and Target share: the client, its (re)connection over the
    cluster's endpoints, and the cluster id."""

    def __init__(self, cluster: Cluster, rule: Rule) -> None:
        self.cluster = cluster
        self.rule = rule
        self.client: RemotingClient | None = None
        self._id: str | None = None

    @property
    def private_requests(self) -> bool:
        """Whether the cluster answers the gateway's own requests (kind gateway)."""
        return self.cluster.kind == "gateway"

    async def open(self) -> None:
        """Connect to the cluster's first endpoint that answers, in the file's order
        (a broker group's members: a dead master's address is passed over at once);
        EndpointUnavailable when none does."""
        await self.close()
        endpoints = self.cluster.endpoints
        for n, address in enumerate(endpoints):
            try:
                await self._open(address)
                return
            except EndpointUnavailable:
                if n == len(endpoints) - 1:
                    raise

    async def _open(self, address: str) -> None:
        timeout = float(self.cluster.options.get("timeout", 5.0))
        client = RemotingClient(
            address,
            client_id=f"lmq-connector-{self.rule.name}",
            access_key=self.cluster.access_key,
            secret_key=self.cluster.secret_key,
            ssl_context=cluster_context(self.cluster),
            timeout=timeout,
        )
        try:
            await client.connection(address)
        except Exception as exc:
            await client.close()
            failure = verify_failure(exc, f"cluster {self.cluster.name} at {address}")
            if failure is not None:
                raise failure from exc
            if is_transient(exc):
                raise unavailable(exc, f"cluster {self.cluster.name} at {address}") from exc
            raise
        self.client = client

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def check(self) -> None:
        """Raise EndpointUnavailable if the cluster cannot be reached now (the connection
        is reopened if it was lost)."""
        client = self._client()
        try:
            await client.connection(client.namesrv)
        except Exception as exc:
            raise self._map(exc, "connection") from exc

    def _client(self) -> RemotingClient:
        if self.client is None:
            raise EndpointUnavailable(f"cluster {self.cluster.name}: not connected")
        return self.client

    async def cluster_id(self) -> str:
        if self._id is None:
            if not self.private_requests:
                self._id = self.cluster.name
            else:
                try:
                    self._id = await OriginClient(self._client()).cluster_id()
                except RemotingError as exc:
                    if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                        raise self._map(exc, "cluster id") from exc
                    # not our gateway (or an older one): known by its name
                    self._id = self.cluster.name
                except Exception as exc:
                    raise self._map(exc, "cluster id") from exc
        return self._id

    def _map(self, exc: Exception, what: str) -> Exception:
        if isinstance(exc, EndpointUnavailable | MessageRefused):
            return exc
        if is_transient(exc):
            return unavailable(exc, f"cluster {self.cluster.name}: {what}")
        return exc


def queue_name(topic: str, queue_id: int) -> str:
    return f"{topic}:{queue_id}"


def parse_queue_name(queue: str) -> tuple[str, int] | None:
    topic, _, qid = queue.rpartition(":")
    return (topic, int(qid)) if topic and qid.isdigit() else None


class GatewaySource(_Endpoint):
    """A RocketMQ topic of a gateway (or of RocketMQ) read by PULL, queue by queue."""

    def __init__(self, cluster: Cluster, rule: Rule) -> None:
        super().__init__(cluster, rule)
        self.topic = rule.read
        self._mqs: dict[str, MessageQueue] = {}
        #: the tag expression pushed into PULL (heartbeats' tag added); a property
        #: filter cannot be pushed down (no SQL92): "*"
        self.expression = "*"
        if rule.property is None and rule.tag.strip() != "*":
            self.expression = f"{rule.tag} || {HEARTBEAT_TAG}"
        #: per queue, the last offset the last read looked at, matched or not
        self.scanned: dict[str, int] = {}
        #: source ranges retention removed before they were read
        self.gaps = 0

    def _consumer(self, group: str | None = None) -> PullConsumer:
        return PullConsumer(self._client(), group or connector_group(self.rule))

    async def queues(self) -> list[str]:
        try:
            route = await self._client().route(self.topic, refresh=True)
        except Exception as exc:
            raise self._map(exc, f"route of {self.topic}") from exc
        self._mqs = {queue_name(mq.topic, mq.queue_id): mq for mq in route.read_queues}
        return sorted(self._mqs, key=lambda q: (self._mqs[q].queue_id, q))

    async def _mq(self, queue: str) -> MessageQueue:
        if queue not in self._mqs:
            await self.queues()
        try:
            return self._mqs[queue]
        except KeyError:
            raise EndpointUnavailable(f"{self.topic} has no queue {queue} (yet)") from None

    async def start_offset(self, queue: str, start: str) -> int:
        """Where a queue with no position starts: the connector group's committed offset
        if it has one, else the rule's start position."""
        mq = await self._mq(queue)
        consumer = self._consumer()
        try:
            committed = await consumer.query_offset(mq)
            # we commit up_to + 1 >= 1; 0 is what a gateway (and RocketMQ) answers a
            # group that never committed while the queue still starts at 0
            if committed is not None and committed > 0:
                return committed
            if start == "earliest":
                return await consumer.min_offset(mq)
            millis = start_millis(start)
            if millis is not None:
                return await consumer.search_offset(mq, millis)
            return await consumer.max_offset(mq)
        except Exception as exc:
            raise self._map(exc, f"start offset of {queue}") from exc

    async def read(
        self, queue: str, after: int | None, start: str, max_messages: int, wait_ms: int
    ) -> list[SourceRecord]:
        mq = await self._mq(queue)
        offset = after + 1 if after is not None else await self.start_offset(queue, start)
        try:
            result = await self._consumer().pull(
                mq, offset, expression=self.expression, max_nums=max_messages,
                suspend_ms=wait_ms,
            )  # fmt: skip
        except Exception as exc:
            raise self._map(exc, f"pull {queue}") from exc
        if result.status == ResponseCode.PULL_OFFSET_MOVED and result.next_begin_offset > offset:
            # retention removed what we had not read yet: nothing to do but go on from
            # the oldest record kept; the gap is logged and counted
            self.gaps += 1
            log.warning(
                "%s: offsets %d..%d are gone at the source (retention); going on from %d",
                queue, offset, result.next_begin_offset - 1, result.next_begin_offset,
            )  # fmt: skip
            try:
                result = await self._consumer().pull(
                    mq, result.next_begin_offset, expression=self.expression,
                    max_nums=max_messages, suspend_ms=0,
                )  # fmt: skip
            except Exception as exc:
                raise self._map(exc, f"pull {queue}") from exc
        if result.status != ResponseCode.PULL_OFFSET_MOVED:
            self.scanned[queue] = result.next_begin_offset - 1
        return [SourceRecord(queue, m.queue_offset, self._copy(m)) for m in result.messages]

    def _copy(self, m: ReceivedMessage) -> CopyMessage:
        props = m.properties
        topic = join_mqtt_topic(self.topic, props.get(MQTT_SECOND_TOPIC, ""))
        path = tuple(p for p in props.get(PATH, "").split(",") if p)
        return CopyMessage(
            body=m.body,
            topic=topic,
            tag=props.get("TAGS", ""),
            keys=tuple(props.get("KEYS", "").split()),
            properties={
                k: v
                for k, v in props.items()
                if k not in SYSTEM_PROPERTIES and k not in CONNECTOR_PROPERTIES
            },
            born_ms=m.born_timestamp,
            msg_id=m.msg_id,
            path=path,
        )

    async def acknowledge(self, queue: str, up_to: int) -> None:
        mq = await self._mq(queue)
        try:
            await self._consumer().update_offset(mq, up_to + 1, oneway=True)
        except Exception as exc:
            raise self._map(exc, f"commit {queue}") from exc

    async def end_offset(self, queue: str) -> int | None:
        mq = await self._mq(queue)
        try:
            return await self._consumer().max_offset(mq)
        except Exception as exc:
            raise self._map(exc, f"max offset of {queue}") from exc

    async def committed_offsets(self, group: str) -> dict[str, int]:
        """Consumer group ``group``'s committed next offsets per source queue."""
        consumer = self._consumer(group)
        out: dict[str, int] = {}
        for queue in await self.queues():
            try:
                offset = await consumer.query_offset(self._mqs[queue])
            except Exception as exc:
                raise self._map(exc, f"offset of {group} on {queue}") from exc
            # 0: never committed, or nothing consumed: nothing to carry
            if offset is not None and offset > 0:
                out[queue] = offset
        return out

    async def send_heartbeat(self, queue: str, properties: Mapping[str, str], tag: str) -> None:
        """Append a heartbeat message to ``queue`` (it travels like any message)."""
        mq = await self._mq(queue)
        producer = Producer(self._client(), connector_group(self.rule), timeout=5.0)
        try:
            await producer.send(
                self.topic, b"", tags=tag, properties=dict(properties), queue_id=mq.queue_id
            )
        except Exception as exc:
            raise self._map(exc, "heartbeat") from exc


class GatewayTarget(_Endpoint):
    """Writes copies to a gateway (or RocketMQ) by SEND_BATCH_MESSAGE."""

    def __init__(self, cluster: Cluster, rule: Rule) -> None:
        super().__init__(cluster, rule)
        self._producer: Producer | None = None
        #: copies the target answered as duplicates (at or below its high-water mark)
        self.duplicates = 0

    async def open(self) -> None:
        await super().open()
        group = str(self.cluster.options.get("producer_group", connector_group(self.rule)))
        self._producer = Producer(self._client(), group, compress_over=None, timeout=10.0)

    def fixed_topic(self, source_topic: str) -> str:
        """The RocketMQ topic a gateway source topic's copies go to."""
        return split_mqtt_topic(self.rule.render_topic(source_topic, source_topic))[0]

    async def high_water(self, origin_cluster: str, queues: Sequence[str]) -> dict[str, int] | None:
        if not self.private_requests:
            return None
        topic = self.fixed_topic(self.rule.read)
        try:
            return await OriginClient(self._client()).high_water(topic, origin_cluster, queues)
        except RemotingError as exc:
            if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return None
            raise self._map(exc, "high-water marks") from exc
        except Exception as exc:
            raise self._map(exc, "high-water marks") from exc

    async def advance(self, origin_cluster: str, queue: str, offset: int) -> None:
        """Raise the high-water mark of ``queue`` over a range the rule filtered out."""
        if not self.private_requests:
            return
        topic = self.fixed_topic(self.rule.read)
        try:
            await OriginClient(self._client()).advance(topic, origin_cluster, queue, offset)
        except Exception as exc:
            raise self._map(exc, "advance") from exc

    async def carry_offsets(
        self, group: str, origin_cluster: str, committed: Mapping[str, int]
    ) -> int:
        """Translate ``group``'s committed source offsets and commit them on the target
        for the same group; returns the number of target queues committed."""
        if not self.private_requests or not committed:
            return 0
        topic = self.fixed_topic(self.rule.read)
        try:
            reply = await OriginClient(self._client()).translate_offsets(
                topic, origin_cluster, committed
            )
            consumer = PullConsumer(self._client(), group)
            queues = {mq.queue_id: mq for mq in await consumer.queues(topic)}
            done = 0
            for t in reply.offsets:
                mq = queues.get(t.queue_id)
                if mq is not None and t.topic == topic:
                    current = await consumer.query_offset(mq)
                    # never move a group back: its consumers on the target may be ahead
                    if current is None or current < t.offset:
                        await consumer.update_offset(mq, t.offset)
                        done += 1
            return done
        except Exception as exc:
            raise self._map(exc, f"carry offsets of {group}") from exc

    async def write(self, topic: str, source_queue: str, messages: Sequence[CopyMessage]) -> None:
        if not messages:
            return
        if self._producer is None:
            raise EndpointUnavailable(f"cluster {self.cluster.name}: not connected")
        rmq_topic, _ = split_mqtt_topic(topic)
        batch = [self._message(rmq_topic, topic, m) for m in messages]
        try:
            queues = await self._producer.queues(rmq_topic)
            parsed = parse_queue_name(source_queue)
            index = parsed[1] if parsed else zlib.crc32(source_queue.encode())
            mq = queues[index % len(queues)]
            result = await self._producer.send_batch(rmq_topic, batch, queue_id=mq.queue_id)
            self.duplicates += result.duplicates
        except RemotingError as exc:
            if is_transient(exc):
                raise self._map(exc, f"send to {rmq_topic}") from exc
            raise MessageRefused(0, str(exc)) from exc
        except ValueError as exc:  # a topic the producer cannot send to
            raise MessageRefused(0, str(exc)) from exc
        except Exception as exc:
            raise self._map(exc, f"send to {rmq_topic}") from exc

    def _message(self, rmq_topic: str, full_topic: str, m: CopyMessage) -> Message:
        props = {k: v for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES}
        _, second = split_mqtt_topic(full_topic)
        if second:
            props[MQTT_SECOND_TOPIC] = second
        if m.msg_id:
            props["UNIQ_KEY"] = m.msg_id
            if m.origin is None:
                # no origin offset to drop a repeat by (an MQTT or AMQP source, whose
                # redeliveries come with new offsets): the gateway's dedup window does
                props[DEDUP_ID] = m.msg_id
        if m.origin is not None:
            props[ORIGIN_CLUSTER] = m.origin.cluster
            props[ORIGIN_QUEUE] = m.origin.queue
            props[ORIGIN_OFFSET] = str(m.origin.offset)
        if m.path:
            props[PATH] = ",".join(m.path)
        return Message(rmq_topic, m.body, m.tag or None, m.keys, props)


def make_source(cluster: Cluster, rule: Rule) -> GatewaySource:
    return GatewaySource(cluster, rule)


def make_target(cluster: Cluster, rule: Rule) -> GatewayTarget:
    return GatewayTarget(cluster, rule)
