"""The remoting load generator's raw connections: a pipelined producer and a pipelined
pull consumer, cheap enough per message that the generator is not what limits a
remoting scenario (like ``bench.mqtt_wire`` for MQTT).

* :class:`SendTemplate` writes SEND_MESSAGE_V2 frames from a template made once with the
  codec (``RemotingCommand.encode``): per message only the opaque, the queue id, the
  born timestamp and the UNIQ_KEY's counter change (a test checks the bytes against the
  codec's for the same fields).
* :class:`RawSender` counts the send responses from their frames (code 0: confirmed)
  without decoding the whole header.
* :class:`RawPuller` long-polls PULL_MESSAGE on its queues, one pull in flight per
  queue as RocketMQ's push consumer has, committing the offset with each pull; it walks
  each response body in the stored-message layout for what it checks, without building
  message objects: every message is counted; its queue id, queue offset (consecutive
  per queue from where the queue started) and the sender's sequence number stamped in
  the body (same queue, increasing) are checked; the send time stamped in the body
  gives its latency.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import struct
import time
from collections.abc import Sequence

from bench.mqtt_wire import Stats
from protocol.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from protocol.remoting import messages as wire
from protocol.remoting.codes import PullSysFlag

_perf = time.perf_counter
#: What the sender stamps at the start of each body: send time, sequence number.
STAMP = struct.Struct(">dQ")
_stamp_unpack = STAMP.unpack_from
_MARK = struct.Struct(">ii")
_mark_unpack = _MARK.unpack_from
_CODE = re.compile(rb'"code":(-?\d+)')
# Stored-message layout: TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET,
# PHYSICALOFFSET, SYSFLAG (40 bytes), then BORNTIMESTAMP.
_STORED_HEAD = struct.Struct(">iiiiiqqi")
_stored_unpack = _STORED_HEAD.unpack_from
_i32_unpack = struct.Struct(">i").unpack_from
_BORN_V6 = 0x10
_STORE_V6 = 0x20
_PULL_FLAGS = int(PullSysFlag.COMMIT_OFFSET | PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)
_SEQ_WIDTH = 12  # hex digits of the UNIQ_KEY's counter: fixed, so the template's holds


def uniq_prop(seq: int) -> str:
    return f"UNIQ_KEY\x01B{os.getpid():X}{seq:0{_SEQ_WIDTH}X}\x02"


def send_fields(topic: str, queue_id: int, born_ms: int, seq: int, uniq: bool) -> dict[str, str]:
    """SEND_MESSAGE_V2's short-named header fields, as the Java producer fills them."""
    props = wire.encode_properties({"WAIT": "true"}) + (uniq_prop(seq) if uniq else "")
    return {
        "a": "benchProducers", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
        "f": "0", "g": str(born_ms), "h": "0", "i": props, "j": "0", "k": "false",
        "m": "false",
    }


class SendTemplate:
    """SEND_MESSAGE_V2 frames for one topic, from a template.

    The template is the codec's encoding of a request whose variable fields hold marker
    values; :meth:`frame` puts the real ones in their place and fixes the two lengths.
    The markers are found once, so a field order or escaping change in the codec is
    followed (and a test compares whole frames with ``RemotingCommand.encode``)."""

    _OPAQUE = 1_987_654_321
    _QUEUE = "7777"
    _BORN = "8888888888888"
    _SEQ = 0xABCDEF987654

    def __init__(self, topic: str, *, uniq: bool = True) -> None:
        self.uniq = uniq
        fields = send_fields(topic, 0, 0, 0, uniq)
        fields["e"] = self._QUEUE
        fields["g"] = self._BORN
        if uniq:
            fields["i"] = fields["i"].replace(f"{0:0{_SEQ_WIDTH}X}", f"{self._SEQ:X}")
        header = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, fields, opaque=self._OPAQUE).encode()[8:]
        markers = [str(self._OPAQUE).encode(), f'"{self._QUEUE}"'.encode(),
                   f'"{self._BORN}"'.encode()]
        if uniq:
            markers.append(f"{self._SEQ:X}".encode())
        order = sorted(markers, key=lambda m: header.index(m))
        for m in markers:
            if header.count(m) != 1:
                raise ValueError(f"template marker {m!r} is not unique in the header")
        self.slots = [markers.index(m) for m in order]  # which value goes in each gap
        self.parts: list[bytes] = []
        pos = 0
        for m in order:
            at = header.index(m)
            self.parts.append(header[pos:at])
            pos = at + len(m)
        self.parts.append(header[pos:])

    def frame(self, opaque: int, queue_id: int, born: bytes, seq: int, body: bytes) -> bytes:
        values = [b"%d" % opaque, b'"%d"' % queue_id, born, b"%012X" % seq]
        parts = self.parts
        pieces = [parts[0]]
        for i, slot in enumerate(self.slots):
            pieces.append(values[slot])
            pieces.append(parts[i + 1])
        header = b"".join(pieces)
        return _MARK.pack(4 + len(header) + len(body), len(header)) + header + body


