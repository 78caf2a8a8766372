"""Backpressure for one connection, both ways (after uvicorn's ``flow_control.py``).

- Reading: a front end calls :meth:`FlowControl.pause_reading` when it cannot take more
  input (e.g. a publisher's appends wait on storage) and :meth:`resume_reading` when it
  can. Both are idempotent, so callers need not track the state.
- Writing: the transport calls ``pause_writing`` when its buffer passes the high-water
  mark and ``resume_writing`` below the low-water mark; :meth:`drain` waits for the
  latter. A subscriber's delivery loop awaits ``drain()`` before writing more, so a slow
  subscriber's backlog stays on disk, not in memory.

Per-connection state; not thread-safe (event-loop thread only).
"""

from __future__ import annotations

import asyncio


class FlowControl:
    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable = asyncio.Event()
        self._writable.set()

    async def drain(self) -> None:
        """Return once the transport accepts more output (at once if it does now, and
        also once the connection is lost, so no writer waits forever)."""
        await self._writable.wait()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            if not self._transport.is_closing():
                self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._writable.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            self._writable.set()

    def connection_lost(self) -> None:
        """Release every writer waiting in :meth:`drain`."""
        self.write_paused = False
        self._writable.set()
