"""Firing the store's durable timers (broker_core.timers) on the gateway's event loop.

One loop timer at the store's next due time (``MessageStore.next_timer_due``), like
the pop service's revive timer: when it runs, ``fire_timers`` dispatches one page of
what is due (``StoreConfig.timer_page``) and, if a whole page fired, runs again with
``call_soon`` so the loop serves other work between pages (a million due at once never
holds the loop for the whole burst); else it is armed again at the next due time. A front end
that stores a delayed message calls :meth:`TimerFiring.arm` with its due time, so an
earlier timer than the one armed is not missed. Timers pending from an earlier run fire
at :meth:`start` (their due times may be past: they fire at once).

Event-loop thread only. ``fire_timers`` runs on the loop thread, as ``revive`` does.
"""

from __future__ import annotations

import asyncio
import logging

from broker_core import MessageStore
from broker_core.clock import now_ms

log = logging.getLogger(__name__)


class TimerFiring:
    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self._handle: asyncio.Handle | None = None
        self._at: int | None = None

    def start(self) -> None:
        self.arm()

    def arm(self, due_ms: int | None = None) -> None:
        """Keep the loop timer at the earliest of ``due_ms`` and the store's next due."""
        due = self.store.next_timer_due() if due_ms is None else due_ms
        if due is None or (self._handle is not None and self._at is not None
                           and self._at <= due):
            return
        if self._handle is not None:
            self._handle.cancel()
        wait_s = max(0.0, (due - now_ms()) / 1000)
        self._at = due
        self._handle = self.loop.call_at(self.loop.time() + wait_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._at = None
        page = self.store.config.timer_page
        fired = 0
        try:
            fired = self.store.fire_timers(max_count=page)
        except Exception:
            log.exception("firing timers failed")
        if self.store.closed:
            return
        if fired >= page:  # more may be due: the next page after other loop work
            self._at = 0
            self._handle = self.loop.call_soon(self._fire)
        else:
            self.arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._at = None
