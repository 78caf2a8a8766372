"""The QoS 1/2 flows of one MQTT session, as a pure object.

:class:`Flows` owns the packet identifiers of a session and every packet-id-keyed table:

- outbound: the in-flight table (QoS 1/2 PUBLISHes sent and not completed), the durable
  ``qos2_out`` (sent, no PUBREC yet), ``pubrel_pending`` (PUBREC came, PUBREL sent) and
  ``qos2_done`` (PUBCOMP came, offset not yet passed by the committed offset);
- inbound QoS 2: the packet ids whose append is under way (a resend waits for it) and
  the durable ``inbound_qos2`` (stored and PUBREC'd, no PUBREL yet).

It does no I/O: it has no asyncio and no store. The transitions return :class:`Effects`
(packets to send, pop receipts to ack, reader offsets to advance, whether the durable
state must be saved and whether the delivery window opened); the connection handler
carries them out in that order. The durable tables live in
:class:`~gateway.mqtt.session_state.SessionState`, so a :class:`Flows` built over a
state decoded after a crash resumes where the saved one stood (:meth:`Flows.restore`,
:meth:`Flows.resume`).

Invariants:

- a packet id is in at most one of: ``inflight``, ``pubrel_pending``, ``qos2_out``,
  ``held`` (ids kept for a resend after a reconnect); :meth:`allocate` returns none of
  them, so a resend keeps its id and no new flow reuses it (MQTT-2.2.1-3, MQTT-4.4.0-1);
- an offset is advanced (its reader may commit past it) exactly once per flow: at PUBACK,
  at PUBREC, or when the client refuses the message (PUBREC >= 0x80);
- an offset whose QoS 2 flow reached PUBREC is never sent again as a PUBLISH, across
  reconnects and restarts (``pubrel_pending``, then ``qos2_done``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from gateway.mqtt.session_state import SessionState
from protocol.mqtt import Pubrel, ReasonCode


class FlowReader(Protocol):
    """What a flow needs of the reader a message came from."""

    lmq: str
    shared: bool

    def acked(self, offset: int) -> None: ...


@dataclass(slots=True)
class Inflight:
    """A QoS 1/2 PUBLISH we sent and whose flow has not completed."""

    packet_id: int
    qos: int
    reader: FlowReader | None
    offset: int  # in the reader's LMQ; -1 for retained messages
    receipt: str | None = None  # pop receipt (shared subscriptions)
    released: bool = False  # QoS 2: PUBREC received, PUBREL sent
    #: Further (reader, offset) entries of the same record: overlapping subscriptions
    #: of the session read it through several LMQs (gateway.mqtt.merge); they advance
    #: with ``reader``.
    more: list[tuple[FlowReader, int]] | None = None

    def entries(self) -> list[tuple[FlowReader, int]]:
        first = [(self.reader, self.offset)] if self.reader is not None else []
        return first + self.more if self.more else first

    def durable_entries(self) -> list[Any]:
        """The entries as kept in the durable tables: ``[lmq, offset, lmq, offset...]``
        (``["", offset]`` when no reader is left)."""
        flat: list[Any] = []
        for reader, offset in self.entries():
            flat += (reader.lmq, offset)
        return flat or ["", self.offset]


def pairs(flat: list[Any]) -> Iterator[tuple[str, int]]:
    """The (lmq, offset) entries of a durable table's value."""
    return zip(flat[::2], flat[1::2], strict=True)


@dataclass(slots=True)
class Effects:
    """What a transition asks of its caller, to be done in this order: advance the
    readers, ack the receipts, save the durable state, send the packets, and deliver
    more if ``wake`` (a flow ended, so the window opened)."""

    advance: list[tuple[FlowReader, int]] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    save: bool = False
    send: list[Pubrel] = field(default_factory=list)
    wake: bool = False


class Inbound(Enum):
    """What to do with an inbound QoS 2 PUBLISH (see :meth:`Flows.inbound_publish`)."""

    STORE = "store"  # new: append it; PUBREC once stored
    DUPLICATE = "duplicate"  # stored already: PUBREC again, do not store
    WAIT = "wait"  # the first copy is being stored: its PUBREC answers both


