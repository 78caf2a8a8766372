"""A small asyncio RocketMQ remoting client: connections, routes, producer, pull consumer.

The gateway is its own name server, so ``RemotingClient("127.0.0.1:8080")`` is all a
client needs; it also talks to any RocketMQ 4/5 name server and broker. The pieces:

* :class:`RemotingConnection` -- one TCP (or TLS) connection: ``invoke`` a request and
  await its response (matched by opaque, bounded by a timeout), ``oneway`` requests,
  and a callback for the server's own requests (NOTIFY_CONSUMER_IDS_CHANGED...).
* :class:`RemotingClient` -- what producers and consumers of one process share: the
  name-server connection, the route cache (GET_ROUTEINFO_BY_TOPIC), one connection per
  broker address, the client id, and ACL signing when an access key is given.
* :class:`Producer` -- SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE with tags, keys, user
  properties and a UNIQ_KEY per message as the Java client sets it; round-robin queue
  selection, or a queue id, or a selector.
* :class:`PullConsumer` -- PULL_MESSAGE (with optional long polling), LITE_PULL_MESSAGE,
  and the offset requests (query, update, max, min, search by time, earliest time).

The push, ordered and pop consumers build on these (``gateway.clients.push`` and
``gateway.clients.pop``). The wire formats are ``protocol.remoting``'s; this module owns
sockets, timeouts and tasks only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.remoting import (
    FrameError,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
)
from protocol.remoting import messages as wire
from protocol.remoting import signature as acl
from protocol.remoting.bodies import MessageQueue
from protocol.remoting.client import ClientConnection, Response, ServerRequest
from protocol.remoting.ids import UniqKeyFactory
from protocol.remoting.route import TopicRouteData

from .received import ReceivedMessage, decode_messages

log = logging.getLogger("lmq.client.remoting")

DEFAULT_TIMEOUT = 3.0
#: Seconds :meth:`RemotingConnection.close` waits for the buffered bytes to go out before
#: it aborts the connection (a peer that stopped reading never takes them).
CLOSE_TIMEOUT = 2.0
#: The Java producer's ``createTopicKey`` and ``defaultTopicQueueNums``.
DEFAULT_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: The Java producer compresses bodies from 4 KiB (``compressMsgBodyOverHowmuch``).
COMPRESS_OVER = 4 * 1024

ServerRequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None] | None]


class RemotingError(Exception):
    """A request failed: the server answered ``code`` with ``remark``, or (code -1) the
    connection failed or the response did not come in time."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{_code_name(code)} ({code}): {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark


class RequestTimeout(RemotingError):
    def __init__(self, code: int, seconds: float) -> None:
        super().__init__(-1, f"no response to request code {code} within {seconds:g} s")


