"""One AMQP connection: bytes to the sans-IO machine, its events to the broker.

``data_received`` feeds :class:`protocol.amqp.AMQPConnection` and handles every event
it yields. An ``AMQPError`` (the peer's, or one the broker raises: 404, 406, ...) is
answered with the machine's ``send_error`` bytes: a channel error closes that channel
(its consumers are cancelled and its unacked messages requeued), a connection error
the connection. Output goes to the connection's outbox
(:meth:`gateway.connection.Connection.queue`): written once per loop turn, in order
(a delivery is one chunk, so content frames never interleave).

Authentication runs in a thread (scrypt); frames that arrive meanwhile wait in the
machine's buffer. Heartbeats use the value of the client's TuneOk. While the store
lags (``publisher.lagging``) reading pauses and clients that advertise the
``connection.blocked`` capability get ``connection.blocked``, then ``unblocked`` when
the publisher's ``caught_up`` event is set.

Methods are dispatched through a table (:data:`_METHODS`, method name -> function).

Per-connection state only. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from pamqp import commands

from gateway.amqp.broker import DEFAULT_VHOST
from gateway.amqp.channel import AmqpChannel
from gateway.amqp.queues import Queue
from gateway.auth.authenticator import Principal
from gateway.frontend import ConnectionHandler
from lmq.topic_space import amqp_to_mqtt
from protocol.amqp import AMQPConnection, AMQPError
from protocol.amqp.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    ChannelError,
    ConnectionLevelError,
)
from protocol.amqp.events import (
    NEED_DATA,
    AuthenticationRequested,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseRequested,
    ContentReceived,
    HeartbeatReceived,
    MethodReceived,
    OpenRequested,
    ProtocolHeaderReceived,
    TuneNegotiated,
)

if TYPE_CHECKING:
    from gateway.amqp.frontend import AmqpFrontEnd
    from gateway.connection import Connection

log = logging.getLogger(__name__)

C, Ch, B, Q, X = (commands.Connection, commands.Channel, commands.Basic, commands.Queue,
                  commands.Exchange)
FRAME_MAX = 131072
#: After our Connection.Close, how long the peer has to answer CloseOk.
CLOSE_GRACE_S = 2.0
#: Methods that only settle deliveries (see _handle).
_SETTLEMENTS = frozenset({"Basic.Ack", "Basic.Nack", "Basic.Reject"})


class AmqpHandler(ConnectionHandler):
    def __init__(self, front: AmqpFrontEnd, conn: Connection) -> None:
        super().__init__(conn)
        self.front = front
        ctx = front.ctx
        self.broker = front.broker
        self.authenticator = ctx.authenticator
        self.publisher = ctx.publisher
        self.proto = AMQPConnection(
            frame_max=min(FRAME_MAX, ctx.config.max_packet_size),
            max_message_size=ctx.store.config.max_message_bytes,
            server_properties={"cluster_name": "lmq-gateway"},
        )
        self.channels: dict[int, AmqpChannel] = {}
        self.vhost = "/"
        self.principal: Any = None
        self.origin = conn.peer
        self.blocked = False
        self.closed = False
        self._busy = False
        #: A publish was submitted since the last check_blocked().
        self.published = False
        self._drain_task: asyncio.Task[None] | None = None
        self._last_recv = time.monotonic()
        self.now_ms = 0  # set by _process

    # -- output (the connection's outbox) ------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue ``data`` in the connection's outbox (dropped once closed)."""
        if not self.closed:
            self.conn.queue(data)

    def flush(self) -> None:
        self.conn.flush()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return self.conn.spawn(coro, name)

    def want_drain(self) -> None:
        """The socket is full: resume deliveries once it drains."""
        if self._drain_task is None:
            self._drain_task = self.conn.spawn(self._drained(), "amqp-drain")

    async def _drained(self) -> None:
        await self.conn.drain()
        self._drain_task = None
        for ch in self.channels.values():
            for consumer in ch.consumers.values():
                consumer.queue.schedule()

    # -- input -------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._last_recv = time.monotonic()
        self.proto.receive_data(data)
        self._process()

    def eof_received(self) -> bool:
        self.proto.receive_data(b"")
        self._process()
        return False

    def _process(self) -> None:
        proto = self.proto
        channels = self.channels
        #: The time (ms) publishes of this batch of received bytes are stamped with:
        #: read once per batch, not once per message.
        self.now_ms = self.broker.now_ms()
        while not self._busy and not self.closed:
            try:
                event = proto.next_event()
                if event is NEED_DATA:
                    break
                if type(event) is ContentReceived:  # the per-message event, first
                    ch = channels.get(event.channel)
                    assert ch is not None, "the protocol machine only reports open channels"
                    try:  # (the per-message path: no _method wrapper)
                        ch.publish(event)
                    except AMQPError as exc:
                        self._publish_failed(exc, ch, event)
                else:
                    self._handle(event)
            except AMQPError as exc:
                self._error(exc)
        if self.published and not self.closed:
            self.published = False
            self.check_blocked()
        self.flush()

    def _error(self, exc: AMQPError) -> None:
        if exc.connection_level:
            self.front.protocol_errors.inc()
            log.info("amqp connection error", extra={
                **self.conn.log_fields(), "code": exc.reply_code, "text": exc.reply_text})
            self.write(self.proto.send_error(exc))
            self._release_all()
            self.front.loop.call_later(CLOSE_GRACE_S, self._close, "amqp error")
            return
        ch = self.channels.pop(exc.channel, None)
        if ch is not None:
            ch.close()
        self.write(self.proto.send_error(exc))

    @staticmethod
    def _publish_failed(exc: AMQPError, ch: AmqpChannel, event: ContentReceived) -> None:
        """Complete the error of a publish with its method and channel, and raise it."""
        if not exc.class_id:
            index = event.method.index
            exc.class_id, exc.method_id = index >> 16, index & 0xFFFF
        if not exc.connection_level and not exc.channel:
            exc.channel = ch.id
        raise exc

    def _handle(self, event: Any) -> None:
        if isinstance(event, MethodReceived):
            if event.channel == 0:  # Connection.UpdateSecret
                self.write(self.proto.send_method(0, C.UpdateSecretOk()))
            else:
                ch = self._channel(event.channel, event.method)
                # A channel's methods take effect in order: publishes still queued for
                # this loop turn's batch append must be in their queues before e.g. a
                # passive declare counts messages or a get pops one. Settling
                # deliveries reads nothing a publish adds (a requeued message is a
                # retry, ahead of new ones either way): the batch is not cut for them.
                if event.method.name not in _SETTLEMENTS:
                    self.publisher.flush()
                self._method(ch, event.method)
        elif isinstance(event, ProtocolHeaderReceived):
            self.write(self.proto.send_start())
        elif isinstance(event, AuthenticationRequested):
            self._authenticate(event)
        elif isinstance(event, TuneNegotiated):
            if event.heartbeat:
                self.conn.spawn(self._heartbeat(event.heartbeat), "amqp-heartbeat")
        elif isinstance(event, OpenRequested):
            self._open(event.virtual_host)
        elif isinstance(event, ChannelOpenRequested):
            self.channels[event.channel] = AmqpChannel(
                self, event.channel, self.broker, self.front.stats)
            self.write(self.proto.send_channel_open_ok(event.channel))
        elif isinstance(event, ChannelCloseRequested):
            closing = self.channels.pop(event.channel, None)
            if closing is not None:
                closing.close()
            self.write(self.proto.send_channel_close_ok(event.channel))
        elif isinstance(event, ConnectionCloseRequested):
            self._release_all()
            self.write(self.proto.send_close_ok())
            self._close("client close")
        elif isinstance(event, ConnectionClosed):
            self._release_all()
            self._close("closed")
        elif isinstance(event, HeartbeatReceived | ChannelClosed):
            pass

    def _channel(self, channel_id: int, method: Any) -> AmqpChannel:
        ch = self.channels.get(channel_id)
        assert ch is not None, "the protocol machine only reports open channels"
        return ch

    # -- handshake ---------------------------------------------------------------------

    def _authenticate(self, ev: AuthenticationRequested) -> None:
        name = ev.client_properties.get("connection_name")
        if isinstance(name, str | bytes) and name:
            self.origin = name.decode() if isinstance(name, bytes) else name
        auth = self.authenticator
        if auth is None:
            self.principal = "anonymous"
            self.write(self.proto.accept_auth())
            return
        self._busy = True

        async def check() -> None:
            try:
                result = await asyncio.to_thread(
                    auth.authenticate, ev.username, ev.password, client_id=self.origin,
                    peer_host=self.conn.peer_host)
            except Exception:
                log.exception("amqp authentication failed", extra=self.conn.log_fields())
                result = None
            self._busy = False
            if result:
                self.principal = result
                self.write(self.proto.accept_auth())
            else:
                self.write(self.proto.deny_auth())
                self.front.loop.call_later(CLOSE_GRACE_S, self._close, "access refused")
            self._process()

        self.conn.spawn(check(), "amqp-auth")

    def _open(self, vhost: str) -> None:
        intro = self.front.ctx.introspection
        if intro.replication_role() == "slave":  # docs/replication.md "Clients follow"
            master = intro.replication_master("amqp") or intro.replication_master("unified")
            self.write(self.proto.deny_open(
                "CONNECTION_FORCED - a slave of its broker group; the master is at"
                f" {master or 'an unknown address'}", 320))
            return
        auth = self.authenticator
        if auth is not None:
            allowed = auth.vhost_allowed(self.principal, vhost)
            if not allowed and auth.vhost_exists(vhost):
                self.write(self.proto.deny_open(
                    f"access to vhost '{vhost}' refused for user '{self.proto.username}'",
                    NOT_ALLOWED))
                return
        else:
            allowed = vhost == "/"
        if not allowed:
            self.write(self.proto.deny_open(f"vhost {vhost} not found"))
            return
        self.vhost = vhost
        self.broker.vhost(vhost)
        self.write(self.proto.accept_open())
        principal = self.principal
        self.conn.established(
            "", principal.username if isinstance(principal, Principal) else None)

    async def _heartbeat(self, interval: int) -> None:
        while not self.closed:
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            if now - self._last_recv > 2 * interval:
                log.info("amqp heartbeat timeout", extra=self.conn.log_fields())
                self._release_all()
                self._close("heartbeat timeout", abort=True)
                return
            if now - self.conn.last_sent >= interval / 2:
                self.write(self.proto.send_heartbeat())

    # -- permissions -------------------------------------------------------------------

    def check(self, kind: str, resource: str, method: Any, exchange: bool = False) -> None:
        auth = self.authenticator
        if auth is None:
            return
        fn = {"configure": auth.can_configure, "write": auth.can_write,
              "read": auth.can_read}[kind]
        if not fn(self.principal, self.vhost, resource):
            what = "exchange" if exchange else "queue"
            user = self.proto.username or "anonymous"
            raise ChannelError(
                ACCESS_REFUSED,
                f"access to {what} '{resource or 'amq.default'}' in vhost '{self.vhost}' "
                f"refused for user '{user}'", method=method)

    def check_topic(self, key: str, method: Any, *, bind: bool) -> None:
        """The MQTT topic ACL on what crosses ``amq.topic`` of vhost ``/`` (the one topic
        space; docs/security.md): a publish with routing key ``a.b.c`` needs
        ``can_publish`` on ``a/b/c``; a binding with key ``a.*`` needs the whole of
        ``a/+`` granted to subscribe (a grant with a deny filter is refused: an AMQP
        queue has no per-message delivery filter). The client identifier is empty, so
        ``%c`` rules never grant. 403 ACCESS_REFUSED, RabbitMQ's topic-authorisation
        refusal."""
        auth = self.authenticator
        if auth is None:
            return
        if bind:
            decision = auth.subscribe_decision(self.principal, "", binding_filter(key))
            granted = decision.granted and decision.deny is None
        else:
            granted = auth.can_publish(self.principal, "", amqp_to_mqtt(key))
        if not granted:
            user = self.proto.username or "anonymous"
            raise ChannelError(
                ACCESS_REFUSED,
                f"{'read' if bind else 'write'} access to topic '{key}' in exchange"
                f" 'amq.topic' in vhost '{self.vhost}' refused for user '{user}'",
                method=method)

    def queue(self, name: str, method: Any) -> Queue:
        return self.broker.queue(self.vhost, name, self.conn.id)

    # -- methods -----------------------------------------------------------------------

    def _method(self, ch: AmqpChannel, m: Any) -> None:
        """Run method ``m`` on channel ``ch``; an AMQPError it raises is completed with
        the channel and the method's ids (the close names the method at fault)."""
        run = _METHODS.get(m.name)
        try:
            if run is None:
                raise ConnectionLevelError(
                    NOT_IMPLEMENTED, f"{m.name} is not implemented", method=m)
            run(self, ch, m)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = m.index >> 16, m.index & 0xFFFF
            if not exc.connection_level and not exc.channel:
                exc.channel = ch.id
            raise

    # -- flow control ------------------------------------------------------------------

    def check_blocked(self) -> None:
        if self.blocked or not self.publisher.lagging:
            return
        self.blocked = True
        self.conn.pause_reading()
        if self.proto.client_capabilities.get("connection.blocked"):
            self.write(self.proto.send_method(0, C.Blocked("low on resources")))
        self.front.watch_blocked(self)

    def unblock(self) -> None:
        if not self.blocked:
            return
        self.blocked = False
        self.conn.resume_reading()
        if (self.proto.client_capabilities.get("connection.blocked")
                and self.proto.state.value == "OPEN"):
            self.write(self.proto.send_method(0, C.Unblocked()))
        self.flush()

    # -- end ---------------------------------------------------------------------------

    def goodbye(self, reason: str = "shutdown") -> None:
        """Shutdown (or authentication turning on, ``reason``): connection.close 320,
        then close once CloseOk comes (or soon)."""
        self.write(self.proto.close(
            320, "CONNECTION_FORCED - broker forced connection closure with reason "
            f"'{reason}'"))
        self._release_all()
        self.flush()
        self.front.loop.call_later(1.0, self._close, reason)

    def _release_all(self) -> None:
        channels, self.channels = self.channels, {}
        for ch in channels.values():
            ch.close()
        self.broker.connection_closed(self.conn.id)

    def _close(self, reason: str, abort: bool = False) -> None:
        if self.closed:
            return
        self.flush()
        self.closed = True
        if abort:
            self.conn.abort(reason)
        else:
            self.conn.close(reason)

    def connection_lost(self, exc: Exception | None) -> None:
        self._release_all()
        self.closed = True
        self.front.disconnected(self)