class Flows:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.inflight: dict[int, Inflight] = {}
        #: Packet ids of messages sent before a disconnect and not acknowledged: the
        #: readers send them again with the same id. Emptied as they are resent; an id
        #: whose resend never happens (the message was skipped) stays until the next
        #: disconnect recomputes the set, so at most a window's worth is ever held.
        self.held: set[int] = set()
        #: Inbound QoS 2 packet ids whose append is under way.
        self.storing: set[int] = set()
        self._next_pid = 1

    # -- packet identifiers ------------------------------------------------------------

    def allocate(self) -> int:
        """A packet id in use by no flow (see the module invariants)."""
        used = self.inflight
        pending = self.state.pubrel_pending
        out = self.state.qos2_out
        held = self.held
        for _ in range(65535):
            pid = self._next_pid
            self._next_pid = pid % 65535 + 1
            if pid in used or pid in pending or pid in out or (held and pid in held):
                continue
            return pid
        raise RuntimeError("no free packet identifier")  # the window is far smaller

    def in_flight(self) -> int:
        return len(self.inflight)

    # -- outbound ----------------------------------------------------------------------

    def sent(
        self,
        pid: int,
        qos: int,
        reader: FlowReader | None,
        offset: int,
        receipt: str | None = None,
        durable: bool = False,
        more: Sequence[tuple[FlowReader, int]] | None = None,
    ) -> bool:
        """A QoS 1/2 PUBLISH went out with ``pid``. ``durable`` (QoS 2 from an ordinary
        subscription, first send): its id is recorded in ``qos2_out`` so that after a
        crash it is sent again with the same id, not as a new message. Returns True if
        the durable state changed (the caller saves it before the bytes leave)."""
        inf = self.inflight[pid] = Inflight(
            pid, qos, reader, offset, receipt, False, list(more) if more else None
        )
        held = self.held
        if held:
            held.discard(pid)
        if durable and reader is not None:
            self.state.qos2_out[pid] = inf.durable_entries() if more else [reader.lmq, offset]
            return True
        return False

    def sent_plain(self, pid: int, qos: int, reader: FlowReader, offset: int) -> None:
        """:meth:`sent` for the delivery twin of plain messages (an ordinary reader, one
        entry, not durable): the same in-flight entry, nothing to save."""
        self.inflight[pid] = Inflight(pid, qos, reader, offset)
        held = self.held
        if held:
            held.discard(pid)

    def on_puback(self, pid: int) -> Effects:
        fx = Effects()
        fx.wake = self._release(pid, fx)
        return fx

    def on_pubacks(self, pids: Iterable[int]) -> Effects:
        """Plain PUBACKs received back to back: each ends its flow, one wake for all."""
        fx = Effects()
        release = self._release
        wake = False
        for pid in pids:
            wake = release(pid, fx) or wake
        fx.wake = wake
        return fx

    def on_pubrec(self, pid: int, reason_code: int, v5: bool) -> Effects:
        fx = Effects()
        inf = self.inflight.get(pid)
        if inf is None:
            if v5:
                fx.send.append(
                    Pubrel(packet_id=pid, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
                )
            return fx
        if reason_code >= 0x80:
            # the client refused the message: the flow ends without PUBREL
            if inf.qos == 2:
                fx.save = self.state.qos2_out.pop(pid, None) is not None
            fx.wake = self._release(pid, fx)
            return fx
        if not inf.released:
            inf.released = True
            fx.advance += inf.entries()
            if inf.receipt is not None:
                fx.receipts.append(inf.receipt)
                inf.receipt = None
            state = self.state
            state.qos2_out.pop(pid, None)
            state.pubrel_pending[pid] = inf.durable_entries()
            fx.save = True
        fx.send.append(Pubrel(packet_id=pid))
        return fx

    def on_pubcomp(self, pid: int) -> Effects:
        fx = Effects()
        flow = self.state.pubrel_pending.pop(pid, None)
        if flow is not None:
            for lmq, offset in pairs(flow):
                if lmq and offset >= 0:
                    # never sent again, even before the offset commit passes it
                    done = self.state.qos2_done.setdefault(lmq, [])
                    done.append(offset)
                    done.sort()
            fx.save = True
        fx.wake = self._release(pid, fx)
        return fx

    def _release(self, pid: int, fx: Effects) -> bool:
        """End the outbound flow of ``pid`` into ``fx``; False if none was in flight."""
        inf = self.inflight.pop(pid, None)
        if inf is None:
            return False
        if not inf.released:
            reader = inf.reader
            if inf.more:
                fx.advance += inf.entries()
            elif reader is not None:
                fx.advance.append((reader, inf.offset))
        if inf.receipt is not None:
            fx.receipts.append(inf.receipt)
        return True

    # -- connection life ---------------------------------------------------------------

    def restore(self, lmq: str, start: int) -> tuple[set[int], dict[int, int]]:
        """For an ordinary reader of ``lmq`` that reads from ``start`` after a
        (re)connect: the offsets never to send again (their QoS 2 flow got past PUBREC)
        and offset -> packet id of those to send again with the same id (QoS 2 sent,
        no PUBREC)."""
        state = self.state
        skip = {
            off
            for flow in state.pubrel_pending.values()
            for name, off in pairs(flow)
            if name == lmq and off >= start
        }
        skip.update(off for off in state.qos2_done.get(lmq, ()) if off >= start)
        resend = {
            off: pid
            for pid, flow in state.qos2_out.items()
            for name, off in pairs(flow)
            if name == lmq and off >= start
        }
        return skip, resend

    def resume(self) -> list[Pubrel]:
        """After a (re)connect: the QoS 2 flows whose PUBREC came before it are in flight
        again, each waiting for its PUBCOMP; the PUBRELs to send, in packet id order."""
        out = []
        for pid, flow in sorted(self.state.pubrel_pending.items()):
            self.inflight[pid] = Inflight(pid, 2, None, flow[1], released=True)
            out.append(Pubrel(packet_id=pid))
        return out

    def offline(self) -> list[str]:
        """The connection is gone. Returns the pop receipts to give back at once (shared
        messages not yet PUBREC'd go to another member); the ids of ordinary messages
        not acknowledged are held for their resend. PUBREL-pending flows are rebuilt
        from the durable state by :meth:`resume`."""
        receipts = []
        held = self.held
        for inf in self.inflight.values():
            if inf.released:
                continue
            if inf.receipt is not None:
                receipts.append(inf.receipt)
            elif inf.reader is not None and not inf.reader.shared:
                held.add(inf.packet_id)
        self.inflight = {}
        self.storing.clear()
        return receipts

    def end(self) -> list[str]:
        """The session is over: the pop receipts to give back; nothing is held."""
        receipts = [
            inf.receipt
            for inf in self.inflight.values()
            if inf.receipt is not None and not inf.released
        ]
        self.inflight.clear()
        self.held.clear()
        self.storing.clear()
        return receipts

    def forget_reader(self, reader: FlowReader) -> None:
        """Its subscription is gone: flows in progress end without advancing it."""
        for inf in self.inflight.values():
            if inf.reader is reader:
                inf.reader = None
            if inf.more:
                inf.more = [e for e in inf.more if e[0] is not reader]

    # -- inbound QoS 2 -----------------------------------------------------------------

    def inbound_publish(self, pid: int) -> Inbound:
        if pid in self.state.inbound_qos2:
            return Inbound.DUPLICATE
        storing = self.storing
        if pid in storing:
            return Inbound.WAIT
        storing.add(pid)
        return Inbound.STORE

    def inbound_stored(self, pid: int, ok: bool) -> bool:
        """The append of an inbound QoS 2 PUBLISH ended (``ok``: stored, PUBREC goes
        out). Returns True if the durable state changed."""
        self.storing.discard(pid)
        if ok:
            self.state.inbound_qos2.append(pid)
        return ok

    def on_pubrel(self, pid: int, v5: bool) -> tuple[int, bool]:
        """The PUBCOMP reason code for an inbound PUBREL, and whether the durable state
        changed. 3.x has no failure code: an unknown id is completed all the same."""
        try:
            self.state.inbound_qos2.remove(pid)
        except ValueError:
            return (ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if v5 else ReasonCode.SUCCESS), False
        return ReasonCode.SUCCESS, True


__all__ = ["Effects", "FlowReader", "Flows", "Inbound", "Inflight", "pairs"]
