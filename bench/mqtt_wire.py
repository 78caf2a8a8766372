"""A minimal MQTT 3.1.1 client for load generation: pre-encoded packets, one asyncio
Protocol per connection, receive path that reads only what it must.

Deliberately independent of the project's ``protocol`` package: the system under test
must not share code with the tool that measures it.

Payload layout (every message the generator sends)::

    +----------------------+-------------------------+
    | send time, >d (8 B)  | zero padding to size    |
    +----------------------+-------------------------+

The send time is ``time.perf_counter()`` of the generator process; a subscriber in the
same process subtracts it from the time the read that carried the message returned.

Receive path: per ``data_received`` it walks the fixed headers (type nibble + remaining
length), and for PUBLISH reads the topic length, the packet id (QoS > 0, answered with a
PUBACK batched into one write per read) and the 8-byte timestamp. Nothing else is
decoded.
"""

from __future__ import annotations

import asyncio
import struct
import time
from array import array
from collections.abc import Callable

_perf = time.perf_counter
_ts_from = struct.Struct(">d").unpack_from
_ts = struct.Struct(">d").pack


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def connect_packet(client_id: str, clean: bool = True, keepalive: int = 0) -> bytes:
    flags = 0x02 if clean else 0x00
    body = _str("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive) + _str(client_id)
    return b"\x10" + _varint(len(body)) + body


def subscribe_packet(packet_id: int, filters: list[tuple[str, int]]) -> bytes:
    body = struct.pack(">H", packet_id) + b"".join(_str(f) + bytes([q]) for f, q in filters)
    return b"\x82" + _varint(len(body)) + body


DISCONNECT = b"\xe0\x00"
PINGREQ = b"\xc0\x00"


class PublishTemplate:
    """A PUBLISH for one topic, split around the fields that change per message.

    ``head`` ends right before the packet id (QoS 1) or the payload (QoS 0); the payload
    is ``timestamp + pad``. Building a message is two concatenations and, for QoS 1,
    one ``struct.pack``.
    """

    __slots__ = ("head", "pad", "qos", "size")

    def __init__(self, topic: str, qos: int, payload_size: int) -> None:
        t = _str(topic)
        rem = len(t) + (2 if qos else 0) + payload_size
        self.head = bytes([0x30 | (qos << 1)]) + _varint(rem) + t
        self.pad = bytes(max(0, payload_size - 8))
        self.qos = qos
        self.size = len(self.head) + (2 if qos else 0) + payload_size


_pid = struct.Struct(">H").pack


def build_batch(tpl: PublishTemplate, n: int, first_pid: int) -> bytes:
    """``n`` PUBLISH packets on one topic stamped now; packet ids from ``first_pid``."""
    ts = _ts(_perf())
    if tpl.qos == 0:
        return (tpl.head + ts + tpl.pad) * n
    head, tail = tpl.head, ts + tpl.pad
    parts = []
    pid = first_pid
    for _ in range(n):
        parts.append(head)
        parts.append(_pid(pid))
        parts.append(tail)
        pid = pid + 1 if pid < 65535 else 1
    return b"".join(parts)


class Stats:
    """Counters shared by every connection of one scenario run (one event loop: no locks)."""

    __slots__ = ("delivered", "latencies", "max_latency_samples", "on_progress", "errors", "acked")

    def __init__(self, max_latency_samples: int = 5_000_000) -> None:
        self.delivered = 0
        self.acked = 0
        self.latencies = array("d")
        self.max_latency_samples = max_latency_samples
        self.on_progress: Callable[[], None] | None = None
        self.errors: list[str] = []


class MqttConn(asyncio.Protocol):
    """One MQTT connection. ``role`` only decides what it does with PUBLISH and PUBACK."""

    def __init__(
        self,
        stats: Stats,
        client_id: str,
        clean: bool = True,
        record: bool = True,
        track_ids: bool = False,
    ) -> None:
        self.stats = stats
        self.client_id = client_id
        self.clean = clean
        self.record = record  # subscribers record latency; a drain may also count ids
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.connack: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.suback: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.session_present = False
        self.received = 0
        self.acked = 0  # PUBACKs received (publisher side)
        self.next_pid = 1
        self.write_paused = False
        self.resumed: asyncio.Event = asyncio.Event()
        self.resumed.set()
        # Backlog drain: sequence numbers seen. Set from the start, since a broker may
        # deliver a session's backlog right behind its CONNACK.
        self.seen_ids: set[int] | None = set() if track_ids else None

    # -- asyncio ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(connect_packet(self.client_id, self.clean))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connack.done():
            self.connack.set_exception(ConnectionError(f"closed before CONNACK: {exc}"))
        if self.suback is not None and not self.suback.done():
            self.suback.set_exception(ConnectionError("closed before SUBACK"))
        if not self.closed.done():
            self.closed.set_result(None)
        self.resumed.set()

    def pause_writing(self) -> None:
        self.write_paused = True
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.resumed.set()

    def data_received(self, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
        n = len(data)
        i = 0
        now = _perf()
        delivered = 0
        acks: list[bytes] | None = None
        lat = self.stats.latencies if self.record else None
        if lat is not None and len(lat) >= self.stats.max_latency_samples:
            lat = None
        seen = self.seen_ids
        while i + 2 <= n:
            h = data[i]
            ln = data[i + 1]
            if ln < 128:
                p = i + 2
            else:
                ln &= 0x7F
                shift = 7
                p = i + 2
                while True:
                    if p >= n:
                        ln = -1
                        break
                    b = data[p]
                    p += 1
                    ln |= (b & 0x7F) << shift
                    if b < 128:
                        break
                    shift += 7
                if ln < 0:
                    break
            end = p + ln
            if end > n:
                break
            t = h >> 4
            if t == 3:
                q = (h >> 1) & 3
                p += 2 + ((data[p] << 8) | data[p + 1])
                if q:
                    if acks is None:
                        acks = []
                    acks.append(b"\x40\x02" + data[p : p + 2])
                    p += 2
                delivered += 1
                if end - p >= 8:
                    if lat is not None:
                        lat.append(now - _ts_from(data, p)[0])
                    if seen is not None and end - p >= 16:
                        seen.add(int.from_bytes(data[p + 8 : p + 16], "big"))
            elif t == 4:
                self.acked += 1
            elif t == 2:
                if not self.connack.done():
                    self.session_present = bool(data[p] & 1)
                    rc = data[p + 1]
                    if rc:
                        self.connack.set_exception(ConnectionError(f"CONNACK return code {rc}"))
                    else:
                        self.connack.set_result(rc)
            elif t == 9:
                if self.suback is not None and not self.suback.done():
                    if 0x80 in data[p + 2 : end]:
                        self.suback.set_exception(ConnectionError("SUBACK refused a filter"))
                    else:
                        self.suback.set_result(None)
            i = end
        self.buf = data[i:] if i < n else b""
        if acks:
            assert self.transport is not None
            self.transport.write(b"".join(acks))
        if delivered:
            self.received += delivered
            self.stats.delivered += delivered
        cb = self.stats.on_progress
        if cb is not None:
            cb()

    # -- helpers --------------------------------------------------------------------------
    async def subscribe(self, filters: list[tuple[str, int]]) -> None:
        assert self.transport is not None
        self.suback = asyncio.get_running_loop().create_future()
        self.transport.write(subscribe_packet(1, filters))
        await self.suback

    def disconnect(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(DISCONNECT)
            self.transport.close()


async def open_conn(
    port: int,
    stats: Stats,
    client_id: str,
    clean: bool = True,
    record: bool = True,
    local_host: str | None = None,
    timeout: float = 30.0,
    track_ids: bool = False,
) -> MqttConn:
    loop = asyncio.get_running_loop()
    kw = {"local_addr": (local_host, 0)} if local_host else {}
    _, proto = await asyncio.wait_for(
        loop.create_connection(
            lambda: MqttConn(stats, client_id, clean, record, track_ids),
            "127.0.0.1",
            port,
            **kw,
        ),
        timeout,
    )
    await asyncio.wait_for(proto.connack, timeout)
    return proto
