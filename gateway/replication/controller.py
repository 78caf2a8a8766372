"""The broker group's controller on etcd (docs/replication.md, "Controller").

etcd holds only control state, under ``/lmq/groups/<group>/``:

- ``master``: the master's key, put with the master's lease by a compare-and-swap
  transaction (``create_revision == 0``: nobody holds it). Its ``create_revision`` is the
  master's **epoch**, carried on every replication frame and written to the epoch
  history beside the log. Value (JSON): the member's name, replication address and
  client addresses.
- ``syncset``: the in-sync set, JSON ``{"master": name, "epoch": E, "members": [...]}``,
  changed only by a transaction that compares both its ``mod_revision`` and the master
  key's ``create_revision == E`` (a deposed master cannot change it).
- ``members/<name>``: during an election, each candidate's log end and epoch, under
  its own lease.

**Mastership.** The master refreshes its lease every ``lease / 4`` s. It stops
acknowledging (the store is fenced, waiting acknowledgements fail) once ``lease * 0.7``
s have passed since it *sent* its last successful refresh: etcd's expiry comes no
earlier than ``lease`` s after that, so the master has stopped before any other member
can take the key (apache/rocketmq#7017; Patroni's self-demotion).

**Election.** A member that finds no master key publishes its log end under
``members/``, waits ``ELECTION_WINDOW_S`` for the others, and takes part only if it is
eligible: a member of the last in-sync set or its master (any member when the group
never had a set), and the eligible member present with the highest log end (ties: the
lowest name). Unclean election (outside the set) is never done. The winner runs the
transaction; the others follow whoever holds the key.

etcd is read by polling the master key every ``POLL_S`` (a get, no watch), so a
failover takes the lease plus at most ``POLL_S + ELECTION_WINDOW_S``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import aetcd
import aetcd.exceptions

from gateway.config import GatewayConfig

if TYPE_CHECKING:
    from gateway.replication.service import ReplicationService

log = logging.getLogger(__name__)

POLL_S = 0.25
ELECTION_WINDOW_S = 0.6
#: The share of the lease after which a master that could not refresh stops.
DEMOTE_AT = 0.7
RPC_TIMEOUT_S = 2


class Etcd:
    """aetcd clients over several endpoints: a call that fails on one endpoint moves to
    the next one for the following call."""

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        self.endpoints = endpoints
        self._i = 0
        self._client: aetcd.Client | None = None

    def client(self) -> aetcd.Client:
        if self._client is None:
            host, _, port = self.endpoints[self._i % len(self.endpoints)].rpartition(":")
            self._client = aetcd.Client(
                host=host.strip("[]"), port=int(port), timeout=RPC_TIMEOUT_S
            )
        return self._client

    async def failed(self) -> None:
        client, self._client = self._client, None
        self._i += 1
        if client is not None:
            try:
                await client.close()
            except Exception:
                pass

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class Controller:
    def __init__(self, service: ReplicationService, cfg: GatewayConfig) -> None:
        self.service = service
        self.prefix = f"/lmq/groups/{cfg.replication_group}/".encode()
        self.master_key = self.prefix + b"master"
        self.set_key = self.prefix + b"syncset"
        self.lease_s = cfg.replication_lease
        self.ttl = max(1, math.ceil(cfg.replication_lease))
        self.etcd = Etcd(cfg.replication_etcd)
        #: The master's replication address as etcd names it ("" if none).
        self.master_replication = ""
        self._lease: Any = None
        self._refreshed_at = 0.0  # monotonic time the last good refresh was SENT
        self._set_mod = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        service = self.service
        service.write_set = self.write_set
        await service.become_slave(
            lambda: self.master_replication or None, "a slave (waiting for the controller)"
        )
        self._task = service._tasks.spawn(self._run(), "replication-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._lease is not None:  # hand the key over at once on a clean stop
            try:
                async with asyncio.timeout(RPC_TIMEOUT_S):
                    await self._lease.revoke()
            except Exception:
                pass
        await self.etcd.close()

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                if self.service.is_master:
                    await self._hold()
                else:
                    await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("replication controller: etcd: %s", exc or type(exc).__name__)
                await self.etcd.failed()
            await asyncio.sleep(POLL_S)

    async def _watch(self) -> None:
        """Not the master: follow the key's holder, or elect when there is none."""
        got = await self.etcd.client().get(self.master_key)
        if got is not None:
            holder = json.loads(got.value)
            self.service.epoch = max(self.service.epoch, got.create_revision)
            self.master_replication = holder["replication"]
            return
        self.master_replication = ""
        await self._elect()

    async def _elect(self) -> None:
        service = self.service
        store = service.store
        client = self.etcd.client()
        me = service.member
        lease = await client.lease(self.ttl)
        try:
            mine = {"log_end": store.log_end, "epoch": store.replica.epoch if store.replica else 0}
            await client.put(
                self.prefix + b"members/" + me.encode(), json.dumps(mine).encode(), lease=lease
            )
            await asyncio.sleep(ELECTION_WINDOW_S)
            got = await client.get(self.set_key)
            syncset = json.loads(got.value) if got is not None else None
            present: dict[str, int] = {}
            for kv in await client.get_prefix(self.prefix + b"members/"):
                name = kv.key[len(self.prefix) + len(b"members/") :].decode()
                present[name] = json.loads(kv.value)["log_end"]
            eligible = set(present)
            if syncset is not None:
                eligible &= {syncset["master"], *syncset["members"]}
            if me not in eligible:
                log.info("replication: not eligible for master (in-sync set %s)", syncset)
                return
            best = min(eligible, key=lambda m: (-present[m], m))
            if best != me:
                log.info(
                    "replication: not campaigning: %s is eligible with log end %d, mine %d",
                    best,
                    present[best],
                    present[me],
                )
                return
            await self._campaign()
        finally:
            try:
                await lease.revoke()
            except Exception:
                pass

    async def _campaign(self) -> None:
        service = self.service
        client = self.etcd.client()
        lease = await client.lease(self.ttl)
        sent = time.monotonic()
        value = json.dumps(
            {
                "member": service.member,
                "replication": service.replication_address(),
                "clients": service.client_addresses(),
            }
        ).encode()
        ok, _ = await client.transaction(
            compare=[client.transactions.create(self.master_key) == 0],
            success=[client.transactions.put(self.master_key, value, lease=lease)],
            failure=[],
        )
        if not ok:
            await lease.revoke()
            return
        got = await client.get(self.master_key)
        if got is None:
            return
        epoch = got.create_revision
        self._lease, self._refreshed_at = lease, sent
        # the set starts with the master alone; only the transaction that holds the key's
        # epoch may write it
        members: frozenset[str] = frozenset()
        body = json.dumps({"master": service.member, "epoch": epoch, "members": []}).encode()
        ok, _ = await client.transaction(
            compare=[client.transactions.create(self.master_key) == epoch],
            success=[client.transactions.put(self.set_key, body)],
            failure=[],
        )
        if not ok:
            return
        got_set = await client.get(self.set_key)
        self._set_mod = got_set.mod_revision if got_set is not None else 0
        self.master_replication = json.loads(value)["replication"]
        await service.become_master(epoch, members)
        log.info("replication: elected master of %s, epoch %d", service.group, epoch)

    async def _hold(self) -> None:
        """The master: refresh the lease; stop before it can have run out."""
        deadline = self._refreshed_at + self.lease_s * DEMOTE_AT
        interval = self.lease_s / 4
        while self.service.is_master:
            sent = time.monotonic()
            try:
                async with asyncio.timeout(max(0.05, deadline - sent)):
                    reply = await self._lease.refresh()
                if reply is None or reply.TTL <= 0:
                    raise RuntimeError("the lease is gone")
                self._refreshed_at = sent
                deadline = sent + self.lease_s * DEMOTE_AT
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() >= deadline:
                    await self._demote(f"lost its lease ({exc or type(exc).__name__})")
                    return
                await self.etcd.failed()
                await asyncio.sleep(0.05)  # a refused connection fails at once
                continue
            try:
                async with asyncio.timeout(max(0.0, min(interval, deadline - time.monotonic()))):
                    await asyncio.Event().wait()
            except TimeoutError:
                pass

    async def _demote(self, reason: str) -> None:
        self._lease = None
        self.master_replication = ""
        log.warning("replication: %s: stopped acknowledging", reason)
        await self.service.become_slave(lambda: self.master_replication or None, reason)

    async def write_set(self, members: frozenset[str]) -> frozenset[str] | None:
        """The master's compare-and-swap of the in-sync set (None if it failed)."""
        service = self.service
        client = self.etcd.client()
        body = json.dumps(
            {"master": service.member, "epoch": service.epoch, "members": sorted(members)}
        ).encode()
        ok, _ = await client.transaction(
            compare=[
                client.transactions.create(self.master_key) == service.epoch,
                client.transactions.mod(self.set_key) == self._set_mod,
            ],
            success=[client.transactions.put(self.set_key, body)],
            failure=[],
        )
        if not ok:
            got = await client.get(self.set_key)
            self._set_mod = got.mod_revision if got is not None else 0
            return None
        got = await client.get(self.set_key)
        self._set_mod = got.mod_revision if got is not None else 0
        return members
