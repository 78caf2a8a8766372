"""A gateway's membership in a broker group (docs/replication.md): its role (master or
slave), its epoch, the replication listener, the slave sessions it serves as master,
the follower it runs as slave, the in-sync set and the store's ack gate.

The role changes in one place, :meth:`ReplicationService.become_master` and
:meth:`become_slave`: a slave's store is fenced (it writes only what its master sends)
and a master's is not; a member that stops being master fails every append waiting for
its acknowledgement (``NotMaster``) before anything else. Who decides is the static
configuration and the ``lmq replication promote`` command (a static pair), or the
controller (etcd, :mod:`gateway.replication.controller`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_core import MessageStore
from broker_core.errors import InSyncTooSmall, NotMaster
from broker_core.replication import StateOp
from gateway.config import GatewayConfig
from gateway.connection import format_address
from gateway.replication.insync import InSync
from gateway.replication.master import SlaveSession
from gateway.replication.slave import Follower
from gateway.security import users_path
from gateway.tasks import TaskOwner

log = logging.getLogger(__name__)

#: How often the master compares the in-sync set with what it should be.
SET_CHECK_S = 0.25


def parse_clients(text: str) -> dict[str, str]:
    """``mqtt=h:p,amqp=h:p`` -> {"mqtt": "h:p", ...}."""
    out = {}
    for part in text.split(","):
        name, sep, address = part.partition("=")
        if sep and name and address:
            out[name.strip()] = address.strip()
    return out


class ReplicationService:
    def __init__(
        self,
        cfg: GatewayConfig,
        store: MessageStore,
        tasks: TaskOwner,
        client_addresses: Callable[[], str],
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.group = cfg.replication_group
        self.sync = cfg.replication_ack == "sync"
        self._tasks = tasks
        self.client_addresses = client_addresses
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        #: One event per slave session's sender, set on every write to the log.
        self.wakes: set[asyncio.Event] = set()
        self.insync = InSync(
            on_wait=self._wake_threadsafe,
            min_insync=cfg.replication_min_insync,
            hold_s=cfg.replication_max_lag,
        )
        self.role = "slave"
        self.epoch = store.replica.epoch if store.replica else 0
        self.member = cfg.replication_name
        #: The master's client addresses as a slave last heard them (``master_clients``).
        self._master_clients = ""
        self.sessions: set[asyncio.Task[None]] = set()
        #: A master: each connected slave's client addresses (from its HELLO).
        self.slave_clients: dict[str, str] = {}
        #: Files beside the store that are replicated whole (name -> this member's path).
        self.files: dict[str, Path] = {"users": users_path(cfg)}
        #: Per slave session, the consumer-state changes still to ship (appended by
        #: the store's tap on any thread, taken by the session on the loop).
        self.state_queues: dict[int, deque[list[StateOp]]] = {}
        self._server: asyncio.Server | None = None
        self._follower: asyncio.Task[None] | None = None
        self._follower_obj: Follower | None = None
        self._set_task: asyncio.Task[None] | None = None
        #: The controller's compare-and-swap of the in-sync set (None: static, applied
        #: at once). Returns the set now in force, or None if the swap failed.
        self.write_set: Callable[[frozenset[str]], Any] | None = None
        #: Called (on the loop) each time this member becomes the master: what a slave
        #: does not run (timer firing, pop revive) is armed from the replicated state.
        self.on_master: list[Callable[[], None]] = []
        #: Called (on the loop) each time this member stops being the master.
        self.on_slave: list[Callable[[], None]] = []
        self.controller: Any = None

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    @property
    def master_clients(self) -> str:
        """The current master's client addresses (``name=host:port,...``): where a slave
        sends the clients it refuses ("" while unknown)."""
        return self.client_addresses() if self.is_master else self._master_clients

    def master_address(self, listener: str) -> str:
        """The current master's address for clients of ``listener`` ("" if unknown)."""
        return parse_clients(self.master_clients).get(listener, "")

    @property
    def address(self) -> tuple[str, int] | None:
        if self._server is None or not self._server.sockets:
            return None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    def replication_address(self) -> str:
        """``host:port`` other members reach this one's replication listener at (the
        advertised host when set)."""
        host, port = self.address or ("", 0)
        advertised = self.cfg.advertised_address.rpartition(":")[0]
        return format_address((advertised or host, port))

    def _wake(self) -> None:
        for wake in self.wakes:
            wake.set()

    def _wake_threadsafe(self) -> None:
        """Wake the slave sessions, from any thread (the store's writers, its flusher)."""
        if threading.get_ident() == self._loop_thread:
            self._wake()
        else:
            self.loop.call_soon_threadsafe(self._wake)

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.cfg
        port = cfg.port("replication") or 0
        self._server = await asyncio.start_server(self._accept, cfg.bind, port, reuse_address=True)
        host, bound = self.address or ("", 0)
        if not self.member:
            self.member = f"{host}:{bound}"
        # fenced until a role is decided: nothing is written before
        assert self.store.replica is not None
        self.store.replica.fence("no role yet")
        if cfg.replication_role == "master":
            await self.become_master(max(self.store.replica.epoch, 1))
        elif cfg.replication_role == "slave":
            await self.become_slave(lambda: cfg.replication_master)
        else:  # auto: the controller decides
            from gateway.replication.controller import Controller

            self.controller = Controller(self, cfg)
            await self.controller.start()
        self._set_task = self._tasks.spawn(self._maintain_set(), "replication-set")

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        self.insync.fail_all(NotMaster("the gateway is stopping"))
        if self._server is not None:
            self._server.close()
        for task in list(self.sessions):
            task.cancel()
        if self._follower is not None:
            self._follower.cancel()
        if self._set_task is not None:
            self._set_task.cancel()

    # -- roles ---------------------------------------------------------------------------

    async def become_master(self, epoch: int, members: frozenset[str] = frozenset()) -> None:
        replica = self.store.replica
        assert replica is not None
        if self._follower is not None:
            self._follower.cancel()
            self._follower = None
        self.insync.reset(members)
        self.store.ack_gate = self.insync.wait if self.sync else None
        await asyncio.to_thread(replica.become_master, epoch)
        await asyncio.to_thread(replica.ship_state, self._on_state)
        replica.on_log_write(self._wake_threadsafe)
        self.epoch = epoch
        self.role = "master"
        self._refuse_if_too_small()
        for hook in self.on_master:
            hook()
        log.info("replication: master of group %s, epoch %d", self.group, epoch)

    async def become_slave(
        self, master_address: Callable[[], str | None], reason: str = "a slave"
    ) -> None:
        replica = self.store.replica
        assert replica is not None
        was_master = self.role == "master"
        # first: nothing more is acknowledged, nothing more is written
        self.insync.fail_all(NotMaster(f"this member is {reason} now"))
        await asyncio.to_thread(replica.fence, reason, "")
        replica.refuse_writes(None)  # the fence refuses them now
        replica.on_log_write(None)
        self.store.ack_gate = None
        self.role = "slave"
        self.slave_clients.clear()
        for task in list(self.sessions):
            task.cancel()
        if was_master:
            log.warning("replication: no longer the master of group %s (%s)", self.group, reason)
            for hook in self.on_slave:
                hook()
        if self._follower is not None:
            self._follower.cancel()
        self._follower_obj = Follower(
            self.store,
            self.group,
            self.member,
            master_address,
            self._on_master,
            lambda: self.epoch,
            self.files,
            self.client_addresses,
        )
        self._follower = self._tasks.spawn(self._follower_obj.run(), "replication-follower")

    def _on_state(self, ops: list[StateOp]) -> None:
        """The store's tap (any thread, in write order): queue for every session."""
        for queue in list(self.state_queues.values()):
            queue.append(ops)
        self._wake_threadsafe()

    def _on_master(self, epoch: int, clients: str) -> None:
        self.epoch = max(self.epoch, epoch)
        self._master_clients = clients

    async def promote(self) -> int:
        """``lmq replication promote`` (a static pair): this slave becomes the master of
        a new epoch. The old master must be stopped first (nothing fences it here)."""
        if self.controller is not None:
            raise RuntimeError("with etcd the controller elects the master")
        if self.is_master:
            return self.epoch
        replica = self.store.replica
        assert replica is not None
        epoch = max(self.epoch, replica.epoch) + 1
        await self.become_master(epoch)
        return epoch

    # -- slave sessions ------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.sessions.add(task)
        try:
            await SlaveSession(self, reader, writer).run()
        finally:
            self.sessions.discard(task)

    def slave_joined(self, member: str, clients: str = "") -> None:
        self.slave_clients[member] = clients
        self._wake()

    def slave_gone(self, member: str) -> None:
        self.slave_clients.pop(member, None)
        self.insync.gone(member)

    def slave_addresses(self, listener: str) -> list[str]:
        """A master: the connected slaves' addresses for clients of ``listener`` (else
        their unified one), in member-name order: the route's brokers 1, 2, ..."""
        out = []
        for member in sorted(self.slave_clients):
            clients = parse_clients(self.slave_clients[member])
            address = clients.get(listener) or clients.get("unified")
            if address:
                out.append(address)
        return out

    @property
    def following(self) -> bool:
        """A slave connected to its master now (its stream is live)."""
        return self._follower_obj is not None and self._follower_obj.connected

    async def _maintain_set(self) -> None:
        """The master's in-sync set follows the slaves that are caught up: a change is
        proposed (both sets count meanwhile), written by the controller's CAS (or
        applied at once without one), then settled."""
        while True:
            await asyncio.sleep(SET_CHECK_S)
            if not self.is_master:
                continue
            self.insync.expire()
            self._refuse_if_too_small()
            wanted = self.insync.wanted(self.cfg.replication_max_lag)
            if wanted == self.insync.members:
                continue
            self.insync.propose(wanted)
            try:
                if self.write_set is None:
                    result: frozenset[str] | None = wanted
                else:
                    result = await self.write_set(wanted)
            except Exception:
                log.exception("replication: writing the in-sync set failed")
                result = None
            self.insync.settle(result)
            self._refuse_if_too_small()
            if result is not None:
                log.info(
                    "replication: in-sync set of %s: %s",
                    self.group,
                    ",".join(sorted(result)) or "(the master alone)",
                )

    def _refuse_if_too_small(self) -> None:
        """``replication_min_insync`` (sync mode): while the in-sync set is too small
        the master refuses writes before anything is written (RocketMQ's
        IN_SYNC_REPLICAS_NOT_ENOUGH); a write made just before the set shrank waits
        for it up to ``replication_max_lag`` (:meth:`InSync.expire`)."""
        replica = self.store.replica
        if replica is None or not self.is_master or not self.sync:
            return
        why = self.insync.too_small()
        refusal = replica.refusal
        if why is None and refusal is not None:
            replica.refuse_writes(None)
            log.info("replication: writes taken again (the in-sync set is large enough)")
        elif why is not None and refusal is None:
            replica.refuse_writes(InSyncTooSmall(f"{why}: writes are refused"))
            log.warning("replication: %s: writes are refused", why)

    # -- introspection -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        store = self.store
        out: dict[str, Any] = {
            "group": self.group,
            "member": self.member,
            "role": self.role,
            "epoch": self.epoch,
            "ack": "sync" if self.sync else "async",
            "min_insync": self.insync.min_insync,
            "log_end": store.log_end,
            "master": parse_clients(self.master_clients),
            "pid": os.getpid(),
        }
        if self.is_master:
            out["in_sync"] = sorted(self.insync.members)
            out["slaves"] = dict(self.insync.acked)
        elif self._follower_obj is not None:
            out["connected"] = self._follower_obj.connected
            out["master_log_end"] = self._follower_obj.master_end
        return out