# -- the method table ---------------------------------------------------------------------
# One function per channel method: (handler, channel, method). Errors propagate to
# AmqpHandler._method, which completes them with the channel and method ids.

_Method = Callable[[AmqpHandler, AmqpChannel, Any], None]


def _basic_ack(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.settle(m.delivery_tag, m.multiple, "ack", m)


def _basic_nack(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.settle(m.delivery_tag, m.multiple, "requeue" if m.requeue else "discard", m)


def _basic_reject(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.settle(m.delivery_tag, False, "requeue" if m.requeue else "discard", m)


def _basic_qos(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.qos(m)
    h.write(h.proto.send_method(ch.id, B.QosOk()))


def _basic_consume(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.consume(m)


def _basic_cancel(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.cancel(m.consumer_tag)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, B.CancelOk(m.consumer_tag)))


def _basic_get(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.get(m)


def binding_filter(key: str) -> str:
    """The MQTT filter that covers AMQP binding key ``key``: ``*`` -> ``+``, ``.`` ->
    ``/``, and a ``#`` before the last word widened to ``#`` there (``a.#.b`` ->
    ``a/#``), since MQTT allows ``#`` only last."""
    levels = amqp_to_mqtt(key).split("/")
    if "#" in levels:
        levels = levels[: levels.index("#") + 1]
    return "/".join(levels)


def _basic_recover(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.requeue_all()
    if m.name == "Basic.Recover":
        h.write(h.proto.send_method(ch.id, B.RecoverOk()))


def _queue_declare(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    h.check("configure", m.queue, m)
    q = h.broker.declare_queue(
        h.vhost, m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
        auto_delete=m.auto_delete, arguments=m.arguments or {}, conn_id=h.conn.id)
    ch.last_queue = q.name
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, Q.DeclareOk(q.name, q.ready(), len(q.consumers))))


def _queue_bind(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    qname = m.queue or ch.last_queue
    h.check("write", qname, m)
    h.check("read", m.exchange, m, exchange=True)
    if m.exchange == "amq.topic" and h.vhost == DEFAULT_VHOST:
        h.check_topic(m.routing_key, m, bind=True)
    h.broker.bind(h.vhost, m.exchange, ("q", qname), m.routing_key, m.arguments or {},
                  h.conn.id)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, Q.BindOk()))


def _queue_unbind(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    qname = m.queue or ch.last_queue
    h.check("write", qname, m)
    h.check("read", m.exchange, m, exchange=True)
    h.broker.unbind(h.vhost, m.exchange, ("q", qname), m.routing_key, m.arguments or {},
                    h.conn.id)
    h.write(h.proto.send_method(ch.id, Q.UnbindOk()))


def _queue_purge(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    q = h.queue(m.queue or ch.last_queue, m)
    h.check("read", q.name, m)
    count = h.broker.purge(q)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, Q.PurgeOk(count)))


def _queue_delete(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    qname = m.queue or ch.last_queue
    h.check("configure", qname, m)
    count = h.broker.delete_queue(h.vhost, qname, m.if_unused, m.if_empty, h.conn.id)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, Q.DeleteOk(count)))


def _exchange_declare(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    h.check("configure", m.exchange, m, exchange=True)
    h.broker.declare_exchange(
        h.vhost, m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
        auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments or {})
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, X.DeclareOk()))


def _exchange_delete(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    h.check("configure", m.exchange, m, exchange=True)
    h.broker.delete_exchange(h.vhost, m.exchange, m.if_unused)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, X.DeleteOk()))


def _exchange_bind(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    h.check("write", m.destination, m, exchange=True)
    h.check("read", m.source, m, exchange=True)
    bind = m.name == "Exchange.Bind"
    if bind and m.source == "amq.topic" and h.vhost == DEFAULT_VHOST:
        h.check_topic(m.routing_key, m, bind=True)
    op = h.broker.bind if bind else h.broker.unbind
    op(h.vhost, m.source, ("e", m.destination), m.routing_key, m.arguments or {}, h.conn.id)
    if not m.nowait:
        h.write(h.proto.send_method(ch.id, X.BindOk() if bind else X.UnbindOk()))


def _confirm_select(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.confirm_select(m)


def _tx_select(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.tx_select(m)


def _tx_commit(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.tx_commit(m)


def _tx_rollback(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    ch.tx_rollback(m)


def _channel_flow(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    if not m.active:
        raise ConnectionLevelError(NOT_IMPLEMENTED, "active=false", method=m)
    h.write(h.proto.send_method(ch.id, Ch.FlowOk(active=True)))


def _ignore(h: AmqpHandler, ch: AmqpChannel, m: Any) -> None:
    pass


#: Channel method name -> what it does. A method not here is 540 NOT_IMPLEMENTED.
_METHODS: dict[str, _Method] = {
    "Basic.Ack": _basic_ack,
    "Basic.Nack": _basic_nack,
    "Basic.Reject": _basic_reject,
    "Basic.Qos": _basic_qos,
    "Basic.Consume": _basic_consume,
    "Basic.Cancel": _basic_cancel,
    "Basic.Get": _basic_get,
    "Basic.Recover": _basic_recover,
    "Basic.RecoverAsync": _basic_recover,
    "Queue.Declare": _queue_declare,
    "Queue.Bind": _queue_bind,
    "Queue.Unbind": _queue_unbind,
    "Queue.Purge": _queue_purge,
    "Queue.Delete": _queue_delete,
    "Exchange.Declare": _exchange_declare,
    "Exchange.Delete": _exchange_delete,
    "Exchange.Bind": _exchange_bind,
    "Exchange.Unbind": _exchange_bind,
    "Confirm.Select": _confirm_select,
    "Tx.Select": _tx_select,
    "Tx.Commit": _tx_commit,
    "Tx.Rollback": _tx_rollback,
    "Channel.Flow": _channel_flow,
    "Channel.FlowOk": _ignore,
}