class RawSender(asyncio.Protocol):
    """A producer connection writing SEND_MESSAGE_V2 frames back to back; responses are
    counted (``confirmed`` for code 0, ``nacked`` otherwise), in any order."""

    def __init__(self, topic: str, queues: int, payload: int, *, uniq: bool = True) -> None:
        self.topic = topic
        self.queues = queues
        self.pad = bytes(max(0, payload - STAMP.size))
        self.template = SendTemplate(topic, uniq=uniq)
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.confirmed = 0
        self.nacked = 0
        self.write_paused = False
        self.seq = itertools.count()
        self.opaque = itertools.count(1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        n, pos = len(buf), 0
        ok = bad = 0
        while n - pos >= 8:
            length, mark = _mark_unpack(buf, pos)
            end = pos + 4 + length
            if end > n:
                break
            hlen = mark & 0xFFFFFF
            if mark >> 24:  # RocketMQ's binary header: the code is its first i16
                code = int.from_bytes(buf[pos + 8 : pos + 10], "big", signed=True)
            else:
                found = _CODE.search(buf, pos + 8, pos + 8 + hlen)
                code = int(found.group(1)) if found else -1
            if code == ResponseCode.SUCCESS:
                ok += 1
            else:
                bad += 1
            pos = end
        self.buf = buf[pos:]
        self.confirmed += ok
        self.nacked += bad

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False

    def build(self, n: int) -> bytes:
        frames = []
        now = _perf()
        born = b'"%d"' % int(time.time() * 1000)
        frame = self.template.frame
        pad = self.pad
        queues = self.queues
        for _ in range(n):
            seq = next(self.seq)
            frames.append(frame(next(self.opaque), seq % queues, born, seq,
                                STAMP.pack(now, seq) + pad))
        return b"".join(frames)


class QueueCheck:
    """What :class:`RawPuller` knows of one queue: the next offset to pull and to see,
    the last sequence number seen, and what did not add up."""

    __slots__ = ("queue_id", "offset", "last_seq", "bad_order", "bad_seq", "pulls", "count")

    def __init__(self, queue_id: int, offset: int) -> None:
        self.queue_id = queue_id
        self.offset = offset
        self.count = 0  # messages seen
        self.last_seq = -1
        self.bad_order = 0  # a queue offset other than the next one (lost, repeated)
        self.bad_seq = 0  # a sequence number of another queue, or not increasing
        self.pulls = 0


class RawPuller(asyncio.Protocol):
    """Long-polling PULL_MESSAGE for ``queues`` (id -> start offset) of ``topic`` as
    consumer group ``group``; see the module doc for what is checked."""

    def __init__(
        self,
        topic: str,
        group: str,
        queues: dict[int, int],
        n_queues: int,
        stats: Stats,
        *,
        batch: int = 64,
        suspend_ms: int = 15_000,
    ) -> None:
        self.topic = topic
        self.group = group
        self.n_queues = n_queues
        self.stats = stats
        self.batch = batch
        self.suspend_ms = suspend_ms
        self.queues = {q: QueueCheck(q, o) for q, o in queues.items()}
        self.pending: dict[int, QueueCheck] = {}
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.opaque = itertools.count(1)
        self.errors: list[str] = []
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        for q in self.queues.values():
            self._pull(q)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self.errors.append(f"pull connection lost: {exc!r}")

    def _pull(self, q: QueueCheck) -> None:
        if self.closing or self.transport is None or self.transport.is_closing():
            return
        opaque = next(self.opaque)
        self.pending[opaque] = q
        q.pulls += 1
        self.transport.write(RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": self.group, "topic": self.topic, "queueId": str(q.queue_id),
            "queueOffset": str(q.offset), "maxMsgNums": str(self.batch),
            "sysFlag": str(_PULL_FLAGS), "commitOffset": str(q.offset),
            "suspendTimeoutMillis": str(self.suspend_ms), "subscription": "*",
            "subVersion": "0", "expressionType": "TAG",
        }, opaque=opaque).encode())

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        while (cmd := self.decoder.next_command()) is not None:
            q = self.pending.pop(cmd.opaque, None)
            if q is None:
                continue  # a server request (NOTIFY_CONSUMER_IDS_CHANGED): not ours
            code = cmd.code
            if code == ResponseCode.SUCCESS:
                self._check(q, cmd.body)
            elif code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                self._error(f"queue {q.queue_id}: pull answered {code} {cmd.remark}")
                asyncio.get_running_loop().call_later(0.5, self._pull, q)  # not in a spin
                continue
            next_offset = int(cmd.ext_fields.get("nextBeginOffset", q.offset))
            if next_offset != q.offset:
                self._error(f"queue {q.queue_id}: nextBeginOffset {next_offset},"
                            f" expected {q.offset}")
                q.offset = next_offset
            self._pull(q)

    def _error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(text)

    def _check(self, q: QueueCheck, body: bytes) -> None:
        now = _perf()
        stats = self.stats
        lat = stats.latencies
        room = stats.max_latency_samples - len(lat)
        queue_id, expected, last_seq = q.queue_id, q.offset, q.last_seq
        n_queues = self.n_queues
        end = len(body)
        pos = count = 0
        while pos < end:
            size, _, _, qid, _, qoff, _, sys_flag = _stored_unpack(body, pos)
            # BORNTIMESTAMP, born host, STORETIMESTAMP, store host, RECONSUMETIMES,
            # PREPARED_TX_OFFSET, then BODYLEN and the body
            at = (pos + 48 + (20 if sys_flag & _BORN_V6 else 8) + 8
                  + (20 if sys_flag & _STORE_V6 else 8) + 12)
            (blen,) = _i32_unpack(body, at)
            if blen < STAMP.size or size <= 0:
                q.bad_order += 1
                self._error(f"queue {queue_id}: a message of {size} bytes, body {blen}")
                break
            sent, seq = _stamp_unpack(body, at + 4)
            if qid != queue_id or qoff != expected:
                q.bad_order += 1
                self._error(f"queue {queue_id}: message of queue {qid} at offset {qoff},"
                            f" expected offset {expected}")
            if seq % n_queues != queue_id or seq <= last_seq:
                q.bad_seq += 1
                self._error(f"queue {queue_id}: sequence number {seq} after {last_seq}")
            last_seq = seq
            expected = qoff + 1
            if count < room:
                lat.append(now - sent)
            count += 1
            pos += size
        q.offset, q.last_seq = expected, last_seq
        q.count += count
        stats.delivered += count
        if stats.on_progress is not None:
            stats.on_progress()

    def checks(self) -> dict[str, int]:
        qs = self.queues.values()
        return {
            "consumed": sum(q.count for q in qs),
            "pulls": sum(q.pulls for q in qs),
            "bad_order": sum(q.bad_order for q in qs),
            "bad_seq": sum(q.bad_seq for q in qs),
        }

    def offsets(self) -> dict[int, int]:
        return {q.queue_id: q.offset for q in self.queues.values()}


def heartbeat_body(client_id: str, group: str, topic: str) -> bytes:
    """HEART_BEAT's body for a push consumer of ``group`` subscribed to all of ``topic``."""
    from protocol.remoting.bodies import ConsumerData, HeartbeatData
    from protocol.remoting.client import subscription_data

    consumer = ConsumerData(
        group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscription_data_set=(subscription_data(topic, "*", int(time.time() * 1000)),),
    )
    return HeartbeatData(client_id, consumers=(consumer,)).serialize()


def summarize(pullers: Sequence[RawPuller]) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in pullers:
        for k, v in p.checks().items():
            out[k] = int(out.get(k, 0)) + v  # type: ignore[call-overload]
    errors = [e for p in pullers for e in p.errors]
    if errors:
        out["check_errors"] = errors[:20]
    return out
