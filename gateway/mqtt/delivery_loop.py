"""When one MQTT connection delivers: a round at the end of a loop turn, and a task.

A session's readers fill the connection's outbox (:mod:`gateway.mqtt.delivery`); this
module decides when. :func:`fill_now` runs one round for every reader right away (the
front end's end-of-turn round, see ``MqttFrontEnd.wake``); :func:`deliver_loop` is the
connection's task, which runs rounds after each wake-up until no reader makes progress,
waiting for the socket to drain whenever it is not writable.

Invariants: only the handler the session is online with delivers (a taken-over handler
stops at its next check); each reader's window is the client's Receive Maximum less
the QoS 1/2 messages in flight. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from gateway.mqtt.delivery import PULL_BATCH, Outbox

if TYPE_CHECKING:
    from gateway.connection import Connection
    from gateway.mqtt.sessions import Session


class DeliveryHost(Outbox, Protocol):
    """The connection handler, as the delivery schedule sees it."""

    closed: bool
    session: Session | None
    #: The client's Receive Maximum.
    receive_max: int
    conn: Connection

    def flush_out(self) -> None: ...


def fill_now(host: DeliveryHost) -> bool:
    """One round of delivery from every reader, right now, into the outbox: the caller
    writes it with ``host.flush_out()``, which it must call even if this raises (no
    flush is scheduled for what is queued here). False if the delivery task must go
    on: the connection is not writable, or a reader filled a whole round (there may
    be more)."""
    session = host.session
    if host.closed or session is None or session.handler is not host:
        return False
    conn = host.conn
    if not conn.writable:
        return False
    done = True
    conn.defer_flush()  # the caller's flush_out
    for reader in list(session.fillers()):
        window = host.receive_max - session.qos_inflight()
        if reader.fill(session, host, window) >= PULL_BATCH:
            done = False
        if not conn.writable:
            done = False
            break
    return done


async def deliver_loop(host: DeliveryHost) -> None:
    """The connection's delivery task: rounds after every wake-up of the session."""
    session = host.session
    assert session is not None
    conn = host.conn
    while not host.closed:
        await session.wakeup.wait()
        session.wakeup.clear()
        progress = True
        while progress and not host.closed and session.handler is host:
            progress = False
            for reader in list(session.fillers()):
                if not conn.writable:
                    await conn.drain()
                    if host.closed or session.handler is not host:
                        return
                window = host.receive_max - session.qos_inflight()
                if reader.fill(session, host, window):
                    progress = True
                host.flush_out()
            if progress:
                await asyncio.sleep(0)  # let other connections run between batches


__all__ = ["DeliveryHost", "deliver_loop", "fill_now"]