class ConnectionLost(RemotingError):
    def __init__(self, why: str) -> None:
        super().__init__(-1, why)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "ERROR"


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """What GET_ROUTEINFO_BY_TOPIC says: brokers (name -> master address) and queues."""

    topic: str
    brokers: dict[str, str]
    read_queues: tuple[MessageQueue, ...]
    write_queues: tuple[MessageQueue, ...]


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` travel space-separated in KEYS, ``tags`` in TAGS."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    def wire_properties(self) -> dict[str, str]:
        """The properties as sent: user ones, then TAGS, KEYS, WAIT and a UNIQ_KEY (set
        once, so a retried send keeps its id)."""
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = " ".join(self.keys)
        props.setdefault("WAIT", "true")
        if "UNIQ_KEY" not in props:
            self.properties["UNIQ_KEY"] = props["UNIQ_KEY"] = new_uniq_key()
        return props


_uniq: list[UniqKeyFactory] = []


def new_uniq_key() -> str:
    """A UNIQ_KEY as MessageClientIDSetter makes it: this host's address, the pid, a
    per-process salt, the milliseconds into the month and a counter, in hex."""
    if not _uniq:
        salt = int.from_bytes(os.urandom(4)) >> 1
        _uniq.append(UniqKeyFactory(_local_ip(), os.getpid(), salt=salt))
    return _uniq[0].next(int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class SendResult:
    """``msg_id`` is the UNIQ_KEY (comma-joined for a batch), ``offset_msg_id`` the
    store's id (store address and log position); ``code`` 0, or 10/11/12 for a message
    stored but not as durable as asked."""

    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    code: int = 0
    #: A transactional send's transaction id (the broker's: the UNIQ_KEY), else "".
    transaction_id: str = ""
    #: Copies an LMQ Gateway did not store (issue 19's connector, docs/rocketmq.md
    #: "Connector requests"): at or below their origin's high-water mark, or looped.
    duplicates: int = 0
    loops: int = 0


@dataclass(frozen=True, slots=True)
class PullResult:
    """``status`` is the response code: 0 FOUND, 19 no new message, 20 none matched,
    21 offset moved. The offsets are always there, as RocketMQ always sends them."""

    status: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage]

    @property
    def found(self) -> bool:
        return self.status == ResponseCode.SUCCESS


class RemotingConnection:
    """One connection. Thread-unsafe; use it from its event loop only."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_request: ServerRequestHandler | None = None,
        signer: Callable[[dict[str, str], bytes], dict[str, str]] | None = None,
        address: str = "",
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._protocol = ClientConnection()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._on_request = on_request
        self._signer = signer
        self._closed = asyncio.Event()
        self._close_reason = "connection closed"
        self._tasks: set[asyncio.Task[Any]] = set()
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        on_request: ServerRequestHandler | None = None,
        signer: Callable[[dict[str, str], bytes], dict[str, str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
    ) -> RemotingConnection:
        host, port = split_address(address)
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {address}: {exc}") from exc
        return cls(reader, writer, on_request=on_request, signer=signer, address=address)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def _fields(self, fields: Mapping[str, object] | None, body: bytes) -> dict[str, str]:
        ext = {k: _field_text(v) for k, v in (fields or {}).items() if v is not None}
        return self._signer(ext, body) if self._signer else ext

    async def invoke(
        self,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> RemotingCommand:
        """Send a request and return its response, whatever its code (see :meth:`call`
        for one that raises on an error code)."""
        if self.closed:
            raise ConnectionLost(self._close_reason)
        opaque, frame = self._protocol.send_request(code, self._fields(fields, body), body)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        try:
            self._writer.write(frame)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result
            # and drops a cancellation that comes as the future completes, so a
            # cancelled caller would run on (the connector's copy tasks did)
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise RequestTimeout(code, timeout) from None
        finally:
            self._pending.pop(opaque, None)
            self._protocol.forget(opaque)

    async def call(
        self,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        timeout: float = DEFAULT_TIMEOUT,
        ok: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """:meth:`invoke`, raising :class:`RemotingError` unless the code is in ``ok``."""
        response = await self.invoke(code, fields, body, timeout=timeout)
        if response.code not in ok:
            raise RemotingError(response.code, response.remark)
        return response

    async def oneway(
        self, code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
    ) -> None:
        """Send a request the server does not answer."""
        if self.closed:
            raise ConnectionLost(self._close_reason)
        _, frame = self._protocol.send_request(
            code, self._fields(fields, body), body, oneway=True
        )
        self._writer.write(frame)
        try:
            # bounded: a peer that stopped reading (frozen, or a link that drops packets
            # without a reset) would otherwise block the caller for good
            async with asyncio.timeout(DEFAULT_TIMEOUT):
                await self._writer.drain()
        except TimeoutError:
            self._finish("the server stopped reading")
            self._writer.transport.abort()
            raise RequestTimeout(code, DEFAULT_TIMEOUT) from None

    async def close(self) -> None:
        if not self.closed:
            self._finish("closed by the client")
        self._writer.close()
        try:
            # close() flushes the write buffer first; a peer that does not read would
            # keep wait_closed() waiting for good: give up after a while and abort
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self._writer.wait_closed()
        except TimeoutError:
            self._writer.transport.abort()
        except Exception:  # the connection is going away; its error is moot
            pass
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._read_task

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for event in self._protocol.receive_data(data):
                    if isinstance(event, Response):
                        future = self._pending.get(event.command.opaque)
                        if future is not None and not future.done():
                            future.set_result(event.command)
                    elif isinstance(event, ServerRequest):
                        self._spawn(self._serve(event.command))
                    else:
                        log.debug("late response, opaque %d", event.command.opaque)
            self._finish("connection closed by the server")
            # our side too: a connection the client replaces without close() would
            # otherwise sit in CLOSE-WAIT until it is garbage (and warn then)
            self._writer.close()
        except FrameError as exc:
            self._finish(f"bad frame from the server: {exc}")
            self._writer.close()
        except (OSError, asyncio.IncompleteReadError) as exc:
            self._finish(f"connection lost: {exc}")
            self._writer.close()

    def _finish(self, reason: str) -> None:
        if self._closed.is_set():
            return
        self._close_reason = reason
        self._closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(reason))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, request: RemotingCommand) -> None:
        answer: RemotingCommand | None = None
        if self._on_request is not None:
            try:
                result = self._on_request(request)
                answer = await result if asyncio.iscoroutine(result) else result  # type: ignore[assignment]
            except Exception:
                log.exception("server request %d failed", request.code)
                answer = RemotingCommand.response_to(
                    request, ResponseCode.SYSTEM_ERROR, "client handler failed"
                )
        if request.is_oneway or self.closed:
            return
        if answer is None:
            answer = RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {request.code} is not supported by this client",
            )
        self._writer.write(answer.encode())


def _field_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into its parts."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def make_signer(
    access_key: str, secret_key: str
) -> Callable[[dict[str, str], bytes], dict[str, str]]:
    """The ACL hook: every request's fields gain AccessKey and Signature (HMAC-SHA1 of
    the sorted field values and the body), as RocketMQ's AclClientRPCHook sends them."""

    def sign(fields: dict[str, str], body: bytes) -> dict[str, str]:
        return acl.sign(fields, body, access_key, secret_key)

    return sign


class RemotingClient:
    """The shared part of one process's producers and consumers.

    ``namesrv`` is ``host:port`` (the gateway's remoting or unified port); broker
    addresses come from the routes, and a broker at the name server's own address reuses
    its connection. ``client_id`` defaults to ``ip@pid`` like the Java client's.
    """

    def __init__(
        self,
        namesrv: str,
        *,
        client_id: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.namesrv = namesrv
        self.client_id = client_id or f"{_local_ip()}@{os.getpid()}@{next(_instances)}"
        self.timeout = timeout
        self._signer = make_signer(access_key, secret_key or "") if access_key else None
        self._ssl = ssl_context
        self._connections: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._routes: dict[str, TopicRoute] = {}
        #: Server requests by code, registered by the consumers (NOTIFY_CONSUMER_IDS_CHANGED).
        self.request_handlers: dict[int, ServerRequestHandler] = {}

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connection(self, address: str) -> RemotingConnection:
        """The open connection to ``address``, opened (again) if needed."""
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:
            conn = self._connections.get(address)
            if conn is None or conn.closed:
                conn = await RemotingConnection.open(
                    address,
                    on_request=self._on_request,
                    signer=self._signer,
                    ssl_context=self._ssl,
                )
                self._connections[address] = conn
            return conn

    def _on_request(self, request: RemotingCommand) -> Awaitable[RemotingCommand | None] | None:
        handler = self.request_handlers.get(request.code)
        return handler(request) if handler else None

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The topic's route, from the cache unless ``refresh``."""
        if not refresh and topic in self._routes:
            return self._routes[topic]
        conn = await self.connection(self.namesrv)
        response = await conn.call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": topic, "acceptStandardJsonOnly": True},
            timeout=self.timeout,
        )
        route = parse_route(topic, response.body)
        self._routes[topic] = route
        return route

    async def broker(self, broker_name: str, topic: str) -> RemotingConnection:
        """The connection to ``broker_name``'s master (id 0), from ``topic``'s route."""
        route = await self.route(topic)
        address = route.brokers.get(broker_name)
        if address is None:
            route = await self.route(topic, refresh=True)
            address = route.brokers.get(broker_name)
        if address is None:
            raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, f"no broker {broker_name}")
        return await self.connection(address)

    async def brokers(self) -> list[RemotingConnection]:
        """A connection to every broker any cached route names."""
        addresses = {a for r in self._routes.values() for a in r.brokers.values()}
        return [await self.connection(a) for a in sorted(addresses)]

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()


_instances = itertools.count(1)


def _local_ip() -> str:
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse_route(topic: str, body: bytes) -> TopicRoute:
    """The route JSON (standard or fastjson style) as a :class:`TopicRoute`."""
    data = TopicRouteData.parse(body)
    brokers: dict[str, str] = {}
    for broker in data.broker_datas:
        master = broker.master_addr
        if master:
            brokers[broker.broker_name] = master
    read: list[MessageQueue] = []
    write: list[MessageQueue] = []
    for q in sorted(data.queue_datas, key=lambda q: q.broker_name):
        if q.broker_name not in brokers:
            continue
        if q.perm & 0x4:
            read += [MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums)]
        if q.perm & 0x2:
            write += [MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums)]
    return TopicRoute(topic, brokers, tuple(read), tuple(write))


QueueSelector = Callable[[Sequence[MessageQueue], Message], MessageQueue]


class Producer:
    """Sends messages for producer group ``group`` (created on first use by a gateway
    that auto-creates groups)."""

    def __init__(
        self,
        client: RemotingClient,
        group: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        compress_over: int | None = COMPRESS_OVER,
    ) -> None:
        self.client = client
        self.group = group
        self.timeout = timeout
        self.compress_over = compress_over
        self._next = itertools.count()

    async def queues(self, topic: str) -> tuple[MessageQueue, ...]:
        route = await self.client.route(topic)
        if not route.write_queues:
            route = await self.client.route(topic, refresh=True)
        if not route.write_queues:
            raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, f"no writable queue for {topic}")
        return route.write_queues

    async def _pick(
        self, message: Message, queue_id: int | None, selector: QueueSelector | None
    ) -> MessageQueue:
        queues = await self.queues(message.topic)
        if queue_id is not None:
            for mq in queues:
                if mq.queue_id == queue_id:
                    return mq
            raise ValueError(f"{message.topic} has no writable queue {queue_id}")
        if selector is not None:
            return selector(queues, message)
        return queues[next(self._next) % len(queues)]

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
        selector: QueueSelector | None = None,
    ) -> SendResult:
        """Send one message and return once the gateway has stored it."""
        return await self.send_message(
            Message(topic, body, tags, tuple(keys), dict(properties or {})),
            queue_id=queue_id,
            selector=selector,
        )

    async def send_message(
        self,
        message: Message,
        *,
        queue_id: int | None = None,
        selector: QueueSelector | None = None,
    ) -> SendResult:
        mq = await self._pick(message, queue_id, selector)
        props = message.wire_properties()
        body, sys_flag = message.body, 0
        if self.compress_over is not None and len(body) >= self.compress_over:
            body, sys_flag = zlib.compress(body), SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
        fields = self._header(mq, sys_flag, message.flag, wire.encode_properties(props))
        conn = await self.client.broker(mq.broker_name, mq.topic)
        response = await conn.call(
            RequestCode.SEND_MESSAGE_V2, fields, body, timeout=self.timeout, ok=_SEND_OK
        )
        return _send_result(response, mq, props["UNIQ_KEY"])

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[Message],
        *,
        queue_id: int | None = None,
        selector: QueueSelector | None = None,
    ) -> SendResult:
        """Send messages of one topic in one SEND_BATCH_MESSAGE: the gateway stores all
        or none. ``msg_id`` is their UNIQ_KEYs joined by commas, as in Java."""
        if not messages:
            raise ValueError("an empty batch")
        if any(m.topic != topic for m in messages):
            raise ValueError("every message of a batch must have the batch's topic")
        if topic.startswith("%RETRY%") or any("DELAY" in m.properties for m in messages):
            raise ValueError("a batch cannot go to a retry topic or carry a delay level")
        mq = await self._pick(messages[0], queue_id, selector)
        entries = []
        ids = []
        for m in messages:
            props = m.wire_properties()
            ids.append(props["UNIQ_KEY"])
            entries.append(wire.BatchMessage(body=m.body, properties=props, flag=m.flag))
        body = wire.encode_batch(entries)
        fields = self._header(mq, 0, 0, wire.encode_properties({"WAIT": "true"}))
        fields["m"] = True
        conn = await self.client.broker(mq.broker_name, mq.topic)
        response = await conn.call(
            RequestCode.SEND_BATCH_MESSAGE, fields, body, timeout=self.timeout, ok=_SEND_OK
        )
        return _send_result(response, mq, ",".join(ids))

    def _header(
        self, mq: MessageQueue, sys_flag: int, flag: int, properties: str
    ) -> dict[str, Any]:
        # SendMessageRequestHeaderV2's one-letter names; null fields are left out, as
        # fastjson leaves them out.
        return {
            "a": self.group,
            "b": mq.topic,
            "c": DEFAULT_TOPIC,
            "d": DEFAULT_TOPIC_QUEUE_NUMS,
            "e": mq.queue_id,
            "f": int(sys_flag),
            "g": int(time.time() * 1000),
            "h": flag,
            "i": properties,
            "j": 0,
            "k": False,
            "m": False,
            "n": mq.broker_name,
        }


_SEND_OK = (
    ResponseCode.SUCCESS,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
)


def _send_result(response: RemotingCommand, mq: MessageQueue, msg_id: str) -> SendResult:
    f = response.ext_fields
    queue = MessageQueue(mq.topic, mq.broker_name, int(f.get("queueId", mq.queue_id)))
    return SendResult(
        msg_id=msg_id,
        offset_msg_id=f.get("msgId", ""),
        queue=queue,
        queue_offset=int(f.get("queueOffset", -1)),
        code=response.code,
        transaction_id=f.get("transactionId", ""),
        duplicates=int(f.get("lmqDuplicates", 0)),
        loops=int(f.get("lmqLoops", 0)),
    )


_PULL_OK = (
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)


class PullConsumer:
    """Pulls queues of consumer group ``group`` and manages its offsets by hand."""

    def __init__(self, client: RemotingClient, group: str, *, timeout: float = DEFAULT_TIMEOUT):
        self.client = client
        self.group = group
        self.timeout = timeout

    async def queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's readable queues."""
        return (await self.client.route(topic)).read_queues

    async def _conn(self, mq: MessageQueue) -> RemotingConnection:
        return await self.client.broker(mq.broker_name, mq.topic)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        *,
        expression: str = "*",
        max_nums: int = 32,
        suspend_ms: int = 0,
        commit_offset: int | None = None,
        lite: bool = False,
    ) -> PullResult:
        """Pull from ``offset``. With ``suspend_ms`` the gateway holds the request until a
        message arrives or the time is up (long polling); ``commit_offset`` also commits
        the group's offset; ``lite`` sends LITE_PULL_MESSAGE."""
        sys_flag = PullSysFlag.SUBSCRIPTION
        if suspend_ms:
            sys_flag |= PullSysFlag.SUSPEND
        if commit_offset is not None:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        if lite:
            sys_flag |= PullSysFlag.LITE_PULL_MESSAGE
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": int(sys_flag),
            "commitOffset": commit_offset if commit_offset is not None else 0,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": expression,
            "subVersion": 0,
            "expressionType": "TAG",
            "bname": mq.broker_name,
        }
        code = RequestCode.LITE_PULL_MESSAGE if lite else RequestCode.PULL_MESSAGE
        conn = await self._conn(mq)
        response = await conn.call(
            code, fields, timeout=self.timeout + suspend_ms / 1000, ok=_PULL_OK
        )
        f = response.ext_fields
        messages = decode_messages(response.body)
        return PullResult(
            status=response.code,
            next_begin_offset=int(f.get("nextBeginOffset", offset)),
            min_offset=int(f.get("minOffset", 0)),
            max_offset=int(f.get("maxOffset", 0)),
            messages=messages,
        )

    async def lite_pull(self, mq: MessageQueue, offset: int, **kw: Any) -> PullResult:
        """LITE_PULL_MESSAGE, as DefaultLitePullConsumer sends it."""
        return await self.pull(mq, offset, lite=True, **kw)

    async def _offset_call(self, code: int, mq: MessageQueue, **extra: object) -> RemotingCommand:
        fields: dict[str, object] = {"topic": mq.topic, "queueId": mq.queue_id}
        fields.update(extra)
        return await (await self._conn(mq)).call(code, fields, timeout=self.timeout)

    async def query_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset, or ``None`` if it never committed one."""
        conn = await self._conn(mq)
        response = await conn.invoke(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id},
            timeout=self.timeout,
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(response.code, response.remark)
        return int(response.ext_fields["offset"])

    async def update_offset(self, mq: MessageQueue, offset: int, *, oneway: bool = False) -> None:
        """Commit ``offset`` (the next message to consume). ``oneway`` as the Java
        client's periodic commit does it: no answer, no error."""
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "commitOffset": offset,
        }
        conn = await self._conn(mq)
        if oneway:
            await conn.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
        else:
            await conn.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields, timeout=self.timeout)

    async def max_offset(self, mq: MessageQueue) -> int:
        response = await self._offset_call(RequestCode.GET_MAX_OFFSET, mq)
        return int(response.ext_fields["offset"])

    async def min_offset(self, mq: MessageQueue) -> int:
        response = await self._offset_call(RequestCode.GET_MIN_OFFSET, mq)
        return int(response.ext_fields["offset"])

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms``."""
        response = await self._offset_call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=timestamp_ms
        )
        return int(response.ext_fields["offset"])

    async def earliest_store_time(self, mq: MessageQueue) -> int:
        response = await self._offset_call(RequestCode.GET_EARLIEST_MSG_STORETIME, mq)
        return int(response.ext_fields["timestamp"])
