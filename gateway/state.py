"""Shared server state: the table of open connections, their counters and the tasks the
gateway owns (uvicorn's ``ServerState``).

:class:`~gateway.connection.GatewayProtocol` calls the three public transitions of a
connection's life, in this order and at most once each:

- :meth:`ServerState.admit` when the socket is accepted: checks the limits
  (``max_connections``, ``max_connections_per_address``, shutting down) and either
  returns the new :class:`~gateway.connection.Connection` or closes the socket;
- :meth:`ServerState.assign` once its protocol is known (its port, or sniffing);
- :meth:`ServerState.release` when the socket is gone.

It owns nothing of the front ends and no store: it depends only on the configuration,
the metrics registry and :mod:`gateway.connection`. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally

from gateway.config import GatewayConfig
from gateway.connection import Connection, format_address
from gateway.metrics import Registry
from gateway.tasks import TaskOwner

log = logging.getLogger(__name__)


class ServerState:
    def __init__(self, config: GatewayConfig, metrics: Registry) -> None:
        self.config = config
        #: Open connections by id, admitted and not yet released.
        self.connections: dict[int, Connection] = {}
        #: Every task the gateway owns; connections' tasks are children of it.
        self.tasks = TaskOwner()
        #: Set at shutdown: no more connections are admitted.
        self.stopping = False
        self._per_address: Tally[str] = Tally()
        #: Open connections by listener and by protocol ("pending" while sniffing), kept
        #: as they come and go: the admin overview's counts, without a walk of the table.
        self.by_listener: Tally[str] = Tally()
        self.by_protocol: Tally[str] = Tally()
        #: Set while no connection is open (shutdown waits on it).
        self.idle = asyncio.Event()
        self.idle.set()
        m = metrics
        self._open = m.gauge("lmq_connections", "Open connections by protocol", ("protocol",))
        self._accepted = m.counter(
            "lmq_connections_accepted_total", "Connections accepted by listener", ("listener",)
        )
        self._closed_total = m.counter(
            "lmq_connections_closed_total", "Connections closed by protocol", ("protocol",)
        )
        self._rejected = m.counter(
            "lmq_connections_rejected_total",
            "Connections closed by the gateway before or instead of serving them",
            ("reason",),
        )

    def admit(self, listener: str, transport: asyncio.Transport) -> Connection | None:
        """A new socket on ``listener``: its :class:`Connection`, or None when a limit
        refuses it (the socket is then closed and the refusal counted)."""
        cfg = self.config
        self._accepted.inc(listener=listener)
        reason = ""
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        if self.stopping:
            reason = "shutting_down"
        elif len(self.connections) >= cfg.max_connections:
            reason = "max_connections"
        elif (
            cfg.max_connections_per_address
            and self._per_address[host] >= cfg.max_connections_per_address
        ):
            reason = "max_connections_per_address"
        if reason:
            self.count_rejected(reason)
            log.warning(
                "connection refused",
                extra={"peer": format_address(peer), "listener": listener, "reason": reason},
            )
            transport.close()
            return None
        conn = Connection(self, listener, transport)
        self.connections[conn.id] = conn
        self._per_address[conn.peer_host] += 1
        self.by_listener[listener] += 1
        self.by_protocol["pending"] += 1
        self.idle.clear()
        self._open.inc(protocol="pending")
        conn.start_connect_timer(cfg.connect_timeout)
        log.info("connection accepted", extra=conn.log_fields())
        return conn

    def readdress(
        self,
        conn: Connection,
        address: tuple[str, int],
        destination: tuple[str, int] | None = None,
    ) -> bool:
        """``conn`` came through a load balancer whose PROXY header names the client at
        ``address`` (and the balancer's address it connected to, ``destination``): from
        now on it is that client's (logs, per-address limit, ACLs).
        False (the connection is closed and the refusal counted) when the client's
        address is at its ``max_connections_per_address``."""
        host = address[0]
        limit = self.config.max_connections_per_address
        if host != conn.peer_host and limit and self._per_address[host] >= limit:
            self.count_rejected("max_connections_per_address")
            log.warning(
                "connection refused",
                extra={**conn.log_fields(), "client": format_address(address),
                       "reason": "max_connections_per_address"},
            )
            conn.close("max_connections_per_address")
            return False
        _less(self._per_address, conn.peer_host)
        self._per_address[host] += 1
        balancer = conn.peer
        conn.peer_host = host
        conn.peer = format_address(address)
        if destination is not None:
            conn.local_address = destination
        log.info("PROXY header", extra={**conn.log_fields(), "via": balancer})
        return True

    def assign(self, conn: Connection, protocol: str) -> None:
        """``conn`` speaks ``protocol`` from now on (it was "pending")."""
        conn.protocol = protocol
        _less(self.by_protocol, "pending")
        self.by_protocol[protocol] += 1
        self._open.dec(protocol="pending")
        self._open.inc(protocol=protocol)

    def release(self, conn: Connection, exc: Exception | None) -> None:
        """``conn``'s socket is gone: forget it, stop its timers and tasks, log it.
        Idempotent."""
        if self.connections.pop(conn.id, None) is None:
            return
        conn.lost()
        _less(self._per_address, conn.peer_host)
        protocol = conn.protocol or "pending"
        _less(self.by_listener, conn.listener)
        _less(self.by_protocol, protocol)
        self._open.dec(protocol=protocol)
        self._closed_total.inc(protocol=protocol)
        reason = conn.close_reason or ("error" if exc else "closed")
        fields = {**conn.log_fields(), "reason": reason, "bytes_in": conn.bytes_in,
                  "bytes_out": conn.bytes_out,
                  "seconds": round(time.monotonic() - conn.opened_at, 3)}
        if exc is not None:
            fields["error"] = str(exc) or type(exc).__name__
        log.info("connection closed", extra=fields)
        if not self.connections:
            self.idle.set()

    def count_rejected(self, reason: str) -> None:
        """Count a connection closed before or instead of being served."""
        self._rejected.inc(reason=reason)


def _less(tally: Tally[str], key: str) -> None:
    """One fewer of ``key`` (gone at none: the tallies name only what is open)."""
    tally[key] -= 1
    if tally[key] <= 0:
        del tally[key]
