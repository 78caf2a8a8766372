"""The PUBLISH intake of one MQTT connection: checks, store submission, acks.

:class:`PublishIntake` takes each inbound PUBLISH the handler decodes: topic validity
and ACL checks, the QoS 2 inbound step (:mod:`gateway.mqtt.flows`), the
``max_publish_rate`` token bucket, and the submission to the shared
:class:`~gateway.publisher.Publisher`. The PUBACK / PUBREC goes out when the store
acknowledges the append (so an acknowledged message survives kill -9).

Invariants:

- ``waiting`` counts the QoS 1/2 publishes submitted and not yet acknowledged by the
  store. Reading pauses (``paused_for_store``) when it exceeds the configured
  ``receive_maximum``, the Receive Maximum of CONNACK (only
  a 3.x client can: an MQTT 5 client's one-too-many is refused by the machine with
  DISCONNECT 0x93) or when the store lags, and resumes once it is below half of it.
- ``throttled``: the token bucket paused reading; a timer resumes it. Reading resumes
  only when neither pause holds; the handler stops handling events while either does.

It talks back to its connection through :class:`IntakeHost` only. Event-loop thread
only.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from broker_core import AppendResult, Message, MessageTooLarge, StorageFull
from gateway.auth import Principal
from gateway.mqtt.flows import Inbound
from gateway.mqtt.messages import to_store_message
from gateway.token_bucket import TokenBucket
from lmq.delayed import InvalidDelayedTopic, parse_delayed
from lmq.names import InvalidTopic, validate_topic_name
from protocol.mqtt import (
    Connection,
    MQTTVersion,
    PacketType,
    Puback,
    Publish,
    Pubrec,
    ReasonCode,
)

if TYPE_CHECKING:
    from gateway.connection import Connection as GatewayConnection
    from gateway.mqtt.frontend import MqttFrontEnd
    from gateway.mqtt.sessions import Session

log = logging.getLogger(__name__)

_V5 = MQTTVersion.V5
_PUBACK = PacketType.PUBACK
_PUBREC = PacketType.PUBREC
_NO_RETAIN = ReasonCode.RETAIN_NOT_SUPPORTED


class IntakeHost(Protocol):
    """What the intake needs of its connection (the MQTT handler)."""

    closed: bool
    session: Session | None
    principal: Principal
    #: Its connection (counts the messages it published).
    conn: GatewayConnection

    def queue(self, data: bytes) -> None:
        """Queue bytes for the client (written once per loop turn)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def resume_processing(self) -> None:
        """Handle the events that wait, decoded or not, in the machine's buffer."""

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...

    def refuse(self, code: int, text: str) -> None:
        """A violation the machine cannot see: DISCONNECT (v5) and close."""

    def close(self, reason: str) -> None: ...

    def log_fields(self) -> dict[str, object]: ...


