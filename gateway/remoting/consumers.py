"""Clients and consumer groups, as RocketMQ's broker learns them from heartbeats.

A client (``clientID``, e.g. ``10.0.0.5@12345``) sends HEART_BEAT with the producer and
consumer groups it belongs to, each consumer group with its subscriptions, every 30 s
and whenever it subscribes. :class:`ConsumerManager` keeps, per consumer group, the
clients in it (each on the connection its last heartbeat came from) and their
subscriptions, which:

- GET_CONSUMER_LIST_BY_GROUP answers (a consumer rebalances its queues over that list);
- a pull without a subscription of its own filters with (RocketMQ's broker-side
  subscription data);
- change notifications go out on: when a group gains or loses a client, or a client's
  subscriptions in it change, every client of the group is sent NOTIFY_CONSUMER_IDS_CHANGED
  (oneway) so it rebalances at once rather than at its next 20 s rebalance, as the
  broker's ``DefaultConsumerIdsChangeListener`` does.

A client leaves a group on UNREGISTER_CLIENT, when its connection closes, or when no
heartbeat came for :data:`CLIENT_EXPIRY_S` (RocketMQ's ``channelExpiredTimeout``).

Event-loop thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: A client with no heartbeat for this long has left its groups.
CLIENT_EXPIRY_S = 120.0


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    #: The expression as sent (``*``, ``TagA || TagB``, or an SQL92 text).
    expression: str = "*"
    #: ``TAG`` or ``SQL92``.
    expression_type: str = "TAG"
    tags: frozenset[str] = frozenset()
    version: int = 0


@dataclass(slots=True)
class ConsumerData:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)


@dataclass(slots=True)
class ClientInfo:
    client_id: str
    #: The connection (handler) of the client's last heartbeat.
    channel: Any
    language: str = "JAVA"
    version: int = 0
    last_seen: float = 0.0
    producer_groups: set[str] = field(default_factory=set)
    consumers: dict[str, ConsumerData] = field(default_factory=dict)


def parse_heartbeat(data: dict[str, Any]) -> tuple[str, set[str], dict[str, ConsumerData]]:
    """``(clientID, producer groups, consumer data by group)`` of a HEART_BEAT body
    (already JSON-decoded). Raises ``ValueError`` for a body of the wrong shape."""
    client_id = data.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise ValueError("the heartbeat has no clientID")
    producers = {
        str(p["groupName"])
        for p in data.get("producerDataSet") or ()
        if isinstance(p, dict) and p.get("groupName")
    }
    consumers: dict[str, ConsumerData] = {}
    for c in data.get("consumerDataSet") or ():
        if not isinstance(c, dict) or not c.get("groupName"):
            raise ValueError("a consumer in the heartbeat has no groupName")
        subs: dict[str, Subscription] = {}
        for s in c.get("subscriptionDataSet") or ():
            if not isinstance(s, dict) or not s.get("topic"):
                raise ValueError("a subscription in the heartbeat has no topic")
            tags = s.get("tagsSet") or ()
            subs[str(s["topic"])] = Subscription(
                topic=str(s["topic"]),
                expression=str(s.get("subString") or "*"),
                expression_type=str(s.get("expressionType") or "TAG"),
                tags=frozenset(str(t) for t in tags) if isinstance(tags, list) else frozenset(),
                version=int(s.get("subVersion") or 0),
            )
        consumers[str(c["groupName"])] = ConsumerData(
            group=str(c["groupName"]),
            consume_type=str(c.get("consumeType") or "CONSUME_PASSIVELY"),
            message_model=str(c.get("messageModel") or "CLUSTERING"),
            consume_from_where=str(c.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=subs,
        )
    return client_id, producers, consumers


class ConsumerManager:
    def __init__(
        self,
        on_group_changed: Callable[[str, list[Any]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Called with (group, the channels of its clients) when a group's membership or
        #: subscriptions change.
        self._on_group_changed = on_group_changed
        self._clock = clock
        self.clients: dict[str, ClientInfo] = {}
        #: group -> client ids, in the order they joined
        self.groups: dict[str, dict[str, None]] = {}
        self.producer_groups: dict[str, dict[str, None]] = {}

    # -- heartbeats and leaving --------------------------------------------------------

    def heartbeat(
        self,
        channel: Any,
        client_id: str,
        producers: set[str],
        consumers: dict[str, ConsumerData],
        language: str = "JAVA",
        version: int = 0,
    ) -> None:
        info = self.clients.get(client_id)
        if info is None:
            info = self.clients[client_id] = ClientInfo(client_id, channel)
        info.channel = channel
        info.language = language
        info.version = version
        info.last_seen = self._clock()
        changed: set[str] = set()
        for group in producers - info.producer_groups:
            self.producer_groups.setdefault(group, {})[client_id] = None
        info.producer_groups |= producers
        # A heartbeat lists every group the client is in; RocketMQ does not drop groups
        # missing from a heartbeat (a client leaves a group by unregistering), nor do we.
        for group, data in consumers.items():
            before = info.consumers.get(group)
            members = self.groups.setdefault(group, {})
            if client_id not in members:
                members[client_id] = None
                changed.add(group)
            elif before is None or before.subscriptions != data.subscriptions:
                changed.add(group)
            info.consumers[group] = data
        for group in changed:
            self._changed(group)

    def unregister(
        self, client_id: str, producer_group: str = "", consumer_group: str = ""
    ) -> None:
        """UNREGISTER_CLIENT: the client leaves the groups named (both empty: all)."""
        info = self.clients.get(client_id)
        if info is None:
            return
        if producer_group:
            self._leave_producer(info, producer_group)
        if consumer_group:
            self._leave_consumer(info, consumer_group)
        if not producer_group and not consumer_group:
            self.remove_client(client_id)
        elif not info.producer_groups and not info.consumers:
            del self.clients[client_id]

    def channel_closed(self, channel: Any) -> list[str]:
        """The connection ``channel`` closed: every client on it leaves. Returns their ids."""
        gone = [c.client_id for c in self.clients.values() if c.channel is channel]
        for client_id in gone:
            self.remove_client(client_id)
        return gone

    def remove_client(self, client_id: str) -> None:
        info = self.clients.pop(client_id, None)
        if info is None:
            return
        for group in list(info.producer_groups):
            self._leave_producer(info, group)
        for group in list(info.consumers):
            self._leave_consumer(info, group)

    def expire(self) -> list[str]:
        """Remove clients silent for :data:`CLIENT_EXPIRY_S`; returns their ids."""
        limit = self._clock() - CLIENT_EXPIRY_S
        gone = [c.client_id for c in self.clients.values() if c.last_seen < limit]
        for client_id in gone:
            self.remove_client(client_id)
        return gone

    def _leave_producer(self, info: ClientInfo, group: str) -> None:
        info.producer_groups.discard(group)
        members = self.producer_groups.get(group)
        if members is not None:
            members.pop(info.client_id, None)
            if not members:
                del self.producer_groups[group]

    def _leave_consumer(self, info: ClientInfo, group: str) -> None:
        if info.consumers.pop(group, None) is None:
            return
        members = self.groups.get(group)
        if members is not None and info.client_id in members:
            del members[info.client_id]
            if not members:
                del self.groups[group]
            self._changed(group)

    def _changed(self, group: str) -> None:
        self._on_group_changed(group, self.channels(group))

    # -- queries -----------------------------------------------------------------------

    def consumer_ids(self, group: str) -> list[str]:
        return list(self.groups.get(group, ()))

    def channels(self, group: str) -> list[Any]:
        out = []
        for client_id in self.groups.get(group, ()):
            info = self.clients.get(client_id)
            if info is not None:
                out.append(info.channel)
        return out

    def producer_channels(self, group: str) -> list[Any]:
        """The connections of the clients whose heartbeats name producer ``group``."""
        out = []
        for client_id in self.producer_groups.get(group, ()):
            info = self.clients.get(client_id)
            if info is not None:
                out.append(info.channel)
        return out

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic`` (from its latest heartbeat that has one)."""
        best: Subscription | None = None
        for client_id in self.groups.get(group, ()):
            info = self.clients.get(client_id)
            data = info.consumers.get(group) if info is not None else None
            sub = data.subscriptions.get(topic) if data is not None else None
            if sub is not None and (best is None or sub.version >= best.version):
                best = sub
        return best

    def consumer_data(self, group: str) -> ConsumerData | None:
        for client_id in self.groups.get(group, ()):
            info = self.clients.get(client_id)
            if info is not None and group in info.consumers:
                return info.consumers[group]
        return None
