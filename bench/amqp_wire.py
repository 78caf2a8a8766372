"""A minimal AMQP 0-9-1 client for load generation, hand-encoded with ``struct``.

Independent of the project's codec, like :mod:`bench.mqtt_wire`. One connection carries
one channel (1). The handshake and the set-up methods (exchange/queue declare, bind,
qos, consume, confirm.select) go through :meth:`AmqpConn.call`, which waits for the
matching ``-Ok``; the hot paths are pre-encoded:

* publish: ``Basic.Publish`` method frame + content header frame + body frame, the
  three concatenated per message and many messages per write;
* consume: per read, walk frame headers (type, channel, size); a ``Basic.Deliver``
  yields its delivery tag, the body frame after it its timestamp (payload layout as in
  :mod:`bench.mqtt_wire`); one ``Basic.Ack`` with ``multiple`` acknowledges every
  delivery of the read;
* confirms: ``Basic.Ack`` from the broker (``multiple`` honoured) advances ``confirmed``.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque

from bench.mqtt_wire import Stats

_perf = time.perf_counter
_ts_from = struct.Struct(">d").unpack_from
_ts = struct.Struct(">d").pack
FRAME_END = b"\xce"
_frame_head = struct.Struct(">BHI")
_QQ = struct.Struct(">Q")


def shortstr(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


EMPTY_TABLE = b"\x00\x00\x00\x00"


def method_frame(channel: int, cls: int, meth: int, args: bytes) -> bytes:
    payload = struct.pack(">HH", cls, meth) + args
    return _frame_head.pack(1, channel, len(payload)) + payload + FRAME_END


def publish_prefix(exchange: str, routing_key: str, body_size: int, channel: int = 1) -> bytes:
    """Method + content-header frames + body frame header of one Basic.Publish."""
    m = method_frame(
        channel, 60, 40, b"\x00\x00" + shortstr(exchange) + shortstr(routing_key) + b"\x00"
    )
    hdr_payload = struct.pack(">HHQH", 60, 0, body_size, 0)
    h = _frame_head.pack(2, channel, len(hdr_payload)) + hdr_payload + FRAME_END
    return m + h + _frame_head.pack(3, channel, body_size)


class AmqpPublishTemplate:
    __slots__ = ("head", "pad")

    def __init__(self, exchange: str, routing_key: str, payload_size: int) -> None:
        self.head = publish_prefix(exchange, routing_key, payload_size)
        self.pad = bytes(max(0, payload_size - 8)) + FRAME_END


def build_amqp_batch(tpl: AmqpPublishTemplate, n: int) -> bytes:
    return (tpl.head + _ts(_perf()) + tpl.pad) * n


class AmqpError(Exception):
    pass


class AmqpConn(asyncio.Protocol):
    def __init__(self, stats: Stats, record: bool = True) -> None:
        self.stats = stats
        self.record = record
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.waiters: deque[tuple[tuple[int, int], asyncio.Future[bytes]]] = deque()
        self.confirmed = 0  # highest publisher-confirm delivery tag
        self.nacked = 0
        self.sent = 0
        self.received = 0
        self.write_paused = False
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.pending_tag = 0  # delivery tag awaiting a (multiple) consumer ack
        self.closed_reason: str | None = None
        self.frame_max = 131072

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(b"AMQP\x00\x00\x09\x01")

    def connection_lost(self, exc: Exception | None) -> None:
        err = AmqpError(self.closed_reason or f"connection lost: {exc}")
        if not self.opened.done():
            self.opened.set_exception(err)
        while self.waiters:
            _, fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(err)
        self.resumed.set()

    def pause_writing(self) -> None:
        self.write_paused = True
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.resumed.set()

    def _on_method(self, channel: int, payload: bytes) -> None:
        cls, meth = struct.unpack_from(">HH", payload)
        args = payload[4:]
        w = self.transport
        assert w is not None
        if (cls, meth) == (10, 10):  # Connection.Start
            resp = b"\x00guest\x00guest"
            w.write(
                method_frame(
                    0, 10, 11, EMPTY_TABLE + shortstr("PLAIN") + longstr(resp) + shortstr("en_US")
                )
            )
        elif (cls, meth) == (10, 30):  # Connection.Tune
            ch_max, frame_max, _hb = struct.unpack_from(">HIH", args)
            self.frame_max = frame_max or 131072
            w.write(method_frame(0, 10, 31, struct.pack(">HIH", ch_max, self.frame_max, 0)))
            w.write(method_frame(0, 10, 40, shortstr("/") + shortstr("") + b"\x00"))
        elif (cls, meth) == (10, 41):  # Connection.OpenOk
            w.write(method_frame(1, 20, 10, shortstr("")))
        elif (cls, meth) == (20, 11):  # Channel.OpenOk
            if not self.opened.done():
                self.opened.set_result(None)
        elif (cls, meth) == (10, 50) or (cls, meth) == (20, 40):  # Connection/Channel.Close
            code = struct.unpack_from(">H", args)[0]
            text = args[3 : 3 + args[2]].decode(errors="replace")
            self.closed_reason = (
                f"broker closed {'connection' if cls == 10 else 'channel'}: {code} {text}"
            )
            self.stats.errors.append(self.closed_reason)
            if cls == 10:
                w.write(method_frame(0, 10, 51, b""))
            w.close()
        else:
            for idx, (want, fut) in enumerate(self.waiters):
                if want == (cls, meth):
                    del self.waiters[idx]
                    if not fut.done():
                        fut.set_result(args)
                    break

    def data_received(self, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
        n = len(data)
        i = 0
        now = _perf()
        delivered = 0
        last_tag = 0
        lat = self.stats.latencies if self.record else None
        if lat is not None and len(lat) >= self.stats.max_latency_samples:
            lat = None
        while i + 7 <= n:
            ftype, channel, size = _frame_head.unpack_from(data, i)
            end = i + 7 + size + 1
            if end > n:
                break
            p = i + 7
            if ftype == 3:
                if lat is not None and size >= 8:
                    lat.append(now - _ts_from(data, p)[0])
            elif ftype == 1:
                if data[p + 1] == 60 and data[p] == 0:
                    meth = data[p + 3]
                    if meth == 60:  # Basic.Deliver: ctag shortstr, delivery-tag longlong
                        q = p + 4
                        q += 1 + data[q]
                        last_tag = _QQ.unpack_from(data, q)[0]
                        delivered += 1
                    elif meth == 80:  # Basic.Ack (confirm)
                        tag = _QQ.unpack_from(data, p + 4)[0]
                        if tag > self.confirmed:
                            self.confirmed = tag
                    elif meth == 120:  # Basic.Nack
                        tag = _QQ.unpack_from(data, p + 4)[0]
                        self.nacked += 1
                        if tag > self.confirmed:
                            self.confirmed = tag
                    else:
                        self._on_method(channel, data[p : p + size])
                else:
                    self._on_method(channel, data[p : p + size])
            # frame type 2 (content header) and 8 (heartbeat): nothing to read
            i = end
        self.buf = data[i:] if i < n else b""
        if delivered:
            assert self.transport is not None
            self.transport.write(method_frame(1, 60, 80, _QQ.pack(last_tag) + b"\x01"))
            self.received += delivered
            self.stats.delivered += delivered
        cb = self.stats.on_progress
        if cb is not None:
            cb()

    async def call(
        self, cls: int, meth: int, args: bytes, ok: tuple[int, int], timeout: float = 30.0
    ) -> bytes:
        assert self.transport is not None
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiters.append((ok, fut))
        self.transport.write(method_frame(1, cls, meth, args))
        return await asyncio.wait_for(fut, timeout)

    # -- set-up methods -----------------------------------------------------------------
    async def confirm_select(self) -> None:
        await self.call(85, 10, b"\x00", (85, 11))

    async def qos(self, prefetch: int) -> None:
        await self.call(60, 10, struct.pack(">IHB", 0, prefetch, 0), (60, 11))

    async def exchange_declare(self, name: str, kind: str) -> None:
        await self.call(
            40, 10, b"\x00\x00" + shortstr(name) + shortstr(kind) + b"\x00" + EMPTY_TABLE, (40, 11)
        )

    async def queue_declare(self, name: str, auto_delete: bool = True) -> None:
        bits = 0x08 if auto_delete else 0x00
        await self.call(
            50, 10, b"\x00\x00" + shortstr(name) + bytes([bits]) + EMPTY_TABLE, (50, 11)
        )

    async def queue_bind(self, queue: str, exchange: str, key: str) -> None:
        await self.call(
            50,
            20,
            b"\x00\x00"
            + shortstr(queue)
            + shortstr(exchange)
            + shortstr(key)
            + b"\x00"
            + EMPTY_TABLE,
            (50, 21),
        )

    async def consume(self, queue: str, tag: str) -> None:
        await self.call(
            60, 20, b"\x00\x00" + shortstr(queue) + shortstr(tag) + b"\x00" + EMPTY_TABLE, (60, 21)
        )

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(
                method_frame(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + b"\x00" * 4)
            )
            self.transport.close()


async def open_amqp(
    port: int, stats: Stats, record: bool = True, timeout: float = 30.0
) -> AmqpConn:
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(
        loop.create_connection(lambda: AmqpConn(stats, record), "127.0.0.1", port),
        timeout,
    )
    await asyncio.wait_for(proto.opened, timeout)
    return proto