class PublishIntake:
    __slots__ = ("host", "front", "proto", "waiting", "paused_for_store", "throttled",
                 "_bucket", "_pause_at")

    def __init__(self, host: IntakeHost, front: MqttFrontEnd, proto: Connection) -> None:
        self.host = host
        self.front = front
        self.proto = proto
        self.waiting = 0  # QoS 1/2 publishes not yet acknowledged by the store
        self.paused_for_store = False
        self.throttled = False
        rate = front.ctx.config.max_publish_rate
        #: The Receive Maximum the gateway announces (``receive_maximum``).
        self._pause_at = front.ctx.config.receive_maximum
        self._bucket = TokenBucket(rate, front.loop.time()) if rate else None

    def publish(self, publish: Publish) -> None:
        host = self.host
        session = host.session
        assert session is not None
        front = self.front
        front.received += 1
        host.conn.messages_in += 1
        if self._bucket is not None:
            self._throttle(self._bucket)
        topic = publish.topic
        if not topic:
            # The codec validated the name (UTF-8, no U+0000, no wildcards, length); an
            # alias resolves to a non-empty one, so this is a safeguard only.
            try:
                validate_topic_name(topic)
            except InvalidTopic as exc:
                host.refuse(ReasonCode.TOPIC_NAME_INVALID, str(exc))
                return
        qos = publish.qos
        delayed: tuple[str, int] | None = None
        if topic.startswith("$delayed/"):
            delayed = self._delayed(publish)
            if delayed is None:
                return
            topic = delayed[0]  # the ACL and the routes are those of the real topic
        if topic.startswith("$SYS") or (
            front.ctx.authenticator is not None
            and not front.can_publish(host.principal, session.client_id, topic)
        ):
            log.info("publish denied", extra={**host.log_fields(), "topic": publish.topic})
            self.ack(publish, ReasonCode.NOT_AUTHORIZED)
            return
        pid = publish.packet_id
        if qos == 2:
            assert pid is not None
            step = session.flows.inbound_publish(pid)
            if step is Inbound.DUPLICATE:
                host.queue(self.proto.send(Pubrec(packet_id=pid)))  # a resend: stored already
                return
            if step is Inbound.WAIT:
                return  # a resend while the first copy is being stored: its PUBREC follows
        message = to_store_message(
            publish, session.client_id, front.now_ms(), pid if qos == 2 else None, delayed
        )
        lmqs = front.topic_space.route_mqtt(topic)
        publisher = front.ctx.publisher
        if delayed is not None and lmqs:  # (reaching nobody: as an undelayed publish)
            self._submit_delayed(publish, message, lmqs, delayed[1])
            return
        if qos == 0 and not publish.retain:
            publisher.submit_nowait(message, lmqs)  # nothing to acknowledge
            if publisher.lagging:
                self.paused_for_store = True
                host.pause_reading()
                host.spawn(self._store_caught_up(), "mqtt-caught-up")
            return
        if qos:
            self.waiting += 1
            if qos == 2:
                session.qos2_appending += 1
        publisher.submit_callback(
            message, lmqs, lambda result, exc: self._published(result, exc, publish, message)
        )
        if self.waiting > self._pause_at or publisher.lagging:
            self.paused_for_store = True
            host.pause_reading()

    def _delayed(self, publish: Publish) -> tuple[str, int] | None:
        """The (real topic, due ms) of a ``$delayed/...`` publish (:mod:`lmq.delayed`);
        None when it is refused: MQTT 5 answers a QoS 1/2 publish with PUBACK / PUBREC
        0x90 Topic Name invalid and a QoS 0 one with DISCONNECT 0x90; a retained one
        (not supported: the retained message would have to change at the fire) with
        DISCONNECT 0x9A Retain not supported (no PUBACK code says it); 3.x has no
        failure acks and is closed."""
        front = self.front
        code = ReasonCode.TOPIC_NAME_INVALID
        try:
            delayed = parse_delayed(publish.topic, front.now_ms(),
                                    front.ctx.store.config.max_timer_delay_ms)
            if publish.retain:
                code = ReasonCode.RETAIN_NOT_SUPPORTED
                raise InvalidDelayedTopic("a $delayed publish cannot be retained")
        except InvalidDelayedTopic as exc:
            log.info("delayed publish refused: %s", exc,
                     extra={**self.host.log_fields(), "topic": publish.topic})
            if publish.qos and self.proto.version == _V5 and code != _NO_RETAIN:
                self.ack(publish, code)
            else:
                self.host.refuse(code, str(exc))
            return None
        return delayed

    def _submit_delayed(
        self, publish: Publish, message: Message, lmqs: Sequence[str], due: int
    ) -> None:
        """Store a ``$delayed`` publish as the store's durable timer: one record now,
        dispatched to ``lmqs`` (the routes of the real topic at publish time) when due.
        Acknowledged like any publish: once the record is durable. No subscriber
        matching now: the caller stores it as an undelayed publish to nowhere."""
        host = self.host
        qos = publish.qos
        if qos:
            self.waiting += 1
            if qos == 2:
                assert host.session is not None
                host.session.qos2_appending += 1
        publisher = self.front.ctx.publisher
        publisher.submit_delayed(
            message, lmqs, due,
            lambda result, exc: self._published(result, exc, publish, message),
        )
        if self.waiting > self._pause_at or publisher.lagging:
            self.paused_for_store = True
            host.pause_reading()
            if not qos:
                host.spawn(self._store_caught_up(), "mqtt-caught-up")

    async def _store_caught_up(self) -> None:
        """A QoS 0 publisher paused while the store lagged (no ack will resume it):
        resume it once the publisher's ``caught_up`` event is set."""
        publisher = self.front.ctx.publisher
        while publisher.lagging:
            await publisher.caught_up.wait()
        if self.host.closed:
            return
        if self.paused_for_store and self.waiting < self._pause_at // 2:
            self.paused_for_store = False
            if not self.throttled:
                self.host.resume_reading()
                self.host.resume_processing()

    def _throttle(self, bucket: TokenBucket) -> None:
        """``max_publish_rate``: a publisher ahead of its budget has its reading paused
        until the bucket refills (backpressure, not a disconnect)."""
        wait = bucket.take(self.front.loop.time())
        if wait and not self.throttled:
            self.throttled = True
            self.host.pause_reading()
            self.front.loop.call_later(wait, self._unthrottle)

    def _unthrottle(self) -> None:
        self.throttled = False
        host = self.host
        if host.closed:
            return
        if not self.paused_for_store:
            host.resume_reading()
        host.resume_processing()

    def _published(
        self,
        result: AppendResult | None,
        exc: BaseException | None,
        publish: Publish,
        message: Message,
    ) -> None:
        qos = publish.qos
        host = self.host
        session = host.session
        if qos:
            self.waiting -= 1
            if qos == 2 and session is not None:
                session.qos2_appending -= 1
        if self.paused_for_store and self.waiting < self._pause_at // 2:
            self.paused_for_store = False
            if not self.throttled:
                host.resume_reading()
                if not host.closed:
                    # the buffered events are handled on the next turn, after this
                    # store callback
                    self.front.loop.call_soon(host.resume_processing)
        if exc is not None or result is None:
            code = (
                ReasonCode.QUOTA_EXCEEDED
                if isinstance(exc, StorageFull)
                else (
                    ReasonCode.PACKET_TOO_LARGE
                    if isinstance(exc, MessageTooLarge)
                    else ReasonCode.UNSPECIFIED_ERROR
                )
            )
            log.warning("publish not stored: %s", exc, extra=host.log_fields())
            if not host.closed:
                if qos == 2 and session is not None:
                    session.flows.inbound_stored(publish.packet_id, False)  # type: ignore[arg-type]
                self.ack(publish, code)
            return
        if publish.retain:
            self.front.retained.set(message, result.store_ms)
        if host.closed:
            return  # (its session's flows forgot the appends under way at the close)
        if qos == 2 and session is not None:
            session.flows.inbound_stored(publish.packet_id, True)  # type: ignore[arg-type]
            session.save(qos2_upto=result.end if session.qos2_appending == 0 else None)
        self.ack(publish, ReasonCode.SUCCESS)

    def ack(self, publish: Publish, code: int) -> None:
        """PUBACK / PUBREC with ``code``; 3.x has no failure acks, so a failure there
        closes the connection (the client resends after reconnecting)."""
        if publish.qos == 0 or self.host.closed:
            return
        proto = self.proto
        if code >= 0x80 and proto.version != _V5:
            if code == ReasonCode.NOT_AUTHORIZED:
                code = ReasonCode.SUCCESS  # 3.x: acknowledge and drop, as mosquitto does
            else:
                self.host.close("publish failed")
                return
        pid = publish.packet_id
        assert pid is not None
        if code == ReasonCode.SUCCESS:
            self.host.queue(proto.send_ack_success(
                _PUBACK if publish.qos == 1 else _PUBREC, pid
            ))
            return
        self.host.queue(proto.send(
            Puback(packet_id=pid, reason_code=code)
            if publish.qos == 1
            else Pubrec(packet_id=pid, reason_code=code)
        ))


__all__ = ["IntakeHost", "PublishIntake"]
