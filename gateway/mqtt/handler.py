"""One MQTT connection: bytes to the sans-IO machine, its events to the session.

``data_received`` feeds :class:`protocol.mqtt.Connection` and handles every event it
yields; replies are written in order. A protocol error answers with the machine's
``error_response()`` (CONNACK or DISCONNECT with the reason code) and closes this
connection only. Inbound PUBLISHes go to the connection's
:class:`~gateway.mqtt.intake.PublishIntake` (checks, store submission, PUBACK/PUBREC
once stored, the Receive Maximum / store-lag pause and the publish-rate throttle);
event handling stops while the intake holds reading paused.

Per-connection state only; the session (which may outlive this) is in
:mod:`gateway.mqtt.sessions`. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar

from gateway.auth import ANONYMOUS_PRINCIPAL, Authenticator, Principal
from gateway.connection import ERROR_LINGER
from gateway.frontend import ConnectionHandler
from gateway.mqtt.connect import Refused, accept, login
from gateway.mqtt.delivery_loop import deliver_loop, fill_now
from gateway.mqtt.flows import Effects
from gateway.mqtt.intake import PublishIntake
from gateway.mqtt.subscribe import subscribe_codes
from protocol.mqtt import (
    NEED_DATA,
    PAUSED,
    Auth,
    Connack,
    Connect,
    Connection,
    ConnectionClosed,
    Disconnect,
    MQTTError,
    MQTTVersion,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubacks,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    State,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)

if TYPE_CHECKING:
    from gateway.connection import Connection as GatewayConnection
    from gateway.mqtt.frontend import MqttFrontEnd
    from gateway.mqtt.sessions import Session

log = logging.getLogger(__name__)

_V5 = MQTTVersion.V5


class MqttHandler(ConnectionHandler):
    def __init__(self, front: MqttFrontEnd, conn: GatewayConnection) -> None:
        super().__init__(conn)
        self.front = front
        #: Delivery counters (see delivery.Outbox).
        self.stats = front
        #: The connection's outbox (:meth:`gateway.connection.Connection.queue`), bound
        #: here because delivery calls it once per message: everything queued in one
        #: turn of the event loop (acks of a batch of publishes, a round of deliveries)
        #: goes out in one write.
        self.queue: Callable[[bytes], None] = conn.queue
        self.proto = Connection(
            max_packet_size=front.ctx.config.max_packet_size,
            outbound_topic_aliases=True,
            batch_pubacks=True,
        )
        self.session: Session | None = None
        self.closed = False
        self.normal_disconnect = False
        self.publish_will = True
        self.receive_max = 65535
        self._keepalive: asyncio.TimerHandle | None = None
        self._last_rx = 0.0
        self._keepalive_s = 0.0
        self._delivery: asyncio.Task[None] | None = None
        self.principal: Principal = ANONYMOUS_PRINCIPAL
        #: MQTT 5 Request Problem Information: reason strings on DISCONNECT.
        self.problem_information = True
        self.intake = PublishIntake(self, front, self.proto)

    # -- bytes in ----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_rx = self.front.loop.time()
        try:
            self.proto.receive_data(data)
            self._process()
        except MQTTError as exc:
            self._protocol_error(exc)

    def eof_received(self) -> bool:
        if not self.closed:
            try:
                self.proto.receive_data(b"")
                self._process()
            except MQTTError as exc:
                self._protocol_error(exc)
        return False

    def _process(self) -> None:
        proto = self.proto
        intake = self.intake
        while not self.closed and not intake.throttled and not intake.paused_for_store:
            event = proto.next_event()
            if event is NEED_DATA or event is PAUSED:
                return
            if type(event) is Publish:  # the hot path: straight to the intake
                intake.publish(event)
                continue
            handler = self._handlers.get(type(event))
            if handler is None:
                raise_unexpected(event)
            else:
                handler(self, event)

    def _protocol_error(self, exc: MQTTError) -> None:
        log.info(
            "mqtt protocol error: %s",
            exc,
            extra={**self.conn.log_fields(), "reason_code": int(exc.reason_code)},
        )
        self.front.protocol_errors.inc()
        try:
            out = self.proto.error_response()
        except Exception:
            out = b""
        if out:
            self.conn.queue(out)
        self.close(f"protocol error: {exc}", linger=True)

    def _send(self, packet: object) -> None:
        self.queue(self.proto.send(packet))  # type: ignore[arg-type]

    def flush_out(self) -> None:
        self.conn.flush()

    # -- what the publish intake uses (gateway.mqtt.intake.IntakeHost) ----------------

    def pause_reading(self) -> None:
        self.conn.pause_reading()

    def resume_reading(self) -> None:
        self.conn.resume_reading()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.conn.spawn(coro, name)

    def log_fields(self) -> dict[str, object]:
        return self.conn.log_fields()

    # -- CONNECT (the rules are in gateway.mqtt.connect) ------------------------------

    def _on_connect(self, connect: Connect) -> None:
        auth = self.front.ctx.authenticator
        if auth is None:  # open mode (no users file, loopback): no thread hop
            self._finish_connect(connect, ANONYMOUS_PRINCIPAL)
            return
        # the login runs in a thread, reading paused meanwhile (packets pipelined after
        # the CONNECT wait in the machine: PAUSED)
        self.conn.pause_reading()
        self.conn.spawn(self._authenticate(auth, connect), "mqtt-auth")

    async def _authenticate(self, auth: Authenticator, connect: Connect) -> None:
        conn = self.conn
        result = await login(
            auth, connect, conn.transport.get_extra_info("peercert"), conn.peer_host
        )
        if self.closed:
            return
        if not isinstance(result, Principal):
            self._send(Connack(reason_code=result.mqtt5_reason_code))
            self.close(f"login refused: {result.reason.name.lower()}", linger=True)
            return
        self._finish_connect(connect, result)
        conn.resume_reading()
        self.resume_processing()

    def _finish_connect(self, connect: Connect, principal: Principal) -> None:
        front = self.front
        self.principal = principal
        accepted = accept(front, self, connect, principal)
        if isinstance(accepted, Refused):
            self._send(accepted.connack)
            self.close(accepted.reason, linger=True)
            return
        session = self.session = accepted.session
        self.receive_max = accepted.receive_max
        self.problem_information = accepted.problem_information
        front.apply_acl(principal, session)
        session.online(self)
        session.save()
        self._send(accepted.connack)
        self.conn.established(session.client_id, principal.username)
        keep_alive = self.proto.keep_alive or 0
        if accepted.server_keep_alive is not None and self.proto.version != _V5:
            keep_alive = accepted.server_keep_alive  # 3.x cannot be told: enforce the cap
        self._keepalive_s = keep_alive * 1.5
        if self._keepalive_s:
            self._keepalive = front.loop.call_later(self._keepalive_s, self._check_keepalive)
        # Resume QoS 2 flows whose PUBREC came before the disconnect, then deliver.
        for pubrel in session.flows.resume():
            self._send(pubrel)
        front.connected(self)
        self._delivery = self.conn.spawn(deliver_loop(self), f"mqtt-deliver-{session.client_id}")
        front.wake(session)

    def _check_keepalive(self) -> None:
        self._keepalive = None
        if self.closed:
            return
        idle = self.front.loop.time() - self._last_rx
        if idle >= self._keepalive_s:
            log.info("keep-alive expired", extra=self.conn.log_fields())
            if self.proto.version == _V5:
                self._try_send(Disconnect(reason_code=ReasonCode.KEEP_ALIVE_TIMEOUT))
            self.close("keep-alive timeout")
            return
        self._keepalive = self.front.loop.call_later(
            self._keepalive_s - idle, self._check_keepalive
        )

    # -- PUBLISH in: _process hands it to the intake (checks, store, acks) ---------

    def resume_processing(self) -> None:
        """Handle packets that arrived while processing was paused (they wait, decoded
        or not, in the machine's buffer)."""
        intake = self.intake
        if self.closed or intake.throttled or intake.paused_for_store:
            return
        try:
            self._process()
        except MQTTError as exc:
            self._protocol_error(exc)

    def refuse(self, code: int, text: str) -> None:
        """A protocol violation the machine cannot see: DISCONNECT (v5) and close."""
        log.info("mqtt: %s", text, extra=self.conn.log_fields())
        self.front.protocol_errors.inc()
        if self.proto.version == _V5:
            props = Properties(reason_string=text) if self.problem_information else Properties()
            self._try_send(Disconnect(reason_code=code, properties=props))
        self.close(text, linger=True)

    def _on_pubrel(self, packet: Pubrel) -> None:
        session = self.session
        assert session is not None
        code, changed = session.flows.on_pubrel(packet.packet_id, self.proto.version == _V5)
        if changed:
            session.save()
        self._send(Pubcomp(packet_id=packet.packet_id, reason_code=code))

    # -- acks of our deliveries: the flows decide, this carries it out -----------------

    def _on_puback(self, packet: Puback) -> None:
        self._apply(self.session.flows.on_puback(packet.packet_id))  # type: ignore[union-attr]

    def _on_pubacks(self, acks: Pubacks) -> None:
        self._apply(self.session.flows.on_pubacks(acks.packet_ids))  # type: ignore[union-attr]

    def _on_pubrec(self, packet: Pubrec) -> None:
        flows = self.session.flows  # type: ignore[union-attr]
        v5 = self.proto.version == _V5
        self._apply(flows.on_pubrec(packet.packet_id, packet.reason_code, v5))

    def _on_pubcomp(self, packet: Pubcomp) -> None:
        self._apply(self.session.flows.on_pubcomp(packet.packet_id))  # type: ignore[union-attr]

    def _apply(self, fx: Effects) -> None:
        session = self.session
        assert session is not None
        if fx.advance:
            for reader, offset in fx.advance:
                reader.acked(offset)
            session.offsets_dirty = True
        for receipt in fx.receipts:
            self._ack_receipt(receipt)
        if fx.save:
            session.save()
        for packet in fx.send:
            self._send(packet)
        if fx.wake:
            self.front.wake(session)

    def _ack_receipt(self, receipt: str) -> None:
        try:
            self.front.store.pop.ack(receipt)
        except Exception as exc:  # revived meanwhile: another member gets it again
            log.debug("shared ack failed: %s", exc)

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------

    def _on_subscribe(self, packet: Subscribe) -> None:
        session = self.session
        assert session is not None
        front = self.front
        client_id = session.client_id
        result = subscribe_codes(
            packet,
            self.proto.version == _V5,
            session.state.subscriptions,
            front.ctx.config.max_subscriptions_per_session,
            lambda topic_filter: front.can_subscribe(self.principal, client_id, topic_filter),
        )
        if result.refuse is not None:
            self.refuse(ReasonCode.PROTOCOL_ERROR, result.refuse)
            return
        retained = []
        for sub in result.granted:
            new = session.add_subscription(sub)
            if sub.share_group is None and (
                sub.retain_handling == 0 or (sub.retain_handling == 1 and new)
            ):
                retained.append(sub)
        session.save()
        self._send(Suback(packet_id=packet.packet_id, reason_codes=tuple(result.codes)))
        front.subscriptions_changed()
        for sub in retained:
            front.send_retained(self, session, sub, sub.qos)
        front.wake(session)

    def _on_unsubscribe(self, packet: Unsubscribe) -> None:
        session = self.session
        assert session is not None
        codes = []
        for key in packet.topic_filters:
            removed = session.remove_subscription(key)
            codes.append(ReasonCode.SUCCESS if removed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
        session.save()
        self.front.subscriptions_changed()
        self._send(
            Unsuback(
                packet_id=packet.packet_id,
                reason_codes=tuple(codes) if self.proto.version == _V5 else (),
            )
        )

    # -- the rest ----------------------------------------------------------------------

    def _on_pingreq(self, _packet: Pingreq) -> None:
        self._send(Pingresp())

    def _on_disconnect(self, packet: Disconnect) -> None:
        session = self.session
        self.normal_disconnect = True
        self.publish_will = packet.reason_code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        expiry = packet.properties.session_expiry_interval
        if session is not None and expiry is not None:
            session.state.expiry = expiry
        self.close("client disconnected")

    def _on_auth(self, _packet: Auth) -> None:
        self.refuse(
            ReasonCode.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported"
        )

    def _on_closed(self, _event: ConnectionClosed) -> None:
        self.close("peer closed")

    _handlers: ClassVar[dict[type, Callable[[MqttHandler, Any], None]]] = {
        Connect: _on_connect,
        Puback: _on_puback,
        Pubacks: _on_pubacks,
        Pubrec: _on_pubrec,
        Pubrel: _on_pubrel,
        Pubcomp: _on_pubcomp,
        Subscribe: _on_subscribe,
        Unsubscribe: _on_unsubscribe,
        Pingreq: _on_pingreq,
        Disconnect: _on_disconnect,
        Auth: _on_auth,
        ConnectionClosed: _on_closed,
    }

    # -- delivery: when is gateway.mqtt.delivery_loop's, what is the readers' ----------

    def fill_now(self) -> bool:
        """One round of delivery right now (see :func:`delivery_loop.fill_now`)."""
        return fill_now(self)

    # -- closing -----------------------------------------------------------------------

    def _try_send(self, packet: object) -> None:
        try:
            self._send(packet)
        except Exception:
            pass

    def goodbye(self) -> None:
        """Gateway shutdown: MQTT 5 DISCONNECT 0x8B (server shutting down), close. The
        session stays as it is (its will is not sent: the client did nothing wrong)."""
        if self.closed:
            return
        if self.proto.state is State.CONNECTED and self.proto.version == _V5:
            self._try_send(Disconnect(reason_code=ReasonCode.SERVER_SHUTTING_DOWN))
        self.publish_will = False
        self.normal_disconnect = True
        self.close("server shutting down")

    def logins_required(self) -> None:
        """Authentication turned on and this connection was admitted without a login:
        MQTT 5 DISCONNECT 0x87 (not authorized), close. The session stays (a client that
        logs in with its client id gets it back) and its will is not sent."""
        if self.closed:
            return
        if self.proto.state is State.CONNECTED and self.proto.version == _V5:
            self._try_send(Disconnect(reason_code=ReasonCode.NOT_AUTHORIZED))
        self.publish_will = False
        self.normal_disconnect = True
        self.close("authentication on")

    def taken_over(self) -> None:
        """Another connection took this client id (MQTT 5 DISCONNECT 0x8E)."""
        if self.proto.version == _V5:
            self._try_send(Disconnect(reason_code=ReasonCode.SESSION_TAKEN_OVER))
        self.close("session taken over", linger=True)

    def close(self, reason: str, linger: bool = False) -> None:
        """Close the connection; ``linger`` after an error answer (a refusing CONNACK,
        a DISCONNECT with an error), so that a client still writing reads the answer
        instead of a reset (:meth:`gateway.connection.Connection.close`)."""
        if self.closed:
            return
        self.flush_out()  # what was queued (a CONNACK, a DISCONNECT) goes before the close
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.conn.close(reason, linger=ERROR_LINGER if linger else 0.0)
        self.front.disconnected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            if self._keepalive is not None:
                self._keepalive.cancel()
            self.front.disconnected(self)


def raise_unexpected(event: object) -> None:
    raise RuntimeError(f"unexpected MQTT event {event!r}")


__all__ = ["MqttHandler"]
