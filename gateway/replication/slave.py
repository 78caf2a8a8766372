"""A slave's side of the replication port (docs/replication.md): connect to the master,
say HELLO with this log's end and epoch history, cut the log where the WELCOME says,
then apply each DATA chunk at the same position and acknowledge it, and each STATE
frame's consumer-state changes (not acknowledged: shipped asynchronously). Every frame must
carry the session's epoch (the WELCOME's); a master of an epoch older than this log's
is refused. On any error the connection is closed, one log line says why, and the slave
connects again after a short pause (the master may have moved: :meth:`Follower.run`
asks ``master_address`` each time)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from broker_core import MessageStore, StoreError
from gateway.replication.master import read_frame
from protocol.replication import (
    Ack,
    Data,
    EpochEntry,
    File,
    FrameDecoder,
    FrameError,
    Hello,
    Refuse,
    State,
    Trim,
    Welcome,
    encode,
)

log = logging.getLogger(__name__)

RETRY_S = 0.5
#: No frame (data or heartbeat) from the master for this long: the connection is dead.
SILENCE_S = 5.0
#: At most this long before the first HELLO for this member's client listeners to start.
CLIENTS_WAIT_S = 5.0


class Follower:
    def __init__(
        self,
        store: MessageStore,
        group: str,
        member: str,
        master_address: Callable[[], str | None],
        on_master: Callable[[int, str], None],
        min_epoch: Callable[[], int] = lambda: 0,
        files: dict[str, Path] | None = None,
        clients: Callable[[], str] = lambda: "",
    ) -> None:
        self.store = store
        self.group = group
        self.member = member
        self.master_address = master_address
        #: Called with (epoch, the master's client addresses) after each WELCOME.
        self.on_master = on_master
        #: The newest epoch this member knows of (the controller's): an older master is
        #: refused.
        self.min_epoch = min_epoch
        #: The files a master ships beside the store (the users file), by name.
        self.files = files or {}
        #: This member's client addresses, told to the master in the HELLO.
        self.clients = clients
        self.connected = False
        self.master_end = 0

    async def run(self) -> None:
        while True:
            address = self.master_address()
            if address:
                try:
                    await self._session(address)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    log.info("replication: master %s: %s", address, exc or type(exc).__name__)
                except (FrameError, StoreError, TimeoutError) as exc:
                    log.warning(
                        "replication: session with master %s ended: %s",
                        address,
                        exc or type(exc).__name__,
                    )
                finally:
                    self.connected = False
            await asyncio.sleep(RETRY_S)

    async def _session(self, address: str) -> None:
        # the HELLO names this member's client listeners, which start just after the
        # replication service: wait for them a little (a member without any goes on)
        for _ in range(int(CLIENTS_WAIT_S / 0.05)):
            if self.clients():
                break
            await asyncio.sleep(0.05)
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        store = self.store
        replica = store.replica
        assert replica is not None
        decoder = FrameDecoder()
        try:
            history = [EpochEntry(*e) for e in replica.epochs]
            writer.write(
                encode(
                    replica.epoch,
                    Hello(self.group, self.member, store.log_end, history, self.clients()),
                )
            )
            await writer.drain()
            async with asyncio.timeout(SILENCE_S):
                epoch, welcome = await read_frame(reader, decoder)
            if isinstance(welcome, Refuse):
                raise StoreError(f"the master refused: {welcome.reason}")
            if not isinstance(welcome, Welcome):
                raise FrameError(f"expected WELCOME, got {type(welcome).__name__}")
            newest = max(replica.epoch, self.min_epoch())
            if epoch < newest:
                self._refuse(
                    writer, newest, f"master of epoch {epoch}, older than the newest known {newest}"
                )
                return
            if welcome.truncate_to < store.log_end:
                await asyncio.to_thread(replica.truncate, welcome.truncate_to)
            elif welcome.truncate_to > store.log_end:  # empty: start at the master's start
                await asyncio.to_thread(replica.start_at, welcome.truncate_to)
            self.connected = True
            self.master_end = welcome.log_end
            self.on_master(epoch, welcome.clients)
            log.info(
                "replication: following master %s (epoch %d) from %d", address, epoch, store.log_end
            )
            while True:
                async with asyncio.timeout(SILENCE_S):
                    got_epoch, message = await read_frame(reader, decoder)
                if got_epoch != epoch:
                    self._refuse(
                        writer, epoch, f"a frame of epoch {got_epoch} in a session of epoch {epoch}"
                    )
                    return
                if isinstance(message, Refuse):
                    raise StoreError(f"the master refused: {message.reason}")
                if isinstance(message, Trim):  # the master's retention moved its log start
                    await asyncio.to_thread(replica.trim_to, message.log_start)
                    continue
                if isinstance(message, File):
                    await asyncio.to_thread(self.write_file, message.name, message.content)
                    continue
                if isinstance(message, State):
                    await asyncio.to_thread(replica.apply_state, message.ops, message.wipe)
                    continue
                if not isinstance(message, Data):
                    raise FrameError(f"expected DATA, got {type(message).__name__}")
                self.master_end = message.master_end
                if not message.records:  # a heartbeat: acknowledged when at its end
                    if store.log_end == message.position:
                        writer.write(encode(epoch, Ack(store.log_end)))
                        await writer.drain()
                    continue
                try:
                    end = await asyncio.to_thread(
                        replica.apply, message.position, message.data_epoch, message.records
                    )
                except StoreError as exc:
                    self._refuse(writer, epoch, f"chunk at {message.position} refused: {exc}")
                    return
                if store.waits_for_ack:  # sync durability: fsynced before the ACK
                    await asyncio.wrap_future(store.acknowledged(end))
                writer.write(encode(epoch, Ack(end)))
                await writer.drain()
        finally:
            writer.close()

    def write_file(self, name: str, content: bytes) -> None:
        """Replace a replicated file (atomically: a rename) with the master's copy; a
        name this member does not replicate is ignored."""
        path = self.files.get(name)
        if path is None:
            log.warning("replication: the master sent an unknown file %r; ignored", name)
            return
        tmp = path.with_name(path.name + ".replicating")
        with open(tmp, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _refuse(self, writer: asyncio.StreamWriter, epoch: int, reason: str) -> None:
        log.warning("replication: refused the master's stream: %s", reason)
        writer.write(encode(epoch, Refuse(reason)))
