"""MQTT sessions at run time: subscriptions, readers, packet identifiers, expiry, wills.

A :class:`Session` outlives its connections when it is persistent. Its durable part is
:class:`~gateway.mqtt.session_state.SessionState` (saved with :meth:`Session.save`); its
position in each LMQ is a committed consumer offset (:meth:`Session.commit_offsets`,
called periodically and at disconnect). Everything else (readers' in-memory positions,
the inflight table) is rebuilt from those on reconnect or restart.

Exactly-once for inbound QoS 2 across a crash: the PUBLISH is appended with a
``mqtt.qos2`` marker, and the packet id is recorded in the session state when the
append is acknowledged; the state also records ``qos2_upto``, the log position up to
which its markers are reflected. After a crash the front end scans the log from the
lowest ``qos2_upto`` and puts back the packet ids of markers past each session's own
mark (the append was acknowledged, PUBREC maybe not yet), so a resent PUBLISH with the
same id is recognised as a duplicate.

Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from gateway.mqtt.delivery import Reader, SharedReader, share_group
from gateway.mqtt.flows import Flows
from gateway.mqtt.merge import MergedReader, groups
from gateway.mqtt.session_state import (
    NEVER,
    PREFIX,
    SessionState,
    SubscriptionState,
    offset_group,
)
from gateway.topic_space import mqtt_lmq

if TYPE_CHECKING:
    from gateway.mqtt.frontend import MqttFrontEnd
    from gateway.mqtt.handler import MqttHandler

log = logging.getLogger(__name__)


class Session:
    def __init__(self, front: MqttFrontEnd, state: SessionState) -> None:
        self.front = front
        self.state = state
        self.readers: dict[str, Reader | SharedReader] = {}
        self._fillers: list[Reader | SharedReader | MergedReader] | None = None
        #: Packet ids and QoS flows (pure; see gateway.mqtt.flows).
        self.flows = Flows(state)
        self.handler: MqttHandler | None = None
        self.wakeup = asyncio.Event()
        self.offsets_dirty = False
        self.expiry_timer: asyncio.TimerHandle | None = None
        self.will_timer: asyncio.TimerHandle | None = None
        #: QoS 2 appends of this session submitted and not yet acknowledged.
        self.qos2_appending = 0

    @property
    def client_id(self) -> str:
        return self.state.client_id

    @property
    def group(self) -> str:
        return offset_group(self.state.client_id)

    def qos_inflight(self) -> int:
        return len(self.flows.inflight)

    def fillers(self) -> list[Reader | SharedReader | MergedReader]:
        """What a delivery round fills from: the ordinary readers, those whose filters
        can overlap merged into one (one copy per message, see gateway.mqtt.merge),
        then each shared subscription's reader."""
        if self._fillers is None:
            ordinary = [r for r in self.readers.values() if isinstance(r, Reader)]
            fillers: list[Reader | SharedReader | MergedReader] = [
                MergedReader(part) if len(part) > 1 else part[0] for part in groups(ordinary)
            ]
            fillers += [r for r in self.readers.values() if isinstance(r, SharedReader)]
            self._fillers = fillers
        return self._fillers

    # -- subscriptions -----------------------------------------------------------------

    def attach_reader(self, sub: SubscriptionState, start_offset: int | None) -> None:
        """Create the reader of a subscription whose filter is already counted in the
        topic space and whose LMQ exists. ``start_offset`` None = the committed offset,
        else the LMQ's end."""
        front = self.front
        lmq = mqtt_lmq(sub.topic_filter)
        reader: Reader | SharedReader
        if sub.share_group is not None:
            reader = SharedReader(sub, lmq)
            if front.store.get_offset(reader.group, lmq) is None:
                info = front.store.lmq(lmq)
                front.store.commit_offset(reader.group, lmq, info.max_offset if info else 0)
        else:
            committed = front.store.get_offset(self.group, lmq)
            if start_offset is None and committed is not None:
                offset = committed
            else:
                info = front.store.lmq(lmq)
                offset = info.max_offset if info else 0
            reader = Reader(sub, lmq, offset)
        self.readers[sub.key] = reader
        self._fillers = None

    def _restore_qos2(self) -> None:
        """Before delivering after a (re)connect: messages whose QoS 2 flow got past
        PUBREC are not sent again; those sent and not PUBREC'd go again, same id."""
        restore = self.flows.restore
        for reader in self.readers.values():
            if isinstance(reader, Reader):
                reader.skip, resend = restore(reader.lmq, reader.next_offset)
                reader.resend.update(resend)

    def listen(self) -> None:
        """Wake the delivery loop whenever a subscribed LMQ gains messages."""
        for reader in self.readers.values():
            self._listen(reader)

    def _listen(self, reader: Reader | SharedReader) -> None:
        if reader.remove_listener is None:
            reader.remove_listener = self.front.store.add_listener(reader.lmq, self._woken)

    def unlisten(self) -> None:
        for reader in self.readers.values():
            self._unlisten(reader)

    @staticmethod
    def _unlisten(reader: Reader | SharedReader) -> None:
        if reader.remove_listener is not None:
            reader.remove_listener()  # type: ignore[operator]
            reader.remove_listener = None

    def _woken(self, _lmq: str, _next_offset: int) -> None:
        self.front.wake(self)

    def add_subscription(self, sub: SubscriptionState) -> bool:
        """Add or replace a subscription; returns True if it is new."""
        old = self.state.subscriptions.get(sub.key)
        self.state.subscriptions[sub.key] = sub
        if old is not None:
            reader = self.readers.get(sub.key)
            if reader is not None:
                reader.sub = sub
            return False
        lmq = self.front.topic_space.add_filter(sub.topic_filter)
        self.front.store.create_lmq(lmq)
        self.attach_reader(sub, start_offset=0)
        reader = self.readers[sub.key]
        if self.state.persistent and isinstance(reader, Reader):
            # Where the backlog of this subscription starts, durably, before the SUBACK.
            self.front.store.commit_offset(self.group, lmq, reader.next_offset)
        if self.handler is not None:
            self._listen(self.readers[sub.key])
        return True

    def remove_subscription(self, key: str) -> bool:
        sub = self.state.subscriptions.pop(key, None)
        if sub is None:
            return False
        reader = self.readers.pop(key, None)
        self._fillers = None
        if reader is not None:
            self._unlisten(reader)
            self.flows.forget_reader(reader)
            if not reader.shared:
                self.front.store.delete_offsets(self.group, [reader.lmq])
        self.front.topic_space.remove_filter(sub.topic_filter)
        return True

    # -- connection life ---------------------------------------------------------------

    def online(self, handler: MqttHandler) -> None:
        self.handler = handler
        self.cancel_timers()
        self.state.connected = True
        self._restore_qos2()
        self.listen()

    def offline(self) -> None:
        """The connection is gone: give back shared messages, rewind, commit."""
        self.handler = None
        self.unlisten()
        self._give_back(self.flows.offline())
        for reader in self.readers.values():
            reader.rewind()
        self.commit_offsets(force=True)
        self.state.connected = False
        self.state.disconnected_ms = self.front.now_ms()
        self.wakeup.clear()

    def _give_back(self, receipts: list[str]) -> None:
        """Shared messages in flight go back to the group at once."""
        store = self.front.store
        for receipt in receipts:
            try:
                store.pop.change_invisible_time(receipt, 0)
            except Exception:  # already revived or acked: nothing to give back
                pass

    def commit_offsets(self, force: bool = False) -> None:
        if not self.state.persistent or not (self.offsets_dirty or force):
            return
        self.offsets_dirty = False
        store = self.front.store
        moved: dict[str, int] = {}
        for reader in self.readers.values():
            if isinstance(reader, Reader):
                point = reader.commit_point()
                if point != reader.committed and store.lmq(reader.lmq) is not None:
                    moved[reader.lmq] = point
        if moved:
            # one write batch: a crash keeps every LMQ's new offset or none of them, so
            # overlapping subscriptions never see one LMQ committed past another
            store.commit_offsets(self.group, moved)
        pruned = False
        done = self.state.qos2_done
        for reader in self.readers.values():
            if isinstance(reader, Reader):
                if reader.lmq in moved:
                    reader.committed = moved[reader.lmq]
                offsets = done.get(reader.lmq)
                if offsets and offsets[0] < reader.committed:
                    kept = [o for o in offsets if o >= reader.committed]
                    if kept:
                        done[reader.lmq] = kept
                    else:
                        del done[reader.lmq]
                    pruned = True
        if pruned:
            self.save()

    def save(self, qos2_upto: int | None = None) -> None:
        """Persist the durable state (persistent sessions only)."""
        if not self.state.persistent:
            return
        if qos2_upto is not None:
            self.state.qos2_upto = max(self.state.qos2_upto, qos2_upto)
        elif self.qos2_appending == 0:
            self.state.qos2_upto = self.front.store.log_end
        self.front.store.put_meta(PREFIX + self.client_id, self.state.encode())

    def cancel_timers(self) -> None:
        for timer in (self.expiry_timer, self.will_timer):
            if timer is not None:
                timer.cancel()
        self.expiry_timer = self.will_timer = None

    def forget(self) -> None:
        """Drop this offline session from memory without touching the store (its filters
        leave the topic space): a promoted member of a broker group loads the replicated
        sessions instead."""
        self.cancel_timers()
        self.unlisten()
        for sub in self.state.subscriptions.values():
            self.front.topic_space.remove_filter(sub.topic_filter)
        self.readers.clear()
        self._fillers = None

    def end(self) -> None:
        """The session is over (clean start, expiry, or a clean session's disconnect):
        drop its subscriptions, offsets and state."""
        self.cancel_timers()
        self.unlisten()
        store = self.front.store
        self._give_back(self.flows.end())
        lmqs = [r.lmq for r in self.readers.values() if not r.shared]
        for sub in self.state.subscriptions.values():
            self.front.topic_space.remove_filter(sub.topic_filter)
        self.readers.clear()
        self._fillers = None
        self.state.subscriptions.clear()
        if self.state.persistent:
            store.delete_offsets(self.group, lmqs)
            store.delete_meta(PREFIX + self.client_id)

    def expiry_delay(self) -> float | None:
        """Seconds until an offline session expires, None = never."""
        if self.state.expiry >= NEVER:
            return None
        return max(0.0, self.state.disconnected_ms / 1000 + self.state.expiry - self.front.now())


__all__ = ["Session", "share_group"]
