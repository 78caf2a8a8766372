"""The MQTT front end: shared MQTT state and the life of sessions.

Shared state (this object): the sessions by client id, the retained-message store, the
metrics, and background work (offset commits, pop revive for shared subscriptions,
``$SYS`` topics, wills and session expiry timers). Per-connection state is in
:class:`~gateway.mqtt.handler.MqttHandler`; per-session state in
:class:`~gateway.mqtt.sessions.Session`.

Every PUBLISH is appended once and dispatched to the LMQ of every matching filter
(:class:`gateway.topic_space.TopicSpace`), including AMQP queues bound to ``amq.topic``.
Persistent sessions keep their filters in the topic space while offline, so their
backlog accumulates in the LMQs, on disk.

Event-loop thread only, except :meth:`wake`, which store listeners may call from any
thread.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from typing import TYPE_CHECKING, Any

from broker_core import StoreError
from gateway.auth import Principal
from gateway.auth.acl import GRANTED, SubscribeDecision, deny_all
from gateway.frontend import FrontEnd
from gateway.mqtt import admin
from gateway.mqtt.delivery import deliver
from gateway.mqtt.handler import MqttHandler
from gateway.mqtt.messages import QOS2_KEY, to_store_message
from gateway.mqtt.retained import RetainedStore
from gateway.mqtt.session_state import PREFIX, SessionState, SubscriptionState
from gateway.mqtt.sessions import Session
from lmq.delayed import InvalidDelayedTopic, parse_delayed
from protocol.mqtt import Properties, Publish

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.context import GatewayContext

log = logging.getLogger(__name__)

VERSION = importlib.metadata.version("lmq-gateway")
COMMIT_INTERVAL_S = 1.0
SYS_INTERVAL_S = 10.0


class MqttFrontEnd(FrontEnd):
    name = "mqtt"

    def __init__(self, ctx: GatewayContext) -> None:
        super().__init__(ctx)
        self.sessions: dict[str, Session] = {}
        self.handlers: dict[int, MqttHandler] = {}
        self.dropped_too_large = 0
        self.dropped_queue_full = 0
        #: Sessions woken during this loop turn (an ordered set), delivered to at its end.
        self._woken: dict[Session, None] = {}

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        gw = self.ctx
        self.loop = gw.loop
        self._wake_any_thread = gw.loop_callback(self._wake)
        self.store = gw.store
        self.topic_space = gw.topic_space
        self.retained = RetainedStore(self.store)
        m = gw.metrics
        self.messages_received = m.counter(
            "lmq_mqtt_messages_received_total", "PUBLISH packets received from clients"
        )
        self.messages_sent = m.counter(
            "lmq_mqtt_messages_sent_total", "PUBLISH packets sent to clients"
        )
        # counted per message as plain ints, copied into the counters at scrape time
        self.sent = 0
        self.received = 0
        self.protocol_errors = m.counter(
            "lmq_mqtt_protocol_errors_total", "Connections closed for a protocol error"
        )
        sessions = m.gauge("lmq_mqtt_sessions", "MQTT sessions (online and offline)")
        online = m.gauge("lmq_mqtt_sessions_online", "MQTT sessions with a connection")
        filters = m.gauge("lmq_mqtt_filters", "Distinct subscription filters")

        def counters() -> None:
            self.messages_sent.inc(self.sent - self.messages_sent.value())
            self.messages_received.inc(self.received - self.messages_received.value())

        def collect() -> None:
            sessions.set(len(self.sessions))
            online.set(len(self.handlers))
            filters.set(self.topic_space.filter_count())

        m.on_sample(counters)
        m.on_collect(collect)
        self._load_sessions()
        admin.register(self)
        gw.spawn(self._commit_loop(), "mqtt-commit")
        gw.spawn(self._revive_loop(), "mqtt-revive")
        gw.spawn(self._sys_loop(), "mqtt-sys")

    def promoted(self) -> None:
        """The broker group's master now (docs/replication.md): the sessions are the old
        master's, replicated; those loaded at start are forgotten and the replicated
        ones loaded, as after a crash (the ones connected to the old master get their
        wills scheduled)."""
        for session in list(self.sessions.values()):
            if session.handler is None:  # a slave has no clients
                session.forget()
                del self.sessions[session.client_id]
        self._load_sessions()
        self.subscriptions_changed()

    def _load_sessions(self) -> None:
        """Persistent sessions come back offline, with their filters in the topic space.
        Sessions that were connected when the gateway died had an abnormal disconnect:
        their wills are scheduled."""
        crashed: list[Session] = []
        now = self.now_ms()
        for _key, raw in self.store.iter_meta(PREFIX):
            state = SessionState.decode(raw)
            session = Session(self, state)
            for sub in state.subscriptions.values():
                lmq = self.topic_space.add_filter(sub.topic_filter)
                self.store.create_lmq(lmq)
                session.attach_reader(sub, start_offset=None)
            self.sessions[state.client_id] = session
            if state.connected:
                crashed.append(session)
        if crashed:
            self._recover_qos2(crashed)
        for session in self.sessions.values():
            if session.state.connected:
                session.state.connected = False
                session.state.disconnected_ms = now
                self._schedule_will(session)
            session.save()
            self._schedule_expiry(session)
        if self.sessions:
            log.info(
                "mqtt sessions loaded",
                extra={"sessions": len(self.sessions), "interrupted": len(crashed)},
            )

    def _recover_qos2(self, crashed: list[Session]) -> None:
        """Put back QoS 2 packet ids whose append was acknowledged but not yet recorded
        when the gateway died (see gateway.mqtt.sessions)."""
        start = min(s.state.qos2_upto for s in crashed)
        by_client = {s.client_id: s for s in crashed}
        for item in self.store.records_from(start):
            marker = item.properties.get(QOS2_KEY)
            if marker is None:
                continue
            client, _, pid = marker.decode().partition("\x00")
            session = by_client.get(client)
            if session is not None and item.position >= session.state.qos2_upto:
                if int(pid) not in session.state.inbound_qos2:
                    session.state.inbound_qos2.append(int(pid))

    def connection_made(self, conn: Connection) -> MqttHandler:
        handler = MqttHandler(self, conn)
        self.handlers[conn.id] = handler
        return handler

    def goodbye(self, conn: Connection) -> None:
        handler = self.handlers.get(conn.id)
        if handler is not None:
            handler.goodbye()
        else:
            conn.close("shutdown")

    def authentication_on(self, conns: list[Connection]) -> None:
        for conn in conns:
            handler = self.handlers.get(conn.id)
            if handler is not None:
                handler.logins_required()
            else:
                conn.close("authentication on")

    async def stop(self) -> None:
        for session in self.sessions.values():
            session.cancel_timers()
            session.commit_offsets(force=True)
            session.save()

    # -- sessions ----------------------------------------------------------------------

    def sessions_for_connect(
        self, client_id: str, clean_start: bool, handler: MqttHandler
    ) -> tuple[Session, bool]:
        """The session a CONNECT gets, and whether it existed (CONNACK session present).
        An online session is taken over; ``clean_start`` ends an existing one."""
        existing = self.sessions.get(client_id)
        if existing is not None and existing.handler is not None:
            existing.handler.taken_over()
            existing = self.sessions.get(client_id)
        if existing is not None and clean_start:
            self._end_session(existing)
            existing = None
        if existing is not None:
            return existing, True
        session = Session(self, SessionState(client_id=client_id))
        self.sessions[client_id] = session
        return session, False

    def connected(self, handler: MqttHandler) -> None:
        log.info(
            "mqtt client connected",
            extra={
                **handler.conn.log_fields(),
                "client_id": handler.session.client_id if handler.session else "-",
            },
        )

    def disconnected(self, handler: MqttHandler) -> None:
        self.handlers.pop(handler.conn.id, None)
        session = handler.session
        if session is None or session.handler is not handler:
            return
        session.offline()
        state = session.state
        if state.will is not None:
            if handler.publish_will:
                self._schedule_will(session)
            else:
                state.will = None
        if state.expiry == 0:
            if session.will_timer is not None:  # no session left to wait in
                session.will_timer.cancel()
                session.will_timer = None
                self._publish_will(session)
            self._end_session(session)
        else:
            session.save()
            self._schedule_expiry(session)

    def end_session(self, session: Session) -> None:
        """End an offline session now (the admin API's kick): its subscriptions, offsets
        and stored state go, as at its expiry."""
        self._end_session(session)

    def _end_session(self, session: Session) -> None:
        session.end()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        self.subscriptions_changed()

    def _schedule_will(self, session: Session) -> None:
        will = session.state.will
        if will is None:
            return
        delay = float(will.delay)
        expiry = session.expiry_delay()
        if expiry is not None:
            delay = min(delay, expiry)
        if delay <= 0:
            self._publish_will(session)
        else:
            session.will_timer = self.loop.call_later(delay, self._publish_will, session)

    def _publish_will(self, session: Session) -> None:
        session.will_timer = None
        will = session.state.will
        if will is None:
            return
        session.state.will = None
        session.save()
        wp = will.properties
        props = Properties(
            payload_format_indicator=wp.get("payload_format_indicator"),
            message_expiry_interval=wp.get("message_expiry_interval"),
            content_type=wp.get("content_type"),
            response_topic=wp.get("response_topic"),
            correlation_data=bytes.fromhex(wp["correlation_data"])
            if "correlation_data" in wp
            else None,
            user_properties=tuple(tuple(p) for p in wp.get("user_properties", ())),
        )
        packet = Publish(
            topic=will.topic,
            payload=will.payload,
            qos=will.qos,
            retain=will.retain,
            packet_id=1 if will.qos else None,
            properties=props,
        )
        self.publish_internal(packet, session.client_id)
        log.info("will published", extra={"client_id": session.client_id, "topic": will.topic})

    @staticmethod
    def will_properties(wp: Properties) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in (
            "payload_format_indicator",
            "message_expiry_interval",
            "content_type",
            "response_topic",
        ):
            value = getattr(wp, name)
            if value is not None:
                out[name] = value
        if wp.correlation_data is not None:
            out["correlation_data"] = wp.correlation_data.hex()
        if wp.user_properties:
            out["user_properties"] = [list(p) for p in wp.user_properties]
        return out

    def _schedule_expiry(self, session: Session) -> None:
        delay = session.expiry_delay()
        if delay is None or session.handler is not None:
            return
        if session.expiry_timer is not None:
            session.expiry_timer.cancel()
        session.expiry_timer = self.loop.call_later(delay, self._expire, session)

    def _expire(self, session: Session) -> None:
        session.expiry_timer = None
        if session.handler is not None:
            return
        if session.will_timer is not None:
            session.will_timer.cancel()
            self._publish_will(session)
        log.info("mqtt session expired", extra={"client_id": session.client_id})
        self._end_session(session)

    def wake(self, session: Session) -> None:
        """A subscribed LMQ gained messages, or a QoS 1/2 window opened: deliver. Any
        thread (store listeners call it); hands over to the loop with
        :func:`gateway.context.loop_callback`."""
        self._wake_any_thread(session)

    def _wake(self, session: Session) -> None:
        """:meth:`wake` on the event loop.

        The sessions woken during one loop turn are served by ONE callback at its end,
        which fills them directly (no task switch per session, the common case when a
        publish reaches many sessions); a session with more to send than one round, or
        a connection that is not writable, is left to its delivery task."""
        woken = self._woken
        if not woken:
            self.loop.call_soon(self._deliver_woken)
        woken[session] = None

    def _deliver_woken(self) -> None:
        # Fill every woken session first, then write them all back to back: a client
        # process that holds many of the connections (a fleet's bridge, a load
        # generator) is woken once for the lot rather than once per packet, with the
        # Python work of the next session between two sends.
        woken, self._woken = self._woken, {}
        filled: list[MqttHandler] = []
        try:
            for session in woken:
                handler = session.handler
                if handler is None:
                    session.wakeup.set()
                    continue
                filled.append(handler)
                if not handler.fill_now():
                    session.wakeup.set()
        finally:
            for handler in filled:
                handler.flush_out()

    def subscriptions_changed(self) -> None:
        """Hook for metrics; the topic space is already up to date."""

    # -- publishing from the gateway itself (wills, $SYS) ------------------------------

    def publish_internal(self, packet: Publish, origin: str) -> None:
        if self.ctx.introspection.replication_role() == "slave":
            return  # a slave writes nothing of its own ($SYS, wills: the master's)
        delayed: tuple[str, int] | None = None
        if packet.topic.startswith("$delayed/"):  # a will may be delayed, as in EMQX
            try:
                delayed = parse_delayed(packet.topic, self.now_ms(),
                                        self.store.config.max_timer_delay_ms)
            except InvalidDelayedTopic as exc:  # nobody to tell: the will is dropped
                log.warning("internal publish dropped: %s", exc, extra={"topic": packet.topic})
                return
        message = to_store_message(packet, origin, self.now_ms(), None, delayed)
        lmqs = self.topic_space.route_mqtt(packet.topic if delayed is None else delayed[0])
        if delayed is not None and lmqs:
            if packet.retain:  # (see docs/mqtt.md: a delayed message is never retained)
                log.info("retain flag of a delayed will ignored", extra={"topic": packet.topic})
            self.ctx.publisher.submit_delayed(message, lmqs, delayed[1], _log_delayed_failure)
            return
        fut = self.ctx.publisher.submit(message, lmqs)

        def stored(f: asyncio.Future[Any]) -> None:
            if f.cancelled() or f.exception() is not None:
                log.warning("internal publish failed", extra={"topic": packet.topic})
            elif packet.retain:
                self.retained.set(message, f.result().store_ms)

        fut.add_done_callback(stored)

    def send_retained(
        self, handler: MqttHandler, session: Session, sub: SubscriptionState, qos: int
    ) -> None:
        now = self.now_ms()
        for record in self.retained.matching(sub.topic_filter):
            deliver(session, handler, record, sub, min(qos, record.qos), now, retained=True)
        handler.flush_out()

    # -- authentication and authorisation ----------------------------------------------

    def session_owner(self, client_id: str) -> str | None:
        """The user name of the session ``client_id`` (None: no session, or anonymous)."""
        session = self.sessions.get(client_id)
        return None if session is None else session.state.username

    def can_publish(self, principal: Principal, client_id: str, topic: str) -> bool:
        auth = self.ctx.authenticator
        return True if auth is None else auth.can_publish(principal, client_id, topic)

    def can_subscribe(
        self, principal: Principal, client_id: str, topic_filter: str
    ) -> SubscribeDecision:
        auth = self.ctx.authenticator
        if auth is None:
            return GRANTED
        return auth.subscribe_decision(principal, client_id, topic_filter)

    def apply_acl(self, principal: Principal, session: Session) -> None:
        """Give every subscription of ``session`` its delivery filter under the rules as
        they are now (the filters are not stored: a restored session gets them here); a
        subscription the rules no longer grant delivers nothing."""
        for sub in session.state.subscriptions.values():
            decision = self.can_subscribe(principal, session.client_id, sub.topic_filter)
            sub.deny = decision.deny if decision.granted else deny_all

    # -- background work ---------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_INTERVAL_S)
            for session in list(self.sessions.values()):
                try:
                    session.commit_offsets()
                except StoreError as exc:
                    log.warning("offset commit failed: %s", exc)

    async def _revive_loop(self) -> None:
        """Shared subscriptions: messages whose invisible time ran out go back to the
        group (the revive notifies the LMQ's listeners, which wakes the members)."""
        while True:
            due = self.store.pop.next_revive_at()
            now = self.now_ms()
            wait = 1.0 if due is None else min(1.0, max(0.0, (due - now) / 1000))
            await asyncio.sleep(wait)
            if due is not None and due <= self.now_ms():
                self.store.pop.revive()

    async def _sys_loop(self) -> None:
        started = time.time()
        while True:
            values = {
                "$SYS/broker/version": f"lmq-gateway {VERSION}",
                "$SYS/broker/uptime": f"{int(time.time() - started)} seconds",
                "$SYS/broker/clients/connected": str(len(self.handlers)),
                "$SYS/broker/clients/total": str(len(self.sessions)),
                "$SYS/broker/subscriptions/count": str(
                    sum(len(s.state.subscriptions) for s in self.sessions.values())
                ),
                "$SYS/broker/messages/received": str(self.received),
                "$SYS/broker/messages/sent": str(self.sent),
                "$SYS/broker/store/log_bytes": str(self.store.log_bytes),
                "$SYS/broker/retained messages/count": str(self.retained.count()),
                # every protocol's pending delayed messages: the store's counters
                "$SYS/broker/delayed messages/count": str(self.store.timers.pending()),
            }
            for topic, text in values.items():
                self.publish_internal(
                    Publish(topic=topic, payload=text.encode(), retain=True), "$SYS"
                )
            await asyncio.sleep(SYS_INTERVAL_S)

    # -- clocks --------------------------------------------------------------------------

    @staticmethod
    def now() -> float:
        return time.time()

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000


def _log_delayed_failure(_result: object, exc: BaseException | None) -> None:
    if exc is not None:
        log.warning("internal delayed publish failed: %s", exc)
