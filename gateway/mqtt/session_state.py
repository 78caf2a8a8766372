"""The durable part of an MQTT session, and where it is kept.

A session is identified by its client id. Its subscriptions, its will and its QoS 2
packet-identifier state are kept in the store's metadata under
``mqtt/session/<client id>`` as JSON; its position in each subscribed filter's LMQ is a
consumer offset of group ``mqtt:<client id>`` (:func:`offset_group`), so the backlog of
an offline session is simply what lies past those offsets: on disk, not in memory.

A clean session (3.x clean session = 1, or 5.0 session expiry 0) is never written: it
lives and dies with its connection.

Session expiry (MQTT 5 Session Expiry Interval; 3.1.1 persistent sessions never
expire) counts from the disconnect. ``expiry`` ``0xFFFFFFFF`` means never.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

PREFIX = "mqtt/session/"
NEVER = 0xFFFFFFFF


def offset_group(client_id: str) -> str:
    """The consumer group under which a session's LMQ offsets are committed."""
    return "mqtt:" + client_id


@dataclass(slots=True)
class SubscriptionState:
    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None
    #: ``$share/<group>/<filter>``: the share group, else None.
    share_group: str | None = None
    #: Topics of this filter that the ACL does not let through (True = drop), or None:
    #: computed from the rules at SUBSCRIBE and at every CONNECT, never stored.
    deny: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        """The subscription as the client named it (what UNSUBSCRIBE names)."""
        if self.share_group is not None:
            return f"$share/{self.share_group}/{self.topic_filter}"
        return self.topic_filter


@dataclass(slots=True)
class WillState:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    delay: int = 0  # seconds (MQTT 5 Will Delay Interval)
    #: The will's MQTT 5 properties as JSON values (see MqttFrontEnd.will_properties).
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SessionState:
    client_id: str
    protocol_level: int = 4
    expiry: int = NEVER  # seconds after disconnect; 0 = ends with the connection
    subscriptions: dict[str, SubscriptionState] = field(default_factory=dict)
    will: WillState | None = None
    #: QoS 2 PUBLISHes received (stored, PUBREC sent) whose PUBREL has not come yet.
    inbound_qos2: list[int] = field(default_factory=list)
    #: Outbound QoS 2 messages whose PUBREC came: PUBREL must be (re)sent, not PUBLISH.
    #: packet id -> [lmq, offset, ...] (one pair per LMQ of the session the record was
    #: read through: overlapping subscriptions, see gateway.mqtt.merge)
    pubrel_pending: dict[int, list[Any]] = field(default_factory=dict)
    #: Outbound QoS 2 PUBLISHes sent and not yet PUBREC'd: packet id -> [lmq, offset, ...].
    #: After a reconnect or restart they are sent again with the same packet id (DUP).
    qos2_out: dict[int, list[Any]] = field(default_factory=dict)
    #: Outbound QoS 2 flows completed (PUBCOMP) above the committed offset: lmq ->
    #: offsets, never delivered again; pruned as the committed offset passes them.
    qos2_done: dict[str, list[int]] = field(default_factory=dict)
    connected: bool = False
    disconnected_ms: int = 0
    #: The user that owns the session (None = anonymous); no other user may take it over.
    username: str | None = None
    #: Log position up to which this session's ``mqtt.qos2`` markers are reflected in
    #: ``inbound_qos2`` (see gateway.mqtt.sessions).
    qos2_upto: int = 0

    @property
    def persistent(self) -> bool:
        return self.expiry > 0

    def encode(self) -> bytes:
        doc = asdict(self)
        for sub in doc["subscriptions"].values():
            del sub["deny"]
        if self.will is not None:
            doc["will"]["payload"] = self.will.payload.hex()
        doc["pubrel_pending"] = {str(k): v for k, v in self.pubrel_pending.items()}
        doc["qos2_out"] = {str(k): v for k, v in self.qos2_out.items()}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SessionState:
        doc = json.loads(raw)
        subs = {k: SubscriptionState(**v) for k, v in doc.pop("subscriptions").items()}
        will = doc.pop("will")
        pubrel = {int(k): v for k, v in doc.pop("pubrel_pending").items()}
        qos2_out = {int(k): v for k, v in doc.pop("qos2_out", {}).items()}
        state = cls(**doc, subscriptions=subs, pubrel_pending=pubrel, qos2_out=qos2_out)
        if will is not None:
            will["payload"] = bytes.fromhex(will["payload"])
            state.will = WillState(**will)
        return state
